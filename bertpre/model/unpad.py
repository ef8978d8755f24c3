"""A padded batch's real tokens, laid end to end: the per-token parts of a layer (projections,
feed-forward, LayerNorms) then compute on them alone, and only attention sees the padded (B, T)
layout. Short texts batched to their longest row are often mostly padding (WordNet glosses in
batches of 32: 38% real tokens), so this is most of a fine-tuning step's work saved."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch


@dataclass(frozen=True)
class Unpadded:
    """Where the real tokens of a (batch, length) layout are."""

    index: torch.Tensor  # (N,) flat positions b * length + t of the real tokens, ascending
    batch: int
    length: int
    # A pretraining batch's layout, built on the host with the batch (`batches.padding.unpadded_layout`):
    cu_seqlens: torch.Tensor | None = None  # (S + 1,) int32: where each sequence begins in `index` order
    document_ids: torch.Tensor | None = None  # (B, T) each position's document in its row, 0 at padding
    packed: bool = False  # rows may hold two documents that must not attend to each other
    cls_index: torch.Tensor | None = None  # (B,) each row's first token among the N
    predicted_index: torch.Tensor | None = None  # (B, P) each prediction slot's token among the N

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor) -> Unpadded:
        """From a (B, T) 1/0 mask. Build it on the CPU, before the batch moves: the index's
        size depends on the data, and reading it from a GPU would stall the queue."""
        batch, length = attention_mask.shape
        return cls(attention_mask.reshape(-1).nonzero().squeeze(1), batch, length)

    @classmethod
    def from_batch(cls, batch: dict[str, torch.Tensor]) -> Unpadded:
        """From a pretraining batch that carries the collator's layout (`token_index` …): no
        tensor is read on the host, so a step built on it has no sync and fixed shapes."""
        batch_size, length = batch["input_ids"].shape
        return cls(batch["token_index"], batch_size, length, cu_seqlens=batch["cu_seqlens"],
                   document_ids=batch["document_ids"], packed=batch["cu_seqlens"].shape[0] > batch_size + 2,
                   cls_index=batch["cls_token_index"], predicted_index=batch["masked_lm_token_index"])

    def to(self, device: torch.device) -> Unpadded:
        return replace(self, index=self.index.to(device, non_blocking=True))

    @property
    def tokens(self) -> int:
        return self.index.numel()

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) → (N, ...): the real tokens' rows, in order."""
        return padded.flatten(0, 1).index_select(0, self.index)

    def key_mask(self, rows: torch.Tensor | None = None, window: int | None = None) -> torch.Tensor:
        """The boolean SDPA mask of attention on the padded view: (B, 1, 1, T), the real keys of
        each row; for `packed` rows or a `window`, (B, 1, Q, T). `packed`: the keys of the query's
        own document (a padding position's query, whose output no one reads, sees its row's real
        keys). `window` (a local layer's): the keys within that many positions of the query, and
        the query itself always (a padding query far from every real key still reads one: never
        no key, so no NaN). `rows` (B, R), flat token indices: those tokens alone query (Q = R)."""
        keys = self.document_ids  # (B, T)
        mask = (keys > 0)[:, None, None, :]
        if not self.packed and window is None:
            return mask
        if self.packed:
            queries = keys if rows is None else keys.flatten().index_select(0, self.index)[rows]  # (B, Q)
            mask = mask & ((queries[:, None, :, None] == keys[:, None, None, :]) | (queries == 0)[:, None, :, None])
        if window is not None:
            key_positions = torch.arange(self.length, device=keys.device)
            query_positions = key_positions if rows is None else self.index[rows] % self.length  # (T,) or (B, Q)
            distance = (query_positions[..., :, None] - key_positions).abs()  # (T, T) or (B, Q, T)
            distance = distance[None, None] if rows is None else distance[:, None]  # (1 or B, 1, Q, T)
            mask = (mask & (distance <= window)) | (distance == 0)
        return mask

    def pad(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, ...) → (B, T, ...), zeros at the padding."""
        rest = tokens.shape[1:]
        padded = tokens.new_zeros((self.batch * self.length, *rest)).index_copy(0, self.index, tokens)
        return padded.view(self.batch, self.length, *rest)


try:  # FlashAttention on variable lengths: CUDA kernels, in torch from 2.10
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # pragma: no cover - an older torch
    varlen_attn = None


def varlen_usable(hidden_states: torch.Tensor, unpadded: Unpadded, dropout_p: float) -> bool:
    """Whether `varlen_attention` runs here: a CUDA device, 16-bit states or autocast (FlashAttention's), no
    attention dropout (`varlen_attn` has none: BERT's 0.1 keeps SDPA on the padded view), and the
    batch's `cu_seqlens`. Elsewhere attention runs as SDPA on the padded view, which is exact on
    every device. FlexAttention with the same mask is not a third choice: on this CPU build it
    runs eager (no kernel without compiling) and measured 982 ms against SDPA's 278 ms for the
    same outputs (within 1e-6) at 32 x 12 heads x 128 x 64, fp32, on 2 shared cores."""
    sixteen_bit = (torch.float16, torch.bfloat16)
    return (varlen_attn is not None and hidden_states.is_cuda and dropout_p == 0.0 and unpadded.cu_seqlens is not None
            and (hidden_states.dtype in sixteen_bit or (torch.is_autocast_enabled("cuda")
                                                        and torch.get_autocast_dtype("cuda") in sixteen_bit)))


def varlen_attention(qkv: tuple[torch.Tensor, ...], unpadded: Unpadded, heads: int,
                     window: int | None = None) -> torch.Tensor:
    """Attention of the real tokens (N, C) over their own sequence (their own document where
    rows are packed; the bucket's fillers as one more), without a padded view: `varlen_attn` on
    `cu_seqlens`, the row length as the longest (a bound known on the host: no sync); `window`:
    the keys within that many positions each way alone (FlashAttention's sliding window, whose
    blocks outside it are skipped). Where `varlen_usable` says so."""
    query, key, value = qkv  # each (N, C)
    shaped = [part.unflatten(-1, (heads, -1)) for part in (query, key, value)]  # (N, nh, hs)
    sides = (-1, -1) if window is None else (window, window)
    context = varlen_attn(*shaped, unpadded.cu_seqlens, unpadded.cu_seqlens, unpadded.length, unpadded.length,
                          window_size=sides)
    return context.flatten(1)  # (N, C)
