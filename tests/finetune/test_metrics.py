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
seqeval_scheme = pytest.importorskip("seqeval.scheme")


def label_cases(count: int, seed: int):
    """(labels, predictions): 1 to 39 examples of 2 to 6 classes; every few cases the predictions
    stuck at one class, the labels of one class, or classes that do not start at 0."""
    rng = np.random.default_rng(seed)
    for case in range(count):
        size, classes = int(rng.integers(1, 40)), int(rng.integers(2, 7))
        labels, predictions = rng.integers(0, classes, size), rng.integers(0, classes, size)
        if case % 5 == 1:
            predictions[:] = predictions[0]
        if case % 7 == 2:
            labels[:] = labels[0]
        if case % 11 == 3:
            labels, predictions = labels + 3, predictions + 3
        yield labels, predictions


def test_accuracy_macro_f1_and_mcc_match_scikit_learn():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns on one-class cases
        for labels, predictions in label_cases(400, seed=0):
            assert metrics.accuracy(predictions, labels) == pytest.approx(sk.accuracy_score(labels, predictions), abs=1e-12)
            assert metrics.f1_macro(predictions, labels) == pytest.approx(
                sk.f1_score(labels, predictions, average="macro", zero_division=0), abs=1e-12)
            assert metrics.matthews_corrcoef(predictions, labels) == pytest.approx(
                sk.matthews_corrcoef(labels, predictions), abs=1e-9)


def test_macro_f1_over_a_fixed_label_set_matches_scikit_learn():
    rng = np.random.default_rng(4)
    for labels, predictions in label_cases(200, seed=5):
        num_labels = int(max(labels.max(), predictions.max())) + 1 + int(rng.integers(0, 3))
        assert metrics.f1_macro(predictions, labels, num_labels=num_labels) == pytest.approx(
            sk.f1_score(labels, predictions, average="macro", labels=list(range(num_labels)), zero_division=0),
            abs=1e-12)


def test_binary_f1_matches_scikit_learn_including_no_positives():
    rng = np.random.default_rng(1)
    for case in range(400):
        size, positive = int(rng.integers(1, 30)), case % 2
        labels, predictions = rng.integers(0, 2, size), rng.integers(0, 2, size)
        if case % 4 < 2:
            predictions[:] = 1 - positive  # nothing predicted positive
        if case % 6 < 2:
            labels[:] = 1 - positive  # nothing positive
        assert metrics.f1_binary(predictions, labels, positive=positive) == pytest.approx(
            sk.f1_score(labels, predictions, average="binary", pos_label=positive, zero_division=0), abs=1e-12)
    assert metrics.f1_binary([0, 0], [0, 0]) == 0.0  # no positive predicted, none true


def test_pearson_and_spearman_match_scipy_with_ties_and_constants():
    rng = np.random.default_rng(2)
    constants = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns on constant input
        for case in range(600):
            size = int(rng.integers(2, 40)) if case % 10 else 2
            x = rng.normal(size=size).round(case % 3)  # rounding makes ties
            y = rng.normal(size=size).round(1)
            if case % 9 == 0:
                x[:] = 0.1  # constant, and its mean is not exactly 0.1
            if case % 13 == 0:
                y[:] = 1.5
            for ours, theirs in [(metrics.pearson(x, y), stats.pearsonr(x, y)[0]),
                                 (metrics.spearman(x, y), stats.spearmanr(x, y)[0])]:
                if np.isnan(theirs):
                    constants += 1
                    assert np.isnan(ours)
                else:
                    assert ours == pytest.approx(theirs, abs=1e-9)
    assert constants > 100


def test_correlations_are_nan_where_undefined():
    assert np.isnan(metrics.pearson([0.3] * 5, [1, 2, 3, 4, 5]))  # constant, as scipy
    assert np.isnan(metrics.spearman([1, 2, 3], [7, 7, 7]))
    assert np.isnan(metrics.pearson([1.0], [2.0]))  # too short (scipy raises)
    assert np.isnan(metrics.pearson([1, np.nan, 3], [1, 2, 3]))  # a nan propagates, as scipy
    assert np.isnan(metrics.spearman([1, np.nan, 3], [1, 2, 3]))
    assert metrics.pearson([1e-320, 2e-320, 4e-320], [1, 2, 4]) == pytest.approx(1.0)  # no underflow


BIO = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG"]  # an ORG only ever opened by an I-
BIOES = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
ODD = [*BIOES, "I-ORG", "E-ORG", "B", "I", "E", "S", "."]  # untyped tags, seqeval's "." too


def tag_cases(tags: list[str], count: int, seed: int):
    """(true, predicted): 1 to 4 sentences of 1 to 10 tags; the prediction changes about half."""
    rng = random.Random(seed)
    for _ in range(count):
        true = [[rng.choice(tags) for _ in range(rng.randint(1, 10))] for _ in range(rng.randint(1, 4))]
        predicted = [[rng.choice(tags) if rng.random() < 0.5 else tag for tag in sentence] for sentence in true]
        yield true, predicted


def assert_same_scores(ours: dict[str, float], true, predicted, **options) -> None:
    assert ours["precision"] == pytest.approx(seqeval.precision_score(true, predicted, **options), abs=1e-12)
    assert ours["recall"] == pytest.approx(seqeval.recall_score(true, predicted, **options), abs=1e-12)
    assert ours["f1"] == pytest.approx(seqeval.f1_score(true, predicted, **options), abs=1e-12)


@pytest.mark.parametrize("tags", [BIO, BIOES, ODD], ids=["BIO", "BIOES", "odd"])
def test_span_scores_match_seqeval(tags):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seqeval warns when nothing is predicted, and on odd tags
        for true, predicted in tag_cases(tags, 400, seed=3):
            assert metrics.spans(true) == {
                (kind, first, last) for kind, first, last in seqeval_get_entities(true)}
            assert_same_scores(metrics.span_scores(predicted, true), true, predicted)


def seqeval_get_entities(sequences):
    from seqeval.metrics.sequence_labeling import get_entities
    return get_entities([list(sentence) for sentence in sequences])


@pytest.mark.parametrize("scheme, tags", [("IOBES", BIOES), ("IOB2", BIO)])
def test_strict_span_scores_match_seqeval_strict_mode(scheme, tags):
    reference = getattr(seqeval_scheme, scheme)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for true, predicted in tag_cases(tags, 400, seed=6):
            assert_same_scores(metrics.span_scores(predicted, true, scheme=scheme), true, predicted,
                               mode="strict", scheme=reference)


def test_strict_mode_refuses_a_tag_outside_the_scheme_and_an_unknown_scheme():
    with pytest.raises(ValueError, match="'E-PER' is not IOB2"):
        metrics.span_scores([["B-PER", "E-PER"]], [["O", "O"]], scheme="IOB2")
    with pytest.raises(ValueError, match="'X-PER' is not IOBES"):
        metrics.span_scores([["X-PER"]], [["O"]], scheme="IOBES")
    with pytest.raises(ValueError, match="unknown tagging scheme 'BILOU'"):
        metrics.span_scores([["O"]], [["O"]], scheme="BILOU")


def test_spans_never_cross_sentences_and_an_orphan_inside_tag_opens_one():
    assert metrics.spans([["B-PER"], ["I-PER"]]) == {("PER", 0, 0), ("PER", 2, 2)}
    assert metrics.spans([["O", "I-LOC", "I-LOC", "B-PER"]]) == {("LOC", 1, 2), ("PER", 3, 3)}
    assert metrics.spans([["B-PER", "I-LOC", "E-LOC", "E-LOC"]]) == {
        ("PER", 0, 0), ("LOC", 1, 2), ("LOC", 3, 3)}
    # strict IOBES: an unclosed B- counts for nothing, an S- always does
    assert metrics.strict_spans([["B-PER", "I-PER", "O", "S-LOC", "B-LOC", "E-LOC"]], "IOBES") == {
        ("LOC", 3, 3), ("LOC", 4, 5)}


def test_no_spans_anywhere_scores_zero():
    assert metrics.span_scores([["O", "O"]], [["O", "O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_each_class_and_the_confusion_matrix_match_scikit_learn():
    for labels, predictions in label_cases(150, seed=7):
        num_labels = int(max(labels.max(), predictions.max())) + 2  # one class neither true nor predicted
        ours = metrics.class_scores(predictions, labels, num_labels)
        theirs = sk.precision_recall_fscore_support(labels, predictions, labels=list(range(num_labels)),
                                                    zero_division=0)
        for name, reference in zip(("precision", "recall", "f1", "support"), theirs, strict=True):
            np.testing.assert_allclose(ours[name], reference, rtol=0, atol=1e-12, err_msg=name)
        assert np.array_equal(metrics.confusion_matrix(predictions, labels, num_labels),
                              sk.confusion_matrix(labels, predictions, labels=list(range(num_labels))))


@pytest.mark.parametrize("tags", [BIO, BIOES, ODD], ids=["BIO", "BIOES", "odd"])
def test_each_entity_type_matches_seqevals_report(tags):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for true, predicted in tag_cases(tags, 300, seed=8):
            ours = metrics.span_type_scores(predicted, true)
            reference = {name: row for name, row in seqeval.classification_report(
                true, predicted, output_dict=True).items() if not name.endswith(" avg")} if (
                metrics.spans(true) | metrics.spans(predicted)) else {}
            assert list(ours) == list(reference)
            for name, row in reference.items():
                assert ours[name]["precision"] == pytest.approx(row["precision"], abs=1e-12)
                assert ours[name]["recall"] == pytest.approx(row["recall"], abs=1e-12)
                assert ours[name]["f1"] == pytest.approx(row["f1-score"], abs=1e-12)
                assert ours[name]["support"] == row["support"]


@pytest.mark.parametrize("scheme, tags", [("IOBES", BIOES), ("IOB2", BIO)])
def test_each_entity_type_in_strict_mode_matches_seqevals_report(scheme, tags):
    reference_scheme = getattr(seqeval_scheme, scheme)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for true, predicted in tag_cases(tags, 300, seed=9):
            ours = metrics.span_type_scores(predicted, true, scheme=scheme)
            if not ours:  # seqeval's report has no row to compare (and fails on no spans at all)
                assert not metrics.strict_spans(true, scheme) | metrics.strict_spans(predicted, scheme)
                continue
            reference = {name: row for name, row in seqeval.classification_report(
                true, predicted, output_dict=True, mode="strict", scheme=reference_scheme).items()
                if not name.endswith(" avg")}
            assert list(ours) == list(reference)
            for name, row in reference.items():
                assert (ours[name]["precision"], ours[name]["recall"], ours[name]["f1"]) == pytest.approx(
                    (row["precision"], row["recall"], row["f1-score"]), abs=1e-12)
                assert ours[name]["support"] == row["support"]


def test_majority_class_takes_the_smallest_of_tied_classes():
    assert metrics.majority_class([2, 1, 2, 1, 0]) == 1
    assert metrics.majority_class(["pos", "neg", "pos"]) == "pos"
    assert isinstance(metrics.majority_class(np.array([3, 3])), int)


def test_accuracy_of_nothing_is_zero_and_the_registry_names_each_metric():
    assert metrics.accuracy([], []) == 0.0
    assert metrics.METRICS == {
        "accuracy": metrics.accuracy, "f1": metrics.f1_binary, "f1_macro": metrics.f1_macro,
        "mcc": metrics.matthews_corrcoef, "pearson": metrics.pearson, "spearman": metrics.spearman}


def test_the_metrics_import_no_reference_library():
    code = ("import sys, bertpre.finetune.metrics; "
            "assert not {'sklearn', 'scipy', 'seqeval'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
