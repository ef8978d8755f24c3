"""Segments of several DATA folders in proportion to their weights (plm/clm mixtures): shares by
tokens, each source moving on through its own stream, an epoch a pure function of its number."""
from __future__ import annotations

import datasets
import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from bertpre.batches.segments import MixedSegments

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS + [f"w{i}" for i in range(40)])}
    return Tokenizer(WordPiece(vocab, unk_token="[UNK]"))


def corpus(documents: int, seed: int) -> datasets.Dataset:
    rng = np.random.default_rng(seed)
    return datasets.Dataset.from_dict({"input_ids": [
        [rng.integers(5, 45, size=int(rng.integers(3, 12))).tolist() for _ in range(int(rng.integers(1, 5)))]
        for _ in range(documents)]})


def mixed(tokenizer, **options) -> MixedSegments:
    return MixedSegments([corpus(200, 0), corpus(40, 1)], [0.25, 0.75], tokenizer, segment_length=16,
                         reuse_length=8, lanes=4, seed=3, **options)


def source_tokens(segments: MixedSegments) -> np.ndarray:
    order = segments.epoch_order(segments.epoch)
    sizes = segments.document_length[order] + 1
    return np.bincount(segments.source_of(order), weights=sizes, minlength=2)


def test_each_epoch_takes_the_weights_share_of_tokens_and_moves_on(tokenizer):
    segments = mixed(tokenizer)
    longest = int(segments.document_length.max()) + 1
    seen_light = []
    for epoch in range(4):
        segments.set_epoch(epoch)
        tokens = source_tokens(segments)
        budget = int((segments.document_length + 1).sum())
        # Whole documents: each source's share is its weight to within one document.
        assert abs(tokens[0] - 0.25 * budget) <= longest and abs(tokens[1] - 0.75 * budget) <= longest
        order = segments.epoch_order(epoch)
        seen_light.append(set(order[segments.source_of(order) == 0].tolist()))
    # The big source, at a quarter of the tokens, reads different documents in each of its first epochs.
    assert not seen_light[0] & seen_light[1]
    # The small source runs through its own epochs several times a mixture epoch (documents repeat).
    order = segments.epoch_order(0)
    small = order[segments.source_of(order) == 1]
    assert len(small) > len(set(small.tolist())) >= 39


def test_an_epoch_is_a_pure_function_of_its_number_and_rows_keep_their_lanes(tokenizer):
    first, second = mixed(tokenizer), mixed(tokenizer)
    first.set_epoch(2)
    second.set_epoch(0)
    second.set_epoch(2)
    assert np.array_equal(first.plan.document, second.plan.document)
    batch = first.__getitems__([0, 1, 2, 3])
    again = second.__getitems__([0, 1, 2, 3])
    assert np.array_equal(batch.input_ids, again.input_ids) and batch.memory_reset.all()
    ranks = [mixed(tokenizer, rank=rank, world_size=2) for rank in range(2)]
    assert not np.array_equal(ranks[0].__getitems__([0]).input_ids, ranks[1].__getitems__([0]).input_ids)
