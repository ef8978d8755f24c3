"""The report behind `bertpre info`: a config's parameters, training FLOPs and memory, for people."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from bertpre.config import Config
from bertpre.model import BertConfig
from bertpre.model.cost import (
    MemoryEstimate,
    ParameterCounts,
    count_parameters,
    estimate_memory,
    memory_shortfall,
    readable,
    training_flops_per_token,
)

DEFAULT_VOCAB_SIZE = 30522  # BERT's uncased WordPiece vocabulary, used for vocab_size: auto


def info_report(config: Config) -> str:
    """What `bertpre info` prints for a run config: its model at its sequence length and precision."""
    return format_info(model_info(
        config.model,
        seq_length=config.data.max_seq_length,
        predicted_share=config.data.predicted_share,
        # auto trains in bf16 (or fp16) on a GPU, where the estimate matters: 2 bytes either way.
        precision="bf16" if config.train.precision == "auto" else config.train.precision,
        micro_batch_size=config.train.micro_batch_size,
    ))


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
    dense_head_flops_per_token: float
    memory: MemoryEstimate


def model_info(
    config: BertConfig,
    seq_length: int = 128,
    predicted_share: float = 0.15,
    precision: str = "fp32",
    micro_batch_size: int = 32,
) -> ModelInfo:
    """Collect the counts for a config; `vocab_size: auto` is taken as 30522."""
    assumed = config.vocab_size == "auto"
    if assumed:
        config = BertConfig(**{**config.to_dict(), "vocab_size": DEFAULT_VOCAB_SIZE})
    config.validate()
    return ModelInfo(
        config=config,
        seq_length=seq_length,
        predicted_share=predicted_share,
        precision=precision,
        micro_batch_size=micro_batch_size,
        vocab_size_assumed=assumed,
        parameters=count_parameters(config),
        flops_per_token=training_flops_per_token(config, seq_length, predicted_share),
        dense_head_flops_per_token=training_flops_per_token(config, seq_length, 1.0),
        memory=estimate_memory(config, seq_length, predicted_share, precision),
    )


def format_info(info: ModelInfo) -> str:
    """The report `bertpre info` prints."""
    config, counts, memory = info.config, info.parameters, info.memory
    shape = (f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
             f"{config.num_attention_heads} heads, intermediate {config.intermediate_size}, "
             f"vocab {config.vocab_size}" + (" (auto: assumed 30522)" if info.vocab_size_assumed else ""))
    if config.embedding_size is not None:
        shape += f", embedding_size {config.embedding_size}"
    if config.share_layers:
        shape += ", one layer shared by all"
    shape += {"absolute": f", absolute positions (at most {config.max_position_embeddings})",
              "rope": f", rotary positions (theta {config.rope_theta:g}), any length",
              "transformer_xl": ", Transformer-XL relative positions, any length"}[config.position_embedding_type]
    rows = [
        ("embeddings", counts.embeddings), ("attention", counts.attention),
        ("feed-forward", counts.feed_forward), ("LayerNorms", counts.layer_norms),
        ("pooler", counts.pooler), ("encoder (BertModel)", counts.encoder),
        ("heads (MLM + pair)", counts.heads), ("total (BertForPreTraining)", counts.total),
    ]
    lines = [f"model: {shape}", "", "parameters"]
    lines += [f"  {name:<28}{value:>14,}  {value / 1e6:>9.2f}M" for name, value in rows]
    biases = counts.encoder - counts.matrices - counts.layer_norms - counts.pooler
    lines += [
        f"  {'matrices only':<28}{counts.matrices:>14,}  {counts.matrices / 1e6:>9.2f}M"
        "  embedding tables + layer weight matrices",
        f"  the encoder count is matrices + {biases:,} "
        + ("biases and projection" if config.embedding_size is not None else "layer biases")
        + f" + {counts.layer_norms:,} LayerNorm + {counts.pooler:,} pooler",
    ]
    if (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (768, 12, 3072) \
            and not config.is_albert and not config.relative_positions:
        lines.append("  (BERT-base: the encoder is the paper's 110M; the matrices, the 108.8M also quoted)")
    lines += [
        "",
        f"training FLOPs per token (s={info.seq_length}, predicted share {info.predicted_share:g})",
        f"  sparse MLM head  {figure(info.flops_per_token / 1e6, 1):>10} MFLOP"
        f"   (dense head would be {figure(info.dense_head_flops_per_token / 1e6, 1)} MFLOP)",
        f"  per sequence     {figure(info.flops_per_token * info.seq_length / 1e9, 2)} GFLOP",
        "",
        f"memory estimate ({info.precision} activations, fp32 weights and AdamW)",
        f"  weights          {readable(memory.weights):>12}",
        f"  gradients        {readable(memory.gradients):>12}",
        f"  AdamW state      {readable(memory.adamw_state):>12}",
        f"  activations / sequence: {readable(memory.activations_per_sequence)}, "
        f"{readable(memory.activations_per_sequence_checkpointed)} with gradient checkpointing",
        f"  at micro_batch_size {info.micro_batch_size}: "
        f"{readable(total_memory(memory, info.micro_batch_size, False))}, "
        f"{readable(total_memory(memory, info.micro_batch_size, True))} with checkpointing "
        f"(+{readable(memory.attention_probs_per_sequence * info.micro_batch_size)} "
        "if attention runs unfused)",
    ]
    note = fit_note(info)
    return "\n".join(lines + ([note] if note else []))


def figure(value: float, decimals: int) -> str:
    """A figure for a column: fixed-point, or with an exponent once it has over 12 digits."""
    return f"{value:.{decimals}f}" if value < 1e12 else f"{value:.3e}"


def fit_note(info: ModelInfo) -> str | None:
    """A line when this machine could not train the config even at its leanest (what `pretrain`
    here would refuse), else None; `info` itself never allocates what it reports on."""
    available, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine has"
    if torch.cuda.is_available():
        available, where = torch.cuda.get_device_properties(0).total_memory, "its GPU has"
    problem = memory_shortfall(info.config, info.seq_length, info.predicted_share, info.micro_batch_size,
                               available, where)
    if problem:
        return f"  does not fit here (`bertpre pretrain` would refuse it): {problem}"
    return None


def total_memory(memory: MemoryEstimate, micro_batch_size: int, checkpointing: bool) -> int:
    """Weights + gradients + AdamW state + activations of one micro-batch, in bytes."""
    per_sequence = (memory.activations_per_sequence_checkpointed if checkpointing
                    else memory.activations_per_sequence)
    return memory.weights + memory.gradients + memory.adamw_state + micro_batch_size * per_sequence
