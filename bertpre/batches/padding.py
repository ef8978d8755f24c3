"""The batch grid both collators (MLM and PLM/CLM) build: instances padded to one length, and the
fixed-size slots that list each row's predicted positions."""
from __future__ import annotations

import numpy as np

from bertpre.batches.instance_batch import InstanceBatch
from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX


def padded_length(longest: int, *, multiple_of: int | None = None, pad_to_length: int | None = None,
                  hint: str = "") -> int:
    """T for a batch whose longest instance has `longest` tokens: `pad_to_length` when set (one
    line, ending in `hint`, when an instance is longer), else `longest` rounded up to a multiple
    of `multiple_of`."""
    if pad_to_length is not None:
        if longest > pad_to_length:
            raise UserError(f"an instance has {longest} tokens, more than pad_to_length {pad_to_length}{hint}")
        return pad_to_length
    if multiple_of:
        return -(-longest // multiple_of) * multiple_of
    return longest


def pad_instances(instances: InstanceBatch, length: int, *, pad_token_id: int, vocab_size: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, T) input ids (int64, [PAD] after each instance), attention mask (bool) and token type ids
    (0 in the padding); an id outside the vocabulary is refused."""
    attention_mask = np.arange(length)[None, :] < instances.lengths[:, None]  # (B, T)
    input_ids = np.full(attention_mask.shape, pad_token_id, dtype=np.int64)
    input_ids[attention_mask] = instances.input_ids
    if input_ids.min() < 0 or input_ids.max() >= vocab_size:
        raise UserError(f"token id {int(input_ids.max())} is outside the tokenizer's vocabulary of "
                        f"{vocab_size}; the data was tokenized with another tokenizer")
    token_type_ids = np.zeros_like(input_ids)
    token_type_ids[attention_mask] = instances.token_type_ids
    return input_ids, attention_mask, token_type_ids


def prediction_slots(predicted: np.ndarray, values: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """(B, P) each row's predicted positions in position order, then 0, and `values` (B, T) there,
    then -100, for P = `slots` (a row's predictions past P are left out)."""
    counts = predicted.sum(axis=1)
    # A stable sort of "not predicted" puts each row's predicted positions first, in order.
    order = np.argsort(~predicted, axis=1, kind="stable")[:, :slots]  # (B, min(P, T))
    positions = np.zeros((len(predicted), slots), dtype=np.int64)
    positions[:, :order.shape[1]] = order
    used = np.arange(slots)[None, :] < counts[:, None]
    positions = np.where(used, positions, 0)
    ids = np.where(used, np.take_along_axis(values, positions, axis=1), IGNORE_INDEX)
    return positions, ids.astype(np.int64)
