"""data.mask_count: exact (round(p·n) a sequence, Google's) or sampled (each token with p, Hugging Face's)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from _tiny_data import build_tiny_data  # tests/ is on sys.path

from bertpre.batches.collator import MaskingCollator
from bertpre.batches.pairs import PretrainingInstances
from bertpre.data import load_data
from bertpre.errors import UserError


@pytest.fixture(scope="module")
def instances(tmp_path_factory) -> tuple:
    data = load_data(build_tiny_data(tmp_path_factory.mktemp("count") / "data", documents=200, seed=1))
    return data.tokenizer, PretrainingInstances(data.train, data.tokenizer, max_seq_length=64, seed=1)


def counts(tokenizer, instances, **options) -> tuple[np.ndarray, np.ndarray]:
    """Predictions and eligible tokens of every sequence of the epoch."""
    collate = MaskingCollator(tokenizer, seed=3, **options)
    predicted, eligible = [], []
    for start in range(0, len(instances), 64):
        batch = collate(instances.__getitems__(range(start, min(start + 64, len(instances)))))
        labels = batch["labels"].numpy()
        original = np.where(labels >= 0, labels, batch["input_ids"].numpy())
        real = batch["attention_mask"].numpy().astype(bool)
        predicted.append((labels >= 0).sum(axis=1))
        eligible.append((real & ~collate.never_predicted[original]).sum(axis=1))
    return np.concatenate(predicted), np.concatenate(eligible)


def test_exact_predicts_round_p_n_in_every_sequence(instances):
    predicted, eligible = counts(*instances, mask_count="exact")
    assert np.array_equal(predicted, np.maximum(np.floor(eligible * 0.15 + 0.5), 1))


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_sampled_draws_each_token_with_p(instances, whole_word_mask):
    predicted, eligible = counts(*instances, mask_count="sampled", whole_word_mask=whole_word_mask)
    total = eligible.sum()
    draws = total / 2 if whole_word_mask else total  # words of the tiny vocab: under 2 tokens each
    assert abs(predicted.sum() / total - 0.15) < 4 * math.sqrt(0.15 * 0.85 / draws)
    assert (predicted == 0).any()  # a sequence may draw none, as with per-token draws
    # Independent draws spread the counts binomially (whole words: wider still), where exact
    # rounding keeps every sequence at round(p·n).
    expected_variance = (eligible * 0.15 * 0.85).mean()
    spread = np.var(predicted - eligible * 0.15)
    assert 0.7 * expected_variance < spread
    if not whole_word_mask:
        assert spread < 1.3 * expected_variance


def test_sampled_respects_the_cap_and_unknown_counts_are_refused(instances):
    predicted, _ = counts(*instances, mask_count="sampled", max_predictions_per_seq=3)
    assert predicted.max() == 3
    with pytest.raises(UserError, match="mask_count must be one of exact, sampled"):
        MaskingCollator(instances[0], mask_count="binomial")
