"""What an XLNet (`architecture: xlnet`) costs to train and to read with: parameters by part, FLOPs
by stream, memory with the memory states."""
from __future__ import annotations

from dataclasses import dataclass

from bertpre.labels import query_rows
from bertpre.model.bert_cost import (
    BYTES_PER_ELEMENT,
    ForwardShape,
    InferenceMemory,
    MemoryEstimate,
    ParameterCounts,
    logit_bytes,
)
from bertpre.model.config import BertConfig


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


def plm_query_rows(seq_length: int, predicted_share: float) -> int:
    """P, the query stream's rows at length T (`labels.query_rows`; share 1 for the hf plan and
    clm: every row)."""
    return query_rows(seq_length, predicted_share)


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


def xlnet_training_flops_per_token(config: BertConfig, seq_length: int, predicted_share: float, *,
                                   memory_length: int | None = None, query_rows: int | None = None,
                                   micro_batch_size: int = 1) -> float:
    """`xlnet_training_flops(...).total`."""
    return xlnet_training_flops(config, seq_length, predicted_share, memory_length=memory_length,
                                query_rows=query_rows, micro_batch_size=micro_batch_size).total


def estimate_xlnet_memory(config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32",
                          *, memory_length: int | None = None, query_rows: int | None = None,
                          device_type: str = "cuda", micro_batch_size: int | None = None) -> MemoryEstimate:
    """Training memory of an XLNet: fp32 weights, gradients and AdamW state, `xlnet_activations`
    (the same on either device: `device_type` is ModernBERT's; `micro_batch_size` the masked
    LM's chunks', and XLNet's LM head is never chunked)."""
    parameters = count_xlnet_parameters(config).total
    full, checkpointed, kept = xlnet_activations(config, seq_length, predicted_share, precision,
                                                 memory_length=memory_length, query_rows=query_rows)
    return MemoryEstimate(weights=4 * parameters, gradients=4 * parameters, adamw_state=8 * parameters,
                          activations_per_sequence=full, activations_per_sequence_checkpointed=checkpointed,
                          attention_probs_per_sequence=0, memory_states_per_sequence=kept)


def estimate_xlnet_inference_memory(config: BertConfig, shape: ForwardShape, precision: str = "fp32", *,
                                    device_type: str = "cuda") -> InferenceMemory:
    """The peak of an XLNet forward without gradients, for a batch of `shape`: T tokens, M
    memory states and P query rows a row (K = M + T keys, R = M + 2T − 1 distances).

    Each layer's tensors are freed as the next is computed. The peak is one stream's attention
    (`XLNetRelativeAttention.attend`): the scores by distance (a, Q, R), kept to its end, beside
    the content scores (a, Q, K), the gathered position scores and their sum (p bytes each),
    or later the float32 softmax and its copy; beside it the layer's [memory; segment], k, v
    (K·d each), the memory given and the memory being made (float32, M·d a layer), the int64
    distance index and the boolean masks (K a query, two for the content stream while its own
    token is let through). `permutation` adds training's inputs: perm_mask (T, T) and its
    padded copy, the segment masks and target_mapping (P, T, float32); the segment scores come
    after the gathered ones are freed, and add nothing to the peak. The head: P·V logits and their softmax (`bert_cost.logit_bytes`; under autocast, the 16-bit
    copy of the word table).
    """
    p = BYTES_PER_ELEMENT[precision]
    d, i, v, heads, layers = (config.hidden_size, config.intermediate_size, config.vocab_size,
                              config.num_attention_heads, config.num_hidden_layers)
    B, T, P, M = shape.batch_size, shape.seq_length, shape.predicted_rows, shape.memory_length
    K, R = M + T, M + 2 * T - 1

    # The float32 softmax beside its input; under autocast, a float32 copy of its input as well,
    # then its 16-bit copy
    softmax = p + 4 if p == 4 else p + 8

    def attend(rows: int) -> int:
        return heads * rows * max(p * (R + 3 * K), p * R + softmax * K)

    masks = (T * K * (3 if shape.permutation else 2) + 8 * P * K + 2 * P * K
             + (T * T + 4 * P * T if shape.permutation else 0))
    layer = 3 * K * d * p + T * d * p + max(attend(T), attend(P), 2 * T * i * p + T * d * 4)
    memory = 2 * layers * M * d * 4
    head = P * v * logit_bytes(precision) + (v * d * p if p != 4 else 0)  # after the last layer
    per_sequence = masks + memory + 4 * T * d + max(layer, head)
    per_batch = 8 * T * K + R * d * (4 + p)  # the content stream's distance index, the sinusoids, W_R R
    return InferenceMemory(weights=4 * count_xlnet_parameters(config).total,
                           activations=B * per_sequence + per_batch)
