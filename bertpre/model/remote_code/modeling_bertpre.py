"""bertpre's BERT for `transformers` (remote code): `BertpreModel`, `BertpreForMaskedLM`,
`BertpreForPreTraining`, and the fine-tuned models of `bertpre finetune --save-model`:
`BertpreForSequenceClassification`, `BertpreForTokenClassification`, `BertpreForQuestionAnswering`.

`bertpre export` copies this file, unchanged, into the folders of models whose positions are
relative, which transformers' own BERT no longer has:

- `rope`: each head's queries and keys are rotated by angles position · θ^(-2k/hs) (the
  "rotate half" pairing), so q_i·k_j depends on i − j only;
- `transformer_xl`: SDPA adds (u·k_j + (q_i + v)·r_{i−j}) / sqrt(hs) to the scores, with r the
  layer's projection `r_net` of the sinusoids [sin(d·f), cos(d·f)] of the signed distance
  d = i − j and u, v (`r_w_bias`, `r_r_bias`) per head, shared by the layers.

It also reads BERT's `absolute` table and ALBERT's options (`embedding_size`: narrower
embeddings projected by `encoder.embedding_hidden_mapping_in`; `share_layers`: one layer
applied `num_hidden_layers` times), so the math is bertpre's for any of its configs. Module and
parameter names are bertpre's (Hugging Face BERT's), so its weights load as they are. Only
torch and transformers are needed; attention is always `F.scaled_dot_product_attention`.

Load with e.g. `AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)`, or a
fine-tuned model with `AutoModelForSequenceClassification` (and so on) the same way.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput

from .configuration_bertpre import BertpreConfig

TRANSFORMER_XL_BASE = 10000.0  # the distance sinusoids' wavelength base, as in Transformer-XL
IGNORE_INDEX = -100


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation for a `hidden_act` name, exactly as bertpre trained with it."""
    if name == "gelu":
        return F.gelu  # BERT's exact erf form
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return partial(F.gelu, approximate="tanh")
    if name == "relu":
        return F.relu
    if name in ("silu", "swish"):
        return F.silu
    raise ValueError(f"hidden_act {name!r} is not supported by bertpre's model")


# --- relative positions ----------------------------------------------------------------------


class RelativePositions(NamedTuple):
    """What every layer's attention needs about positions, computed once per forward."""

    kind: str
    cos: torch.Tensor | None = None  # rope: (T, hs)
    sin: torch.Tensor | None = None
    sinusoids: torch.Tensor | None = None  # transformer_xl: R of distances T-1 … -(T-1), (2T-1, C)
    r_w_bias: torch.Tensor | None = None  # transformer_xl: u, (nh, hs)
    r_r_bias: torch.Tensor | None = None  # transformer_xl: v, (nh, hs)


def rotary_angles(length: int, head_size: int, theta: float,
                  device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of positions 0 … T−1's rotation angles, (T, hs), in float32."""
    inverse_frequency = theta ** (-torch.arange(0, head_size, 2, device=device,
                                                dtype=torch.float32) / head_size)  # (hs/2,)
    positions = torch.arange(length, device=device, dtype=torch.float32)
    angles = positions[:, None] * inverse_frequency[None, :]  # (T, hs/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, hs): pairs (k, k + hs/2)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_k, x_{k+hs/2}) of every head by its position's angle; x (B, nh, T, hs)."""
    first, second = x.chunk(2, dim=-1)
    rotated_half = torch.cat([-second, first], dim=-1)
    return x * cos.to(x.dtype) + rotated_half * sin.to(x.dtype)


def distance_sinusoids(length: int, width: int, device: torch.device) -> torch.Tensor:
    """R(d) = [sin(d·f), cos(d·f)], f = base^(-2k/width), for d = T−1 down to −(T−1), (2T−1, width)."""
    distances = torch.arange(length - 1, -length, -1, device=device, dtype=torch.float32)
    frequencies = TRANSFORMER_XL_BASE ** (-torch.arange(0, width, 2, device=device,
                                                        dtype=torch.float32) / width)
    angles = distances[:, None] * frequencies[None, :]  # (2T-1, width/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def transformer_xl_bias(query: torch.Tensor, key: torch.Tensor, r: torch.Tensor,
                        r_w_bias: torch.Tensor, r_r_bias: torch.Tensor) -> torch.Tensor:
    """(u·k_j + (q_i + v)·r_{i−j}) / sqrt(hs), the score SDPA adds to q_i·k_j / sqrt(hs).

    Args:
        query, key: (B, nh, T, hs).
        r: the layer's projection of `distance_sinusoids`, (2T−1, nh, hs).
        r_w_bias, r_r_bias: u and v, (nh, hs).

    Returns:
        (B, nh, T, T).
    """
    B, nh, T, hs = query.shape
    content = torch.einsum("hd,bhjd->bhj", r_w_bias.to(key.dtype), key)[:, :, None, :]  # (B, nh, 1, T)
    by_distance = torch.einsum("bhid,nhd->bhin", query + r_r_bias.to(query.dtype)[None, :, None, :],
                               r.to(query.dtype))  # (B, nh, T, 2T-1)
    rows = torch.arange(T, device=query.device)
    index = (T - 1) - rows[:, None] + rows[None, :]  # (T, T): where i - j sits in `by_distance`
    position = by_distance.gather(-1, index.expand(B, nh, T, T))  # (B, nh, T, T)
    return (content + position) / math.sqrt(hs)


# --- the encoder -------------------------------------------------------------------------------


class BertpreEmbeddings(nn.Module):
    """Word (+ absolute position) + token type embeddings, LayerNorm and dropout; `embedding_size`
    wide when set (ALBERT), else `hidden_size`. Relative models have no position table."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width, padding_idx=config.pad_token_id)
        if config.position_embedding_type == "absolute":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids)
        if hasattr(self, "position_embeddings"):
            length = input_ids.shape[1]
            if length > self.position_embeddings.num_embeddings:
                raise ValueError(f"sequence length {length} exceeds max_position_embeddings "
                                 f"{self.position_embeddings.num_embeddings}; truncate the input")
            embeddings = embeddings + self.position_embeddings(torch.arange(length, device=input_ids.device))
        if token_type_ids is None:
            embeddings = embeddings + self.token_type_embeddings.weight[0]
        else:
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(embeddings))  # (B, T, E)


class BertpreSelfAttention(nn.Module):
    """Multi-head attention through SDPA; `rope` rotates queries and keys, `transformer_xl` adds
    a bias from this layer's projection `r_net` of the distance sinusoids."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        if config.position_embedding_type == "transformer_xl":
            self.r_net = nn.Linear(config.hidden_size, config.hidden_size, bias=False)  # W_R
        self.dropout_prob = config.attention_probs_dropout_prob

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                positions: RelativePositions | None) -> torch.Tensor:
        B, T, C = hidden_states.shape
        shape = (B, T, self.num_attention_heads, self.attention_head_size)
        query = self.query(hidden_states).view(shape).transpose(1, 2)  # (B, nh, T, hs)
        key = self.key(hidden_states).view(shape).transpose(1, 2)
        value = self.value(hidden_states).view(shape).transpose(1, 2)
        if positions is not None and positions.kind == "rope":
            query = apply_rotary(query, positions.cos, positions.sin)
            key = apply_rotary(key, positions.cos, positions.sin)
        elif positions is not None and positions.kind == "transformer_xl":
            r = self.r_net(positions.sinusoids.to(hidden_states.dtype))  # (2T-1, C)
            r = r.view(-1, self.num_attention_heads, self.attention_head_size)  # (2T-1, nh, hs)
            bias = transformer_xl_bias(query, key, r, positions.r_w_bias, positions.r_r_bias)
            if attention_mask is not None:
                bias = bias.masked_fill(~attention_mask, float("-inf"))
            attention_mask = bias.to(query.dtype)  # (B, nh, T, T), added to the scores
        context = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask,
            dropout_p=self.dropout_prob if self.training else 0.0,
        )  # (B, nh, T, hs)
        return context.transpose(1, 2).reshape(B, T, C)


class BertpreSelfOutput(nn.Module):
    """Attention output projection, dropout, residual and post-LayerNorm."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertpreAttention(nn.Module):
    """Self-attention followed by its output block."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.self = BertpreSelfAttention(config)
        self.output = BertpreSelfOutput(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                positions: RelativePositions | None) -> torch.Tensor:
        return self.output(self.self(hidden_states, attention_mask, positions), hidden_states)


class BertpreIntermediate(nn.Module):
    """The feed-forward expansion: dense to `intermediate_size` and the activation."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = activation(config.hidden_act)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertpreOutput(nn.Module):
    """The feed-forward contraction, dropout, residual and post-LayerNorm."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertpreLayer(nn.Module):
    """One post-LayerNorm transformer block: attention, then feed-forward."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.attention = BertpreAttention(config)
        self.intermediate = BertpreIntermediate(config)
        self.output = BertpreOutput(config)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                positions: RelativePositions | None) -> torch.Tensor:
        attention_output = self.attention(hidden_states, attention_mask, positions)
        return self.output(self.intermediate(attention_output), attention_output)


class BertpreEncoder(nn.Module):
    """The layers (with `share_layers`, one applied `num_hidden_layers` times); Transformer-XL's
    u and v (`r_w_bias`, `r_r_bias`) live here, shared by every layer."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.num_hidden_layers = config.num_hidden_layers
        self.position_embedding_type = config.position_embedding_type
        self.rope_theta = float(config.rope_theta)
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        if config.position_embedding_type == "transformer_xl":
            bias_shape = (config.num_attention_heads, self.attention_head_size)
            self.r_w_bias = nn.Parameter(torch.zeros(bias_shape))
            self.r_r_bias = nn.Parameter(torch.zeros(bias_shape))
        if config.embedding_size is not None:
            self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        distinct = 1 if config.share_layers else config.num_hidden_layers
        self.layer = nn.ModuleList([BertpreLayer(config) for _ in range(distinct)])

    def relative_positions(self, length: int, device: torch.device) -> RelativePositions | None:
        """The rotary angles or the distance sinusoids for `length` tokens (None: absolute)."""
        if self.position_embedding_type == "rope":
            cos, sin = rotary_angles(length, self.attention_head_size, self.rope_theta, device)
            return RelativePositions("rope", cos=cos, sin=sin)
        if self.position_embedding_type == "transformer_xl":
            width = self.num_attention_heads * self.attention_head_size
            return RelativePositions("transformer_xl", sinusoids=distance_sinusoids(length, width, device),
                                     r_w_bias=self.r_w_bias, r_r_bias=self.r_r_bias)
        return None

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None,
                output_hidden_states: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """Returns: the last hidden states (B, T, C) and, if asked, those after each layer
        (with the input to the first in front)."""
        if hasattr(self, "embedding_hidden_mapping_in"):
            hidden_states = self.embedding_hidden_mapping_in(hidden_states)  # (B, T, E) -> (B, T, C)
        positions = self.relative_positions(hidden_states.shape[1], hidden_states.device)
        all_hidden_states = [hidden_states] if output_hidden_states else None
        for index in range(self.num_hidden_layers):
            hidden_states = self.layer[index % len(self.layer)](hidden_states, attention_mask, positions)
            if all_hidden_states is not None:
                all_hidden_states.append(hidden_states)
        return hidden_states, tuple(all_hidden_states) if all_hidden_states is not None else None


class BertprePooler(nn.Module):
    """tanh(dense(hidden state of the first token)), the input of the pair head."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden_states[:, 0]))  # (B, C)


# --- heads -------------------------------------------------------------------------------------


class BertprePredictionHeadTransform(nn.Module):
    """dense, activation, LayerNorm before the vocabulary projection (to `embedding_size` for ALBERT)."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, width)
        self.transform_act_fn = activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class BertpreLMPredictionHead(nn.Module):
    """The MLM head; its decoder weight is tied to the word embeddings and its bias is `bias`."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.transform = BertprePredictionHeadTransform(config)
        self.decoder = nn.Linear(width, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))  # (..., V)


class BertpreOnlyMLMHead(nn.Module):
    """The MLM head alone (`cls.predictions`)."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.predictions = BertpreLMPredictionHead(config)


class BertprePreTrainingHeads(nn.Module):
    """The MLM head and the 2-way pair head (NSP or SOP) on the pooled state."""

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__()
        self.predictions = BertpreLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


# --- the models --------------------------------------------------------------------------------

TIED_DECODER = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}


class BertprePreTrainedModel(PreTrainedModel):
    """Weight initialization (BERT's: normal(0, initializer_range), zero biases) and loading."""

    config_class = BertpreConfig
    base_model_prefix = "bert"
    _supports_sdpa = True  # attention is always SDPA; there is no eager path

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)  # Linear, Embedding (padding row 0), LayerNorm
        if isinstance(module, BertpreEncoder) and hasattr(module, "r_w_bias"):
            nn.init.normal_(module.r_w_bias, std=self.config.initializer_range)
            nn.init.normal_(module.r_r_bias, std=self.config.initializer_range)
        elif isinstance(module, BertpreLMPredictionHead):
            nn.init.zeros_(module.bias)

    def as_requested(self, output: ModelOutput, return_dict: bool | None) -> ModelOutput | tuple:
        """`output`, or its tuple where `return_dict` (else the config's) is False."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()


def padding_mask_for_sdpa(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, T) 1/0 padding mask -> (B, 1, 1, T) boolean, True where keys may be attended."""
    if attention_mask is None:
        return None
    return attention_mask.bool()[:, None, None, :]


class BertpreModel(BertprePreTrainedModel):
    """The encoder: embeddings, layers and (unless `add_pooling_layer=False`) the pooler."""

    # The heads of a pretraining checkpoint, which the bare encoder does not use.
    _keys_to_ignore_on_load_unexpected = [r"^cls\."]

    def __init__(self, config: BertpreConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = BertpreEmbeddings(config)
        self.encoder = BertpreEncoder(config)
        self.pooler = BertprePooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple:
        """Args: `input_ids` (B, T); `attention_mask` (B, T), 1 for tokens and 0 for padding."""
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        hidden_states = self.embeddings(input_ids, token_type_ids)
        hidden_states, all_hidden_states = self.encoder(
            hidden_states, padding_mask_for_sdpa(attention_mask), bool(output_hidden_states))
        output = BaseModelOutputWithPooling(
            last_hidden_state=hidden_states,
            pooler_output=self.pooler(hidden_states) if self.pooler is not None else None,
            hidden_states=all_hidden_states,
        )
        return self.as_requested(output, return_dict)


class BertpreForMaskedLM(BertprePreTrainedModel):
    """The encoder and the MLM head; `labels` (B, T) with -100 where nothing is predicted."""

    _tied_weights_keys = dict(TIED_DECODER)
    # A pretraining checkpoint's pooler and pair head, which masked LM does not use.
    _keys_to_ignore_on_load_unexpected = [r"^bert\.pooler\.", r"^cls\.seq_relationship\."]

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__(config)
        self.bert = BertpreModel(config, add_pooling_layer=False)
        self.cls = BertpreOnlyMLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> MaskedLMOutput | tuple:
        encoded = self.bert(input_ids, attention_mask, token_type_ids,
                            output_hidden_states=output_hidden_states, return_dict=True)
        logits = self.cls.predictions(encoded.last_hidden_state)  # (B, T, V)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        output = MaskedLMOutput(loss=loss, logits=logits, hidden_states=encoded.hidden_states)
        return self.as_requested(output, return_dict)


@dataclass
class BertprePreTrainingOutput(ModelOutput):
    """`loss` (the MLM and pair losses added, those whose labels were given),
    `prediction_logits` (B, T, V), `seq_relationship_logits` (B, 2), `hidden_states` if asked."""

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class BertpreForPreTraining(BertprePreTrainedModel):
    """The encoder with the MLM head and the pair head, as bertpre pretrained it.

    `labels` (B, T) with -100 where nothing is predicted; `next_sentence_label` (B,), 0 for a
    true continuation (NSP) or the right order (SOP), 1 otherwise.
    """

    _tied_weights_keys = dict(TIED_DECODER)

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__(config)
        self.bert = BertpreModel(config)
        self.cls = BertprePreTrainingHeads(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BertprePreTrainingOutput | tuple:
        encoded = self.bert(input_ids, attention_mask, token_type_ids,
                            output_hidden_states=output_hidden_states, return_dict=True)
        prediction_logits = self.cls.predictions(encoded.last_hidden_state)  # (B, T, V)
        seq_relationship_logits = self.cls.seq_relationship(encoded.pooler_output)  # (B, 2)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(prediction_logits.float().flatten(0, 1), labels.flatten(),
                                   ignore_index=IGNORE_INDEX)
        if next_sentence_label is not None:
            pair_loss = F.cross_entropy(seq_relationship_logits.float(), next_sentence_label.view(-1),
                                        ignore_index=IGNORE_INDEX)
            loss = pair_loss if loss is None else loss + pair_loss
        output = BertprePreTrainingOutput(loss=loss, prediction_logits=prediction_logits,
                                          seq_relationship_logits=seq_relationship_logits,
                                          hidden_states=encoded.hidden_states)
        return self.as_requested(output, return_dict)


# --- fine-tuned models (`bertpre finetune --save-model`) ----------------------------------------
# transformers' BERT task classes' names and math: bertpre's weights load as they are.


def sequence_classification_loss(config: BertpreConfig, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """transformers' loss for `problem_type` (when unset: regression for one label, else single-
    label for integer labels and multi-label for float ones); logits (B, num_labels)."""
    problem_type = config.problem_type
    if problem_type is None:
        integer = labels.dtype in (torch.long, torch.int)
        problem_type = ("regression" if config.num_labels == 1 else
                        "single_label_classification" if integer else "multi_label_classification")
    if problem_type == "regression" and config.num_labels == 1:
        return F.mse_loss(logits.float().view(-1), labels.float().view(-1))
    if problem_type == "regression":
        return F.mse_loss(logits.float(), labels.float())
    if problem_type == "single_label_classification":
        return F.cross_entropy(logits.float().view(-1, config.num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class BertpreForSequenceClassification(BertprePreTrainedModel):
    """The encoder → pooled first token → dropout → `classifier`; `num_labels` 1 is regression;
    `labels` (B,) (float (B, num_labels) for multi-label)."""

    # A pretraining checkpoint's heads, which a classifier does not use.
    _keys_to_ignore_on_load_unexpected = [r"^cls\."]

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertpreModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput | tuple:
        encoded = self.bert(input_ids, attention_mask, token_type_ids,
                            output_hidden_states=output_hidden_states, return_dict=True)
        logits = self.classifier(self.dropout(encoded.pooler_output))  # (B, num_labels)
        loss = None if labels is None else sequence_classification_loss(self.config, logits, labels)
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=encoded.hidden_states)
        return self.as_requested(output, return_dict)


class BertpreForTokenClassification(BertprePreTrainedModel):
    """The encoder → every token's output → dropout → `classifier` (no pooler); `labels` (B, T)
    with -100 where a token is not labelled."""

    _keys_to_ignore_on_load_unexpected = [r"^cls\.", r"^bert\.pooler\."]

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertpreModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> TokenClassifierOutput | tuple:
        encoded = self.bert(input_ids, attention_mask, token_type_ids,
                            output_hidden_states=output_hidden_states, return_dict=True)
        logits = self.classifier(self.dropout(encoded.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=encoded.hidden_states)
        return self.as_requested(output, return_dict)


class BertpreForQuestionAnswering(BertprePreTrainedModel):
    """The encoder → every token's output → `qa_outputs` (no dropout, no pooler): a start and an
    end logit a token. `start_positions`, `end_positions` (B,); a position past the sequence is
    ignored, and the loss is the mean of the start and end cross-entropies."""

    _keys_to_ignore_on_load_unexpected = [r"^cls\.", r"^bert\.pooler\."]

    def __init__(self, config: BertpreConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertpreModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> QuestionAnsweringModelOutput | tuple:
        encoded = self.bert(input_ids, attention_mask, token_type_ids,
                            output_hidden_states=output_hidden_states, return_dict=True)
        logits = self.qa_outputs(encoded.last_hidden_state)  # (B, T, 2)
        start_logits, end_logits = (part.squeeze(-1).contiguous() for part in logits.split(1, dim=-1))
        loss = None
        if start_positions is not None and end_positions is not None:
            ignored = start_logits.shape[1]  # transformers' rule: clamped past the end, then ignored
            start_loss = F.cross_entropy(start_logits.float(), start_positions.view(-1).clamp(0, ignored),
                                         ignore_index=ignored)
            end_loss = F.cross_entropy(end_logits.float(), end_positions.view(-1).clamp(0, ignored),
                                       ignore_index=ignored)
            loss = (start_loss + end_loss) / 2
        output = QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                              hidden_states=encoded.hidden_states)
        return self.as_requested(output, return_dict)


__all__ = ["BertpreForMaskedLM", "BertpreForPreTraining", "BertpreForQuestionAnswering",
           "BertpreForSequenceClassification", "BertpreForTokenClassification", "BertpreModel",
           "BertprePreTrainedModel"]
