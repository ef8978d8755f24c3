"""BERT for pretraining (MLM + NSP/SOP heads) with Hugging Face parameter names and ALBERT options."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from bertpre.labels import IGNORE_INDEX
from bertpre.model import hf_format
from bertpre.model.chunked_loss import VocabularyHead
from bertpre.model.common import (  # noqa: F401 - PreTrainingOutput, bert_mask_logits: bert.py's names too
    PreTrainingOutput,
    Rows,
    activation,
    bert_mask_logits,
    masked_lm_predictions,
    query_angles,
    read_positions,
    read_rows,
    summed_cross_entropy,
)
from bertpre.model.config import BertConfig
from bertpre.model.layer_norm import LayerNorm
from bertpre.model.positions import (
    PositionInputs,
    apply_rotary,
    relative_distances,
    rotary_angles,
    sinusoid_table,
    transformer_xl_bias,
)
from bertpre.model.unpad import Unpadded, varlen_attention, varlen_usable

# --- the network ---------------------------------------------------------------------------


class BertEmbeddings(nn.Module):
    """Word + position + token type embeddings, then LayerNorm and dropout.

    Their width is `embedding_size` when set (ALBERT), else `hidden_size`. With relative
    positions (`rope`, `transformer_xl`) there is no position table: attention sees positions.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        if config.position_embedding_type == "absolute":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.LayerNorm = LayerNorm(width, eps=config.layer_norm_eps, low_precision=config.low_precision_layernorm)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids)
        if hasattr(self, "position_embeddings"):
            embeddings = embeddings + self.position_embeddings(self.position_ids(input_ids))
        if token_type_ids is None:
            embeddings = embeddings + self.token_type_embeddings.weight[0]
        else:
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))  # (B, T, E)

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The row of the position table each token reads: BERT's are 0, 1, 2 … whatever the
        tokens (T,); a family that counts positions otherwise (RoBERTa) overrides this."""
        seq_length = input_ids.shape[1]
        if seq_length > self.position_embeddings.num_embeddings:
            raise ValueError(
                f"sequence length {seq_length} exceeds max_position_embeddings "
                f"{self.position_embeddings.num_embeddings}; truncate the input"
            )
        return torch.arange(seq_length, device=input_ids.device)  # (T,)


class BertSelfAttention(nn.Module):
    """Multi-head attention scores and context through `F.scaled_dot_product_attention`;
    relative positions rotate queries and keys (`rope`) or add a bias (`transformer_xl`, with
    this layer's projection `r_net` of the distance sinusoids)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        if config.position_embedding_type == "transformer_xl":
            self.r_net = nn.Linear(config.hidden_size, config.hidden_size, bias=False)  # W_R
        self.dropout_prob = config.attention_probs_dropout_prob
        self.fused_qkv = config.fused_qkv

    def qkv_joined(self, hidden_states: torch.Tensor, parts: tuple[nn.Linear, ...] | None = None) -> torch.Tensor:
        """Query, key and value side by side (..., 3C) from one (3C, C) matrix product
        (`model.fused_qkv`), or `parts` alone (the last layer on the rows read: key and value):
        the hidden states are read (and cast under autocast) once instead of three times, and
        backward sums one input gradient instead of three. The parameters stay three Linears
        under Hugging Face's names, so checkpoints, exports and `init_from` never see the
        concatenation (3C² a layer: a few MB a step against the activations' GBs)."""
        parts = parts or (self.query, self.key, self.value)
        weight = torch.cat([part.weight for part in parts])  # (3C, C)
        bias = torch.cat([part.bias for part in parts])
        return F.linear(hidden_states, weight, bias)

    def fused(self, hidden_states: torch.Tensor) -> bool:
        """`model.fused_qkv` now: true, false, or auto (under autocast, where the one product also
        casts the input once instead of three times; float32 keeps three products, as exact as ever)."""
        if self.fused_qkv == "auto":
            return torch.is_autocast_enabled(hidden_states.device.type)
        return self.fused_qkv

    def qkv(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Query, key and value of every row, each (..., C): views of one product where
        `fused`, else three products."""
        if self.fused(hidden_states):
            return self.qkv_joined(hidden_states).chunk(3, dim=-1)
        return self.query(hidden_states), self.key(hidden_states), self.value(hidden_states)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                positions: PositionInputs | None = None, rows: Rows | None = None,
                unpadded: Unpadded | None = None) -> torch.Tensor:
        """Context (B, T, C); with `rows`, only those positions query (B, R, C), over the keys
        and values of every position. With `unpadded`, `hidden_states` and the context are the
        real tokens alone (N, C): they are projected as they are and laid out padded for
        attention only."""
        if unpadded is None:
            B, T, C = hidden_states.shape
            querying = hidden_states if rows is None else read_rows(hidden_states, rows)  # (B, Q, C)
            Q = querying.shape[1]
            shape = (B, T, self.num_attention_heads, self.attention_head_size)
            if rows is None:  # every row queries: one QKV product where model.fused_qkv says so
                query, key, value = (part.view(shape).transpose(1, 2)  # (B, nh, T, hs)
                                     for part in self.qkv(hidden_states))
            else:
                query = self.query(querying).view(B, Q, *shape[2:]).transpose(1, 2)  # (B, nh, Q, hs)
                kv = (self.qkv_joined(hidden_states, (self.key, self.value)).chunk(2, dim=-1)
                      if self.fused(hidden_states) else (self.key(hidden_states), self.value(hidden_states)))
                key, value = (part.view(shape).transpose(1, 2) for part in kv)  # (B, nh, T, hs)
        else:
            (B, T), C = (unpadded.batch, unpadded.length), hidden_states.shape[-1]
            Q, shape = T, (B, T, self.num_attention_heads, self.attention_head_size)
            dropout_p = self.dropout_prob if self.training else 0.0
            if rows is None and positions is None and varlen_usable(hidden_states, unpadded, dropout_p):
                return varlen_attention(self.qkv(hidden_states), unpadded, self.num_attention_heads)  # (N, C)
            if rows is not None:  # (B, R) flat indices of the tokens that query
                Q = rows.shape[1]
                query = self.query(read_rows(hidden_states, rows)).view(B, Q, *shape[2:]).transpose(1, 2)
                kv = (self.qkv_joined(hidden_states, (self.key, self.value)).chunk(2, dim=-1)
                      if self.fused(hidden_states) else (self.key(hidden_states), self.value(hidden_states)))
                key, value = (unpadded.pad(part).view(shape).transpose(1, 2) for part in kv)  # (B, nh, T, hs)
            else:
                if self.fused(hidden_states):  # padded once, (B, T, 3C), then split
                    parts = unpadded.pad(self.qkv_joined(hidden_states)).chunk(3, dim=-1)
                else:
                    parts = tuple(unpadded.pad(part) for part in self.qkv(hidden_states))
                query, key, value = (part.view(shape).transpose(1, 2) for part in parts)  # (B, nh, T, hs)
        if positions is not None and positions.kind == "rope":
            query = apply_rotary(query, query_angles(positions.cos, rows), query_angles(positions.sin, rows))
            key = apply_rotary(key, positions.cos, positions.sin)
        elif positions is not None and positions.kind == "transformer_xl":
            r = self.r_net(positions.sinusoids.to(hidden_states.dtype))  # (2T-1, C)
            r = r.view(-1, self.num_attention_heads, self.attention_head_size)  # (2T-1, nh, hs)
            if rows is not None:  # the distance table of all T queries: the querying rows are kept
                full = self.query(hidden_states).view(shape).transpose(1, 2)
                bias = transformer_xl_bias(full, key, r, positions.r_w_bias, positions.r_r_bias)  # (B, nh, T, T)
                bias = read_rows(bias.transpose(1, 2), rows).transpose(1, 2)  # (B, nh, Q, T)
            else:
                bias = transformer_xl_bias(query, key, r, positions.r_w_bias, positions.r_r_bias)
            if attention_mask is not None:
                bias = bias.masked_fill(~attention_mask, float("-inf"))
            attention_mask = bias.to(query.dtype)  # (B, nh, Q, T), added to the scores
        context = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask,
            dropout_p=self.dropout_prob if self.training else 0.0,
        )  # (B, nh, Q, hs)
        context = context.transpose(1, 2).reshape(B, Q, C)
        return context if unpadded is None or rows is not None else unpadded.unpad(context)  # (N, C)


class BertSelfOutput(nn.Module):
    """Attention output projection, dropout, residual and post-LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps,
                                   low_precision=config.low_precision_layernorm)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    """Self-attention followed by its output block."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                positions: PositionInputs | None = None, rows: Rows | None = None,
                unpadded: Unpadded | None = None) -> torch.Tensor:
        context = self.self(hidden_states, attention_mask, positions, rows, unpadded)
        # Post-LN: a computed row's residual is that row's input.
        return self.output(context, hidden_states if rows is None else read_rows(hidden_states, rows))


class BertIntermediate(nn.Module):
    """The feed-forward expansion: dense to `intermediate_size` and the activation."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = activation(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(nn.Module):
    """The feed-forward contraction, dropout, residual and post-LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps,
                                   low_precision=config.low_precision_layernorm)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertLayer(nn.Module):
    """One post-LayerNorm transformer block: attention, then feed-forward."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                positions: PositionInputs | None = None, rows: Rows | None = None,
                unpadded: Unpadded | None = None) -> torch.Tensor:
        """(B, T, C) → (B, T, C); with `rows`, those positions' outputs only (B, R, C): every
        step after attention is per position, so the others need not be computed. With
        `unpadded`, (N, C) → (N, C) over the real tokens alone."""
        attention_output = self.attention(hidden_states, attention_mask, positions, rows, unpadded)
        return self.output(self.intermediate(attention_output), attention_output)


class BertEncoder(nn.Module):
    """The stack of layers; with `share_layers` one layer is applied `num_hidden_layers` times.

    It turns positions into what attention needs (`position_inputs`); Transformer-XL's u and v
    (`r_w_bias`, `r_r_bias`, per head) live here, shared by every layer.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_hidden_layers = config.num_hidden_layers
        self.position_embedding_type = config.position_embedding_type
        self.rope_theta = config.rope_theta
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        if config.position_embedding_type == "transformer_xl":
            bias_shape = (config.num_attention_heads, self.attention_head_size)
            self.r_w_bias = nn.Parameter(torch.empty(bias_shape).normal_(std=config.initializer_range))
            self.r_r_bias = nn.Parameter(torch.empty(bias_shape).normal_(std=config.initializer_range))
        if config.embedding_size is not None:
            # ALBERT's name and place for the projection of factorized embeddings.
            self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        distinct = 1 if config.share_layers else config.num_hidden_layers
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(distinct)])
        self.gradient_checkpointing = False

    def position_inputs(self, length: int, device: torch.device) -> PositionInputs | None:
        """The rotary angles or the distance sinusoids for `length` tokens (None: absolute)."""
        if self.position_embedding_type == "rope":
            cos, sin = rotary_angles(torch.arange(length, device=device), self.attention_head_size,
                                     self.rope_theta)
            return PositionInputs("rope", cos=cos, sin=sin)
        if self.position_embedding_type == "transformer_xl":
            width = self.num_attention_heads * self.attention_head_size
            return PositionInputs("transformer_xl",
                                  sinusoids=sinusoid_table(relative_distances(length, device), width),
                                  r_w_bias=self.r_w_bias, r_r_bias=self.r_r_bias)
        return None

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                last_rows: Rows | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """(B, T, C); with `last_rows`, the last layer computes only the first `last_rows`
        positions, or those a (B, R) index names (B, R, C): what the heads read (a pooler
        [CLS] alone, pretraining [CLS] and the predicted positions). With `unpadded`, the real
        tokens alone (N, C) in and out (the last layer's `last_rows` padded again)."""
        if hasattr(self, "embedding_hidden_mapping_in"):
            hidden_states = self.embedding_hidden_mapping_in(hidden_states)  # (B, T, E) -> (B, T, C)
        length = hidden_states.shape[1] if unpadded is None else unpadded.length
        positions = self.position_inputs(length, hidden_states.device)
        flat_rows = unpadded is not None and unpadded.cls_index is not None  # a pretraining layout
        if flat_rows:
            attention_mask = unpadded.key_mask()  # (B, 1, 1 or T, T): padding, and other documents
        for index in range(self.num_hidden_layers):
            layer = self.layer[index % len(self.layer)]
            rows = last_rows if index == self.num_hidden_layers - 1 else None
            if rows is not None and unpadded is not None and not flat_rows:
                hidden_states, unpadded = unpadded.pad(hidden_states), None  # rows are read padded
            elif rows is not None and flat_rows and unpadded.packed:
                attention_mask = unpadded.key_mask(rows)  # (B, 1, R, T): the rows' own documents
            if self.gradient_checkpointing and self.training:
                hidden_states = checkpoint(layer, hidden_states, attention_mask, positions, rows, unpadded,
                                           use_reentrant=False)
            else:
                hidden_states = layer(hidden_states, attention_mask, positions, rows, unpadded)
        return hidden_states  # (B, T, C), (B, R, C), or (N, C) unpadded


class BertPooler(nn.Module):
    """tanh(dense(hidden state of the first token)), the input of the pair head."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden_states[:, 0]))  # (B, C)


@dataclass
class BertModelOutput:
    """What `BertModel` returns: `last_hidden_state` (B, T, C) and `pooler_output` (B, C), None
    for an encoder without a pooler."""

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor | None


class BertModel(nn.Module):
    """The encoder: embeddings, layers and pooler (Hugging Face's `BertModel`).

    A family with BERT's layers and its own embeddings (RoBERTa's positions) names them in
    `embeddings_class`; without `add_pooling_layer` there is no pooler (Hugging Face's
    `add_pooling_layer=False`).
    """

    embeddings_class: type[nn.Module] = BertEmbeddings

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__()
        config.validate()
        self.config = config
        self.embeddings = self.embeddings_class(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.apply(partial(init_weights, std=config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        last_rows: Rows | None = None,
        unpadded: Unpadded | None = None,
    ) -> BertModelOutput:
        """Args: `input_ids` (B, T); `attention_mask` (B, T), 1 for tokens and 0 for padding;
        `last_rows`: compute the last layer for the first positions only (1: [CLS], enough for
        the pooler), or for the (B, R) positions an index names, [CLS] first where the pooler
        reads it; `last_hidden_state` is then (B, R, C); `unpadded`: the mask's real
        tokens (`Unpadded.from_mask`), so that the layers compute nothing for padding (the
        outputs at padding are then zeros, where Hugging Face's are values no one reads).
        A pretraining layout (`Unpadded.from_batch`) reads `last_rows` (B, R) as flat token
        indices and gives (B, R, C), computing the last layer for them alone where
        `model.last_layer_rows` says so (in training); the attention mask is then its own."""
        hidden_states = self.embeddings(input_ids, token_type_ids)
        if unpadded is not None and unpadded.cls_index is not None:
            computed = last_rows if self.config.last_layer_rows and self.training else None
            hidden_states = self.encoder(unpadded.unpad(hidden_states), None, computed, unpadded)
            if computed is None:  # the whole last layer ran: read the rows of its (N, C)
                hidden_states = read_rows(hidden_states, last_rows)  # (B, R, C)
            pooled = None if self.pooler is None else self.pooler(hidden_states)
            return BertModelOutput(last_hidden_state=hidden_states, pooler_output=pooled)
        if unpadded is not None:
            if attention_mask is None:
                raise ValueError("unpadded needs the attention mask it was made from")
            hidden_states = unpadded.unpad(hidden_states)  # (N, C)
        hidden_states = self.encoder(hidden_states, attention_mask_for_sdpa(attention_mask), last_rows, unpadded)
        if unpadded is not None and last_rows is None:
            hidden_states = unpadded.pad(hidden_states)  # (B, T, C)
        pooled = None if self.pooler is None else self.pooler(hidden_states)
        return BertModelOutput(last_hidden_state=hidden_states, pooler_output=pooled)


def attention_mask_for_sdpa(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, T) 1/0 padding mask -> (B, 1, 1, T) boolean, True where keys may be attended.

    The caller decides whether there is padding at all (on the CPU, before the batch is
    copied): asking the device here would stall the GPU queue. Without a mask SDPA may take its
    fastest kernel, so pass None for a batch without padding.
    """
    if attention_mask is None:
        return None
    return attention_mask.bool()[:, None, None, :]


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialization: normal(0, std) weights, zero biases, LayerNorm 1/0, zero padding row."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


# --- pretraining heads ---------------------------------------------------------------------


class BertPredictionHeadTransform(nn.Module):
    """dense, activation, LayerNorm before the vocabulary projection (to `embedding_size` for ALBERT)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, width)
        self.transform_act_fn = activation(config.hidden_act)
        self.LayerNorm = LayerNorm(width, eps=config.layer_norm_eps, low_precision=config.low_precision_layernorm)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class BertLMPredictionHead(nn.Module):
    """The MLM head; its decoder weight is the word embedding matrix and its bias is `bias`."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(width, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias  # one tensor under two names, as in Hugging Face

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))  # (..., V)


class BertPreTrainingHeads(nn.Module):
    """MLM head on token states and the 2-way pair head (NSP or SOP) on the pooled state."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertForPreTraining(nn.Module):
    """BERT with its MLM and pair heads; parameter names are Hugging Face's `BertForPreTraining`."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.cls.apply(partial(init_weights, std=config.initializer_range))
        nn.init.zeros_(self.cls.predictions.bias)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make the MLM decoder use the word embedding matrix (one tensor, counted once)."""
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        self.cls.predictions.decoder.bias = self.cls.predictions.bias

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each layer's activations in the backward pass (training mode only)."""
        self.bert.encoder.gradient_checkpointing = enabled

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        label_smoothing: float = 0.0,
        masked_lm_positions: torch.Tensor | None = None,
        masked_lm_ids: torch.Tensor | None = None,
        unpadded: Unpadded | None = None,
    ) -> PreTrainingOutput:
        """Args:
            labels: (B, T) with -100 where nothing is predicted (Hugging Face's layout).
            next_sentence_label: (B,), -100 where a row has no pair label.
            masked_lm_positions, masked_lm_ids: (B, P), Google's layout (ids -100 in unused
                slots); it replaces `labels` and keeps every shape fixed: no host sync, no
                data-dependent shape, so the whole forward compiles as one graph. The last
                layer then computes [CLS] and these positions alone (`model.last_layer_rows`).
            unpadded: the batch's real tokens (`Unpadded.from_batch`, `model.unpad`): every
                layer computes them alone, and the heads read [CLS] and the slots' tokens.
        """
        if unpadded is not None:
            rows = torch.cat([unpadded.cls_index[:, None], unpadded.predicted_index], dim=1)  # (B, 1 + P) flat
        else:
            rows = read_positions(self.config, masked_lm_positions, cls_first=True, training=self.training)  # (B, 1 + P) or None
        encoded = self.bert(input_ids, attention_mask, token_type_ids, last_rows=rows, unpadded=unpadded)
        seq_relationship_logits = self.cls.seq_relationship(encoded.pooler_output)  # (B, 2)
        head = self.cls.predictions
        predictions = masked_lm_predictions(
            VocabularyHead(head.transform, head.decoder), encoded.last_hidden_state, labels=labels,
            label_smoothing=label_smoothing, masked_lm_positions=masked_lm_positions, masked_lm_ids=masked_lm_ids,
            predicted_states=None if rows is None else encoded.last_hidden_state[:, 1:],
            loss_chunk_rows=self.config.loss_chunk_rows if self.training else 0)
        mlm_loss = predictions.loss

        pair_loss = pair_loss_sum = None
        if next_sentence_label is not None:
            next_sentence_label = next_sentence_label.view(-1)
            pair_loss_sum = summed_cross_entropy(seq_relationship_logits, next_sentence_label)
            pair_loss = pair_loss_sum / (next_sentence_label != IGNORE_INDEX).sum().clamp(min=1)

        loss = None
        for part in (mlm_loss, pair_loss):
            if part is not None:
                loss = part if loss is None else loss + part
        return PreTrainingOutput(
            loss=loss,
            mlm_loss=mlm_loss,
            pair_loss=pair_loss,
            prediction_logits=predictions.logits,
            seq_relationship_logits=seq_relationship_logits,
            mlm_loss_sum=predictions.loss_sum,
            pair_loss_sum=pair_loss_sum,
            mlm_correct=predictions.correct,
        )

    def num_parameters(self) -> int:
        """Trainable parameters, tied ones counted once."""
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, folder: str | Path) -> None:
        """Write `config.json` and `model.safetensors` in the Hugging Face layout."""
        hf_format.write_folder(folder, self.config, self.state_dict())

    def load_weights(self, state_dict: dict[str, torch.Tensor], folder: Path, *,
                     strict: bool = False) -> tuple[list[str], list[str]]:
        """Copy a Hugging Face folder's tensors (bertpre's names) into this model, keeping the
        fresh initialization of the parts the folder lacks (see `hf_format.match_state_dict`).

        Returns:
            (missing names, unexpected names).
        """
        expected = {name: tensor.shape for name, tensor in self.state_dict().items()}
        missing, unexpected = hf_format.match_state_dict(expected, state_dict, folder, strict=strict)
        with torch.no_grad():
            self.load_state_dict({k: v for k, v in state_dict.items() if k in expected}, strict=False)
        self.tie_weights()
        return missing, unexpected

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, strict: bool = False) -> BertForPreTraining:
        """Load a Hugging Face BERT folder.

        Parts a BertModel-only folder lacks (pooler, heads) are initialized and named in a
        warning, or refused with `strict`. Never downloads anything.
        """
        config, state_dict = hf_format.read_folder(folder)
        model = cls(config)
        missing, unexpected = model.load_weights(state_dict, Path(folder), strict=strict)
        hf_format.warn_loading(folder, missing, unexpected)
        return model
