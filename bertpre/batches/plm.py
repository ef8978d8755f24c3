"""Batches for XLNet's permutation language modelling (`plm`) and Transformer-XL's left-to-right
one (`clm`, the identity order): which tokens are predicted, in what factorization order, and
who may see whom.

A batch stays compact on the host: per position its rank in the factorization order
(`perm_rank`, -1 for a token every position may see), whether it is hidden from the positions
ranked before it (`perm_hidden`) and whether it is predicted (`perm_target`), plus the P
predicted positions a row and their ids (`target_positions`, `labels`, -100 in unused slots).
`expand_plm` turns that into XLNet's `perm_mask` (B, T, T) and `target_mapping` (B, P, T) on
whatever device the batch is on, without a host sync: P is fixed by the collator, so a compiled
step never sees a new shape.

Two span plans, as `plan`:
- `xlnet` (default; the original zihangdai/xlnet `data_utils._sample_mask` and `_local_perm`):
  spans of n whole words, P(n) ∝ 1/n for n = 1 … `max_span_length`, each with n / p tokens of
  context around it (p = `plm_probability`, the original's mask_beta / mask_alpha), split at a
  uniform point, so the spans alone cover p / (1 + p) of the row (1/7 for p = 1/6); then single
  tokens drawn at random until the row has exactly round(n_eligible · p) targets (a span that
  would overshoot is cut to fit; the original keeps the overshoot and predicts only the first
  `num_predict`). Inputs stay whole: only the query stream starts from `mask_emb`. The
  factorization order: visible tokens first (rank -1), then the targets and the functional
  tokens ([CLS], [SEP]) in a random order drawn within blocks of `perm_size` positions (one
  permutation of the offsets, used for every block, so an earlier block never depends on a
  later one: what makes its hidden states reusable as the next segment's memory). Functional
  tokens are in the order but never predicted. The query stream runs over the P targets only.
- `hf` (Hugging Face's `DataCollatorForPermutationLanguageModeling`): span lengths uniform in
  1 … `max_span_length` tokens (not words), one in each window of length / `plm_probability`,
  special tokens and padding unmasked afterwards (so the count varies); targets replaced by
  [MASK] in the input; the order within two halves of the row; the query stream over every
  position (P = T, `target_mapping` the identity); an odd length refused.

`clm`: rank = position, every real token hidden from the ones before it, every non-special
token predicted (P = T): with XLNet's two streams this is Transformer-XL's language model.

Each row's draws come from a generator keyed by (collator seed, the instance's `seed_key`), so a
row is planned the same way whichever worker builds it and whatever else is in its batch.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from tokenizers import Tokenizer

from bertpre.batches import keyed_random
from bertpre.batches.instance_batch import InstanceBatch, as_instance_batch
from bertpre.batches.padding import pad_instances, padded_length, prediction_slots
from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX, query_rows
from bertpre.tokenizer.roles import token_roles
from bertpre.tokenizer.word_boundaries import continues_word

if TYPE_CHECKING:  # the run config sits above this package
    from bertpre.config import DataConfig

OBJECTIVES = ("plm", "clm")
PLANS = ("xlnet", "hf")
_PLM_TAG = 0x9E4A7

__all__ = ["OBJECTIVES", "PLANS", "PermutationCollator", "expand_plm", "span_mask_xlnet", "span_mask_hf", "xlnet_spans",
           "factorization_rank", "target_count"]


def target_count(eligible: int, plm_probability: float) -> int:
    """How many of a row's `eligible` tokens the `xlnet` plan predicts: round(n·p), at least 1."""
    if eligible <= 0:
        return 0
    return min(eligible, query_rows(eligible, plm_probability))


def span_mask_xlnet(word_starts: np.ndarray, eligible: np.ndarray, goal: int, *, plm_probability: float,
                    max_span_length: int, rng: np.random.Generator) -> np.ndarray:
    """(T,) bool: exactly `goal` eligible positions, as spans of whole words (see the module)."""
    masked = xlnet_spans(word_starts, eligible, goal, plm_probability=plm_probability,
                         max_span_length=max_span_length, rng=rng)
    count = int(masked.sum())
    if count < goal:  # top up with single tokens, uniformly among the rest
        rest = np.flatnonzero(eligible & ~masked)
        masked[rng.choice(rest, size=goal - count, replace=False)] = True
    return masked


def xlnet_spans(word_starts: np.ndarray, eligible: np.ndarray, goal: int, *, plm_probability: float,
                max_span_length: int, rng: np.random.Generator) -> np.ndarray:
    """The spans alone, before the top-up: at most `goal` positions."""
    length = len(eligible)
    masked = np.zeros(length, dtype=bool)
    sizes = np.arange(1, max_span_length + 1)
    weights = 1.0 / sizes
    weights /= weights.sum()
    starts = word_starts & eligible
    count, cursor = 0, 0
    while cursor < length and count < goal:
        words = int(rng.choice(sizes, p=weights))
        window = max(words, int(words / plm_probability))
        left = int(rng.integers(window))  # the window's context before the span
        begin = cursor + left
        while begin < length and not starts[begin]:
            begin += 1
        if begin >= length:
            break
        end, seen = begin + 1, 1
        while end < length and eligible[end]:
            if starts[end]:
                if seen == words:
                    break
                seen += 1
            end += 1
        end = min(end, begin + goal - count)  # cut to fit the goal exactly
        masked[begin:end] = True
        count += end - begin
        cursor = end + (window - left)
    return masked


def span_mask_hf(eligible: np.ndarray, *, plm_probability: float, max_span_length: int,
                 rng: np.random.Generator) -> np.ndarray:
    """(T,) bool: Hugging Face's plan (see the module); ineligible positions unmasked after."""
    length = len(eligible)
    masked = np.zeros(length, dtype=bool)
    cursor = 0
    while cursor < length:
        span = int(rng.integers(1, max_span_length + 1))
        window = int(span / plm_probability)
        begin = cursor + int(rng.integers(window - span + 1))
        masked[begin:begin + span] = True
        cursor += window
    return masked & eligible


def factorization_rank(length: int, perm_size: int, rng: np.random.Generator) -> np.ndarray:
    """(T,) int64: each position's place in a random order drawn within blocks of `perm_size`
    (one permutation of the offsets for every block; block b entirely before block b + 1)."""
    if length % perm_size:
        raise UserError(f"the sequence length {length} must be a multiple of perm_size {perm_size}")
    offsets = rng.permutation(perm_size)
    positions = np.arange(length)
    return (positions // perm_size) * perm_size + offsets[positions % perm_size]


class PermutationCollator:
    """Callable turning instances into a `plm` or `clm` batch (see the module).

    Args:
        tokenizer: the WordPiece tokenizer ([CLS], [SEP], [PAD], [MASK] and `##` pieces).
        objective: `plm` or `clm`.
        plan: `xlnet` or `hf` (plm only).
        plm_probability: share of eligible tokens predicted (XLNet's 1/K: 1/6 is K = 6).
        max_span_length: the longest span (words for `xlnet`, tokens for `hf`).
        perm_size: the block the order is drawn within (`xlnet`; default the whole padded row,
            XLNet's `reuse_len` when segments are reused as memory).
        seed: mixed into every row's key.
        pad_to_length: pad every batch to exactly this length (compiled steps); else the longest.

    The batch: int64 `input_ids`, `token_type_ids`, `attention_mask`, `perm_rank` (B, T);
    bool `perm_hidden`, `perm_target` (B, T); int64 `target_positions`, `labels` (B, P); and
    for segments read lane by lane (`SegmentInstances`), bool `memory_reset` (B,).
    P: round(T · plm_probability) for `xlnet` (T the padded length), T for `hf` and `clm`.
    """

    def __init__(self, tokenizer: Tokenizer, *, objective: str = "plm", plan: str = "xlnet",
                 plm_probability: float = 1 / 6, max_span_length: int = 5, perm_size: int | None = None,
                 seed: int = 0, pad_to_length: int | None = None) -> None:
        if objective not in OBJECTIVES:
            raise UserError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")
        if plan not in PLANS:
            raise UserError(f"plm plan must be one of {', '.join(PLANS)}, not {plan!r}")
        if not 0.0 < plm_probability < 1.0:
            raise UserError(f"plm_probability must be in (0, 1), not {plm_probability}")
        if not 1 <= max_span_length <= 1 / plm_probability:
            raise UserError(f"max_span_length must be from 1 to 1/plm_probability ({1 / plm_probability:g}), "
                            f"not {max_span_length}")
        for name, value in (("perm_size", perm_size), ("pad_to_length", pad_to_length)):
            if value is not None and value < 1:
                raise UserError(f"{name} must be a positive integer or null, not {value}")
        self.objective, self.plan = objective, plan
        self.plm_probability, self.max_span_length = plm_probability, max_span_length
        self.perm_size, self.pad_to_length = perm_size, pad_to_length
        self.seed_key = keyed_random.derive_key(seed, _PLM_TAG)
        roles = token_roles(tokenizer)
        self.pad_token_id, self.mask_token_id = roles.pad_token_id, roles.mask_token_id
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1
        special = {token_id for token_id, added in tokenizer.get_added_tokens_decoder().items() if added.special}
        self.functional = np.zeros(self.vocab_size, dtype=bool)  # in the order, never predicted
        self.functional[sorted(special | roles.special_ids)] = True
        tokens = np.full(self.vocab_size, "", dtype=object)
        tokens[list(vocab.values())] = list(vocab.keys())
        self.is_continuation = continues_word(tokens, roles, special | roles.special_ids)

    @classmethod
    def from_config(cls, tokenizer: Tokenizer, data_config: DataConfig, seed: int, *,
                    fixed_shapes: bool = False) -> PermutationCollator:
        """The collator a run's `data:` section describes (objective plm or clm).

        The xlnet plan draws its order within blocks of `data.segment_step` tokens when segments
        overlap (XLNet's perm_size = reuse_len), so that the states cached as the next segment's
        memory never depended on the part of the row that segment reads again. With
        `fixed_shapes` (a compiled step) every batch is padded to `max_seq_length`.
        """
        step = data_config.segment_step
        return cls(tokenizer, objective=data_config.objective, plan=data_config.plm_plan,
                   plm_probability=data_config.plm_probability, max_span_length=data_config.max_span_length,
                   perm_size=step if step < data_config.max_seq_length else None, seed=seed,
                   pad_to_length=data_config.max_seq_length if fixed_shapes else None)

    def slots(self, length: int) -> int:
        """P, the predicted positions a row has room for at padded length T."""
        if self.objective == "clm" or self.plan == "hf":
            return length
        return query_rows(length, self.plm_probability)

    def __call__(self, instances: Sequence[dict] | InstanceBatch) -> dict[str, torch.Tensor]:
        instances = as_instance_batch(instances)
        input_ids, attention_mask, token_type_ids = self._pad(instances)
        batch_size, length = input_ids.shape
        if self.plan == "hf" and self.objective == "plm" and length % 2:
            raise UserError(f"the hf plan needs an even sequence length, not {length}; pad to an even length")
        row_keys = keyed_random.mix64(instances.seed_keys ^ np.uint64(self.seed_key))
        functional = self.functional[input_ids] & attention_mask
        eligible = attention_mask & ~self.functional[input_ids]
        word_starts = eligible & ~self.is_continuation[input_ids]
        if instances.word_starts is not None:  # DATA's own word boundaries (e.g. Chinese words)
            word_starts = np.zeros_like(eligible)
            word_starts[attention_mask] = instances.word_starts.astype(bool)
            word_starts &= eligible
        slots = self.slots(length)
        rank = np.full((batch_size, length), -1, dtype=np.int64)
        hidden = np.zeros((batch_size, length), dtype=bool)
        target = np.zeros((batch_size, length), dtype=bool)
        for row in range(batch_size):
            rng = np.random.Generator(np.random.PCG64(int(row_keys[row])))
            rank[row], hidden[row], target[row] = self._plan_row(
                eligible[row], word_starts[row], functional[row], attention_mask[row], slots, rng)
        positions, labels = self._targets(input_ids, target, slots)
        if self.plan == "hf" and self.objective == "plm":  # its targets read [MASK] in the input
            input_ids = np.where(target, self.mask_token_id, input_ids)
        batch = {
            "input_ids": torch.from_numpy(input_ids),
            "token_type_ids": torch.from_numpy(token_type_ids),
            "attention_mask": torch.from_numpy(attention_mask.astype(np.int64)),
            "perm_rank": torch.from_numpy(rank),
            "perm_hidden": torch.from_numpy(hidden),
            "perm_target": torch.from_numpy(target),
            "target_positions": torch.from_numpy(positions),
            "labels": torch.from_numpy(labels),
        }
        if instances.memory_reset is not None:  # segments read lane by lane: where memory starts empty
            batch["memory_reset"] = torch.from_numpy(instances.memory_reset.astype(bool))
        return batch

    def _plan_row(self, eligible: np.ndarray, word_starts: np.ndarray, functional: np.ndarray,
                  real: np.ndarray, slots: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        length = len(eligible)
        if self.objective == "clm":
            return np.arange(length), real.copy(), eligible.copy()
        if self.plan == "hf":
            masked = span_mask_hf(eligible, plm_probability=self.plm_probability,
                                  max_span_length=self.max_span_length, rng=rng)
            order = factorization_rank(length, length // 2, rng)
            return np.where(masked | functional, order, -1), masked, masked
        goal = min(slots, target_count(int(eligible.sum()), self.plm_probability))
        masked = span_mask_xlnet(word_starts, eligible, goal, plm_probability=self.plm_probability,
                                 max_span_length=self.max_span_length, rng=rng)
        order = factorization_rank(length, self.perm_size or length, rng)
        hidden = masked | functional
        return np.where(hidden, order, -1), hidden, masked

    def _targets(self, input_ids: np.ndarray, target: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray]:
        """(B, P) predicted positions in position order (then 0) and their ids (then -100)."""
        return prediction_slots(target, input_ids, slots)

    def _pad(self, instances: InstanceBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        multiple_of = None
        if self.objective == "plm" and self.plan == "xlnet" and self.perm_size:
            multiple_of = self.perm_size  # whole blocks of the order
        elif self.objective == "plm" and self.plan == "hf":
            multiple_of = 2  # its two halves
        length = padded_length(int(instances.lengths.max()), multiple_of=multiple_of,
                               pad_to_length=self.pad_to_length)
        return pad_instances(instances, length, pad_token_id=self.pad_token_id, vocab_size=self.vocab_size)


def expand_plm(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """XLNet's `perm_mask` (B, T, T; True: i may not see j) and `target_mapping` (B, P, T; one-hot
    rows, zero in unused slots), on the batch's device, with no host sync.

    i may not see j when j is hidden and ranked no earlier than i's own rank (a predicted token
    also not itself: its query stream must not see its own token; the content stream, which may,
    is the model's business)."""
    rank, hidden, target = batch["perm_rank"], batch["perm_hidden"], batch["perm_target"]
    own = torch.where(target, rank, rank + 1)
    perm_mask = (own.unsqueeze(2) <= rank.unsqueeze(1)) & hidden.unsqueeze(1)
    length = rank.shape[1]
    used = (batch["labels"] != IGNORE_INDEX).unsqueeze(-1)
    target_mapping = torch.nn.functional.one_hot(batch["target_positions"], length).to(torch.float32) * used
    return perm_mask, target_mapping
