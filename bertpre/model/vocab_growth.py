"""New vocab rows for a released BERT's weights: each appended token starts as the mean of its old pieces."""
from __future__ import annotations

import torch

from bertpre.errors import UserError

WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"
# Per-token rows of the MLM head; in BertForPreTraining's own state_dict the decoder's are the
# embedding matrix and the bias again (tied), and they stay tied here.
HEAD_ROWS = ("cls.predictions.decoder.weight", "cls.predictions.bias", "cls.predictions.decoder.bias")


def grow_vocab_rows(state_dict: dict[str, torch.Tensor], pieces: list[list[int]], *,
                    word_embeddings: str = WORD_EMBEDDINGS,
                    head_rows: tuple[str, ...] = HEAD_ROWS) -> dict[str, torch.Tensor]:
    """Append one row per new token to the word embeddings and the MLM head's per-token tensors.

    New token k gets the mean of the rows (and of the biases) of the old ids `pieces[k]`, as
    `bertpre.tokenizer.vocab_extension` gives them, so it starts where the old model would have
    put the word it was split into. Old rows are unchanged; dtypes are kept. A head tensor that
    is the embedding (or the bias) tensor itself stays the same tensor as it.

    Args:
        state_dict: bertpre / Hugging Face names (see `hf_format.normalize_keys`); must hold
            `bert.embeddings.word_embeddings.weight` (V, E).
        pieces: for each new token, in id order, the old ids it was split into (at least one).
        word_embeddings, head_rows: the family's names of those tensors (BERT's by default).

    Returns:
        A new dict: the grown tensors (V + len(pieces) rows), the others as they were.

    Raises:
        UserError: the embedding matrix is missing, or a token has no pieces or an id out of range.
    """
    if word_embeddings not in state_dict:
        raise UserError(f"the weights have no {word_embeddings}, so the vocab cannot be grown")
    size = state_dict[word_embeddings].shape[0]
    for index, ids in enumerate(pieces):
        if not ids or not all(0 <= piece < size for piece in ids):
            raise UserError(f"new token {size + index} has pieces {ids}, not ids below the model's "
                            f"vocab size {size}")
    grown: dict[str, torch.Tensor] = dict(state_dict)
    done: dict[tuple, torch.Tensor] = {}  # old tensor's memory → its grown tensor, for tied names
    for key in (word_embeddings, *head_rows):
        tensor = state_dict.get(key)
        if tensor is None:
            continue
        if _memory(tensor) not in done:
            done[_memory(tensor)] = _append_means(tensor, pieces)
        grown[key] = done[_memory(tensor)]
    return grown


def _memory(tensor: torch.Tensor) -> tuple:
    """Where a tensor's values live: `Module.state_dict()` gives tied names separate tensor
    objects over the same memory."""
    return (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(),
            tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)


def _append_means(rows: torch.Tensor, pieces: list[list[int]]) -> torch.Tensor:
    """`rows` (V, ...) followed by, for each id list, the mean of its rows, in `rows`' dtype."""
    if not pieces:
        return rows
    with torch.no_grad():
        # Averaged in at least float32: a bf16 mean of a few rows would lose bits for nothing.
        accumulate = torch.promote_types(rows.dtype, torch.float32)
        means = torch.stack([rows[ids].to(accumulate).mean(dim=0) for ids in pieces])  # (K, ...)
        return torch.cat([rows.detach(), means.to(rows.dtype)])  # (V + K, ...)
