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


def unpadded_layout(attention_mask: np.ndarray, masked_lm_positions: np.ndarray, *,
                    document_starts: np.ndarray | None = None, bucket: int = 1) -> dict[str, np.ndarray]:
    """Where a (B, T) batch's real tokens are, laid end to end, for a step that computes on them
    alone (`model.unpad`): built here, on the host with the batch, so the step needs no `nonzero`
    (a host sync) and its shapes are known before it runs.

    Args:
        attention_mask: (B, T) bool; each row's real tokens come first.
        masked_lm_positions: (B, P) the prediction slots' positions (0 in an unused slot).
        document_starts: (B,) the position where a packed row's second document begins (its
            length where it has none); None: one document a row.
        bucket: the token count N is rounded up to a multiple of this (at most B·T), so that a
            compiled step sees one of at most ceil(B·T / bucket) shapes; the extra slots take
            padding positions, distinct, as a sequence of their own that no real token reads.

    Returns (int64 unless said):
        token_index (N',): flat positions b·T + t of the real tokens, ascending, then the fillers'.
        cu_seqlens (S + 1,) int32: where each sequence attention sees begins in token_index order,
            the fillers' last; S = 2B + 1 with `document_starts` (a row's second document may be
            empty), else B + 1, so its shape is the batch's (repeated ends: empty sequences).
        document_ids (B, T): 1, 2 … the document of each position in its row, 0 at padding.
        cls_token_index (B,): each row's first token in token_index.
        masked_lm_token_index (B, P): each slot's token in token_index (an unused slot: its row's first).
    """
    batch_size, length = attention_mask.shape
    lengths = attention_mask.sum(axis=1)
    flat_mask = attention_mask.reshape(-1)
    real = np.flatnonzero(flat_mask)
    tokens = len(real)
    padded_tokens = min(-(-tokens // bucket) * bucket, batch_size * length)
    fillers = np.flatnonzero(~flat_mask)[: padded_tokens - tokens]
    token_index = np.concatenate([real, fillers]).astype(np.int64)
    row_starts = np.cumsum(lengths) - lengths  # (B,)
    positions = np.arange(length)[None, :]
    if document_starts is None:
        document_ids = attention_mask.astype(np.int64)
        ends = np.cumsum(lengths)
    else:
        second = np.minimum(document_starts, lengths)
        document_ids = np.where(attention_mask, 1 + (positions >= second[:, None]), 0).astype(np.int64)
        ends = np.stack([row_starts + second, row_starts + lengths], axis=1).reshape(-1)
    cu_seqlens = np.concatenate([[0], ends, [padded_tokens]]).astype(np.int32)
    masked_lm_token_index = row_starts[:, None] + masked_lm_positions  # an unused slot: the row's first
    return {"token_index": token_index, "cu_seqlens": cu_seqlens, "document_ids": document_ids,
            "cls_token_index": row_starts.astype(np.int64),
            "masked_lm_token_index": masked_lm_token_index.astype(np.int64)}
