"""The report behind `bertpre info`: a config's parameters, training FLOPs and memory, for people."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch

from bertpre.config import Config
from bertpre.model import BertConfig
from bertpre.model.cost import (
    ForwardShape,
    InferenceMemory,
    MemoryEstimate,
    ModernBertFlops,
    ParameterCounts,
    XLNetFlops,
    count_parameters,
    estimate_inference_memory,
    estimate_memory,
    plm_query_rows,
    readable,
    training_flops_per_token,
    training_memory_floor,
)
from bertpre.model.families import family
from bertpre.train.evaluation import evaluation_forward
from bertpre.train.memory import pretraining_shortfall
from bertpre.train.objectives import objective_for
from bertpre.train.setup import predicted_share, resolved_config

DEFAULT_VOCAB_SIZE = 30522  # BERT's uncased WordPiece vocabulary, used for vocab_size: auto


def info_report(config: Config) -> str:
    """What `bertpre info` prints for a run config: its model at its sequence length and precision,
    resolved as the run would resolve it (`train.setup.resolved_config`: the vocabulary of its
    DATA where it is tokenized, the shape of `model.init_from`)."""
    here = device_here(config.train.device)
    config = resolved_config(config)
    report = format_info(model_info(
        config.model,
        seq_length=config.data.max_seq_length,
        predicted_share=predicted_share(config.data),
        # auto trains in bf16 (or fp16) on a GPU, where the estimate matters: 2 bytes either way.
        precision="bf16" if config.train.precision == "auto" else config.train.precision,
        micro_batch_size=config.train.micro_batch_size,
        # on one device every row of a step (micro-batches x accumulation) keeps its memory
        memory_rows=config.train.batch_size,
        evaluation=evaluation_forward(config.data, config.train.micro_batch_size, config.model.mem_len),
        device_type=estimated_device(config.train.device),
    ), here)
    return "\n".join([report, *objective_lines(config)])


def objective_lines(config: Config) -> list[str]:
    """Where the objective trains more than one network (ELECTRA's discriminator and generator),
    each one's parameters (counted on a model built on the meta device: exact, nothing allocated;
    shared tensors once), training FLOPs per token (their sum is what `perf/mfu` counts) and the
    least memory its training needs; nothing for one network."""
    if config.model.vocab_size == "auto":
        config = dataclasses.replace(config, model=dataclasses.replace(config.model, vocab_size=DEFAULT_VOCAB_SIZE))
    objective = objective_for(config.data.objective, config.objective)
    parts = objective.cost_parts(config)
    if len(parts) == 1:
        return []
    with torch.device("meta"):
        model = objective.build_model(copy.copy(config.model), None, family(config.model).build_pretraining)
    claimed = [part.prefix for part in parts if part.prefix]
    options = objective.cost_options(config)
    seq_length, micro_batch_size = config.data.max_seq_length, config.train.micro_batch_size
    device_type = estimated_device(config.train.device)
    lines = ["", f"data.objective {objective.name}: {len(parts)} networks trained together "
             f"(s={seq_length}, micro_batch_size {micro_batch_size})",
             f"  {'':<16}{'parameters':>14}  {'MFLOP/token':>12}  {'memory at least':>16}"]
    total_flops = 0.0
    for part in parts:
        parameters = sum(tensor.numel() for name, tensor in model.named_parameters()
                         if (name.startswith(part.prefix) if part.prefix else not name.startswith(tuple(claimed))))
        flops = training_flops_per_token(part.model, seq_length, part.predicted_share, **options) + part.head_flops
        weights, activations = training_memory_floor(part.model, seq_length, part.predicted_share, micro_batch_size,
                                                     device_type=device_type)
        total_flops += flops
        lines.append(f"  {part.name:<16}{parameters:>14,}  {figure(flops / 1e6, 1):>12}  "
                     f"{readable(weights + activations):>16}")
    lines.append(f"  {'total':<16}{sum(p.numel() for p in model.parameters()):>14,}  "
                 f"{figure(total_flops / 1e6, 1):>12}  (perf/mfu counts this total)")
    return lines


def estimated_device(requested: str) -> str:
    """The device type whose estimate `info` prints for `train.device`: a CPU's when the config asks
    for one; else a GPU's (`auto` too: the figure that matters before a GPU hour, as the README
    shows it), whatever this machine has."""
    return "cpu" if requested == "cpu" else "cuda"


def device_here(requested: str) -> torch.device:
    """The device `pretrain` on this machine would train on for `train.device` (`cuda` without a
    GPU, which `pretrain` refuses, is judged as this machine's CPU)."""
    return torch.device("cuda" if requested != "cpu" and torch.cuda.is_available() else "cpu")


@dataclass
class ModelInfo:
    """Everything `bertpre info` prints."""

    config: BertConfig
    seq_length: int
    predicted_share: float
    precision: str
    micro_batch_size: int
    vocab_size_assumed: bool
    parameters: ParameterCounts
    flops_per_token: float
    dense_head_flops_per_token: float  # XLNet: every row a query (the hf plan, clm)
    memory: MemoryEstimate
    memory_rows: int = 0  # XLNet: the rows whose memory states one device keeps
    device_type: str = "cuda"  # the device whose memory the estimate is ("cpu": no FlexAttention)
    # the family's training FLOPs per token by part (`Family.flops_by_part`: XLNet's streams,
    # ModernBERT's parts with local layers at their window), None where it has none
    flops_by_part: XLNetFlops | ModernBertFlops | None = None
    evaluation: ForwardShape | None = None  # `bertpre evaluate`'s forward at micro_batch_size
    evaluation_memory: InferenceMemory | None = None  # its peak, as `evaluate` checks it

    @property
    def query_rows(self) -> int:
        """XLNet's P, the query stream's rows a sequence."""
        return plm_query_rows(self.seq_length, self.predicted_share)


def model_info(
    config: BertConfig,
    seq_length: int = 128,
    predicted_share: float = 0.15,
    precision: str = "fp32",
    micro_batch_size: int = 32,
    memory_rows: int | None = None,
    evaluation: ForwardShape | None = None,
    device_type: str = "cuda",
) -> ModelInfo:
    """Collect the counts for a config; `vocab_size: auto` is taken as 30522. For XLNet,
    `predicted_share` gives the query rows P and the memory is the config's `mem_len`, kept by
    `memory_rows` sequences (default `micro_batch_size`). With `evaluation`, the peak of that
    forward without gradients (fp32, as `bertpre evaluate` runs and checks it). The memory is
    estimated for a device of `device_type` (a GPU's by default; "cpu": ModernBERT's dense window)."""
    assumed = config.vocab_size == "auto"
    if assumed:
        config = BertConfig(**{**config.to_dict(), "vocab_size": DEFAULT_VOCAB_SIZE})
    config.validate()
    row = family(config)
    # the rows whose memory states one device keeps (XLNet's memory; no family else keeps any)
    kept = (micro_batch_size if memory_rows is None else memory_rows) if row.config.memory else 0
    # XLNet's cost depends on the micro-batch (its memory and relative positions are per batch);
    # BERT's cost model takes the argument and does not need it.
    per_batch = {"micro_batch_size": micro_batch_size}
    by_part = None if row.flops_by_part is None else row.flops_by_part(config, seq_length, predicted_share,
                                                                       micro_batch_size)
    return ModelInfo(
        config=config,
        seq_length=seq_length,
        predicted_share=predicted_share,
        precision=precision,
        micro_batch_size=micro_batch_size,
        vocab_size_assumed=assumed,
        parameters=count_parameters(config),
        flops_per_token=training_flops_per_token(config, seq_length, predicted_share, **per_batch),
        dense_head_flops_per_token=training_flops_per_token(config, seq_length, 1.0, **per_batch),
        memory=estimate_memory(config, seq_length, predicted_share, precision, device_type=device_type,
                               micro_batch_size=micro_batch_size),
        device_type=device_type,
        evaluation=evaluation,
        evaluation_memory=None if evaluation is None else estimate_inference_memory(config, evaluation,
                                                                                    device_type=device_type),
        memory_rows=kept,
        flops_by_part=by_part,
    )


def format_info(info: ModelInfo, here: torch.device | None = None) -> str:
    """The report `bertpre info` prints; `here`: the device `pretrain` on this machine would
    train on, whose memory the fit note judges (default: `train.device: auto`'s)."""
    return REPORTS[family(info.config).cost_report](info, here)


def format_encoder_info(info: ModelInfo, here: torch.device | None = None) -> str:
    """`bertpre info` for an encoder (BERT, RoBERTa, ModernBERT): parameters by part, FLOPs, memory."""
    config, counts, memory = info.config, info.parameters, info.memory
    row = family(config)
    shape = (f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
             f"{config.num_attention_heads} heads, intermediate {config.intermediate_size}, "
             f"vocab {config.vocab_size}" + (" (auto: assumed 30522)" if info.vocab_size_assumed else ""))
    shape += row.shape_details(config)
    encoder_class, model_class, heads = model_names(config)
    rows = [
        ("embeddings", counts.embeddings), ("attention", counts.attention),
        ("feed-forward", counts.feed_forward), ("LayerNorms", counts.layer_norms),
        ("pooler", counts.pooler), (f"encoder ({encoder_class})", counts.encoder),
        (f"heads ({heads})", counts.heads), (f"total ({model_class})", counts.total),
    ]
    width = max(28, *(len(name) + 1 for name, _ in rows))
    lines = [f"model: {shape}", "", "parameters"]
    lines += [f"  {name:<{width}}{value:>14,}  {value / 1e6:>9.2f}M" for name, value in rows]
    biases = counts.encoder - counts.matrices - counts.layer_norms - counts.pooler
    lines += [
        f"  {'matrices only':<{width}}{counts.matrices:>14,}  {counts.matrices / 1e6:>9.2f}M"
        "  embedding tables + layer weight matrices",
        f"  the encoder count is matrices + {biases:,} "
        + ("biases and projection" if config.embedding_size is not None else "layer biases")
        + f" + {counts.layer_norms:,} LayerNorm + {counts.pooler:,} pooler",
    ]
    note = row.parameter_note(config)
    if note:
        lines.append(note)
    lines += [
        "",
        f"training FLOPs per token (s={info.seq_length}, predicted share {info.predicted_share:g})",
        *flops_part_lines(info),
        f"  sparse MLM head  {figure(info.flops_per_token / 1e6, 1):>10} MFLOP"
        f"   (dense head would be {figure(info.dense_head_flops_per_token / 1e6, 1)} MFLOP)",
        f"  per sequence     {figure(info.flops_per_token * info.seq_length / 1e9, 2)} GFLOP",
        "",
        *memory_lines(info),
        f"  activations / sequence: {readable(memory.activations_per_sequence)}, "
        f"{readable(memory.activations_per_sequence_checkpointed)} with gradient checkpointing",
        *loss_chunk_lines(memory),
        f"  at micro_batch_size {info.micro_batch_size}: "
        f"{readable(total_memory(memory, info.micro_batch_size, False))}, "
        f"{readable(total_memory(memory, info.micro_batch_size, True))} with checkpointing "
        f"(+{readable(memory.attention_probs_per_sequence * info.micro_batch_size)} "
        "if attention runs unfused)",
        *evaluation_lines(info),
    ]
    note = fit_note(info, here)
    return "\n".join(lines + ([note] if note else []))


def flops_part_lines(info: ModelInfo) -> list[str]:
    """The training FLOPs per token by part, where the family's row gives them
    (`Family.flops_by_part`, whose record lists its parts: ModernBERT's)."""
    flops = info.flops_by_part
    if flops is None:
        return []
    return [f"  {name:<22}{figure(value / 1e6, 3):>10} MFLOP  {100 * value / flops.total:5.1f}%  {what}"
            for name, value, what in flops.parts(info.config, info.seq_length)]


def model_names(config: BertConfig) -> tuple[str, str, str]:
    """(encoder class, pretraining class, heads) as the family names them: BERT's BertModel,
    BertForPreTraining and "MLM + pair"; RoBERTa's and XLM-R's transformers classes and "MLM"."""
    row = family(config)
    heads = "MLM + pair" if row.pair_task else "MLM"
    if row.class_names is not None:
        return (*row.class_names(config), heads)
    return row.build_encoder.__name__, row.pretraining_class.__name__, heads


def memory_lines(info: ModelInfo) -> list[str]:
    """The memory estimate's heading and the weights, gradients and AdamW state it counts."""
    memory = info.memory
    # a GPU's figure is the default and says nothing more; a CPU's is named
    device = " on a CPU" if info.device_type == "cpu" else ""
    return [f"memory estimate{device} ({info.precision} activations, fp32 weights and AdamW)",
            f"  weights          {readable(memory.weights):>12}",
            f"  gradients        {readable(memory.gradients):>12}",
            f"  AdamW state      {readable(memory.adamw_state):>12}"]


def format_xlnet_info(info: ModelInfo, here: torch.device | None = None) -> str:
    """`bertpre info` for an XLNet: parameters, FLOPs by stream, memory with the memory states."""
    config, counts, memory, flops = info.config, info.parameters, info.memory, info.flops_by_part
    T, P, M, layers, d = (info.seq_length, info.query_rows, config.mem_len, config.num_hidden_layers,
                          config.hidden_size)
    shape = (f"XLNet, {layers} layers, hidden {d}, {config.num_attention_heads} heads, "
             f"intermediate {config.intermediate_size}, vocab {config.vocab_size}"
             + (" (auto: assumed 30522)" if info.vocab_size_assumed else "")
             + (f", memory {M}" if M else ", no memory")
             + (f", clamp_len {config.clamp_len}" if config.clamp_len > 0 else ""))
    rows = [
        ("embeddings (+ mask_emb)", counts.embeddings), ("attention (q k v o r)", counts.attention),
        ("feed-forward", counts.feed_forward), ("LayerNorms", counts.layer_norms),
        ("encoder (XLNetModel)", counts.encoder), ("LM head bias (tied)", counts.heads),
        ("total (XLNetLMHeadModel)", counts.total),
    ]
    lines = [f"model: {shape}", "", "parameters"]
    lines += [f"  {name:<28}{value:>14,}  {value / 1e6:>9.2f}M" for name, value in rows]
    lines.append(f"  {'matrices only':<28}{counts.matrices:>14,}  {counts.matrices / 1e6:>9.2f}M"
                 "  word table + layer weight matrices")
    parts = [("content stream", flops.content_stream, f"{T} tokens"),
             ("query stream", flops.query_stream, f"{P} target rows"),
             ("memory", flops.memory, f"{M} states as keys" if M else "none"),
             ("relative positions", flops.relative_positions, f"W_R on {M + 2 * T - 1} distances a micro-batch"),
             ("LM head", flops.head, f"{P} rows")]
    lines += ["", f"training FLOPs per token (T={T}, P={P} query rows at share {info.predicted_share:.3g}, "
                  f"memory M={M}, micro-batch {info.micro_batch_size})"]
    lines += [f"  {name:<20}{figure(value / 1e6, 3):>11} MFLOP  {100 * value / flops.total:5.1f}%  {what}"
              for name, value, what in parts]
    lines += [
        f"  {'total':<20}{figure(info.flops_per_token / 1e6, 3):>11} MFLOP"
        f"   (every row a query, as the hf plan and clm: {figure(info.dense_head_flops_per_token / 1e6, 3)} MFLOP)",
        f"  per sequence        {figure(info.flops_per_token * T / 1e9, 3):>11} GFLOP",
        "",
        *memory_lines(info),
        f"  activations / sequence: {readable(memory.activations_per_sequence)}, "
        f"{readable(memory.activations_per_sequence_checkpointed)} with gradient checkpointing "
        "(both streams, attention probabilities included)",
    ]
    states = info.memory_rows * memory.memory_states_per_sequence
    if M:
        lines.append(f"  memory states / sequence: {readable(memory.memory_states_per_sequence)} "
                     f"({layers} layers x {M} x {d}, float32, kept across steps); "
                     f"{readable(states)} for {info.memory_rows:,} rows (a step's, on one device)")
    lines.append(f"  at micro_batch_size {info.micro_batch_size}: "
                 f"{readable(total_memory(memory, info.micro_batch_size, False) + states)}, "
                 f"{readable(total_memory(memory, info.micro_batch_size, True) + states)} with checkpointing"
                 + (" (memory states included)" if M else ""))
    lines += evaluation_lines(info)
    note = fit_note(info, here)
    return "\n".join(lines + ([note] if note else []))


def loss_chunk_lines(memory: MemoryEstimate) -> list[str]:
    """The masked LM's loss where it runs in chunks at the micro-batch (`model.loss_chunk_rows`):
    what it holds once a micro-batch, beside the rows' activations; nothing without chunks."""
    chunks = memory.loss_chunks
    if chunks is None:
        return []
    return [f"  masked-LM loss in {chunks.count:,} chunks of {chunks.rows:,} rows: {readable(chunks.bytes)} "
            "a micro-batch (the decoder's float32 gradients, one chunk's logits)"]


def evaluation_lines(info: ModelInfo) -> list[str]:
    """The peak of `bertpre evaluate`'s forward, the figure its memory check compares (none
    without an evaluation shape)."""
    need, shape = info.evaluation_memory, info.evaluation
    if need is None or shape is None:
        return []
    return [f"  evaluate (no gradients, fp32, {shape.batch_size:,} sequences of {shape.seq_length:,} tokens): "
            f"{readable(need.total)} at its peak ({readable(need.activations)} of activations)"]


def figure(value: float, decimals: int) -> str:
    """A figure for a column: fixed-point, or with an exponent once it has over 12 digits."""
    return f"{value:.{decimals}f}" if value < 1e12 else f"{value:.3e}"


def fit_note(info: ModelInfo, here: torch.device | None = None) -> str | None:
    """A line when this machine could not train the config even at its leanest (what `pretrain`
    here would refuse: its check, on the device it would train on, `here`), else None; `info`
    itself never allocates what it reports on."""
    problem = pretraining_shortfall(info.config, info.seq_length, info.predicted_share, info.micro_batch_size,
                                    here or device_here("auto"), memory_rows=info.memory_rows or None)
    if problem:
        return f"  does not fit here (`bertpre pretrain` would refuse it): {problem}"
    return None


def total_memory(memory: MemoryEstimate, micro_batch_size: int, checkpointing: bool) -> int:
    """Weights + gradients + AdamW state + activations of one micro-batch at their most, in bytes:
    with the masks its forward holds beside them (ModernBERT's dense window, where it is dense),
    as `pretrain`'s and fine-tuning's checks count them."""
    activations = (memory.checkpointed_activation_peak(micro_batch_size) if checkpointing
                   else memory.activation_peak(micro_batch_size))
    return memory.weights + memory.gradients + memory.adamw_state + activations


# `bertpre info`'s layout for each `Family.cost_report`
REPORTS = {"encoder": format_encoder_info, "two-stream": format_xlnet_info}
