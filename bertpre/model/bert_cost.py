"""What a BERT-layout model costs to train: parameters by part, FLOPs per token, memory
(the shared `ParameterCounts` and `MemoryEstimate` are laid out here)."""
from __future__ import annotations

from dataclasses import dataclass

from bertpre.model.config import BertConfig

BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass
class ParameterCounts:
    """Parameters by part; the tied MLM decoder weight is the word embedding table, counted once.

    `embeddings`: word/position/token-type tables and ALBERT's projection to hidden size (no
    position table with relative positions);
    `attention` and `feed_forward`: weights and biases of the distinct layers (with
    `transformer_xl`, each layer's W_R and the shared u and v too);
    `layer_norms`: the embedding and layer LayerNorms; `heads`: MLM transform (dense and
    LayerNorm), MLM output bias and the pair classifier.
    """

    embeddings: int
    attention: int
    feed_forward: int
    layer_norms: int
    pooler: int
    heads: int
    # Embedding tables plus the layers' weight matrices: no biases, no LayerNorms, no pooler or
    # heads. For BERT-base this is the 108.8M figure often quoted next to the paper's 110M.
    matrices: int

    @property
    def encoder(self) -> int:
        """BertModel without its heads: what the BERT paper's 110M counts."""
        return self.embeddings + self.attention + self.feed_forward + self.layer_norms + self.pooler

    @property
    def total(self) -> int:
        """All of BertForPreTraining."""
        return self.encoder + self.heads


def count_bert_parameters(config: BertConfig) -> ParameterCounts:
    """Parameters of `BertForPreTraining(config)` by part, computed from the shapes."""
    d, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    width = config.embedding_size or d
    distinct_layers = 1 if config.share_layers else config.num_hidden_layers
    positions = config.max_position_embeddings if config.position_embedding_type == "absolute" else 0
    tables = (v + positions + config.type_vocab_size) * width
    projection = (width * d + d) if config.embedding_size is not None else 0
    attention_matrices, feed_forward_matrices = 4 * d * d, 2 * d * i
    if config.position_embedding_type == "transformer_xl":
        attention_matrices += d * d  # W_R, no bias
    relative_biases = 2 * d if config.position_embedding_type == "transformer_xl" else 0  # u and v
    return ParameterCounts(
        embeddings=tables + projection,
        attention=distinct_layers * (attention_matrices + 4 * d) + relative_biases,
        feed_forward=distinct_layers * (feed_forward_matrices + i + d),
        layer_norms=2 * width + distinct_layers * 2 * 2 * d,
        pooler=d * d + d,
        heads=(d * width + width) + 2 * width + v + (2 * d + 2),
        matrices=tables + distinct_layers * (attention_matrices + feed_forward_matrices),
    )


def bert_training_flops(config: BertConfig, seq_length: int, predicted_share: float, *,
                             memory_length: int | None = None, query_rows: int | None = None,
                             micro_batch_size: int = 1) -> float:
    """FLOPs of forward + backward per input token, with the sparse MLM head.

    `memory_length`, `query_rows` and `micro_batch_size` are XLNet's (`xlnet_cost`); BERT's
    layout ignores them.

    6·N_enc (weight matrices applied to every token, shared layers counted per use) +
    12·L·s·d (attention scores and weighted sum) + 6·f·(d·w + w·V) (MLM head on the predicted
    share f only; w = embedding_size or d). Pooler and pair head (once per sequence) are left out.
    `transformer_xl` adds 12·L·s·d for the position scores (q + v)·r over the 2s − 1 distances;
    its W_R projects those distances once per batch, not per token, and is left out; `rope`
    adds only elementwise work.
    """
    d, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    width = config.embedding_size or d
    projection = width * d if config.embedding_size is not None else 0
    n_encoder = config.num_hidden_layers * (4 * d * d + 2 * d * i) + projection
    attention = 12 * config.num_hidden_layers * seq_length * d
    if config.position_embedding_type == "transformer_xl":
        attention *= 2
    head = 6 * predicted_share * (d * width + width * v)
    return 6 * n_encoder + attention + head


@dataclass
class MemoryEstimate:
    """Bytes for training with AdamW: fp32 weights, gradients and optimizer state, and activations."""

    weights: int
    gradients: int
    adamw_state: int
    activations_per_sequence: int
    activations_per_sequence_checkpointed: int
    attention_probs_per_sequence: int  # extra when SDPA falls back to its unfused (math) kernel
    # XLNet: the memory states a row keeps from one step to the next (none for BERT's layout)
    memory_states_per_sequence: int = 0


def estimate_bert_memory(
    config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32", *,
    memory_length: int | None = None, query_rows: int | None = None,
) -> MemoryEstimate:
    """Training memory, following Korthikanti et al. 2022 ("Reducing Activation Recomputation").
    `memory_length` and `query_rows` are XLNet's (`xlnet_cost`); BERT's layout ignores them.

    Per token and layer, the tensors kept for backward are p·(9d + 2I) + 2d bytes (p bytes per
    activation element, 1-byte dropout masks): QKV input, Q, K, V, attention output (kept by
    the fused kernel) and its (B, T, C) copy, two LayerNorm inputs, FFN input, activation
    input and output, two dropout masks: the paper's 34·d for BERT-base in 16-bit, plus the
    fused kernel's output. Fused SDPA kernels keep no s×s probabilities; the unfused kernel adds
    (2p + 1)·a·s per token and layer. With checkpointing only each layer's input is kept, plus
    one layer's activations while it is recomputed.
    """
    parameters = count_bert_parameters(config).total
    p = BYTES_PER_ELEMENT[precision]
    d, i, v, s = config.hidden_size, config.intermediate_size, config.vocab_size, seq_length
    width = config.embedding_size or d
    layers = config.num_hidden_layers

    per_layer = s * (p * (9 * d + 2 * i) + 2 * d)
    if config.position_embedding_type == "transformer_xl":
        # The position scores by distance (a, s, 2s - 1), the (a, s, s) bias SDPA keeps, q + v
        # and the projected distances (about another d a token).
        per_layer += p * s * (config.num_attention_heads * (3 * s - 1) + 2 * d)
    embeddings = s * (p * width + width + (p * width if config.embedding_size is not None else 0))
    predicted = predicted_share * s
    # gathered states, transform dense/act/LayerNorm inputs, decoder input, logits, fp32 log-softmax
    head = int(predicted * (p * (d + 3 * width) + (p + 4) * v))
    return MemoryEstimate(
        weights=4 * parameters,
        gradients=4 * parameters,
        adamw_state=8 * parameters,
        activations_per_sequence=embeddings + layers * per_layer + head,
        activations_per_sequence_checkpointed=embeddings + layers * s * p * d + per_layer + head,
        attention_probs_per_sequence=layers * s * (2 * p + 1) * config.num_attention_heads * s,
    )
