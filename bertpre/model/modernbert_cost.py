"""What a ModernBERT (`architecture: modernbert`) costs to train and to read with: parameters by
part, FLOPs by part with local layers at their window, memory."""
from __future__ import annotations

from dataclasses import dataclass

from bertpre.model.bert_cost import (
    BYTES_PER_ELEMENT,
    ForwardShape,
    InferenceMemory,
    LossChunks,
    MemoryEstimate,
    ParameterCounts,
    chunked_loss_memory,
    head_logit_bytes,
    logit_bytes,
    micro_batch_rows,
)
from bertpre.model.config import BertConfig
from bertpre.model.layer_norm import resolve_low_precision
from bertpre.model.modernbert import flex_runs


def count_modernbert_parameters(config: BertConfig) -> ParameterCounts:
    """Parameters of transformers' `ModernBertForMaskedLM(config)` by part, the tied decoder
    weight counted once (it is the word table).

    `embeddings`: the word table (no position table: positions are rotary); `attention`: each
    layer's Wqkv and Wo; `feed_forward`: each layer's Wi (to 2·I: GeGLU's input and gate) and
    Wo; `layer_norms`: the embeddings' norm, every layer's but the first's attention norm, every
    layer's feed-forward norm and the final norm; `heads`: the head's dense and norm, and the
    decoder's bias. Biases only where `attention_bias`, `mlp_bias`, `norm_bias`,
    `classifier_bias` (the head's dense) and `decoder_bias` ask for them (by default the
    decoder's alone).
    """
    d, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    norm = d * (2 if config.norm_bias else 1)  # weight (and bias)
    attention = 4 * d * d + (4 * d if config.attention_bias else 0)
    feed_forward = 3 * d * i + (2 * i + d if config.mlp_bias else 0)
    return ParameterCounts(
        embeddings=v * d,
        attention=layers * attention,
        feed_forward=layers * feed_forward,
        layer_norms=(2 * layers + 1) * norm,  # 1 + (L - 1) + L + 1 norms
        pooler=0,
        heads=d * d + (d if config.classifier_bias else 0) + norm + (v if config.decoder_bias else 0),
        matrices=v * d + layers * (4 * d * d + 3 * d * i),
    )


def global_layer_count(config: BertConfig) -> int:
    """Layers that attend to every token (`ModernBertFields.layer_is_global`: layers 0, n, 2n …)."""
    return sum(config.layer_is_global(index) for index in range(config.num_hidden_layers))


def window_pairs(seq_length: int, local_attention: int) -> int:
    """The (query, key) pairs a local layer scores in a sequence of `seq_length` tokens: a token
    attends to those at most `local_attention // 2` positions away on either side (transformers'
    window, `local_attention + 1` keys for an even window), fewer at the sequence's edges."""
    half = local_attention // 2
    beyond = max(seq_length - half - 1, 0)  # keys farther than `half` from the first query
    return seq_length * seq_length - beyond * (beyond + 1)  # less both triangles outside the band


@dataclass
class ModernBertFlops:
    """Training FLOPs (forward + backward) per input token of a ModernBERT step, by where they go.

    `attention_projections`: Wqkv and Wo on every token; `global_attention` and
    `local_attention`: the scores q·k and the weighted sum of values, over T keys a query in
    global layers and over the window's keys in local layers; `feed_forward`: GeGLU's Wi (d to
    2·I) and Wo; `head`: the head's dense on the predicted rows; `decoder`: the tied decoder
    (d to V) on the predicted rows. The embeddings are a lookup: no matmul FLOPs.
    """

    attention_projections: float
    global_attention: float
    local_attention: float
    feed_forward: float
    head: float
    decoder: float

    @property
    def total(self) -> float:
        return (self.attention_projections + self.global_attention + self.local_attention
                + self.feed_forward + self.head + self.decoder)

    def parts(self, config: BertConfig, seq_length: int) -> list[tuple[str, float, str]]:
        """(part, FLOPs, what it covers) for each part, as `bertpre info` lists them."""
        global_layers = global_layer_count(config)
        local_layers = config.num_hidden_layers - global_layers
        keys = min(seq_length, 2 * config.sliding_window + 1)

        def layers(count: int) -> str:
            return f"{count} layer" + ("" if count == 1 else "s")

        return [("attention Wqkv, Wo", self.attention_projections, layers(config.num_hidden_layers)),
                ("global attention", self.global_attention, f"{layers(global_layers)}, {seq_length:,} keys a token"),
                ("local attention", self.local_attention,
                 f"{layers(local_layers)}, at most {keys:,} keys a token" if local_layers else "no local layer"),
                ("feed-forward (GeGLU)", self.feed_forward, f"Wi to 2 x {config.intermediate_size}, Wo"),
                ("MLM head dense", self.head, "the predicted rows"),
                ("decoder", self.decoder, f"the predicted rows, {config.vocab_size:,} tokens")]


def modernbert_flops_by_part(config: BertConfig, seq_length: int, predicted_share: float) -> ModernBertFlops:
    """Matmul FLOPs of one ModernBERT training step per input token, by part.

    Every matmul runs forward once and backward twice (the input's and the weight's gradient;
    also the first layer's, since the embeddings train), as BERT's `bert_training_flops`: 6 a
    weight per token, 12·d per (query, key) pair and layer (q·k and the weighted sum, each
    2·d). The head and decoder run on the predicted share alone (a sparse head). Left out, as
    torch's FlopCounterMode leaves them out: elementwise work (rotary, LayerNorm, GeGLU's
    product, softmax, bias adds) and the loss. A dense kernel over a masked window would spend
    global attention's FLOPs on a local layer; this counts the window's.
    """
    d, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    T = seq_length
    global_layers = global_layer_count(config)
    local_layers = layers - global_layers
    return ModernBertFlops(
        attention_projections=6 * layers * 4 * d * d,
        global_attention=12 * d * global_layers * T,
        local_attention=12 * d * local_layers * window_pairs(T, config.local_attention) / T,
        feed_forward=6 * layers * 3 * d * i,
        head=6 * predicted_share * d * d,
        decoder=6 * predicted_share * d * v,
    )


def modernbert_training_flops(config: BertConfig, seq_length: int, predicted_share: float,
                              **options: int | None) -> float:
    """`modernbert_flops_by_part(...).total`; the options (`memory_length`, `query_rows`,
    `micro_batch_size`) are XLNet's and ignored."""
    return modernbert_flops_by_part(config, seq_length, predicted_share).total


def flex_attention_on(config: BertConfig, seq_length: int, device_type: str, training: bool = True) -> bool:
    """Whether local layers run FlexAttention's block mask at `seq_length` on a device of
    `device_type` (`ModernBertModel.uses_flex`'s rule, `flex_runs`): on a GPU at long rows; never
    on a CPU, where SDPA reads the dense T×T window."""
    return flex_runs(config, device_type, seq_length, training)


def modernbert_activations(config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32",
                           *, flex_attention: bool = False, dropout_mask_bytes: int = 1,
                           norm_statistics_bytes: int = 4, loss_chunks: LossChunks | None = None) -> tuple[int, int]:
    """Bytes a ModernBERT training step keeps for backward per sequence: (without, with gradient
    checkpointing). `precision` is the activations' (p bytes an element; the residual stream
    and LayerNorm statistics stay float32 under autocast). Matches the tensors autograd keeps,
    within 0.2%, on bertpre's step and on transformers' (tests/model/test_modernbert_cost.py).

    Per token and layer: p·(8d + 4I) (Wqkv's input, q, k and v, the rotated q and k that SDPA
    keeps, its output, which is Wo's input; Wi's input, its 2·I output, the activation's output
    and GeGLU's product), r·2d (the two LayerNorms' inputs, the residual stream: float32, r = 4,
    or p under autocast with `model.low_precision_layernorm`), 2·2·s
    (their mean and rstd, float32 on CUDA; `norm_statistics_bytes`: CPU keeps a 16-bit input's
    dtype) and 4·a (the fused kernel's log-sum-exp); the first layer has no
    attention norm. Per token once: the ids (int64), the embeddings' and the final LayerNorm's
    inputs and statistics, the predicted-row mask (a byte). Per predicted row (P = share·T): the
    head's dense, activation, LayerNorm and decoder inputs (4·p·d), the LayerNorm's statistics,
    the row's index (int64), the logits and their float32 log-softmax ((p + 4)·V); with
    `loss_chunks` (`bert_cost.chunked_loss_memory`: the loss in chunks) no logits, and the rows'
    (N, E) gradient where the decoder's input was (the same p·d a row).

    Masks, counted for a batch with padding: SDPA is handed additive masks in the query's dtype,
    made once a forward and kept once for every layer (`AttentionMasks.sdpa_mask`), the global
    layers' T·p a row (the padding), the local layers' T²·p (the window); with `flex_attention`
    (on a GPU, `flex_attention_on`) local layers keep a block mask instead, a few bytes. With dropout, a mask of `dropout_mask_bytes` an element (1 on
    CUDA; CPU keeps the input's dtype) for the embeddings (d), the attention output (d, with
    attention_dropout) and the GeGLU product (I). Fused SDPA keeps no T×T probabilities
    (`estimate_modernbert_memory` says what the unfused kernel adds). With checkpointing, each
    layer keeps only its input (float32) and one layer is recomputed at a time.
    """
    p = BYTES_PER_ELEMENT[precision]
    # the residual stream's bytes: float32, or p with model.low_precision_layernorm on under autocast
    r = p if p != 4 and resolve_low_precision(config.low_precision_layernorm, precision) else 4
    d, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    T = seq_length
    global_layers = global_layer_count(config)
    local_layers = layers - global_layers
    predicted = predicted_share * T
    dropout = dropout_mask_bytes
    layer_dropout = (d if config.attention_dropout > 0 else 0) + (i if config.mlp_dropout > 0 else 0)
    stats = 2 * norm_statistics_bytes  # a LayerNorm's mean and rstd, a token
    per_token_layer = p * (8 * d + 4 * i) + r * 2 * d + 2 * stats + 4 * config.num_attention_heads \
        + dropout * layer_dropout
    first_layer_less = r * d + stats  # no attention norm before the first layer
    once = T * (8 + 2 * (r * d + stats) + 1 + (dropout * d if config.embedding_dropout > 0 else 0))
    global_mask, local_mask = T * p, (0 if flex_attention else T * T * p)
    masks = (global_mask if global_layers else 0) + (local_mask if local_layers else 0)
    head = int(predicted * (4 * p * d + stats + 8 + head_logit_bytes(precision, loss_chunks) * v))
    full = layers * T * per_token_layer - T * first_layer_less + once + masks + head
    # checkpointing keeps each layer's input; the masks live on in the forward's AttentionMasks
    checkpointed = layers * T * r * d + T * per_token_layer + masks + once + head
    return full, checkpointed


def estimate_modernbert_memory(config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32",
                               *, device_type: str = "cuda", micro_batch_size: int | None = None,
                               **options: int | None) -> MemoryEstimate:
    """Training memory of a ModernBERT on a device of `device_type`: fp32 weights, gradients and
    AdamW's two moments, and `modernbert_activations` (FlexAttention for local layers where a GPU
    runs it; on a CPU SDPA's dense window). The options are XLNet's and ignored. With
    `micro_batch_size`, the masked LM's loss as a step of that many rows runs it: in chunks
    where `model.loss_chunk_rows` says so (`loss_chunks`, `bert_cost.chunked_loss_memory`).

    Without FlexAttention the forward also holds the boolean window mask (T² a row with padding)
    until it ends (`forward_masks_per_sequence`), and builds it from two int64 T×T distance
    tensors a batch (`mask_building`, 16·T²: the boolean masks made after the first is freed,
    10·T² + 2·B·T², stay below it or below the forward's end), so the estimate grows with the batch
    and as T² where the window is dense. Within 2% of a CPU step's measured peak at batch 4 and
    above; the building's figure is the peak at batch 1 and 2.

    `attention_probs_per_sequence`: what SDPA's unfused (math) kernel keeps beside, every layer's
    T×T probabilities (a local layer's too: the kernel masks a dense matrix), and with
    attention_dropout their dropped copy and its mask.
    """
    parameters = count_modernbert_parameters(config).total
    flex = flex_attention_on(config, seq_length, device_type)
    chunks = None if micro_batch_size is None else chunked_loss_memory(
        config, micro_batch_rows(seq_length, predicted_share, micro_batch_size), config.hidden_size, precision,
        decoder_bias=config.decoder_bias, device_type=device_type)
    full, checkpointed = modernbert_activations(config, seq_length, predicted_share, precision, flex_attention=flex,
                                                loss_chunks=chunks)
    p = BYTES_PER_ELEMENT[precision]
    probability = p + (p + 1 if config.attention_dropout > 0 else 0)
    square = 0 if flex else seq_length * seq_length
    return MemoryEstimate(
        weights=4 * parameters, gradients=4 * parameters, adamw_state=8 * parameters,
        activations_per_sequence=full, activations_per_sequence_checkpointed=checkpointed,
        attention_probs_per_sequence=(config.num_hidden_layers * config.num_attention_heads
                                      * seq_length * seq_length * probability),
        forward_masks_per_sequence=square, mask_building=16 * square, loss_chunks=chunks,
    )


def estimate_modernbert_inference_memory(config: BertConfig, shape: ForwardShape, precision: str = "fp32", *,
                                         device_type: str = "cuda",
                                         flex_attention: bool | None = None) -> InferenceMemory:
    """The peak of a ModernBERT forward without gradients (`torch.no_grad`, eval mode), for a
    batch of `shape` (`memory_length` and `permutation` are XLNet's), with padding.

    Each layer's tensors are freed as the next is computed, so the peak is the residual stream
    (float32) plus the largest working set of one step: the attention's while the key is
    rotated (its LayerNorm's float32 output, Wqkv's 3·T·d output, the rotated query, and the
    key's rotation in float32: its rotated half, the two products and their sum; under autocast
    the key's float32 copy too), or while SDPA runs (q, k, v, its output, and its additive copy
    of the mask), or the feed-forward's (its LayerNorm's output, Wi's 2·I output, the
    activation's output and GeGLU's product), or the head's (as BERT's:
    `bert_cost.estimate_bert_inference_memory`). Fused SDPA keeps no T×T scores, but its mask
    is T×T for local layers: boolean, T² bytes a row, built before the first layer from two
    int64 T×T distance tensors a batch, and made additive (T²·p) by each local layer's SDPA.
    `flex_attention` (default: `flex_attention_on`, what a device of `device_type` runs: a GPU
    at long rows, never a CPU) puts local layers on a block mask instead, and none of these T×T
    tensors exists. Per batch: the rotary angles of
    both thetas.
    """
    p = BYTES_PER_ELEMENT[precision]
    d, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    head_size = d // config.num_attention_heads
    B, T, P = shape.batch_size, shape.seq_length, shape.predicted_rows
    flex = flex_attention_on(config, shape.seq_length, device_type, training=False) if flex_attention is None \
        else flex_attention
    local = global_layer_count(config) < config.num_hidden_layers and not flex
    residual = 4 * T * d
    normed = 4 * T * d  # LayerNorm's output: float32, also under autocast
    float_copy = 4 * T * d if p != 4 else 0
    rotation = normed + 3 * T * d * p + T * d * p + 4 * T * d * 4 + float_copy
    sdpa = normed + 3 * T * d * p + 3 * T * d * p + (T * T * p if local else T * p)
    # the layer's input, which its caller holds, beside the residual stream it has become
    feed_forward = residual + normed + 4 * T * i * p
    head = P * 4 * d * 4 + P * v * logit_bytes(precision) + (v * d * p if p != 4 else 0)
    # ModernBertModel builds the window's boolean mask whenever it does not run FlexAttention,
    # whether or not a layer is local
    window_mask = 0 if flex else T * T
    padding = 9 * T  # the attention mask as given (int64) and as booleans
    per_sequence = residual + window_mask + padding + max(rotation, sdpa, feed_forward, head)
    angles = 2 * 2 * T * head_size * 4 + 8 * T  # cos and sin, (T, hs) float32, for each theta; positions
    # building the window: |i - j| (int64, and its operand), then the boolean masks
    building = 0 if flex else max(16 * T * T, 10 * T * T + 2 * B * T * T)
    return InferenceMemory(weights=4 * count_modernbert_parameters(config).total,
                           activations=max(B * per_sequence, B * residual + building) + angles)


def modernbert_shape_details(config: BertConfig) -> str:
    """`bertpre info`'s shape line past the sizes, for a ModernBERT: its positions and attention pattern."""
    period = config.global_attn_every_n_layers
    pattern = ("global attention in every layer" if period == 1 else
               f"global attention every {period} layers and a window of {config.local_attention} "
               f"({config.sliding_window} each way) elsewhere")
    return (f", rotary positions (theta {config.global_rope_theta:g} global, {config.local_rope_theta:g} local), "
            f"{pattern}")
