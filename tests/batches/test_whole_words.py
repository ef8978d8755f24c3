"""Whole-word masking by DATA's word starts: every word masked whole, one 80/10/10 draw per word,
the rates within binomial tolerance; DATA without word starts gives the same batches as before."""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest
from _tiny_data import build_chinese_data, build_tiny_data  # tests/ is on sys.path

from bertpre.batches.collator import MaskingCollator
from bertpre.batches.pairs import PretrainingInstances
from bertpre.data.folder import load_data
from bertpre.labels import KEPT, MASKED, RANDOM_TOKEN

pytest.importorskip("rjieba")

@pytest.fixture(scope="module")
def chinese_data(tmp_path_factory) -> Path:
    return build_chinese_data(tmp_path_factory.mktemp("zh-data") / "data")


def words_of(flags: list[int], eligible: list[bool]) -> list[list[int]]:
    """Positions of each word, read straight off the flags: a flagged eligible token and the
    unflagged eligible tokens after it."""
    words: list[list[int]] = []
    for position, (flag, ok) in enumerate(zip(flags, eligible, strict=True)):
        if not ok:
            continue
        if flag or not words or words[-1][-1] != position - 1:
            words.append([position])
        else:
            words[-1].append(position)
    return words


def test_every_word_is_masked_whole_over_ten_thousand_instances(chinese_data):
    data = load_data(chinese_data)
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=48, seed=1)
    collate = MaskingCollator(data.tokenizer, whole_word_mask=True, max_predictions_per_seq=12, seed=2)
    sampled = predicted = eligible_tokens = wanted = 0
    word_actions, lengths = [], []
    epoch = 0
    while sampled < 10_000:
        instances.set_epoch(epoch)
        for start in range(0, len(instances), 64):
            rows = instances.__getitems__(range(start, min(start + 64, len(instances))))
            batch = collate(rows)
            labels, actions = batch["labels"].numpy(), batch["mask_action"].numpy()
            real = batch["attention_mask"].numpy().astype(bool)
            original = np.where(labels >= 0, labels, batch["input_ids"].numpy())
            for row in range(len(rows)):
                instance = rows.instance(row)
                length = len(instance["input_ids"])
                ok = (real[row, :length] & ~collate.never_predicted[original[row, :length]]).tolist()
                for word in words_of(instance["word_starts"], ok):
                    chosen = [labels[row, position] >= 0 for position in word]
                    assert all(chosen) or not any(chosen), (instance, word)
                    if chosen[0]:
                        assert len({actions[row, position] for position in word}) == 1  # one draw a word
                        word_actions.append(actions[row, word[0]])
                        lengths.append(len(word))
                eligible_tokens += sum(ok)
                wanted += min(max(1, math.floor(sum(ok) * 0.15 + 0.5)), 12)  # the sequence's count k
                predicted += int((labels[row] >= 0).sum())
            sampled += len(rows)
        epoch += 1
    assert max(lengths) >= 3 and np.mean(lengths) > 1.5  # words of several characters were masked
    rate = predicted / eligible_tokens
    # The word crossing a sequence's count k is kept with the share of it still wanted: the
    # count is k in expectation (the plain 15% up to each sequence's rounding of k).
    assert abs(predicted / wanted - 1) < 0.01 and abs(rate - 0.15) < 0.01
    words = len(word_actions)
    for action, share in ((MASKED, 0.8), (RANDOM_TOKEN, 0.1), (KEPT, 0.1)):
        realised = np.mean(np.array(word_actions) == action)
        assert abs(realised - share) < 4 * math.sqrt(share * (1 - share) / words), (action, realised)


@pytest.mark.parametrize("pairs", [{"pair_task": "nsp"}, {"pair_task": "none", "pack_documents": True}])
def test_a_segment_cut_inside_a_word_starts_a_word(chinese_data, pairs):
    data = load_data(chinese_data)
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=12, seed=4, **pairs)
    rows = instances.__getitems__(range(len(instances)))
    cls, sep = data.tokenizer.token_to_id("[CLS]"), data.tokenizer.token_to_id("[SEP]")
    for row in range(len(rows)):
        instance = rows.instance(row)
        ids, flags = instance["input_ids"], instance["word_starts"]
        assert len(ids) == len(flags)
        for position, token in enumerate(ids):
            if token in (cls, sep):
                assert flags[position] == 1
            if position and ids[position - 1] in (cls, sep):  # a segment's first token
                assert flags[position] == 1
    assert rows.truncated.any()


# sha256 of four whole-word-masked batches (and four plain ones) of the tiny DATA, which has no
# word_starts column, pinned from the code before word starts existed (commit 634236a).
PINNED_BATCHES = {
    False: "c6ec2d9ce19c5f8e571a2b23cb186a1960f4f296eba1a7ccf4dc5f90d3427642",
    True: "7be3bad0cd6d534f6d48e3f3443523edcfcb7c67c9b54750d461086ce9afb832",
}


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_data_without_word_starts_gives_the_same_batches_as_before(whole_word_mask, tmp_path):
    data = load_data(build_tiny_data(tmp_path / "data", documents=40, validation=4, seed=5))
    assert "word_starts" not in data.train.column_names
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=32, seed=3)
    collate = MaskingCollator(data.tokenizer, whole_word_mask=whole_word_mask, max_predictions_per_seq=5, seed=9)
    digest = hashlib.sha256()
    for start in range(0, 64, 16):
        batch = collate(instances.__getitems__(range(start, start + 16)))
        for name in sorted(batch):
            digest.update(name.encode())
            digest.update(batch[name].numpy().tobytes())
    assert digest.hexdigest() == PINNED_BATCHES[whole_word_mask]
