"""XLNet for permutation language modelling, in Hugging Face's `XLNetLMHeadModel` parameter layout.

One layer (Yang et al. 2019, with Transformer-XL's relative attention and recurrence):

- score(i, j) = [(q_i + u)·k_j + (q_i + v)·W_R R(i−j) + (q_i + s)·seg_embed[i, j same/other
  segment]] / sqrt(d_head), with R the sinusoid of the signed distance (both directions,
  `attn_type` "bi") clamped to `clamp_len`; u, v, s are `r_w_bias`, `r_r_bias`, `r_s_bias`.
- Keys and values run over [memory; current segment]: the memory is each layer's input from the
  previous segments (detached, the last `mem_len` states), seen by every query.
- Two streams: the content stream h (from the word embedding) sees what `perm_mask` allows and
  always itself; the query stream g (from `mask_emb`) exists only at the P targets that
  `target_mapping` names, sees what `perm_mask` allows, never its own token, and feeds the head.
  Its attention runs over those P rows only (XLNet's code and Hugging Face's scatter them back
  to all T rows for the attention), and a target that may see nothing gets no context, where
  they spread its attention over every key, its own token included.

Tensors are batch-first here (Hugging Face's code is time-first); the math and the parameter
names are the same, so `state_dict()` loads into `transformers.XLNetLMHeadModel` as it is.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer
from torch import nn
from torch.utils.checkpoint import checkpoint

import bertpre
from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX
from bertpre.model import hf_format
from bertpre.model.common import ForwardShape, activation, summed_cross_entropy
from bertpre.model.config import BertConfig
from bertpre.model.positions import sinusoid_table
from bertpre.model.xlnet_config import XLNetConfig
from bertpre.tokenizer.wordpiece import (
    CLS_TOKEN,
    MASK_TOKEN,
    PAD_TOKEN,
    SEP_TOKEN,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    load_tokenizer,
)
from bertpre.tokenizer.xlnet_layout import save_xlnet_tokenizer

TIED_KEYS = ("lm_loss.weight",)  # the word embedding under the head's name
# The length an export's tokenizer truncates to (relative positions read any length; this is the
# `max_position_embeddings` a BertConfig read from an XLNet config.json has).
XLNET_MODEL_MAX_LENGTH = 512


# --- the network ---------------------------------------------------------------------------


class StreamInputs(NamedTuple):
    """Where one stream's queries stand towards the keys [memory; segment], per forward.

    `distance_index` (B or 1, Q, K): the row of the distance table for query i and key j.
    `blocked` (B, Q, K): True where the query may not look. `other_segment` (B, Q, K): True
    where the key lies in another segment. `sees_nothing` (B, Q): True for a query with no
    context (or no target), which then gets none rather than attention spread over blocked keys.
    """

    distance_index: torch.Tensor
    blocked: torch.Tensor | None = None
    other_segment: torch.Tensor | None = None
    sees_nothing: torch.Tensor | None = None


class XLNetRelativeAttention(nn.Module):
    """Two-stream relative attention: projections `q, k, v, o, r` (d_model, n_head, d_head), no
    biases, `r_w_bias`/`r_r_bias`/`r_s_bias` and `seg_embed` per layer, then residual + post-LN."""

    def __init__(self, config: XLNetConfig) -> None:
        super().__init__()
        shape = (config.hidden_size, config.num_attention_heads, config.head_size)
        head_shape = (config.num_attention_heads, config.head_size)
        self.q = nn.Parameter(torch.empty(shape))
        self.k = nn.Parameter(torch.empty(shape))
        self.v = nn.Parameter(torch.empty(shape))
        self.o = nn.Parameter(torch.empty(shape))
        self.r = nn.Parameter(torch.empty(shape))
        self.r_r_bias = nn.Parameter(torch.empty(head_shape))
        self.r_s_bias = nn.Parameter(torch.empty(head_shape))
        self.r_w_bias = nn.Parameter(torch.empty(head_shape))
        self.seg_embed = nn.Parameter(torch.empty((2, *head_shape)))
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.scale = 1.0 / math.sqrt(config.head_size)

    def forward(self, h: torch.Tensor, g: torch.Tensor | None, memory: torch.Tensor | None,
                sinusoids: torch.Tensor, content: StreamInputs,
                query: StreamInputs | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args: h (B, T, C); g (B, P, C) or None; memory (B, M, C) or None; sinusoids (R, C)."""
        keys_in = h if memory is None else torch.cat([memory, h], dim=1)  # (B, K, C)
        key = torch.einsum("bkc,cnd->bnkd", keys_in, self.k)
        value = torch.einsum("bkc,cnd->bnkd", keys_in, self.v)
        key_r = torch.einsum("rc,cnd->nrd", sinusoids.to(h.dtype), self.r)  # (nh, R, hs)
        query_h = torch.einsum("btc,cnd->bntd", h, self.q)
        h = self.post_attention(h, self.attend(query_h, key, value, key_r, content))
        if g is not None and query is not None:
            query_g = torch.einsum("bpc,cnd->bnpd", g, self.q)
            g = self.post_attention(g, self.attend(query_g, key, value, key_r, query))
        return h, g

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               key_r: torch.Tensor, stream: StreamInputs) -> torch.Tensor:
        """Attention of queries (B, nh, Q, hs) over keys and values (B, nh, K, hs) -> (B, Q, nh, hs)."""
        B, nh, Q, _ = query.shape
        K = key.shape[2]
        scores = torch.einsum("bnqd,bnkd->bnqk", query + self.r_w_bias[:, None], key)
        by_distance = torch.einsum("bnqd,nrd->bnqr", query + self.r_r_bias[:, None], key_r)
        scores = scores + by_distance.gather(-1, stream.distance_index[:, None].expand(B, nh, Q, K))
        if stream.other_segment is not None:
            by_segment = torch.einsum("bnqd,snd->bnqs", query + self.r_s_bias[:, None], self.seg_embed)
            scores = scores + torch.where(stream.other_segment[:, None], by_segment[..., 1:],
                                          by_segment[..., :1])
        scores = scores * self.scale  # (B, nh, Q, K)
        if stream.blocked is not None:
            # The dtype's own minimum: a large constant like -1e30 overflows in float16.
            scores = scores.masked_fill(stream.blocked[:, None], torch.finfo(scores.dtype).min)
        probs = self.dropout(scores.softmax(dim=-1, dtype=torch.float32).to(value.dtype))
        if stream.sees_nothing is not None:
            probs = probs.masked_fill(stream.sees_nothing[:, None, :, None], 0.0)
        return torch.einsum("bnqk,bnkd->bqnd", probs, value)

    def post_attention(self, residual: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Output projection `o`, dropout, residual and post-LayerNorm."""
        out = torch.einsum("bqnd,cnd->bqc", attended, self.o)
        return self.layer_norm(self.dropout(out) + residual)


class XLNetFeedForward(nn.Module):
    """layer_1, activation, dropout, layer_2, dropout, residual and post-LayerNorm."""

    def __init__(self, config: XLNetConfig) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layer_1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.layer_2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        self.activation_function = activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.dropout(self.activation_function(self.layer_1(x)))
        return self.layer_norm(self.dropout(self.layer_2(out)) + x)


class XLNetLayer(nn.Module):
    """Relative attention, then the feed-forward block on each stream."""

    def __init__(self, config: XLNetConfig) -> None:
        super().__init__()
        self.rel_attn = XLNetRelativeAttention(config)
        self.ff = XLNetFeedForward(config)

    def forward(self, h: torch.Tensor, g: torch.Tensor | None, memory: torch.Tensor | None,
                sinusoids: torch.Tensor, content: StreamInputs,
                query: StreamInputs | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        h, g = self.rel_attn(h, g, memory, sinusoids, content, query)
        return self.ff(h), None if g is None else self.ff(g)


def relative_sinusoids(length: int, memory_length: int, width: int, clamp_len: int,
                       device: torch.device) -> torch.Tensor:
    """R for the distances M+T−1 down to −(T−1) (query i at M+i, key j), clamped, (M+2T−1, C)."""
    distances = torch.arange(memory_length + length - 1, -length, -1, device=device)
    if clamp_len > 0:
        distances = distances.clamp(-clamp_len, clamp_len)
    return sinusoid_table(distances, width)


def stream_inputs(
    batch_size: int,
    length: int,
    memory_length: int,
    device: torch.device,
    attention_mask: torch.Tensor | None = None,
    mems_attention_mask: torch.Tensor | None = None,
    perm_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    target_mapping: torch.Tensor | None = None,
) -> tuple[StreamInputs, StreamInputs | None]:
    """What attention needs about positions, masks and segments, for the content stream over
    the T tokens and, with `target_mapping`, the query stream over its P targets.

    Memory keys are never blocked by `perm_mask` and count as segment 0 (XLNet's convention);
    the content stream always sees its own token. All on the device: no host sync.
    """
    B, T, M = batch_size, length, memory_length
    K = M + T
    rows = torch.arange(T, device=device)
    keys = torch.arange(K, device=device)
    content_index = (T - 1 - rows[:, None] + keys[None, :])[None]  # (1, T, K)

    blocked = None  # (B, T, K), before the content stream's own token is let through
    if attention_mask is not None or mems_attention_mask is not None:
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.bool, device=device)
        if mems_attention_mask is None:
            mems_attention_mask = torch.ones(B, M, dtype=torch.bool, device=device)
        key_valid = torch.cat([mems_attention_mask.bool(), attention_mask.bool()], dim=1)  # (B, K)
        blocked = (~key_valid)[:, None, :].expand(B, T, K)
    if perm_mask is not None:
        perm = F.pad(perm_mask.bool(), (M, 0))  # (B, T, K)
        blocked = perm if blocked is None else blocked | perm
    other_segment = None
    if token_type_ids is not None:
        key_types = F.pad(token_type_ids, (M, 0))
        other_segment = token_type_ids[:, :, None] != key_types[:, None, :]  # (B, T, K)
    content = StreamInputs(
        distance_index=content_index,
        blocked=None if blocked is None else blocked & (keys[None, :] != rows[:, None] + M),
        other_segment=other_segment,
    )
    if target_mapping is None:
        return content, None

    targets = target_mapping.argmax(dim=-1)  # (B, P): the position each target predicts

    def rows_of(table: torch.Tensor) -> torch.Tensor:
        return table.gather(1, targets[..., None].expand(-1, -1, K))  # (B, T, K) -> (B, P, K)

    sees_nothing = target_mapping.sum(dim=-1) == 0  # an unused target slot
    query_blocked = None if blocked is None else rows_of(blocked)
    if query_blocked is not None:
        sees_nothing = sees_nothing | query_blocked.all(dim=-1)
    query = StreamInputs(
        distance_index=T - 1 - targets[..., None] + keys,  # (B, P, K)
        blocked=query_blocked,
        other_segment=None if other_segment is None else rows_of(other_segment),
        sees_nothing=sees_nothing,
    )
    return content, query


@dataclass
class XLNetModelOutput:
    """`last_hidden_state`: the query stream (B, P, C) with `target_mapping`, else the content
    stream (B, T, C). `mems`: per layer its input states to remember (B, ≤mem_len, C),
    detached, or None without `mem_len`; `mems_attention_mask` (B, ≤mem_len) which are real."""

    last_hidden_state: torch.Tensor
    mems: list[torch.Tensor] | None = None
    mems_attention_mask: torch.Tensor | None = None


class XLNetModel(nn.Module):
    """The transformer: `word_embedding`, `mask_emb` (the query stream's start) and the layers."""

    def __init__(self, config: XLNetConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.word_embedding = nn.Embedding(config.vocab_size, config.hidden_size)
        self.mask_emb = nn.Parameter(torch.empty(1, 1, config.hidden_size))
        self.layer = nn.ModuleList([XLNetLayer(config) for _ in range(config.num_hidden_layers)])
        self.dropout = nn.Dropout(config.dropout)
        self.gradient_checkpointing = False
        self.apply(partial(init_weights, std=config.initializer_range))
        nn.init.normal_(self.mask_emb, std=config.initializer_range)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        perm_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        mems: list[torch.Tensor] | None = None,
        mems_attention_mask: torch.Tensor | None = None,
    ) -> XLNetModelOutput:
        """Args (Hugging Face's meanings, batch-first):
            input_ids, token_type_ids, attention_mask: (B, T); attention_mask 1 for tokens.
            perm_mask: (B, T, T), 1 where token i may not see token j.
            target_mapping: (B, P, T), one-hot rows naming the P predicted positions (a zero
                row is an unused slot).
            mems: per layer (B, M, C) from the previous segment; mems_attention_mask (B, M).
        """
        B, T = input_ids.shape
        M = 0 if mems is None else mems[0].shape[1]
        content, query = stream_inputs(B, T, M, input_ids.device, attention_mask,
                                       mems_attention_mask, perm_mask, token_type_ids, target_mapping)
        sinusoids = self.dropout(relative_sinusoids(T, M, self.config.hidden_size,
                                                    self.config.clamp_len, input_ids.device))
        h = self.dropout(self.word_embedding(input_ids))  # (B, T, C)
        g = None
        if target_mapping is not None:
            g = self.dropout(self.mask_emb.expand(B, target_mapping.shape[1], -1))  # (B, P, C)

        new_mems: list[torch.Tensor] | None = [] if self.config.mem_len else None
        for index, layer in enumerate(self.layer):
            memory = None if mems is None else mems[index]
            if new_mems is not None:
                # A copy: a slice would keep the whole concatenation alive across steps.
                new_mems.append(self.remember(h, memory).detach().clone())
            if self.gradient_checkpointing and self.training:
                h, g = checkpoint(layer, h, g, memory, sinusoids, content, query, use_reentrant=False)
            else:
                h, g = layer(h, g, memory, sinusoids, content, query)

        new_mask = None
        if new_mems is not None and (attention_mask is not None or mems_attention_mask is not None):
            if attention_mask is None:
                attention_mask = torch.ones(B, T, dtype=torch.bool, device=input_ids.device)
            new_mask = self.remember(attention_mask.bool(), None if mems_attention_mask is None
                                     else mems_attention_mask.bool())
        return XLNetModelOutput(self.dropout(h if g is None else g), new_mems, new_mask)

    def remember(self, current: torch.Tensor, memory: torch.Tensor | None) -> torch.Tensor:
        """The last `mem_len` of [memory; the first `reuse_len` of current] along time."""
        if self.config.reuse_len is not None:
            current = current[:, : self.config.reuse_len]
        if memory is not None:
            current = torch.cat([memory, current], dim=1)
        return current[:, -self.config.mem_len:]


def init_weights(module: nn.Module, std: float) -> None:
    """XLNet's initialization: normal(0, std) weights and attention parameters, zero biases,
    LayerNorm 1/0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=std)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, XLNetRelativeAttention):
        for name in ("q", "k", "v", "o", "r", "r_r_bias", "r_s_bias", "r_w_bias", "seg_embed"):
            nn.init.normal_(getattr(module, name), std=std)


# --- the language-model head ---------------------------------------------------------------


@dataclass
class XLNetLMOutput:
    """`logits` (B, P, V) with `target_mapping`, else (B, T, V); `loss` the mean cross-entropy
    over labels that are not -100 and `loss_sum` the sum before the division; `mems` and
    `mems_attention_mask` to pass with the next segment."""

    logits: torch.Tensor
    mems: list[torch.Tensor] | None = None
    mems_attention_mask: torch.Tensor | None = None
    loss: torch.Tensor | None = None
    loss_sum: torch.Tensor | None = None


class XLNetLMHeadModel(nn.Module):
    """XLNet with its tied language-model head `lm_loss` (Hugging Face's `XLNetLMHeadModel`)."""

    def __init__(self, config: XLNetConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = XLNetModel(config)
        self.lm_loss = nn.Linear(config.hidden_size, config.vocab_size)
        nn.init.zeros_(self.lm_loss.bias)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make the head use the word embedding matrix (one tensor, counted once)."""
        self.lm_loss.weight = self.transformer.word_embedding.weight

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each layer's activations in the backward pass (training mode only)."""
        self.transformer.gradient_checkpointing = enabled

    def num_parameters(self) -> int:
        """Trainable parameters, tied ones counted once."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        perm_mask: torch.Tensor | None = None,
        target_mapping: torch.Tensor | None = None,
        mems: list[torch.Tensor] | None = None,
        labels: torch.Tensor | None = None,
        mems_attention_mask: torch.Tensor | None = None,
        label_smoothing: float = 0.0,
    ) -> XLNetLMOutput:
        """See `XLNetModel.forward`; `labels` (B, P) with `target_mapping`, else (B, T), -100
        where nothing is predicted."""
        encoded = self.transformer(input_ids, token_type_ids, attention_mask, perm_mask,
                                    target_mapping, mems, mems_attention_mask)
        logits = self.lm_loss(encoded.last_hidden_state)
        loss = loss_sum = None
        if labels is not None:
            loss_sum = summed_cross_entropy(logits, labels, label_smoothing)
            loss = loss_sum / (labels != IGNORE_INDEX).sum().clamp(min=1)
        return XLNetLMOutput(logits, encoded.mems, encoded.mems_attention_mask, loss, loss_sum)

    def save_pretrained(self, folder: str | Path) -> None:
        """Write `config.json` and `model.safetensors` as `transformers.XLNetLMHeadModel` reads them."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: tensor.detach().contiguous().cpu()
                   for name, tensor in self.state_dict().items() if name not in TIED_KEYS}
        hf_format.write_json(folder / hf_format.CONFIG_NAME,
                             {**self.config.to_hf_dict(), "bertpre_version": bertpre.__version__})
        save_file(tensors, folder / hf_format.SAFETENSORS_NAME, metadata={"format": "pt"})

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, strict: bool = True) -> XLNetLMHeadModel:
        """Load an XLNet folder (bertpre's export or Hugging Face's); every weight but the tied
        head must be there, `strict` or not (an XLNet folder has no optional parts). Never
        downloads anything."""
        folder = hf_format.check_folder(folder)
        path = folder / hf_format.CONFIG_NAME
        if not path.is_file():
            raise UserError(f"{folder}: no {hf_format.CONFIG_NAME}; a Hugging Face model folder needs one")
        try:
            config = XLNetConfig.from_hf_dict(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError, AttributeError) as error:
            raise UserError(f"{path}: not an XLNet config ({error})") from None
        model = cls(config)
        model.load_weights(hf_format.read_weights(folder), folder)
        return model

    def load_weights(self, state_dict: dict[str, torch.Tensor], folder: Path, *,
                     strict: bool = True) -> tuple[list[str], list[str]]:
        """Copy a folder's tensors into this model: every weight but the tied head must be there,
        and no other (`strict` is always so for XLNet, whose folders hold no optional parts).

        Returns:
            (missing names, unexpected names): both empty.
        """
        state_dict = {k: v for k, v in state_dict.items() if k not in TIED_KEYS}
        expected = {k: v.shape for k, v in self.state_dict().items() if k not in TIED_KEYS}
        _, unexpected = hf_format.match_state_dict(expected, state_dict, folder, layout="XLNet", optional=())
        if unexpected:
            raise UserError(f"{folder}: the weights do not fit XLNet's layout of config.json "
                            f"({len(unexpected)} unexpected: {', '.join(unexpected[:3])})")
        with torch.no_grad():
            self.load_state_dict(state_dict, strict=False)
        self.tie_weights()
        return [], []


def special_token_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """config.json's pad, [CLS] and [SEP] ids as the tokenizer has them (a reused vocabulary keeps
    its own); those it lacks are left out."""
    ids = {"pad_token_id": PAD_TOKEN, "cls_token_id": CLS_TOKEN, "sep_token_id": SEP_TOKEN}
    return {field: tokenizer.token_to_id(token) for field, token in ids.items()
            if tokenizer.token_to_id(token) is not None}


def xlnet_export_writer(model: XLNetLMHeadModel, tokenizer_folder: Path) -> tuple[str, hf_format.ExportWriter]:
    """Hugging Face's native `XLNetLMHeadModel` folder, and the run's (BERT-layout) tokenizer in
    XLNet's layout; config.json names the tokenizer's own special ids (a reused vocabulary keeps
    its own)."""
    tokenizer = load_tokenizer(tokenizer_folder)
    model.config = replace(model.config, **special_token_ids(tokenizer))

    def write(staging: Path) -> list[str]:
        model.save_pretrained(staging)
        save_xlnet_tokenizer(tokenizer, staging, model_max_length=XLNET_MODEL_MAX_LENGTH)
        return [TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE]

    return "XLNetLMHeadModel", write


def write_xlnet_task_folder(folder: Path, state: dict[str, torch.Tensor], config: BertConfig,
                            tokenizer_folder: Path, *, pooler: bool) -> dict:
    """A fine-tuned XLNet's weights and the tokenizer it was fine-tuned with (XLNet's layout,
    whatever layout the source kept); returns config.json's content, with the tokenizer's ids.
    (`pooler` is BERT's: XLNet's encoder has none.)"""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({name: tensor.detach().contiguous().cpu() for name, tensor in state.items()},
              folder / hf_format.SAFETENSORS_NAME, metadata={"format": "pt"})
    tokenizer = load_tokenizer(tokenizer_folder)
    save_xlnet_tokenizer(tokenizer, folder, model_max_length=config.max_position_embeddings)
    return {**config.to_hf_dict(), "bertpre_version": bertpre.__version__, **special_token_ids(tokenizer)}


# fill-mask reads a long text in windows of the length an export declares (its tokenizer's
# model_max_length), one every half window.
MASK_WINDOW = XLNET_MODEL_MAX_LENGTH
MASK_WINDOW_STEP = MASK_WINDOW // 2


def reading_windows(length: int, window: int, step: int) -> list[tuple[int, int]]:
    """[start, stop) of the windows over `length` tokens: `window` long, one every `step`, the
    last ending at the text's end (training's segments, `plan_segments`, over one document)."""
    count = 1 + max(0, -(-(length - window) // step))
    return [(index * step, min(index * step + window, length)) for index in range(count)]


def choose_window(position: int, windows: list[tuple[int, int]], memory_length: int) -> int:
    """The window where `position` has the most context on its poorer side (before it: the
    window's tokens and the memory before them, at most `memory_length`; after it: the
    window's), then the most in all; the first of equals."""

    def context(index: int) -> tuple[int, int]:
        start, stop = windows[index]
        before = position - (start - min(memory_length, start))
        after = stop - 1 - position
        return min(before, after), before + after

    return max((index for index, (start, stop) in enumerate(windows) if start <= position < stop), key=context)


@contextmanager
def remembering(model: XLNetLMHeadModel, reuse_len: int) -> Iterator[None]:
    """The memory each forward leaves is the states of its first `reuse_len` tokens (what the
    trainer's `prepare_model` sets for a run), for the duration; the config is restored after."""
    config = model.transformer.config
    kept = config.reuse_len
    config.reuse_len = reuse_len
    try:
        yield
    finally:
        config.reuse_len = kept


@torch.no_grad()
def xlnet_mask_logits(model: XLNetLMHeadModel, tokenizer: Tokenizer, text: str,
                      fits: Callable[[ForwardShape], None] = lambda shape: None) -> torch.Tensor:
    """XLNet's logits (M, V) for each [MASK] of `text`: every [MASK] is a target of the query
    stream that sees the rest of the text (as a segment ends, with [SEP]) and no other target;
    the [MASK] tokens are hidden from every position, in the window and in the memory, so they
    take no part.

    A text longer than `MASK_WINDOW` is read as training reads a document: windows of that
    length, one every `MASK_WINDOW_STEP`, each seeing the memory the earlier ones left (its
    first `MASK_WINDOW_STEP` states, the last `mem_len` kept), and each [MASK] predicted in the
    window where it has the most context on both sides (`choose_window`). So memory is bounded
    whatever the text's length (attention at most MASK_WINDOW × (MASK_WINDOW + mem_len)), and
    XLNet reads long text as it was built to (Transformer-XL's recurrence) rather than being
    refused it; reading the whole text at once instead costs memory by the square of its
    length (3,000 words took 2.3 GB) and shows the model distances it never saw in training. A
    text up to `MASK_WINDOW` tokens is one window: one forward over all of it, as before.

    `fits` is told the largest forward before any runs (it may refuse it).
    """
    ids = tokenizer.encode(text, add_special_tokens=False).ids + [tokenizer.token_to_id(SEP_TOKEN)]
    mask_id = tokenizer.token_to_id(MASK_TOKEN)
    positions = [index for index, token in enumerate(ids) if token == mask_id]
    if not positions:
        raise UserError(f"the tokenizer did not keep {MASK_TOKEN} as one token in {text!r}")
    memory_length = model.transformer.config.mem_len
    windows = reading_windows(len(ids), MASK_WINDOW, MASK_WINDOW_STEP)
    chosen = [choose_window(position, windows, memory_length) for position in positions]
    fits(ForwardShape(batch_size=1, seq_length=windows[0][1], predicted_rows=max(Counter(chosen).values()),
                      memory_length=min(memory_length, windows[-1][0])))
    device = next(model.parameters()).device
    input_ids = torch.tensor([ids], device=device)  # (1, n)
    visible = input_ids != mask_id  # no position sees a [MASK]: in its window, nor in memory
    logits = torch.empty(len(positions), model.config.vocab_size, device=device)  # (M, V)
    memory = memory_mask = None
    with remembering(model, MASK_WINDOW_STEP):
        for index, (start, stop) in enumerate(windows[:max(chosen) + 1]):
            numbers = [number for number, window in enumerate(chosen) if window == index]
            if not numbers and not memory_length:
                continue  # nothing to predict here, nothing to remember
            target_mapping = None
            if numbers:
                target_mapping = torch.zeros(1, len(numbers), stop - start, device=device)  # (1, P, T)
                target_mapping[0, torch.arange(len(numbers)), [positions[n] - start for n in numbers]] = 1.0
            encoded = model.transformer(input_ids[:, start:stop], attention_mask=visible[:, start:stop],
                                        target_mapping=target_mapping, mems=memory,
                                        mems_attention_mask=memory_mask)
            if numbers:
                logits[numbers] = model.lm_loss(encoded.last_hidden_state[0]).float()  # (P, V)
            memory, memory_mask = encoded.mems, encoded.mems_attention_mask
    return logits
