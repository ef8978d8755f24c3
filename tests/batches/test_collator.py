"""bertpre.collator.MaskingCollator: padding, the 15% choice, the 80/10/10 split, whole words,
and masks that depend on the instance only (not on the batch or the DataLoader worker)."""

from __future__ import annotations

import math

import datasets
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from bertpre.batches.collator import MaskingCollator
from bertpre.batches.pairs import PretrainingInstances
from bertpre.errors import UserError
from bertpre.labels import KEPT, MASKED, NO_ACTION, RANDOM_TOKEN

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [f"w{i}" for i in range(60)]
PIECES = [f"##p{i}" for i in range(40)]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS + PIECES)}
    return Tokenizer(WordPiece(vocab, unk_token="[UNK]"))


def ids_of(tokenizer: Tokenizer, *names: str) -> list[int]:
    return [tokenizer.token_to_id(name) for name in names]


def random_instances(
    tokenizer: Tokenizer,
    count: int,
    seed: int,
    min_length: int = 4,
    max_length: int = 60,
    pieces: bool = False,
) -> list[dict]:
    """[CLS] A [SEP] B [SEP] instances of random words (and `##` pieces), some [UNK]s."""
    cls, sep, unk = ids_of(tokenizer, "[CLS]", "[SEP]", "[UNK]")
    rng = np.random.default_rng(seed)
    pool = [tokenizer.token_to_id(t) for t in WORDS + (PIECES if pieces else [])] + [unk]
    instances = []
    for i in range(count):
        a = rng.choice(
            pool, size=int(rng.integers(max(1, min_length // 2), max_length // 2))
        ).tolist()
        b = rng.choice(
            pool, size=int(rng.integers(max(1, min_length // 2), max_length // 2))
        ).tolist()
        ids = [cls, *a, sep, *b, sep]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        instances.append(
            {
                "input_ids": ids,
                "token_type_ids": types,
                "next_sentence_label": i % 2,
                "seed_key": 1000 + i,
            }
        )
    return instances


def within_binomial(successes: int, trials: int, p: float, sigmas: float = 4.5) -> bool:
    return abs(successes - trials * p) <= sigmas * math.sqrt(trials * p * (1 - p))


def test_padding_and_output_layout(tokenizer):
    instances = random_instances(tokenizer, 5, seed=0)
    batch = MaskingCollator(tokenizer)(instances)
    longest = max(len(x["input_ids"]) for x in instances)
    assert set(batch) == {
        "input_ids",
        "token_type_ids",
        "attention_mask",
        "labels",
        "next_sentence_label",
        "mask_action",
        "masked_lm_positions",
        "masked_lm_ids",
    }
    slots = int((batch["labels"] != -100).sum(dim=1).max())  # no cap: the batch's most predictions
    for name, tensor in batch.items():
        assert tensor.dtype == torch.long
        assert tensor.shape == ((5,) if name == "next_sentence_label" else
                                (5, slots) if name.startswith("masked_lm") else (5, longest))
    assert batch["next_sentence_label"].tolist() == [0, 1, 0, 1, 0]
    for row, instance in enumerate(instances):
        n = len(instance["input_ids"])
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (longest - n)
        assert batch["token_type_ids"][row, :n].tolist() == instance["token_type_ids"]
        restored = torch.where(
            batch["labels"][row] >= 0, batch["labels"][row], batch["input_ids"][row]
        )
        assert restored[:n].tolist() == instance["input_ids"]
        assert (batch["input_ids"][row, n:] == 0).all() and (batch["labels"][row, n:] == -100).all()

    assert (
        MaskingCollator(tokenizer, pad_to_multiple_of=8)(instances)["input_ids"].shape[1]
        == -(-longest // 8) * 8
    )
    assert MaskingCollator(tokenizer, pad_to_length=64)(instances)["input_ids"].shape == (5, 64)
    with pytest.raises(UserError):
        MaskingCollator(tokenizer, pad_to_length=longest - 1)(instances)


def test_exactly_fifteen_percent_of_eligible_tokens_and_never_specials(tokenizer):
    special = set(ids_of(tokenizer, "[PAD]", "[CLS]", "[SEP]", "[MASK]"))
    instances = random_instances(tokenizer, 400, seed=1)
    batch = MaskingCollator(tokenizer, pad_to_multiple_of=8)(instances)
    for row, instance in enumerate(instances):
        eligible = [t for t in instance["input_ids"] if t not in special]
        predicted = batch["labels"][row][batch["labels"][row] != -100].tolist()
        assert len(predicted) == max(1, math.floor(len(eligible) * 0.15 + 0.5))
        assert not special & set(predicted)
        assert ((batch["mask_action"][row] != NO_ACTION) == (batch["labels"][row] != -100)).all()


def test_eighty_ten_ten_split_and_random_tokens_are_ordinary(tokenizer):
    collate = MaskingCollator(tokenizer)
    instances = random_instances(tokenizer, 1200, seed=2)
    batch = collate(instances)
    action, labels, ids = batch["mask_action"], batch["labels"], batch["input_ids"]
    predicted = int((labels != -100).sum())
    assert predicted > 3000
    for kind, p in ((MASKED, 0.8), (RANDOM_TOKEN, 0.1), (KEPT, 0.1)):
        assert within_binomial(int((action == kind).sum()), predicted, p)
    assert (ids[action == MASKED] == tokenizer.token_to_id("[MASK]")).all()
    assert (ids[action == KEPT] == labels[action == KEPT]).all()
    replaced = ids[action == RANDOM_TOKEN]
    ordinary = {tokenizer.token_to_id(t) for t in WORDS + PIECES}
    assert set(replaced.tolist()) <= ordinary
    # uniform over the ordinary tokens: every one of the 100 shows up among ~300 draws
    assert len(set(replaced.tolist())) > 80
    untouched = action == NO_ACTION
    assert (labels[untouched] == -100).all()


def test_max_predictions_per_seq_caps_the_count(tokenizer):
    instances = random_instances(tokenizer, 50, seed=3, min_length=60, max_length=120)
    batch = MaskingCollator(tokenizer, max_predictions_per_seq=5)(instances)
    assert ((batch["labels"] != -100).sum(dim=1) == 5).all()


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_fixed_size_predictions_list_the_labels_in_position_order(tokenizer, whole_word_mask):
    instances = random_instances(tokenizer, 40, seed=7, min_length=4, max_length=120, pieces=True)
    batch = MaskingCollator(tokenizer, max_predictions_per_seq=12, whole_word_mask=whole_word_mask,
                            seed=3)(instances)
    positions, ids, labels = batch["masked_lm_positions"], batch["masked_lm_ids"], batch["labels"]
    assert positions.shape == ids.shape == (40, 12)
    for row in range(40):
        predicted = torch.nonzero(labels[row] != -100).flatten()
        count = len(predicted)
        assert positions[row, :count].tolist() == predicted.tolist()  # increasing positions
        assert ids[row, :count].tolist() == labels[row, predicted].tolist()
        assert (positions[row, count:] == 0).all() and (ids[row, count:] == -100).all()
    # The gather the model does: hidden states at the positions, labels at the same places.
    gathered = labels.gather(1, positions)
    assert torch.equal(torch.where(ids != -100, gathered, -100), ids)
    # Fixed shapes: P is the cap whatever the batch; without a cap, the padded length.
    few = MaskingCollator(tokenizer, max_predictions_per_seq=12)(instances[:2])
    assert few["masked_lm_positions"].shape == (2, 12)
    uncapped = MaskingCollator(tokenizer, pad_to_length=128)(instances[:2])
    assert uncapped["masked_lm_ids"].shape == (2, 128)


def test_whole_words_are_chosen_all_or_nothing(tokenizer):
    special = set(ids_of(tokenizer, "[PAD]", "[CLS]", "[SEP]", "[MASK]"))
    piece_ids = {tokenizer.token_to_id(t) for t in PIECES}
    instances = random_instances(tokenizer, 300, seed=4, pieces=True)
    batch = MaskingCollator(tokenizer, whole_word_mask=True, max_predictions_per_seq=12)(instances)
    groups_checked = 0
    for row, instance in enumerate(instances):
        ids = instance["input_ids"]
        chosen = (batch["labels"][row, : len(ids)] != -100).tolist()
        words, current = [], []  # a word: a non-special token and the `##` pieces after it
        for position, token in enumerate(ids):
            if token in special:
                current = []
                continue
            if token not in piece_ids or not current:
                current = [position]
                words.append(current)
            else:
                current.append(position)
        for word in words:
            assert len({chosen[p] for p in word}) == 1
            groups_checked += len(word) > 1 and chosen[word[0]]
        count, eligible = sum(chosen), sum(len(w) for w in words)
        target = min(max(1, math.floor(eligible * 0.15 + 0.5)), 12)
        longest_word = max(len(w) for w in words)
        # words are taken in key order while fewer than `target` tokens are taken and the cap holds
        assert count <= 12 and (
            target <= count < target + longest_word or count > 12 - longest_word
        )
    assert groups_checked > 50


def test_masks_follow_the_instance_not_the_batch(tokenizer):
    collate = MaskingCollator(tokenizer, seed=7)
    instances = random_instances(tokenizer, 20, seed=5)
    together = collate(instances)
    alone = collate([instances[3]])
    n = len(instances[3]["input_ids"])
    assert torch.equal(together["labels"][3, :n], alone["labels"][0, :n])
    assert torch.equal(together["input_ids"][3, :n], alone["input_ids"][0, :n])
    rekeyed = collate([{**instances[3], "seed_key": 999_999}])
    other_seed = MaskingCollator(tokenizer, seed=8)([instances[3]])
    assert not torch.equal(rekeyed["labels"], alone["labels"])
    assert not torch.equal(other_seed["labels"], alone["labels"])
    # without a seed_key the ids themselves key the draws: still reproducible
    plain = [{"input_ids": x["input_ids"]} for x in instances]
    assert torch.equal(collate(plain)["labels"], collate(plain)["labels"])
    assert "next_sentence_label" not in collate(plain)


def test_ids_outside_the_vocabulary_are_a_user_error(tokenizer):
    with pytest.raises(UserError):
        MaskingCollator(tokenizer)([{"input_ids": [2, 5000, 3]}])


def test_same_batches_with_zero_and_two_workers_and_new_ones_next_epoch(tokenizer):
    rng = np.random.default_rng(0)
    word_ids = [tokenizer.token_to_id(t) for t in WORDS]
    documents = [
        [
            rng.choice(word_ids, size=int(rng.integers(2, 15))).tolist()
            for _ in range(int(rng.integers(1, 6)))
        ]
        for _ in range(60)
    ]
    instances = PretrainingInstances(
        datasets.Dataset.from_dict({"input_ids": documents}), tokenizer, max_seq_length=32
    )
    collate = MaskingCollator(tokenizer)

    def epoch_batches(num_workers: int) -> list[dict]:
        loader = torch.utils.data.DataLoader(
            instances, batch_size=8, collate_fn=collate, num_workers=num_workers
        )
        return list(loader)

    serial, parallel = epoch_batches(0), epoch_batches(2)
    assert len(serial) == len(parallel) > 3
    for one, two in zip(serial, parallel, strict=True):
        assert all(torch.equal(one[k], two[k]) for k in one)
    instances.set_epoch(1)
    next_epoch = epoch_batches(0)
    assert not torch.equal(next_epoch[0]["input_ids"], serial[0]["input_ids"])
    # the same text in both epochs is masked differently
    first = {
        tuple(torch.where(b["labels"] >= 0, b["labels"], b["input_ids"])[r].tolist()): b["labels"][
            r
        ]
        for b in serial
        for r in range(len(b["labels"]))
    }
    again = [
        (first[key], b["labels"][r])
        for b in next_epoch
        for r in range(len(b["labels"]))
        if (key := tuple(torch.where(b["labels"] >= 0, b["labels"], b["input_ids"])[r].tolist()))
        in first
    ]
    assert not again or any(not torch.equal(x, y) for x, y in again)


@pytest.mark.parametrize("pair_task", ["nsp", "sop", "none"])
def test_a_batch_fetched_as_one_collates_like_its_instances_one_by_one(tokenizer, pair_task):
    rng = np.random.default_rng(1)
    word_ids = [tokenizer.token_to_id(t) for t in WORDS]
    documents = [[rng.choice(word_ids, size=int(rng.integers(1, 30))).tolist()
                  for _ in range(int(rng.integers(1, 6)))] for _ in range(40)]
    instances = PretrainingInstances(datasets.Dataset.from_dict({"input_ids": documents}), tokenizer,
                                     max_seq_length=24, pair_task=pair_task, seed=5)
    collate = MaskingCollator(tokenizer, pad_to_multiple_of=8)
    indices = [7, 0, 3, 3, len(instances) - 1, 12, 5]
    fetched = instances.__getitems__(indices)
    one_by_one = [instances[i] for i in indices]
    assert fetched.truncated.any() and not fetched.truncated.all()
    assert [fetched.instance(k) for k in range(len(indices))] == one_by_one
    together, separately = collate(fetched), collate(one_by_one)
    assert set(together) == set(separately)
    assert all(torch.equal(together[key], separately[key]) for key in together)
    assert ("next_sentence_label" in together) == (pair_task != "none")


def test_every_eligible_position_is_equally_likely_to_be_chosen(tokenizer):
    cls, sep = ids_of(tokenizer, "[CLS]", "[SEP]")
    word = tokenizer.token_to_id("w1")
    rows = 2000
    instances = [
        {"input_ids": [cls] + [word] * 20 + [sep] + [word] * 17 + [sep], "seed_key": i}
        for i in range(rows)
    ]
    chosen = (MaskingCollator(tokenizer)(instances)["labels"] != -100).numpy()
    eligible = [p for p in range(40) if p not in (0, 21, 39)]
    k = math.floor(37 * 0.15 + 0.5)  # 6 of 37 in every row
    assert (chosen.sum(axis=1) == k).all() and not chosen[:, [0, 21, 39]].any()
    for position in eligible:
        assert within_binomial(int(chosen[:, position].sum()), rows, k / 37)
