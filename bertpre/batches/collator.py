"""Pad pretraining instances into a batch and mask 15% of their tokens (BERT's 80/10/10 rule).

Masking is vectorized over the whole (batch, position) grid: every position gets a keyed hash
of (collator seed, the instance's `seed_key`, position) as its random number, so an instance is
masked the same way whichever worker collates it and whatever else is in its batch; a new epoch
gives new instance keys and so new masks.

Choices, where BERT's recipe leaves room:
- Each sequence gets exactly `k = floor(n * mlm_probability + 0.5)` predictions among its n
  eligible tokens (never [CLS], [SEP], [PAD] or [MASK]; [UNK] is eligible, as in Google's code),
  at least 1 when n >= 1, at most `max_predictions_per_seq`. The k positions are the k smallest
  random keys, i.e. a uniform k-subset. With `mask_count="sampled"`, k is instead the number of
  eligible tokens whose key falls below `mlm_probability` (each token, or each word, drawn on its
  own, as Hugging Face's collator draws them; possibly 0), still capped.
- With `whole_word_mask`, a word (a token and its following `##` pieces) shares one key, and
  words are taken in key order until the count reaches k; the last word may overshoot k, but
  the total never exceeds `max_predictions_per_seq`. When the instances carry word-start flags
  (DATA tokenized with `--word-boundaries`, e.g. Chinese words of single characters), a word
  is a flagged token and the unflagged ones after it, and the 80/10/10 action is drawn once per
  word: all its tokens become [MASK], or all random tokens, or all stay. There words are often
  several tokens long, so the word that would cross k is taken with probability
  (k - tokens before it) / its length: the expected count is k, not k plus half a word.
- Each predicted token independently becomes [MASK] with `mask_replace_prob`, a random
  non-special token with `random_replace_prob`, else stays (per-token draws, as in Google's
  code), so the 80/10/10 split holds in expectation, not exactly per sequence.

The predictions also come in Google's fixed-size layout, `masked_lm_positions` and
`masked_lm_ids` of shape (B, P): a GPU gathers P rows per sequence without a data-dependent
shape, so the step needs no host sync and a compiled step never sees a new shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from tokenizers import Tokenizer

from bertpre.batches import keyed_random
from bertpre.batches.instance_batch import InstanceBatch, as_instance_batch
from bertpre.batches.padding import pad_instances, padded_length, prediction_slots, unpadded_layout
from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX, KEPT, MASK_COUNTS, MASKED, NO_ACTION, RANDOM_TOKEN
from bertpre.tokenizer.roles import token_roles
from bertpre.tokenizer.word_boundaries import continues_word

if TYPE_CHECKING:  # the run config sits above this package
    from bertpre.config import DataConfig

_COLLATOR_TAG = 0xC011A7E
_REPLACEMENT_COUNTER_BASE = 1 << 32  # replacement-token draws use counters apart from the keys'
_CROSSING_COUNTER_BASE = 1 << 33  # the draw that keeps or drops the word crossing the count
_UNUSED_TOKEN = re.compile(r"^\[unused\d+\]$")


class MaskingCollator:
    """Callable turning a list of instances into a masked batch of tensors.

    Args:
        tokenizer: the tokenizer (its special tokens by role, vocabulary, and word pieces: `##`
            continuations for WordPiece, `Ġ` / `▁` word starts for byte-level BPE / Unigram).
        mlm_probability: share of eligible tokens to predict.
        mask_replace_prob: share of predicted tokens replaced by [MASK].
        random_replace_prob: share of predicted tokens replaced by a random non-special token.
        whole_word_mask: choose a word's pieces together.
        mask_count: "exact" (round(p·n) predictions a sequence) or "sampled" (each token or
            word with probability p).
        max_predictions_per_seq: cap on predictions per sequence (None: no cap).
        seed: mixed into every instance's key; two collators with different seeds mask differently.
        pad_to_multiple_of: pad the batch's longest length up to a multiple of this (e.g. 8).
        pad_to_length: pad every batch to exactly this length (for compiled models).
        unpad_bucket: add the real tokens' layout (`padding.unpadded_layout`: `token_index`,
            `cu_seqlens`, `document_ids`, `cls_token_index`, `masked_lm_token_index`), the token
            count rounded up to a multiple of this, for a step on the real tokens alone
            (`model.unpad`); None: none.

    Instances are dicts with `input_ids` and optionally `token_type_ids`,
    `next_sentence_label` and `seed_key` (an int; without it the key is a hash of the ids).
    The batch holds int64 tensors `input_ids`, `token_type_ids`, `attention_mask`, `labels`
    (-100 where not predicted), `mask_action` (0 none, 1 [MASK], 2 random, 3 kept),
    `masked_lm_positions` (B, P) — each row's predicted positions in increasing order, then 0 —
    and `masked_lm_ids` (B, P) — the original ids there, then -100; P is `max_predictions_per_seq`,
    without a cap the padded length under `pad_to_length`, else the batch's most predictions —
    and, when every instance has one, `next_sentence_label`.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        mlm_probability: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        whole_word_mask: bool = False,
        max_predictions_per_seq: int | None = None,
        mask_count: str = "exact",
        seed: int = 0,
        pad_to_multiple_of: int | None = None,
        pad_to_length: int | None = None,
        unpad_bucket: int | None = None,
    ) -> None:
        if not 0.0 < mlm_probability <= 1.0:
            raise UserError(f"mlm_probability must be in (0, 1], not {mlm_probability}")
        if (
            min(mask_replace_prob, random_replace_prob) < 0
            or mask_replace_prob + random_replace_prob > 1
        ):
            raise UserError(
                "mask_replace_prob and random_replace_prob must be >= 0 and sum to at most 1, "
                f"not {mask_replace_prob} and {random_replace_prob}"
            )
        for name, value in (
            ("max_predictions_per_seq", max_predictions_per_seq),
            ("pad_to_multiple_of", pad_to_multiple_of),
            ("pad_to_length", pad_to_length),
            ("unpad_bucket", unpad_bucket),
        ):
            if value is not None and value < 1:
                raise UserError(f"{name} must be a positive integer or null, not {value}")
        self.mlm_probability = mlm_probability
        self.mask_replace_prob = mask_replace_prob
        self.random_replace_prob = random_replace_prob
        if mask_count not in MASK_COUNTS:
            raise UserError(f"mask_count must be one of {', '.join(MASK_COUNTS)}, not {mask_count!r}")
        self.whole_word_mask = whole_word_mask
        self.mask_count = mask_count
        self.max_predictions_per_seq = max_predictions_per_seq
        self.pad_to_multiple_of = pad_to_multiple_of
        self.pad_to_length = pad_to_length
        self.unpad_bucket = unpad_bucket
        self.seed_key = keyed_random.derive_key(seed, _COLLATOR_TAG)

        vocab = tokenizer.get_vocab(with_added_tokens=True)  # token -> id
        self.vocab_size = max(vocab.values()) + 1
        tokens = np.full(self.vocab_size, "", dtype=object)
        tokens[list(vocab.values())] = list(vocab.keys())
        roles = token_roles(tokenizer)  # by role: BERT's [MASK], RoBERTa's <mask>
        self.pad_token_id, self.mask_token_id = roles.pad_token_id, roles.mask_token_id
        special = {
            token_id
            for token_id, added in tokenizer.get_added_tokens_decoder().items()
            if added.special
        }
        special |= roles.special_ids
        unk = roles.unk_token_id
        # Lookup tables indexed by token id.
        self.never_predicted = np.zeros(self.vocab_size, dtype=bool)
        self.never_predicted[sorted(special - {unk})] = True
        unused = np.fromiter((bool(_UNUSED_TOKEN.match(t)) for t in tokens), bool, self.vocab_size)
        not_replacement = unused | (tokens == "")
        not_replacement[sorted(special | ({unk} if unk is not None else set()))] = True
        self.replacement_ids = np.flatnonzero(~not_replacement)
        if len(self.replacement_ids) == 0:
            raise UserError(
                "the tokenizer's vocabulary has no ordinary tokens to use as random replacements"
            )
        # A word's later pieces: WordPiece's `##` ones, BPE's and Unigram's without Ġ / ▁.
        self.is_continuation = continues_word(tokens, roles, special)

    @classmethod
    def from_config(cls, tokenizer: Tokenizer, data_config: DataConfig, seed: int, *,
                    fixed_shapes: bool = False, unpad_bucket: int | None = None) -> MaskingCollator:
        """The collator a run's `data:` section describes.

        With `fixed_shapes` (a compiled step) every batch is padded to `max_seq_length`;
        `unpad_bucket`: see the class.
        """
        return cls(tokenizer, mlm_probability=data_config.mlm_probability,
                   mask_replace_prob=data_config.mask_replace_prob,
                   random_replace_prob=data_config.random_replace_prob,
                   whole_word_mask=data_config.whole_word_mask, mask_count=data_config.mask_count,
                   max_predictions_per_seq=data_config.max_predictions_per_seq, seed=seed,
                   pad_to_length=data_config.max_seq_length if fixed_shapes else None,
                   unpad_bucket=unpad_bucket)

    def __call__(self, instances: Sequence[dict] | InstanceBatch) -> dict[str, torch.Tensor]:
        instances = as_instance_batch(instances)
        input_ids, attention_mask, token_type_ids = self._pad(instances)
        row_keys = keyed_random.mix64(instances.seed_keys ^ np.uint64(self.seed_key))
        word_starts = self.word_start_grid(instances, attention_mask) if self.whole_word_mask else None
        labels, mask_action, masked_ids = self.mask_tokens(input_ids, attention_mask, row_keys, word_starts)
        batch = {
            "input_ids": torch.from_numpy(masked_ids),
            "token_type_ids": torch.from_numpy(token_type_ids),
            "attention_mask": torch.from_numpy(attention_mask.astype(np.int64)),
            "labels": torch.from_numpy(labels),
            "mask_action": torch.from_numpy(mask_action),
        }
        positions, ids = self.fixed_size_predictions(labels)
        batch["masked_lm_positions"] = torch.from_numpy(positions)
        batch["masked_lm_ids"] = torch.from_numpy(ids)
        if self.unpad_bucket is not None:
            layout = unpadded_layout(attention_mask, positions, document_starts=instances.document_starts,
                                     bucket=self.unpad_bucket)
            batch.update({name: torch.from_numpy(array) for name, array in layout.items()})
        if instances.next_sentence_label is not None:
            batch["next_sentence_label"] = torch.from_numpy(instances.next_sentence_label.astype(np.int64))
        return batch

    def fixed_size_predictions(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B, P) positions and ids of each row's predictions, in position order, then 0 / -100."""
        predicted = labels != IGNORE_INDEX
        # P: the cap when there is one; else the padded length (fixed) or the batch's most.
        slots = self.max_predictions_per_seq
        if slots is None:
            slots = labels.shape[1] if self.pad_to_length is not None else max(int(predicted.sum(axis=1).max()), 1)
        return prediction_slots(predicted, labels, slots)

    def _pad(self, instances: InstanceBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(B, T) input ids, attention mask (bool) and token type ids, padded with [PAD] / 0."""
        length = padded_length(int(instances.lengths.max()), multiple_of=self.pad_to_multiple_of,
                               pad_to_length=self.pad_to_length,
                               hint="; raise pad_to_length to at least max_seq_length")
        return pad_instances(instances, length, pad_token_id=self.pad_token_id, vocab_size=self.vocab_size)

    @staticmethod
    def word_start_grid(instances: InstanceBatch, attention_mask: np.ndarray) -> np.ndarray | None:
        """(B, T) bool word-start flags padded like the ids; None when the instances have none."""
        if instances.word_starts is None:
            return None
        grid = np.zeros(attention_mask.shape, dtype=bool)
        grid[attention_mask] = instances.word_starts.astype(bool)
        return grid

    def mask_tokens(
        self, input_ids: np.ndarray, attention_mask: np.ndarray, row_keys: np.ndarray,
        word_starts: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Choose and corrupt the predicted positions.

        Args:
            input_ids: (B, T) int64 padded ids; attention_mask: (B, T) bool; row_keys: (B,) uint64.
            word_starts: (B, T) bool, where words begin (whole-word masking by given words).
        Returns:
            labels (B, T) with -100 where not predicted, mask_action (B, T), corrupted input ids.
        """
        batch_size, length = input_ids.shape
        positions = np.arange(length)
        eligible = attention_mask & ~self.never_predicted[input_ids]  # (B, T)
        num_eligible = eligible.sum(axis=1)
        num_to_predict = np.floor(num_eligible * self.mlm_probability + 0.5).astype(np.int64)
        num_to_predict = np.where(num_eligible > 0, np.maximum(num_to_predict, 1), 0)
        cap = self.max_predictions_per_seq if self.max_predictions_per_seq is not None else length
        num_to_predict = np.minimum(num_to_predict, cap)

        # One 64-bit hash per position: high 32 bits order the positions, low 32 bits pick the
        # action. The position below the 32 ordering bits makes keys distinct, so that exactly k
        # are chosen (exact in float64 up to 2**21 positions); ineligible positions get 2.0.
        bits = keyed_random.random_bits(row_keys[:, None], positions[None, :])  # (B, T) uint64
        action_draw = (bits & np.uint64(0xFFFFFFFF)).astype(np.float64) * 2.0**-32
        selection_key = (
            (bits >> np.uint64(32)).astype(np.float64) * 2.0**21 + positions
        ) * 2.0**-53
        selection_key = np.where(eligible, selection_key, 2.0)
        if self.whole_word_mask:
            start_index, word_length = self.word_layout(input_ids, eligible, word_starts)
            if self.mask_count == "sampled":  # the tokens of the words whose key is below p
                word_key = selection_key[np.arange(batch_size)[:, None], start_index]
                drawn = (eligible & (word_key < self.mlm_probability)).sum(axis=1)
                num_to_predict = np.minimum(drawn, cap)
            crossing_draw = None
            if word_starts is not None:
                crossing_bits = keyed_random.random_bits(row_keys[:, None],
                                                         _CROSSING_COUNTER_BASE + start_index)
                crossing_draw = (crossing_bits >> np.uint64(11)).astype(np.float64) * 2.0**-53
            chosen = self._choose_whole_words(
                eligible, selection_key, num_to_predict, cap, start_index, word_length, crossing_draw
            )
            if word_starts is not None:  # one 80/10/10 draw per word: its first token's
                action_draw = action_draw[np.arange(batch_size)[:, None], start_index]
        else:
            if self.mask_count == "sampled":  # the tokens whose key is below p
                num_to_predict = np.minimum((selection_key < self.mlm_probability).sum(axis=1), cap)
            # The k smallest keys of a row: everything up to the row's k-th smallest key.
            sorted_keys = np.sort(selection_key, axis=1)
            kth_key = sorted_keys[np.arange(batch_size), np.maximum(num_to_predict, 1) - 1]
            chosen = eligible & (selection_key <= kth_key[:, None]) & (num_to_predict[:, None] > 0)

        mask_action = np.where(
            action_draw < self.mask_replace_prob,
            MASKED,
            np.where(
                action_draw < self.mask_replace_prob + self.random_replace_prob, RANDOM_TOKEN, KEPT
            ),
        )
        mask_action = np.where(chosen, mask_action, NO_ACTION).astype(np.int64)
        labels = np.where(chosen, input_ids, IGNORE_INDEX)
        masked_ids = np.where(mask_action == MASKED, self.mask_token_id, input_ids)
        random_rows, random_positions = np.nonzero(mask_action == RANDOM_TOKEN)
        if len(random_rows):
            draw = keyed_random.integers(
                row_keys[random_rows],
                _REPLACEMENT_COUNTER_BASE + random_positions,
                0,
                len(self.replacement_ids) - 1,
            )
            masked_ids[random_rows, random_positions] = self.replacement_ids[draw]
        return labels, mask_action, masked_ids

    def word_layout(self, input_ids: np.ndarray, eligible: np.ndarray,
                    word_starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(B, T) position of each token's word's first token, and the word's length in tokens.

        A word is an eligible token that `word_starts` flags (without flags: one that is not a
        `##` piece) and the eligible tokens right after it that are not; an ineligible token
        ([CLS], [SEP], padding) ends a word.
        """
        length = input_ids.shape[1]
        positions = np.arange(length)
        previous_eligible = np.zeros_like(eligible)
        previous_eligible[:, 1:] = eligible[:, :-1]
        begins = ~self.is_continuation[input_ids] if word_starts is None else word_starts
        word_start = eligible & (begins | ~previous_eligible)
        continues = eligible & ~word_start  # a later token of the word before it
        word_end = eligible.copy()
        word_end[:, :-1] &= ~continues[:, 1:]
        start_index = np.maximum.accumulate(np.where(word_start, positions, 0), axis=1)  # (B, T)
        end_index = np.minimum.accumulate(np.where(word_end, positions, length)[:, ::-1], axis=1)
        return start_index, end_index[:, ::-1] - start_index + 1

    def _choose_whole_words(
        self,
        eligible: np.ndarray,
        selection_key: np.ndarray,
        num_to_predict: np.ndarray,
        cap: int,
        start_index: np.ndarray,
        word_length: np.ndarray,
        crossing_draw: np.ndarray | None = None,
    ) -> np.ndarray:
        """(B, T) bool: words (see `word_layout`) taken in key order until `num_to_predict`
        tokens are reached, never past `cap`. With `crossing_draw` ((B, T) uniforms, one per
        word), the word that crosses the count is kept only when its draw falls below the share
        of it the count still wants."""
        batch_size, length = eligible.shape
        # Every piece takes its word's key; tokens keyed below it belong to words taken earlier.
        word_key = np.where(
            eligible, selection_key[np.arange(batch_size)[:, None], start_index], 2.0
        )
        row_offset = 3.0 * np.arange(batch_size)[:, None]  # keys lie in [0, 2]: rows stay apart
        flat_sorted = np.sort(word_key + row_offset, axis=1).ravel()
        tokens_before = np.searchsorted(flat_sorted, (word_key + row_offset).ravel(), side="left")
        tokens_before = (
            tokens_before.reshape(batch_size, length) - length * np.arange(batch_size)[:, None]
        )
        chosen = (
            eligible
            & (tokens_before < num_to_predict[:, None])
            & (tokens_before + word_length <= cap)
        )
        if crossing_draw is not None:
            wanted = num_to_predict[:, None] - tokens_before  # tokens still wanted before this word
            crossing = wanted < word_length
            chosen &= ~crossing | (crossing_draw < wanted / word_length)
        return chosen
