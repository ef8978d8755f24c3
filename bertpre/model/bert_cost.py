"""What a model config costs to train: parameters by part, FLOPs per token, memory."""
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


def count_parameters(config: BertConfig) -> ParameterCounts:
    """Parameters of `BertForPreTraining(config)` (or, for `architecture: xlnet`,
    `XLNetLMHeadModel(config.xlnet_config())`) by part, computed from the shapes."""
    if config.is_xlnet:
        return count_xlnet_parameters(config)
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


def count_xlnet_parameters(config: BertConfig) -> ParameterCounts:
    """XLNet's parts: `embeddings` the word table and `mask_emb` (the query stream's start);
    `attention` per layer q, k, v, o, r (no biases), r_w/r_r/r_s biases and seg_embed;
    `feed_forward` layer_1 and layer_2; `heads` the LM head's bias (its weight is the word table).
    No pooler: XLNet's summary layer belongs to the fine-tuning heads."""
    d, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    return ParameterCounts(
        embeddings=v * d + d,
        attention=layers * (5 * d * d + 3 * d + 2 * d),
        feed_forward=layers * (2 * d * i + i + d),
        layer_norms=layers * 2 * 2 * d,
        pooler=0,
        heads=v,
        matrices=v * d + layers * (5 * d * d + 2 * d * i),
    )


def training_flops_per_token(config: BertConfig, seq_length: int, predicted_share: float, *,
                             memory_length: int | None = None, query_rows: int | None = None,
                             micro_batch_size: int = 1) -> float:
    """FLOPs of forward + backward per input token, with the sparse MLM head.

    For `architecture: xlnet` this is `xlnet_training_flops(...).total` (see there for
    `memory_length`, `query_rows` and `micro_batch_size`, which BERT's layout ignores).

    6·N_enc (weight matrices applied to every token, shared layers counted per use) +
    12·L·s·d (attention scores and weighted sum) + 6·f·(d·w + w·V) (MLM head on the predicted
    share f only; w = embedding_size or d). Pooler and pair head (once per sequence) are left out.
    `transformer_xl` adds 12·L·s·d for the position scores (q + v)·r over the 2s − 1 distances;
    its W_R projects those distances once per batch, not per token, and is left out; `rope`
    adds only elementwise work.
    """
    if config.is_xlnet:
        return xlnet_training_flops(config, seq_length, predicted_share, memory_length=memory_length,
                                    query_rows=query_rows, micro_batch_size=micro_batch_size).total
    d, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    width = config.embedding_size or d
    projection = width * d if config.embedding_size is not None else 0
    n_encoder = config.num_hidden_layers * (4 * d * d + 2 * d * i) + projection
    attention = 12 * config.num_hidden_layers * seq_length * d
    if config.position_embedding_type == "transformer_xl":
        attention *= 2
    head = 6 * predicted_share * (d * width + width * v)
    return 6 * n_encoder + attention + head


def plm_query_rows(seq_length: int, predicted_share: float) -> int:
    """P, the query stream's rows at length T: `PermutationCollator.slots`' rounding of T·share
    (share 1 for the hf plan and clm: every row)."""
    return max(1, int(seq_length * predicted_share + 0.5))


@dataclass
class XLNetFlops:
    """Training FLOPs (forward + backward) per input token of an XLNet step, by where they go.

    `content_stream`: the T tokens' q, k, v, o and feed-forward, and their attention over the
    segment's T keys; `query_stream`: the P target rows' q, o and feed-forward and their
    attention over the same T keys; `memory`: k and v of the M memory states and both
    streams' attention over them; `relative_positions`: W_R (`r`) over the M + 2T − 1
    distance sinusoids, once per micro-batch; `head`: the tied LM head over the P rows.
    """

    content_stream: float
    query_stream: float
    memory: float
    relative_positions: float
    head: float

    @property
    def total(self) -> float:
        return self.content_stream + self.query_stream + self.memory + self.relative_positions + self.head


def xlnet_training_flops(config: BertConfig, seq_length: int, predicted_share: float, *,
                         memory_length: int | None = None, query_rows: int | None = None,
                         micro_batch_size: int = 1) -> XLNetFlops:
    """Matmul FLOPs of one XLNet training step (`XLNetLMHeadModel` with `target_mapping`), per
    input token, by part.

    Args:
        seq_length: T, the segment's tokens. predicted_share: the data config's share of rows
            predicted, giving P = `plm_query_rows(T, share)` unless `query_rows` is given.
        memory_length: M, memory states per layer (None: the config's `mem_len`, what every
            step after a document's first segments sees; 0: no memory).
        micro_batch_size: the rows that share one W_R projection of the distances.

    Per layer and sequence, with K = M + T keys and R = M + 2T − 1 distances, forward is
    2d²·(2K + 2T + 2P) for q, k, v, o; 2d·(T + P)·(2K + R + 2) for scores q·k, position scores
    q·W_R R (before the gather picks K of the R), segment scores and the weighted sum of
    values (segment scores: with token_type_ids, as the PLM step passes them); 4d·I·(T + P)
    for the feed-forward; 2d²·R / micro_batch_size for W_R; the head 2d·V·P. Backward is twice
    forward (input and weight gradients), except W_R's, whose input (the sinusoids) needs no
    gradient: once; and the last layer's content stream, whose output the loss never reads:
    none (so "3 × forward" overstates a 2-layer step by 15-30%). Left out, as FlopCounterMode
    leaves them out: the elementwise work (softmax, gather, LayerNorm, GELU, bias adds,
    dropout), the embedding lookup and its gradient, and the loss.
    """
    d, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    T = seq_length
    M = config.mem_len if memory_length is None else memory_length
    P = plm_query_rows(T, predicted_share) if query_rows is None else query_rows
    R = M + 2 * T - 1
    # Forward + backward passes summed over the layers. The loss reads only the query stream,
    # so the last layer's content stream (its q, attention, o and feed-forward) runs forward
    # only; its k and v feed the query stream and train.
    content_passes, passes = 3 * layers - 2, 3 * layers

    def stream(rows: int) -> float:
        """q, o, feed-forward and attention over the segment's T keys (2T − 1 distances) of `rows` queries."""
        return 4 * d * d * rows + 4 * d * i * rows + 2 * d * rows * (2 * T + (2 * T - 1) + 2)

    return XLNetFlops(
        content_stream=(content_passes * stream(T) + passes * 4 * d * d * T) / T,  # + k, v of T keys
        query_stream=passes * stream(P) / T,
        # k and v of the M states; q·k, values and positions over them, for both streams
        memory=(passes * 4 * d * d * M + (content_passes * T + passes * P) * 2 * d * 3 * M) / T,
        relative_positions=2 * layers * 2 * d * d * R / micro_batch_size / T,
        head=3 * 2 * d * v * P / T,
    )


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


def estimate_memory(
    config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32", *,
    memory_length: int | None = None, query_rows: int | None = None,
) -> MemoryEstimate:
    """Training memory, following Korthikanti et al. 2022 ("Reducing Activation Recomputation").
    For `architecture: xlnet`, see `xlnet_activations` (`memory_length` and `query_rows` as in
    `xlnet_training_flops`; BERT's layout ignores them).

    Per token and layer, the tensors kept for backward are p·(9d + 2I) + 2d bytes (p bytes per
    activation element, 1-byte dropout masks): QKV input, Q, K, V, attention output (kept by
    the fused kernel) and its (B, T, C) copy, two LayerNorm inputs, FFN input, activation
    input and output, two dropout masks: the paper's 34·d for BERT-base in 16-bit, plus the
    fused kernel's output. Fused SDPA kernels keep no s×s probabilities; the unfused kernel adds
    (2p + 1)·a·s per token and layer. With checkpointing only each layer's input is kept, plus
    one layer's activations while it is recomputed.
    """
    parameters = count_parameters(config).total
    if config.is_xlnet:
        full, checkpointed, kept = xlnet_activations(config, seq_length, predicted_share, precision,
                                                     memory_length=memory_length, query_rows=query_rows)
        return MemoryEstimate(weights=4 * parameters, gradients=4 * parameters, adamw_state=8 * parameters,
                              activations_per_sequence=full, activations_per_sequence_checkpointed=checkpointed,
                              attention_probs_per_sequence=0, memory_states_per_sequence=kept)
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


def xlnet_activations(config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32",
                      *, memory_length: int | None = None, query_rows: int | None = None,
                      dropout_mask_bytes: int = 1) -> tuple[int, int, int]:
    """Bytes an XLNet training step keeps per sequence: (activations for backward, the same with
    gradient checkpointing, memory states kept across steps). Matches, within 0.1%, the tensors
    autograd keeps (tests/model/test_xlnet_cost.py), in float32 and under CPU bf16 autocast.

    Each stream of Q rows (T content, P query) keeps per layer, at p bytes an element: Q·d·p·6
    (its input, q + u, q + v, q + s, the attention output, the feed-forward input), Q·d·4·2 (two
    LayerNorm inputs: the residual stream stays float32 under autocast), Q·I·p·2 (activation
    input and output), its own copies of k and v laid out for its matmuls (2·K·d·p), the
    position scores before the gather picks K of the R distances (a·Q·R·p: gather keeps its
    input), and the attention probabilities (a·Q·K: the float32 softmax; its 16-bit copy or the
    dropout output, which the query stream copies again to zero rows that see nothing; the
    dropout mask). Each layer keeps [memory; segment] (K·d·p, twice under autocast: k and v each
    cast it) for k and v. The last layer's content stream feeds nothing the loss reads: its
    tensors are freed during the forward. Per sequence: boolean masks and the query stream's
    int64 gather index (2·T·K + 10·P·K bytes), and the head's input, logits and float32
    log-softmax (P·(p·d + (p + 4)·V)). With dropout, masks of Q·(2d + I) a stream and layer and
    (T + P)·d for the embeddings, `dropout_mask_bytes` an element (1 on CUDA; CPU keeps them
    in the input's dtype). Per micro-batch, not counted: the sinusoids, W_R's output and
    contiguous copies of weights. With checkpointing, each layer keeps only its inputs
    (T + P)·d·p, and one layer is recomputed at a time.

    Memory states: M·d per layer, float32 (the residual stream's dtype); they persist between
    steps, also with checkpointing.
    """
    p = BYTES_PER_ELEMENT[precision]
    d, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    heads, dropout = config.num_attention_heads, config.hidden_dropout_prob > 0
    T = seq_length
    M = config.mem_len if memory_length is None else memory_length
    P = plm_query_rows(T, predicted_share) if query_rows is None else query_rows
    K, R = M + T, M + 2 * T - 1
    mask = dropout_mask_bytes if dropout else 0  # CUDA keeps bool masks; CPU's dropout a float one
    # Probabilities: the float32 softmax; the values' matmul input (the 16-bit copy or the
    # dropout output; for the query stream always a copy, rows that see nothing zeroed); the mask.
    content_probability = 4 + (p if dropout or p != 4 else 0) + mask
    query_probability = 4 + p + mask

    # Under autocast the residual stream stays float32 (LayerNorm runs in float32), so the
    # LayerNorm inputs are float32, and each matmul keeps its own 16-bit copy of its input.
    autocast = p != 4

    def stream(rows: int, probability: int) -> int:
        return (p * rows * (6 * d + 2 * i) + 4 * rows * 2 * d + 2 * K * d * p
                + heads * rows * (R * p + K * probability) + 16 * rows + mask * rows * (2 * d + i))

    keys = (2 if autocast else 1) * p * K * d  # [memory; segment] for k and v
    # Without memory, k and v read the content stream's input itself (unless autocast copies it).
    shared = p * T * d if M == 0 and not autocast else 0
    per_layer = keys + stream(T, content_probability) - shared + stream(P, query_probability)
    last_layer = keys + stream(P, query_probability)
    per_sequence = 2 * T * K + 10 * P * K + P + 8 * T + mask * (T + P) * d
    head = P * (p * d + mask * d + (p + 4) * v)
    # Without dropout the first layer's query input is mask_emb itself, a parameter.
    first_query = 0 if dropout or autocast else p * P * d
    full = (layers - 1) * per_layer + last_layer + per_sequence + head - first_query
    checkpointed = layers * p * (T + P) * d + per_layer + per_sequence + head
    return full, checkpointed, layers * M * d * 4


def readable(size: float) -> str:
    """Bytes as KiB (below a MiB), MiB, GiB, TiB or PiB; beyond, in PiB with an exponent."""
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30)):
        if size >= scale:
            amount = size / scale
            return f"{amount:.3g} {unit}" if amount >= 1e6 else f"{amount:,.2f} {unit}"
    if size < 2**20:
        return f"{size / 2**10:.1f} KiB"
    return f"{size / 2**20:.1f} MiB"


def training_memory_floor(config: BertConfig, seq_length: int, predicted_share: float,
                          micro_batch_size: int, *, memory_length: int | None = None,
                          query_rows: int | None = None, memory_rows: int | None = None) -> tuple[int, int]:
    """(model bytes, activation bytes) that training needs at the least: fp32 weights, gradients
    and AdamW's two moments; one micro-batch's activations with gradient checkpointing in 16-bit,
    and for XLNet the memory states of `memory_rows` sequences (every row of the device's share
    of a step keeps its own: micro_batch_size × accumulation steps; default micro_batch_size)."""
    memory = estimate_memory(config, seq_length, predicted_share, "bf16", memory_length=memory_length,
                             query_rows=query_rows)
    model = memory.weights + memory.gradients + memory.adamw_state
    rows = micro_batch_size if memory_rows is None else memory_rows
    return model, (micro_batch_size * memory.activations_per_sequence_checkpointed
                   + rows * memory.memory_states_per_sequence)


def memory_shortfall(config: BertConfig, seq_length: int, predicted_share: float,
                     micro_batch_size: int, available: int, where: str, *, memory_length: int | None = None,
                     query_rows: int | None = None, memory_rows: int | None = None) -> str | None:
    """Why a run cannot fit in `available` bytes even at its leanest (`training_memory_floor`),
    or None when it may; `where` names the memory ('the GPU has')."""
    model, activations = training_memory_floor(config, seq_length, predicted_share, micro_batch_size,
                                               memory_length=memory_length, query_rows=query_rows,
                                               memory_rows=memory_rows)
    if model > available:
        return (f"the model has {count_parameters(config).total:,} parameters, whose weights, gradients "
                f"and AdamW state alone need {readable(model)}, but {where} {readable(available)}; make "
                "model.hidden_size, num_hidden_layers, intermediate_size or vocab_size smaller")
    if model + activations > available:
        memory = " and XLNet's memory states" if config.is_xlnet and config.mem_len else ""
        return (f"a micro-batch of {micro_batch_size:,} sequences of {seq_length:,} tokens needs at least "
                f"{readable(activations)} of activations (16-bit, gradient checkpointing){memory} beside the "
                f"model's {readable(model)}, but {where} {readable(available)}; make "
                "train.micro_batch_size or data.max_seq_length" + (", model.mem_len" if memory else "")
                + " smaller")
    return None
