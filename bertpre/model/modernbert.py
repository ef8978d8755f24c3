"""ModernBERT (`architecture: modernbert`) with Hugging Face's `ModernBertForMaskedLM` names.

The network: token embeddings → LayerNorm → dropout; pre-LayerNorm layers (none before the first
layer's attention), each rotary attention (one theta for global layers, another for local ones)
and a GeGLU feed-forward, no biases unless asked; a final LayerNorm; the MLM head dense → act →
LayerNorm, then the decoder tied to the embeddings with its own bias. Layers 0, n, 2n …
(`global_attn_every_n_layers` n) attend to every token; the others to the keys within
`local_attention // 2` positions each way (transformers' window, `ModernBertFields.sliding_window`).

Attention is torch SDPA with exact masks (padding and window) everywhere; on a GPU with
FlexAttention, local layers use a block mask instead, so that the blocks outside the window are
skipped rather than computed and masked. Under `model.unpad` a pretraining step computes the real
tokens alone (N, C) from the embeddings on: attention is FlashAttention's `varlen_attn` on each
row's documents (local layers with its window) on a GPU, SDPA on a padded view with the same
document and window mask elsewhere.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertpre.errors import UserError
from bertpre.model import hf_format
from bertpre.model.chunked_loss import VocabularyHead
from bertpre.model.common import (
    ForwardShape,
    MaskedLMOnly,
    activation,
    bert_mask_logits,
    copy_tokenizer_files,
    query_angles,
    read_rows,
)
from bertpre.model.config import BertConfig
from bertpre.model.layer_norm import LayerNorm, low_precision_dtype
from bertpre.model.positions import rotary_angles
from bertpre.model.unpad import Unpadded, varlen_attention, varlen_usable
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.roles import token_roles

# The tensor transformers stores under a second name (the decoder is the token embeddings).
TIED_KEYS = ("decoder.weight",)
# Head sizes FlexAttention's GPU kernels take.
FLEX_HEAD_SIZES = (16, 32, 64, 128, 256)
# Up to this length local layers run SDPA with the dense window mask on a GPU too: on one H100
# (2026-11-26, torch 2.11, ModernBERT-base at 1024, batch 32, bf16) it trained at 154,678
# tokens/s and FlexAttention's block mask at 125,030, its forward kernel taking 4.0 ms a local
# layer, seven times its backward (bench.gpu throughput --local-attention, --profile). Longer
# rows keep FlexAttention, unmeasured: there the dense mask's work and memory grow as T², the
# window's as T.
SDPA_UP_TO_LENGTH = 1024


# --- attention masks -------------------------------------------------------------------------


def flex_suits(config: BertConfig, length: int, training: bool = True) -> bool:
    """Whether local layers of rows of `length` tokens take FlexAttention's block mask on a GPU
    that has it: rows longer than SDPA_UP_TO_LENGTH, a head size its kernels take, and no
    attention dropout while training (FlexAttention has none)."""
    head_size = config.hidden_size // config.num_attention_heads
    dropout = training and config.family_fields.attention_dropout > 0
    return length > SDPA_UP_TO_LENGTH and head_size in FLEX_HEAD_SIZES and not dropout


def flex_runs(config: BertConfig, device_type: str, length: int, training: bool = True) -> bool:
    """Whether local layers of rows of `length` tokens run FlexAttention's block mask on a device
    of `device_type` ("cuda", "cpu"): a GPU whose torch has it, rows it suits (`flex_suits`).
    Elsewhere SDPA reads the dense T×T window mask, whose memory the cost model counts."""
    return device_type == "cuda" and flex_suits(config, length, training) and flex_attention_available()


def flex_attention_available() -> bool:
    """Whether this torch has FlexAttention (torch >= 2.5)."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


class AttentionMasks:
    """What global and local layers attend to, built once a forward and read by every layer.

    `global_mask`: (B, 1, 1, T) True at real keys, or None (no padding). `local_mask`: (B or 1,
    1, T, T) True where a query may read a key (within the window, a real key), or FlexAttention's
    block mask of the same rule. A query always reads itself, so that a padding query far from
    every real token still has a key (the result there is never read; without it SDPA gives NaN,
    whose gradient would reach the weights).

    `sdpa_mask` gives SDPA these masks, made additive once a forward and shared by the layers
    while gradients are kept: handed a boolean mask, SDPA makes its own additive copy in every
    layer, and autograd keeps each one for backward (a local layer's is T²·p bytes a row).
    """

    def __init__(self, global_mask: torch.Tensor | None, local_mask, flex: bool = False) -> None:
        self.global_mask, self.local_mask, self.flex = global_mask, local_mask, flex
        self._additive: dict[tuple[bool, torch.dtype], torch.Tensor] = {}

    @classmethod
    def of_padding(cls, attention_mask: torch.Tensor | None, length: int, window: int,
                   device: torch.device, flex: bool) -> AttentionMasks:
        """The masks of a padded batch's (B, T) 1/0 `attention_mask` (None: no padding)."""
        keys = None if attention_mask is None else attention_mask.to(device=device, dtype=torch.bool)  # (B, T)
        global_mask = None if keys is None else keys[:, None, None, :]  # (B, 1, 1, T)
        if flex:
            return cls(global_mask, _window_block_mask(keys, length, window, device), flex=True)
        positions = torch.arange(length, device=device)
        distance = (positions[:, None] - positions[None, :]).abs()  # (T, T)
        local = (distance <= window)[None, None]  # (1, 1, T, T)
        if keys is not None:
            local = (local & keys[:, None, None, :]) | torch.eye(length, dtype=torch.bool, device=device)
        return cls(global_mask, local)

    @classmethod
    def of_documents(cls, unpadded: Unpadded, window: int) -> AttentionMasks:
        """The masks of a pretraining layout's padded view (`model.unpad` where `varlen_attn` does
        not run): each query reads the real keys of its own document, within `window` in a local layer."""
        return cls(unpadded.key_mask(), unpadded.key_mask(window=window))  # (B, 1, 1 or T, T), (B, 1, T, T)

    def sdpa_mask(self, is_global: bool, dtype: torch.dtype) -> torch.Tensor | None:
        """The mask a global or local layer hands SDPA for a query of `dtype`: additive (0 where
        a key is read, -inf elsewhere, as SDPA itself would make it), one tensor for every layer
        while gradients are kept; the boolean mask without gradients, where SDPA's copy is freed
        after each layer."""
        mask = self.global_mask if is_global else self.local_mask
        if mask is None or not torch.is_grad_enabled():
            return mask
        key = (is_global, dtype)
        if key not in self._additive:
            self._additive[key] = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
                ~mask, float("-inf"))
        return self._additive[key]


def _window_block_mask(keys: torch.Tensor | None, length: int, window: int, device: torch.device):
    """FlexAttention's block mask of the local rule (`AttentionMasks`): blocks wholly outside the
    window are skipped."""
    from torch.nn.attention.flex_attention import create_block_mask

    if keys is None:
        def rule(batch, head, query, key):
            return (query - key).abs() <= window
        batches = None
    else:
        def rule(batch, head, query, key):
            return (((query - key).abs() <= window) & keys[batch, key]) | (query == key)
        batches = keys.shape[0]
    # compiled on a GPU: uncompiled it would build the whole (B, T, T) mask to find the blocks
    return create_block_mask(rule, batches, None, length, length, device=device, _compile=device.type == "cuda")


_compiled_flex: Callable | None = None


def _flex_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, block_mask) -> torch.Tensor:
    """FlexAttention, compiled once (uncompiled it computes every score, as SDPA with a mask would)."""
    global _compiled_flex
    from torch.nn.attention.flex_attention import flex_attention

    if query.device.type != "cuda":
        return flex_attention(query, key, value, block_mask=block_mask)
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention)
    return _compiled_flex(query, key, value, block_mask=block_mask)


# --- the network -----------------------------------------------------------------------------


def norm(config: BertConfig) -> LayerNorm:
    """ModernBERT's LayerNorm (no bias unless `norm_bias`), in the autocast dtype as the config says."""
    return LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias,
                     low_precision=config.low_precision_layernorm)


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions on (B, nh, T, hs) with the tables cos and signed sin (T, hs): sin with its
    first half negated (`rotation_tables`), in the tables' dtype, returned in x's: float32 whatever
    x's dtype, as transformers does, or the autocast dtype (`model.low_precision_rotary`), where q
    and k are rotated as the products gave them, with no float32 copy and cast back.

    x·cos + (second, first)·(−sin, sin): the swapped halves are one kernel where the rotate-half
    form (−second, first) takes a negation and a concatenation, the same numbers bit for bit."""
    x_rotated = x.to(cos.dtype)
    first, second = x_rotated.chunk(2, dim=-1)
    return (x_rotated * cos + torch.cat([second, first], dim=-1) * signed_sin).to(x.dtype)


def rotation_tables(cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`rotate`'s tables of `positions.rotary_angles`' cos and sin (T, hs), in `dtype`: cos, and
    sin with its first half negated."""
    half = sin.shape[-1] // 2
    return cos.to(dtype), torch.cat([-sin[:, :half], sin[:, half:]], dim=-1).to(dtype)


def rotation_dtype(setting: bool | str, device_type: str) -> torch.dtype:
    """The dtype rotary positions are applied in now (`model.low_precision_rotary`: true, false,
    or auto, as `model.low_precision_layernorm` reads them): the autocast dtype where it asks for
    it, else float32."""
    return low_precision_dtype(setting, device_type) or torch.float32


class ModernBertEmbeddings(nn.Module):
    """Token embeddings → LayerNorm → dropout (no positions: they are rotary, in attention)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = norm(config)
        self.drop = nn.Dropout(config.embedding_dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))  # (B, T, C)


class ModernBertAttention(nn.Module):
    """Rotary self-attention: one Wqkv projection, SDPA (or FlexAttention), Wo, dropout."""

    def __init__(self, config: BertConfig, layer_index: int) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.is_global = config.layer_is_global(layer_index)
        self.window = config.sliding_window  # a local layer's keys: within this many positions each way
        self.dropout = config.attention_dropout
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.out_drop = nn.Dropout(config.attention_dropout) if config.attention_dropout > 0 else nn.Identity()

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                masks: AttentionMasks | None, rows: torch.Tensor | None = None,
                unpadded: Unpadded | None = None) -> torch.Tensor:
        """(B, T, C) → (B, T, C); with `rows` (B, R), those positions alone query (B, R, C), over
        the keys and values of every position (SDPA only: FlexAttention's block mask is not cut).
        With `unpadded`, the real tokens (N, C) → (N, C) or (B, R, C) (`unpadded_context`)."""
        if unpadded is not None:
            return self.out_drop(self.Wo(self.unpadded_context(hidden_states, cos, sin, masks, rows, unpadded)))
        B, T, C = hidden_states.shape
        if rows is None:
            qkv = self.Wqkv(hidden_states).view(B, T, 3, self.num_heads, self.head_size)
            query, key, value = qkv.transpose(1, 3).unbind(dim=2)  # each (B, nh, T, hs)
            query = rotate(query, cos, sin)
        else:
            weight, bias = self.Wqkv.weight, self.Wqkv.bias  # rows [query; key; value], C each
            kv = F.linear(hidden_states, weight[C:], None if bias is None else bias[C:])
            key, value = kv.view(B, T, 2, self.num_heads, self.head_size).transpose(1, 3).unbind(dim=2)
            query = F.linear(read_rows(hidden_states, rows), weight[:C], None if bias is None else bias[:C])
            query = query.view(B, -1, self.num_heads, self.head_size).transpose(1, 2)  # (B, nh, R, hs)
            query = rotate(query, query_angles(cos, rows), query_angles(sin, rows))
        key = rotate(key, cos, sin)
        Q = query.shape[2]
        dropout = self.dropout if self.training else 0.0
        if not self.is_global and masks.flex:
            if rows is not None:
                raise ValueError("rows are computed with SDPA's dense masks, not FlexAttention's block mask")
            out = _flex_attention(query, key, value, masks.local_mask)  # (B, nh, T, hs)
        else:
            mask = masks.sdpa_mask(self.is_global, query.dtype)
            if rows is not None and mask is not None and mask.shape[2] > 1:  # a local layer's (·, 1, T, T)
                mask = read_rows(mask.expand(B, -1, -1, -1).transpose(1, 2), rows).transpose(1, 2)  # (B, 1, R, T)
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
        out = out.transpose(1, 2).reshape(B, Q, C)
        return self.out_drop(self.Wo(out))

    def unpadded_context(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                         masks: AttentionMasks | None, rows: torch.Tensor | None, unpadded: Unpadded
                         ) -> torch.Tensor:
        """The attention context of a pretraining layout's real tokens (`model.unpad`): (N, C) → (N, C),
        or of the (B, R) flat `rows` alone (B, R, C). `cos`, `sin` (N, hs): each token's rotation.
        `masks` None: FlashAttention's `varlen_attn` on the documents (the model found it usable),
        else SDPA on the padded view with these masks; `rows` always read the padded view."""
        N, C = hidden_states.shape
        B, heads = unpadded.batch, (self.num_heads, self.head_size)
        cos_tokens, sin_tokens = cos[:, None], sin[:, None]  # (N, 1, hs): broadcast over the heads
        if rows is None:
            query, key, value = self.Wqkv(hidden_states).view(N, 3, *heads).unbind(dim=1)  # (N, nh, hs) each
            query = rotate(query, cos_tokens, sin_tokens)
        else:
            weight, bias = self.Wqkv.weight, self.Wqkv.bias  # rows [query; key; value], C each
            query = F.linear(read_rows(hidden_states, rows), weight[:C], None if bias is None else bias[:C])
            query = query.view(B, -1, *heads).transpose(1, 2)  # (B, nh, R, hs)
            query = rotate(query, query_angles(cos, rows), query_angles(sin, rows))
            kv = F.linear(hidden_states, weight[C:], None if bias is None else bias[C:])
            key, value = kv.view(N, 2, *heads).unbind(dim=1)  # (N, nh, hs) each
        key = rotate(key, cos_tokens, sin_tokens)
        local = None if self.is_global else self.window
        if rows is None and masks is None:
            return varlen_attention((query.flatten(1), key.flatten(1), value.flatten(1)), unpadded,
                                    self.num_heads, window=local)  # (N, C)
        key, value = (unpadded.pad(part).transpose(1, 2) for part in (key, value))  # (B, nh, T, hs)
        if rows is None:
            query = unpadded.pad(query).transpose(1, 2)  # (B, nh, T, hs)
            mask = masks.sdpa_mask(self.is_global, query.dtype)
        else:
            mask = unpadded.key_mask(rows, window=local)  # (B, 1, 1 or R, T)
        dropout = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout)
        out = out.transpose(1, 2).reshape(B, -1, C)  # (B, T or R, C)
        return out if rows is not None else unpadded.unpad(out)  # (B, R, C) or (N, C)


class ModernBertMLP(nn.Module):
    """GeGLU: Wi gives the input and its gate (2 × intermediate), act(input) · gate → Wo."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = activation(config.hidden_activation)
        self.drop = nn.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input, gate = self.Wi(hidden_states).chunk(2, dim=-1)  # (B, T, I) each
        return self.Wo(self.drop(self.act(input) * gate))


class ModernBertEncoderLayer(nn.Module):
    """x + attn(attn_norm(x)), then x + mlp(mlp_norm(x)); layer 0 has no attn_norm (the
    embeddings' norm precedes it)."""

    def __init__(self, config: BertConfig, layer_index: int) -> None:
        super().__init__()
        self.attn_norm = nn.Identity() if layer_index == 0 else norm(config)
        self.attn = ModernBertAttention(config, layer_index)
        self.mlp_norm = norm(config)
        self.mlp = ModernBertMLP(config)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                masks: AttentionMasks | None, rows: torch.Tensor | None = None,
                unpadded: Unpadded | None = None) -> torch.Tensor:
        """(B, T, C) → (B, T, C); with `rows` (B, R), those positions' outputs alone (B, R, C).
        With `unpadded`, the real tokens (N, C) → (N, C), or `rows` (B, R) flat: (B, R, C)."""
        # one expression: a name for the attention output would keep it alive through the MLP
        hidden_states = (hidden_states if rows is None else read_rows(hidden_states, rows)) \
            + self.attn(self.attn_norm(hidden_states), cos, sin, masks, rows, unpadded)
        return hidden_states + self.mlp(self.mlp_norm(hidden_states))


def trunc_normal(module: nn.Module, std: float, cutoff_factor: float) -> None:
    """transformers' ModernBERT init of one weight: normal(0, std) cut at ± cutoff_factor · std; zero bias."""
    nn.init.trunc_normal_(module.weight, mean=0.0, std=std, a=-cutoff_factor * std, b=cutoff_factor * std)
    if getattr(module, "bias", None) is not None:
        nn.init.zeros_(module.bias)


def init_std(config: BertConfig) -> dict[str, float]:
    """transformers' stds by role: `in` (Wqkv, Wi), `out` (each Wo, the head's dense: scaled by
    depth), `embedding`, `final_out` (a task classifier)."""
    return {"in": config.initializer_range,
            "out": config.initializer_range / math.sqrt(2.0 * config.num_hidden_layers),
            "embedding": config.initializer_range,
            "final_out": config.hidden_size ** -0.5}


class ModernBertModel(nn.Module):
    """The encoder: embeddings, layers, final_norm (Hugging Face's `ModernBertModel`).

    `flex_attention`: None (default) uses FlexAttention for local layers on a CUDA device where
    torch has it and rows are longer than SDPA_UP_TO_LENGTH; True or False forces the choice
    (tests and bench.gpu compare the two).
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList([ModernBertEncoderLayer(config, index)
                                     for index in range(config.num_hidden_layers)])
        self.final_norm = norm(config)
        self.gradient_checkpointing = False
        self.flex_attention: bool | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """transformers' truncated-normal init (`ModernBertPreTrainedModel._init_weights`)."""
        std, cutoff = init_std(self.config), self.config.initializer_cutoff_factor
        trunc_normal(self.embeddings.tok_embeddings, std["embedding"], cutoff)
        for layer in self.layers:
            trunc_normal(layer.attn.Wqkv, std["in"], cutoff)
            trunc_normal(layer.attn.Wo, std["out"], cutoff)
            trunc_normal(layer.mlp.Wi, std["in"], cutoff)
            trunc_normal(layer.mlp.Wo, std["out"], cutoff)
        for module in self.modules():
            if isinstance(module, nn.LayerNorm):
                module.reset_parameters()

    def uses_flex(self, device: torch.device, length: int) -> bool:
        """Whether local layers run FlexAttention's block mask on `device` for rows of `length`
        tokens (attention dropout, which FlexAttention lacks, keeps SDPA while training)."""
        if self.flex_attention is not None:
            return self.flex_attention
        return flex_runs(self.config, device.type, length, self.training)

    def rotations(self, positions: torch.Tensor) -> dict[bool, tuple[torch.Tensor, torch.Tensor]]:
        """`rotate`'s tables (cos, signed sin), each (T, hs), of the (T,) `positions`, for global
        (True) and local (False) layers, in the dtype `model.low_precision_rotary` asks for: cast
        once a forward, not a layer."""
        head_size = self.config.hidden_size // self.config.num_attention_heads
        dtype = rotation_dtype(self.config.low_precision_rotary, positions.device.type)
        own = self.config.family_fields  # ModernBertFields: read as a plain record under torch.compile
        return {is_global: rotation_tables(*rotary_angles(positions, head_size, theta), dtype)
                for is_global, theta in ((True, own.global_rope_theta), (False, own.local_rope_theta))}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, last_rows: torch.Tensor | None = None,
                unpadded: Unpadded | None = None) -> torch.Tensor:
        """The last hidden states (B, T, C). `attention_mask` (B, T): 1 at tokens, 0 at padding
        (None: no padding); `token_type_ids` is taken for BERT's call and not read (ModernBERT
        has no token types); `last_rows` (B, R): the last layer computes those positions alone
        (B, R, C), as `BertModel`'s (a local last layer on FlexAttention computes every position
        and keeps those). `unpadded`: a pretraining layout (`Unpadded.from_batch`, `model.unpad`),
        see `forward_unpadded`."""
        if unpadded is not None:
            return self.forward_unpadded(input_ids, last_rows, unpadded)
        hidden_states = self.embeddings(input_ids)  # (B, T, C)
        length, device = input_ids.shape[1], input_ids.device
        masks = AttentionMasks.of_padding(attention_mask, length, self.config.family_fields.sliding_window, device,
                                          self.uses_flex(device, length))
        rotations = self.rotations(torch.arange(length, device=device))
        last = self.layers[-1]
        kept = None
        if last_rows is not None and not last.attn.is_global and masks.flex:
            last_rows, kept = None, last_rows
        for layer in self.layers:
            cos, sin = rotations[layer.attn.is_global]
            rows = last_rows if layer is last else None
            if self.gradient_checkpointing and self.training:
                hidden_states = checkpoint(layer, hidden_states, cos, sin, masks, rows, use_reentrant=False)
            else:
                hidden_states = layer(hidden_states, cos, sin, masks, rows)
        if kept is not None:
            hidden_states = read_rows(hidden_states, kept)  # (B, R, C)
        return self.final_norm(hidden_states)

    def forward_unpadded(self, input_ids: torch.Tensor, rows: torch.Tensor, unpadded: Unpadded) -> torch.Tensor:
        """The last states (B, R, C) of the (B, R) flat token indices `rows`, every layer computing
        the batch's real tokens alone (N, C), from the embeddings on: the last layer computes
        `rows` alone where `model.last_layer_rows` says so (in training). Attention is `varlen_attn`
        on each row's documents where `varlen_usable` says so (a CUDA device, no attention
        dropout), else SDPA on a padded view with the same document and window masks. A token's
        rotation is its position in its row: a packed document's second part starts past 0, which
        rotary attention, reading distances alone within a document, does not see."""
        hidden_states = self.embeddings(unpadded.unpad(input_ids))  # (N, C)
        dropout = self.config.family_fields.attention_dropout if self.training else 0.0
        varlen = varlen_usable(hidden_states, unpadded, dropout)
        masks = None if varlen else AttentionMasks.of_documents(unpadded, self.config.family_fields.sliding_window)
        positions = unpadded.index % unpadded.length  # (N,) each token's place in its row
        rotations = {is_global: (cos[positions], sin[positions])  # (N, hs) each
                     for is_global, (cos, sin) in self.rotations(torch.arange(unpadded.length,
                                                                              device=input_ids.device)).items()}
        computed = rows if self.config.last_layer_rows and self.training else None
        last = self.layers[-1]
        for layer in self.layers:
            cos, sin = rotations[layer.attn.is_global]
            layer_rows = computed if layer is last else None
            if self.gradient_checkpointing and self.training:
                hidden_states = checkpoint(layer, hidden_states, cos, sin, masks, layer_rows, unpadded,
                                           use_reentrant=False)
            else:
                hidden_states = layer(hidden_states, cos, sin, masks, layer_rows, unpadded)
        if computed is None:  # the whole last layer ran: read the rows of its (N, C)
            hidden_states = read_rows(hidden_states, rows)  # (B, R, C)
        return self.final_norm(hidden_states)


class ModernBertPredictionHead(nn.Module):
    """dense → classifier_activation → norm, before the decoder."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = activation(config.classifier_activation)
        self.norm = norm(config)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(hidden_states)))


class ModernBertForMaskedLM(MaskedLMOnly):
    """ModernBERT with its MLM head; parameter names are Hugging Face's `ModernBertForMaskedLM`
    (`model.…`, `head.…`, `decoder.bias`), so a checkpoint is an export's model as it is."""

    tied_keys = TIED_KEYS
    optional_parts = ("head.", "decoder.")

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=config.decoder_bias)
        std = init_std(config)
        trunc_normal(self.head.dense, std["out"], config.initializer_cutoff_factor)
        if self.decoder.bias is not None:
            nn.init.zeros_(self.decoder.bias)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make the decoder use the token embedding matrix (one tensor, counted once)."""
        self.decoder.weight = self.model.embeddings.tok_embeddings.weight

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each layer's activations in the backward pass (training mode only)."""
        self.model.gradient_checkpointing = enabled

    def vocabulary_head(self) -> VocabularyHead:
        """`head` (dense, activation, norm), then the tied `decoder`."""
        return VocabularyHead(self.head, self.decoder)

    def layout(self) -> str:
        return "ModernBERT"

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
               token_type_ids: torch.Tensor | None, rows: torch.Tensor | None = None,
               unpadded: Unpadded | None = None) -> torch.Tensor:
        """The encoder's states (B, T, C), or those of `rows` (B, R, C) (flat token indices with
        `unpadded`); `token_type_ids` is not read (no token types)."""
        return self.model(input_ids, attention_mask, last_rows=rows, unpadded=unpadded)

    def save_pretrained(self, folder: str | Path) -> None:
        """Write `config.json` and `model.safetensors` as Hugging Face's ModernBertForMaskedLM has them."""
        write_modernbert_folder(folder, self.config, self.state_dict())

    @staticmethod
    def read_folder(folder: Path) -> dict[str, torch.Tensor]:
        """A ModernBertForMaskedLM or ModernBertModel folder's tensors."""
        return read_modernbert_weights(folder)


def build_modernbert(config: BertConfig, tokenizer: Tokenizer | None = None) -> ModernBertForMaskedLM:
    return ModernBertForMaskedLM(config)


# --- Hugging Face folders --------------------------------------------------------------------


def normalize_modernbert_keys(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ModernBERT folder's tensors under `ModernBertForMaskedLM`'s names: a bare ModernBertModel's
    gain the `model.` prefix; the tied decoder weight goes."""
    bare = not any(key.startswith("model.") for key in state_dict)
    return {("model." + key if bare and not key.startswith(("head.", "decoder.")) else key): tensor
            for key, tensor in state_dict.items() if key not in TIED_KEYS}


def read_modernbert_weights(folder: Path) -> dict[str, torch.Tensor]:
    """A ModernBERT folder's tensors (safetensors, sharded, or pytorch_model.bin read with
    weights_only) under bertpre's names."""
    return normalize_modernbert_keys(hf_format.read_weights(folder))


def write_modernbert_folder(folder: str | Path, config: BertConfig, state_dict: dict[str, torch.Tensor],
                            **config_values: int | None) -> None:
    """config.json (with `config_values` added: the tokenizer's ids) and model.safetensors, the tied
    decoder weight left out as transformers leaves it."""
    hf_format.write_folder(folder, config, {name: tensor for name, tensor in state_dict.items()
                                            if name not in TIED_KEYS})
    if config_values:
        path = Path(folder) / hf_format.CONFIG_NAME
        hf_format.write_json(path, {**json.loads(path.read_text(encoding="utf-8")), **config_values})


def special_token_ids(tokenizer_folder: Path) -> dict[str, int | None]:
    """config.json's token ids by role: [CLS] (or <s>) as cls and bos, [SEP] (or </s>) as sep and
    eos, the padding's; none where the tokenizer lacks the roles."""
    try:
        roles = token_roles(load_tokenizer(tokenizer_folder))
    except UserError:
        return {}
    return {"cls_token_id": roles.cls_token_id, "bos_token_id": roles.cls_token_id,
            "sep_token_id": roles.sep_token_id, "eos_token_id": roles.sep_token_id}


def modernbert_export_writer(model: ModernBertForMaskedLM,
                             tokenizer_folder: Path) -> tuple[str, hf_format.ExportWriter]:
    """Hugging Face's native `ModernBertForMaskedLM` folder and the run's tokenizer files as they
    are; config.json names the tokenizer's special ids."""
    config = model.config
    ids = special_token_ids(tokenizer_folder)

    def write(staging: Path) -> list[str]:
        write_modernbert_folder(staging, config, model.state_dict(), **ids)
        copied = copy_tokenizer_files(tokenizer_folder, staging)
        hf_format.limit_model_max_length(staging, config.max_position_embeddings)
        return copied

    return "ModernBertForMaskedLM", write


# --- fill-mask -------------------------------------------------------------------------------


def modernbert_max_input_tokens(config: BertConfig) -> int:
    """The length ModernBERT was trained to read, `max_position_embeddings` (8,192 in the released
    checkpoints): rotary positions compute any length, but past it the model meets distances it
    never saw, and the dense window's T×T mask (on a CPU) grows as the square (a 17,000-word
    text, 20,445 tokens, asked for 3.3 GB at once for one int64 T×T tensor)."""
    return config.max_position_embeddings



@torch.no_grad()
def modernbert_mask_logits(model: ModernBertForMaskedLM, tokenizer: Tokenizer, text: str,
                           fits: Callable[[ForwardShape], None] = lambda shape: None) -> torch.Tensor:
    """The MLM head's logits (M, V) at each mask of `text` (the tokenizer's own, by role), read
    as one segment as the tokenizer lays it out; rotary positions read any length."""
    return bert_mask_logits(model, tokenizer, text, fits, mask_token=token_roles(tokenizer).mask_token)
