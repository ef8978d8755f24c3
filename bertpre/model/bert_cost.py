"""What a BERT-layout model costs to train and to read with: parameters by part, FLOPs per token,
memory (the shared `ParameterCounts`, `MemoryEstimate`, `ForwardShape` and `InferenceMemory` are
laid out here)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from bertpre.model.chunked_loss import chunk_rows
from bertpre.model.common import ForwardShape  # noqa: F401 - the cost modules' name too
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


@dataclass(frozen=True)
class LossChunks:
    """A training step's masked-LM loss run in chunks (`model.loss_chunk_rows`,
    `chunked_loss.ChunkedCrossEntropy`): `count` chunks of `rows` predicted rows a micro-batch, and
    the `bytes` that holds once a micro-batch, whatever its rows (`chunked_loss_memory`)."""

    rows: int
    count: int
    bytes: int


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
    # Dense T×T masks a forward builds and holds beside what autograd keeps (ModernBERT's window
    # where SDPA reads it; none for BERT's layout): alive until the forward ends, a row's share,
    # and the most that building them holds at once, a batch's
    forward_masks_per_sequence: int = 0
    mask_building: int = 0
    # The masked LM's loss in chunks at the micro-batch estimated (`estimate_memory`'s
    # `micro_batch_size`), its bytes beside the rows' activations; None: its whole logits, counted
    # in `activations_per_sequence`
    loss_chunks: LossChunks | None = None

    @property
    def loss_chunk_bytes(self) -> int:
        """What the chunked loss holds once a micro-batch (0 without chunks)."""
        return 0 if self.loss_chunks is None else self.loss_chunks.bytes

    def activation_peak(self, batch_size: int) -> int:
        """The activations of a training forward of `batch_size` rows at their most, without
        gradient checkpointing: at the forward's end (where the chunked loss runs), or while its
        masks are built."""
        end = batch_size * (self.activations_per_sequence + self.forward_masks_per_sequence)
        return max(end + self.loss_chunk_bytes, self.mask_building)

    def checkpointed_activation_peak(self, batch_size: int) -> int:
        """`activation_peak` with gradient checkpointing: the masks are made once a forward, before
        the first layer, and are not recomputed, so they weigh the same as without it."""
        end = batch_size * (self.activations_per_sequence_checkpointed + self.forward_masks_per_sequence)
        return max(end + self.loss_chunk_bytes, self.mask_building)


def chunked_loss_memory(config: BertConfig, predicted_rows: int, width: int, precision: str, *,
                        decoder_bias: bool = True, device_type: str = "cuda") -> LossChunks | None:
    """How a training step of `predicted_rows` predicted rows (a micro-batch's) runs its masked-LM
    loss under `model.loss_chunk_rows` (`chunked_loss.chunk_rows`), or None where it is unchunked.

    `bytes`: the float32 (V, E) and (V,) gradients the loss keeps to the backward (E = `width`,
    the decoder's input), plus one chunk's (c, V) tensors at their most: its logits (p bytes an
    element) and their float32 log-probabilities (turned in place into the gradient), and under
    autocast the most of: the logits' float32 copy the log-softmax reads; later the gradient's
    p-byte cast and its p-byte (V, E) product with the features, summed into the float32 one;
    then the bias's float32 sum of the cast. A CPU (`device_type`) copies a 16-bit input to
    float32 before such a mixed sum (the product, and the cast for the bias), a GPU's kernels
    read it as it is. The rows' own (N, E) gradient, kept to the backward where the unchunked
    head keeps the decoder's input, is the rows' (`activations_per_sequence`). Left out, as the
    unchunked head's: the decoder weight's autocast copy and a few (N,) and (V,) vectors.
    Within 1.5% of the forward's peak on a CPU (tests/model/test_chunked_loss.py).
    """
    v = config.vocab_size
    rows = chunk_rows(config.loss_chunk_rows, predicted_rows, v)
    if not rows:
        return None
    p = BYTES_PER_ELEMENT[precision]
    kept = 4 * v * width + (4 * v if decoder_bias else 0)
    chunk = rows * v * (p + 4)
    if p != 4:  # fp32: the log-softmax reads the logits, and the gradient is the log-probabilities' tensor
        cpu = device_type == "cpu"
        beside = [4 * rows * v, p * rows * v + (p + (4 if cpu else 0)) * v * width]
        if decoder_bias and cpu:
            beside.append((p + 4) * rows * v)
        chunk += max(beside)
    return LossChunks(rows=rows, count=-(-predicted_rows // rows), bytes=kept + chunk)


def micro_batch_rows(seq_length: int, predicted_share: float, micro_batch_size: int) -> int:
    """The predicted rows of a micro-batch of `micro_batch_size` rows: what the chunks divide."""
    return round(predicted_share * seq_length * micro_batch_size)


def head_logit_bytes(precision: str, chunks: LossChunks | None) -> int:
    """Bytes a predicted row's logits keep to the backward: the logits and their float32
    log-softmax ((p + 4)·V a row: times V), or none where the loss runs in `chunks`."""
    return 0 if chunks is not None else BYTES_PER_ELEMENT[precision] + 4


def estimate_bert_memory(
    config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32", *,
    memory_length: int | None = None, query_rows: int | None = None, device_type: str = "cuda",
    micro_batch_size: int | None = None,
) -> MemoryEstimate:
    """Training memory, following Korthikanti et al. 2022 ("Reducing Activation Recomputation").
    `memory_length` and `query_rows` are XLNet's (`xlnet_cost`), `device_type` ModernBERT's
    (whether FlexAttention runs); BERT's layout ignores them (fused SDPA on either device).
    With `micro_batch_size`, a step of that many rows: where `model.loss_chunk_rows` chunks its
    predicted rows (`chunked_loss_memory`), no row keeps logits and `loss_chunks` holds what
    the loss holds once; without, every predicted row's logits are counted (the whole product).

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
    chunks = None if micro_batch_size is None else chunked_loss_memory(
        config, micro_batch_rows(s, predicted_share, micro_batch_size), width, precision, device_type=device_type)
    # gathered states, transform dense/act/LayerNorm inputs, decoder input (chunked: the rows'
    # gradient in its place), logits and fp32 log-softmax (none in chunks)
    head = int(predicted * (p * (d + 3 * width) + head_logit_bytes(precision, chunks) * v))
    return MemoryEstimate(
        weights=4 * parameters,
        gradients=4 * parameters,
        adamw_state=8 * parameters,
        activations_per_sequence=embeddings + layers * per_layer + head,
        activations_per_sequence_checkpointed=embeddings + layers * s * p * d + per_layer + head,
        attention_probs_per_sequence=layers * s * (2 * p + 1) * config.num_attention_heads * s,
        loss_chunks=chunks,
    )


@dataclass
class InferenceMemory:
    """Bytes at the peak of a forward pass without gradients: the fp32 weights and the
    activations alive at once (without gradients autocast keeps no copies of the weights)."""

    weights: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.activations


def with_fewer_weights(estimate: MemoryEstimate, fewer: int) -> MemoryEstimate:
    """BERT's training memory for a family with `fewer` parameters than BERT's count (RoBERTa's,
    ELECTRA's): fp32 weights and gradients, AdamW's two moments; activations unchanged."""
    return replace(estimate, weights=estimate.weights - 4 * fewer, gradients=estimate.gradients - 4 * fewer,
                   adamw_state=estimate.adamw_state - 8 * fewer)


def logit_bytes(precision: str) -> int:
    """Bytes a logit takes at the head's peak: itself, its float32 copy (under autocast) and the
    float32 (log-)softmax read from it."""
    p = BYTES_PER_ELEMENT[precision]
    return p + 4 + (4 if p != 4 else 0)


def estimate_bert_inference_memory(config: BertConfig, shape: ForwardShape, precision: str = "fp32", *,
                                   device_type: str = "cuda") -> InferenceMemory:
    """The peak of a BERT forward without gradients (`torch.no_grad`, eval mode), for a batch
    of `shape` (`memory_length` and `permutation` are XLNet's; `device_type` ModernBERT's).

    Without autograd each layer's tensors are freed as the next is computed, so the peak is
    the residual stream (float32: LayerNorm's output, also under autocast) plus the largest
    working set of one layer: q, k, v, the context and its copies (6 T·d·p, p bytes a matmul
    output), or the feed-forward's two T·I tensors. Fused SDPA keeps no T×T scores (CPU's flash
    kernel, CUDA's efficient kernel); `rope` rotates q, then k, through two T·d more;
    `transformer_xl` builds its bias by hand: the scores by
    distance (a, T, 2T − 1), the gathered (a, T, T), their sum and its scaled copy, and an
    int64 (T, T) index a batch. The head: the P predicted rows' states, the logits, and their
    float32 copy and (log-)softmax (under autocast, the decoder's 16-bit copy of the word table).
    """
    p = BYTES_PER_ELEMENT[precision]
    d, i, v, heads = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_attention_heads
    width = config.embedding_size or d
    B, T, P = shape.batch_size, shape.seq_length, shape.predicted_rows
    residual = 4 * T * max(d, width)
    cast = T * d * p if p != 4 else 0  # under autocast, a matmul's 16-bit copy of its float32 input
    attention = 6 * T * d * p + cast
    per_batch = 0
    if config.position_embedding_type == "rope":
        attention += 2 * T * d * p  # rotating q (then k): its rotated half, two products and their sum
        per_batch = 4 * T * (d // heads) * 4  # the angles (twice, half and whole), their cos and sin
    if config.position_embedding_type == "transformer_xl":
        attention += heads * T * (5 * T - 1) * p
        per_batch = 8 * T * T + (2 * T - 1) * d * (4 + p)  # the gather index, the sinusoids and W_R's output
    feed_forward = 2 * T * i * p + 2 * T * d * 4 + cast
    embeddings = 3 * T * width * 4
    head = P * (d + 3 * width) * 4 + P * v * logit_bytes(precision) + (v * width * p if p != 4 else 0)
    per_sequence = residual + max(embeddings, attention, feed_forward, head)  # one after the other
    return InferenceMemory(weights=4 * count_bert_parameters(config).total,
                           activations=B * per_sequence + per_batch)


def position_limit(config: BertConfig) -> str:
    """The tokens a table of absolute positions reads: its rows, less RoBERTa's rows up to the
    padding's id ("512 tokens, 514 rows")."""
    if config.max_tokens == config.max_position_embeddings:
        return f"{config.max_tokens}"
    return f"{config.max_tokens} tokens, {config.max_position_embeddings} rows"


def bert_shape_details(config: BertConfig) -> str:
    """`bertpre info`'s shape line past the sizes, for a BERT-layout model: ALBERT's options and
    the positions."""
    details = ""
    if config.embedding_size is not None:
        details += f", embedding_size {config.embedding_size}"
    if config.share_layers:
        details += ", one layer shared by all"
    return details + {"absolute": f", absolute positions (at most {position_limit(config)})",
                      "rope": f", rotary positions (theta {config.rope_theta:g}), any length",
                      "transformer_xl": ", Transformer-XL relative positions, any length"}[config.position_embedding_type]


def bert_base_note(config: BertConfig) -> str | None:
    """The line that ties BERT-base's count to the paper's (none for another shape)."""
    if (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (768, 12, 3072) \
            and not config.is_albert and not config.relative_positions:
        return "  (BERT-base: the encoder is the paper's 110M; the matrices, the 108.8M also quoted)"
    return None
