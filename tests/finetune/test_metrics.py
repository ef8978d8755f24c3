"""bertpre's downstream metrics against scikit-learn, scipy and seqeval on random cases, the
degenerate ones included (one class, no positives, constant values, ties, malformed tags)."""
from __future__ import annotations

import random
import subprocess
import sys
import warnings

import numpy as np
import pytest

from bertpre.finetune import metrics

sk = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")
seqeval = pytest.importorskip("seqeval.metrics")


def label_cases(count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for case in range(count):
        size, classes = int(rng.integers(1, 40)), int(rng.integers(2, 7))
        labels, predictions = rng.integers(0, classes, size), rng.integers(0, classes, size)
        if case % 5 == 1:
            predictions[:] = predictions[0]  # stuck at one class
        if case % 7 == 2:
            labels[:] = labels[0]  # one class in the labels
        yield labels, predictions


def test_accuracy_macro_f1_and_mcc_match_scikit_learn():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns on one-class cases
        for labels, predictions in label_cases(600):
            assert metrics.accuracy(predictions, labels) == pytest.approx(sk.accuracy_score(labels, predictions), abs=1e-12)
            assert metrics.f1_macro(predictions, labels) == pytest.approx(
                sk.f1_score(labels, predictions, average="macro", zero_division=0), abs=1e-12)
            assert metrics.matthews_corrcoef(predictions, labels) == pytest.approx(
                sk.matthews_corrcoef(labels, predictions), abs=1e-9)


def test_binary_f1_matches_scikit_learn_including_no_positives():
    rng = np.random.default_rng(1)
    for case in range(600):
        size = int(rng.integers(1, 30))
        labels, predictions = rng.integers(0, 2, size), rng.integers(0, 2, size)
        if case % 4 == 0:
            predictions[:] = 0  # nothing predicted positive
        if case % 6 == 0:
            labels[:] = 0  # nothing positive
        assert metrics.f1_binary(predictions, labels, positive=1) == pytest.approx(
            sk.f1_score(labels, predictions, average="binary", pos_label=1, zero_division=0), abs=1e-12)


def test_pearson_and_spearman_match_scipy_with_ties_and_constants():
    rng = np.random.default_rng(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on constant input
        for case in range(600):
            size = int(rng.integers(2, 40))
            x = rng.normal(size=size).round(case % 3)  # rounding makes ties
            y = rng.normal(size=size).round(1)
            if case % 9 == 0:
                x[:] = 1.5  # constant: undefined, nan like scipy
            for ours, theirs in [(metrics.pearson(x, y), stats.pearsonr(x, y)[0]),
                                 (metrics.spearman(x, y), stats.spearmanr(x, y)[0])]:
                if np.isnan(theirs):
                    assert np.isnan(ours)
                else:
                    assert ours == pytest.approx(theirs, abs=1e-9)


@pytest.mark.parametrize("tags", [
    ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"],  # BIO, with I- after O or another type
    ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"],  # BIOES
])
def test_span_scores_match_seqeval(tags):
    rng = random.Random(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seqeval warns when nothing is predicted
        for _ in range(400):
            true = [[rng.choice(tags) for _ in range(rng.randint(1, 10))] for _ in range(rng.randint(1, 4))]
            predicted = [[rng.choice(tags) if rng.random() < 0.5 else tag for tag in sentence] for sentence in true]
            ours = metrics.span_scores(predicted, true)
            assert ours["precision"] == pytest.approx(seqeval.precision_score(true, predicted), abs=1e-12)
            assert ours["recall"] == pytest.approx(seqeval.recall_score(true, predicted), abs=1e-12)
            assert ours["f1"] == pytest.approx(seqeval.f1_score(true, predicted), abs=1e-12)


def test_spans_never_cross_sentences_and_an_orphan_inside_tag_opens_one():
    assert metrics.spans([["B-PER"], ["I-PER"]]) == {("PER", 0, 0), ("PER", 2, 2)}
    assert metrics.spans([["O", "I-LOC", "I-LOC", "B-PER"]]) == {("LOC", 1, 2), ("PER", 3, 3)}


def test_the_metrics_import_no_reference_library():
    code = ("import sys, bertpre.finetune.metrics; "
            "assert not {'sklearn', 'scipy', 'seqeval'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
