"""bertpre.batches.plm: who sees whom in a permutation-LM batch (every predicted token sees
exactly the tokens before it in its factorization order), exact target counts, the span plan's
length distribution, Hugging Face's plan, the left-to-right order, and rows planned by their
instance alone."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from bertpre.batches.plm import PermutationCollator, expand_plm, target_count, xlnet_spans
from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX, query_rows

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [f"w{i}" for i in range(60)]
PIECES = [f"##p{i}" for i in range(40)]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS + WORDS + PIECES)}
    return Tokenizer(WordPiece(vocab, unk_token="[UNK]"))


def instances(tokenizer: Tokenizer, count: int, seed: int, *, lengths=(8, 64), pieces: bool = True) -> list[dict]:
    """[CLS] A [SEP] B [SEP] of random words, some followed by `##` pieces."""
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    rng = np.random.default_rng(seed)
    made = []
    for number in range(count):
        length = int(rng.integers(*lengths))
        body = []
        while len(body) < length:
            body.append(tokenizer.token_to_id(f"w{rng.integers(60)}"))
            while pieces and rng.random() < 0.3:
                body.append(tokenizer.token_to_id(f"##p{rng.integers(40)}"))
        cut = len(body) // 2
        ids = [cls, *body[:cut], sep, *body[cut:], sep]
        made.append({"input_ids": ids, "token_type_ids": [0] * (cut + 2) + [1] * (len(body) - cut + 1),
                     "seed_key": seed * 1000 + number})
    return made


def test_every_target_sees_exactly_the_tokens_before_it_in_its_order(tokenizer):
    collator = PermutationCollator(tokenizer, seed=3)
    batch = collator(instances(tokenizer, 24, 0))
    perm_mask, target_mapping = expand_plm(batch)
    real = batch["attention_mask"].bool()
    for row in range(len(real)):
        rank = batch["perm_rank"][row].tolist()
        hidden = batch["perm_hidden"][row].tolist()
        positions = [p for p in range(len(rank)) if real[row, p]]
        # The order as a list: the visible tokens first (tied), then the hidden ones by rank.
        order = sorted(positions, key=lambda p: (hidden[p], rank[p]))
        visible_count = sum(not hidden[p] for p in positions)
        assert len({rank[p] for p in positions if hidden[p]}) == len(positions) - visible_count  # a strict order
        for slot in range(target_mapping.shape[1]):
            if batch["labels"][row, slot] == IGNORE_INDEX:
                assert target_mapping[row, slot].sum() == 0
                continue
            target = int(target_mapping[row, slot].argmax())
            assert hidden[target] and batch["perm_target"][row, target]
            before = set(order[:order.index(target)])
            sees = {p for p in positions if not perm_mask[row, target, p]}
            assert sees == before  # its own token and everything after it in the order unseen
        for position in positions:  # a visible token sees the visible ones only
            if not hidden[position]:
                sees = {p for p in positions if not perm_mask[row, position, p]}
                assert sees == {p for p in positions if not hidden[p]}


def test_targets_are_exact_in_count_and_inputs_stay_whole(tokenizer):
    collator = PermutationCollator(tokenizer, plm_probability=1 / 6, seed=1)
    made = instances(tokenizer, 40, 1)
    batch = collator(made)
    length = batch["input_ids"].shape[1]
    assert batch["labels"].shape == (40, round(length / 6))
    functional = {tokenizer.token_to_id(name) for name in SPECIALS if name != "[UNK]"}
    for row, instance in enumerate(made):
        ids = instance["input_ids"]
        eligible = sum(token not in functional for token in ids)
        targets = batch["perm_target"][row]
        assert int(targets.sum()) == target_count(eligible, 1 / 6) == int((batch["labels"][row] != IGNORE_INDEX).sum())
        assert batch["input_ids"][row, :len(ids)].tolist() == ids  # inputs left whole (XLNet's plan)
        used = batch["labels"][row] != IGNORE_INDEX
        positions = batch["target_positions"][row][used]
        assert torch.equal(batch["labels"][row][used], batch["input_ids"][row, positions])
        assert all(ids[p] not in functional for p in positions.tolist())
        # [CLS] and [SEP] are in the order (hidden from what comes before them) but never predicted
        for position, token in enumerate(ids):
            if token in functional:
                assert batch["perm_hidden"][row, position] and not targets[position]


def test_span_lengths_follow_the_plan():
    """Spans of n one-piece words, P(n) ∝ 1/n for n ≤ 5, each with 6n tokens of context (the
    original's mask_alpha 6, mask_beta 1): with a goal never reached, over ~3,900 spans each
    length's share is within 0.025 of (1/n) / H_5, and the spans cover 1/7 of the row ± 0.01."""
    rng = np.random.default_rng(0)
    length = 60_000
    eligible = np.ones(length, dtype=bool)
    masked = xlnet_spans(eligible.copy(), eligible, length, plm_probability=1 / 6, max_span_length=5, rng=rng)
    edges = np.diff(np.concatenate([[0], masked.astype(int), [0]]))
    spans = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    assert len(spans) > 3500
    expected = (1 / np.arange(1, 6)) / (1 / np.arange(1, 6)).sum()
    shares = np.bincount(spans, minlength=6)[1:] / len(spans)
    assert np.abs(shares - expected).max() < 0.025, shares
    assert abs(masked.mean() - 1 / 7) < 0.01


def test_spans_are_whole_words():
    rng = np.random.default_rng(1)
    length = 5000
    starts = rng.random(length) < 0.6
    starts[0] = True
    eligible = np.ones(length, dtype=bool)
    masked = xlnet_spans(starts, eligible, length, plm_probability=1 / 6, max_span_length=5, rng=rng)
    edges = np.diff(np.concatenate([[0], masked.astype(int), [0]]))
    begins, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    assert starts[begins].all()
    assert all(end == length or starts[end] for end in ends)
    words = [int(starts[begin:end].sum()) for begin, end in zip(begins, ends, strict=True)]
    assert min(words) >= 1 and max(words) <= 5


def test_a_row_is_planned_by_its_instance_alone(tokenizer):
    collator = PermutationCollator(tokenizer, seed=5, pad_to_length=128)
    made = instances(tokenizer, 12, 2)
    whole = collator(made)
    alone = collator(made[3:4])
    for name in ("perm_rank", "perm_hidden", "perm_target", "target_positions", "labels"):
        assert torch.equal(whole[name][3], alone[name][0]), name
    other = PermutationCollator(tokenizer, seed=6, pad_to_length=128)(made[3:4])
    assert not torch.equal(other["perm_target"][0], alone["perm_target"][0])


def test_blocks_of_perm_size_come_in_order(tokenizer):
    collator = PermutationCollator(tokenizer, seed=2, perm_size=32, pad_to_length=64)
    batch = collator(instances(tokenizer, 16, 3, lengths=(58, 62)))
    rank, hidden = batch["perm_rank"], batch["perm_hidden"]
    for row in range(16):
        first = rank[row, :32][hidden[row, :32]]
        second = rank[row, 32:][hidden[row, 32:]]
        assert first.numel() and second.numel() and first.max() < second.min()


def test_hugging_faces_plan(tokenizer):
    made = instances(tokenizer, 30, 4, lengths=(20, 41))
    batch = PermutationCollator(tokenizer, plan="hf", seed=4, pad_to_length=96)(made)
    mask = tokenizer.token_to_id("[MASK]")
    targets = batch["perm_target"]
    assert batch["labels"].shape == batch["input_ids"].shape  # P = T: every position a query
    assert torch.equal(batch["input_ids"][targets], torch.full((int(targets.sum()),), mask))
    used = batch["labels"] != IGNORE_INDEX
    assert torch.equal(used.sum(1), targets.sum(1))
    for row, instance in enumerate(made):  # labels are the ids [MASK] replaced
        positions = batch["target_positions"][row][used[row]]
        assert batch["labels"][row][used[row]].tolist() == [instance["input_ids"][p] for p in positions.tolist()]
    share = targets.sum() / batch["attention_mask"].sum()
    assert 0.08 < float(share) < 0.25
    perm_mask, _ = expand_plm(batch)
    assert perm_mask[targets.unsqueeze(-1) & torch.eye(perm_mask.shape[1], dtype=torch.bool)].all()
    with pytest.raises(UserError, match="even sequence length"):
        PermutationCollator(tokenizer, plan="hf", pad_to_length=63)(made[:2])


def test_left_to_right_is_the_identity_order(tokenizer):
    batch = PermutationCollator(tokenizer, objective="clm")(instances(tokenizer, 6, 5))
    perm_mask, target_mapping = expand_plm(batch)
    real = batch["attention_mask"].bool()
    for row in range(6):
        for position in torch.nonzero(batch["perm_target"][row]).flatten().tolist():
            sees = {p for p in torch.nonzero(real[row]).flatten().tolist() if not perm_mask[row, position, p]}
            assert sees == set(range(position))
    assert target_mapping.shape[1] == batch["input_ids"].shape[1]


@pytest.mark.parametrize(("settings", "message"), [
    ({"objective": "mlm"}, "objective must be one of"),
    ({"plan": "other"}, "plan must be one of"),
    ({"plm_probability": 0.0}, "plm_probability must be in"),
    ({"plm_probability": 0.5, "max_span_length": 5}, "max_span_length must be from 1"),
    ({"perm_size": 0}, "perm_size must be a positive"),
])
def test_bad_settings_are_one_line(tokenizer, settings, message):
    with pytest.raises(UserError, match=message):
        PermutationCollator(tokenizer, **settings)


def test_a_batch_of_short_rows_is_padded_to_whole_blocks_of_the_order(tokenizer):
    """Segments at a document's end are short: the padded length still holds whole perm_size
    blocks (xlnet plan) or two halves (hf plan), so no batch of a run is refused."""
    made = instances(tokenizer, 4, 7, lengths=(9, 13))
    assert max(len(row["input_ids"]) for row in made) % 8
    batch = PermutationCollator(tokenizer, perm_size=8, seed=1)(made)
    assert batch["input_ids"].shape[1] % 8 == 0
    odd = [row for row in made if len(row["input_ids"]) % 2] or made
    assert PermutationCollator(tokenizer, plan="hf", seed=1)(odd[:1])["input_ids"].shape[1] % 2 == 0


def test_the_collator_the_objective_and_the_cost_model_count_one_p(tokenizer):
    """P is one function (`labels.query_rows`): the collator's slots, the objective's cost option
    and the cost model's query rows are its value, round(T·share) and at least 1."""
    from bertpre.config import load_config
    from bertpre.model.cost import plm_query_rows
    from bertpre.train.objectives import objective_for

    assert [query_rows(length, 1 / 6) for length in (1, 2, 3, 32, 512)] == [1, 1, 1, 5, 85]
    for length, share in ((32, 1 / 6), (100, 0.15), (512, 1 / 6), (7, 0.01)):
        collator = PermutationCollator(tokenizer, plm_probability=share, seed=1)
        config = load_config(None, ["model.architecture=xlnet", "data.objective=plm", f"data.plm_probability={share}",
                                    f"data.max_seq_length={max(length, 8)}"])
        rows = objective_for("plm").cost_options(config)["query_rows"]
        assert collator.slots(length) == plm_query_rows(length, share) == query_rows(length, share)
        assert rows == query_rows(max(length, 8), share)
