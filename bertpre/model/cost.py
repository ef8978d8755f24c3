"""What a model config costs to train and to read with: parameters by part, FLOPs per token,
memory; each family's own functions (`bert_cost`, `xlnet_cost`, `roberta_cost`, `modernbert_cost`), as
the family table names them."""
from __future__ import annotations

from collections.abc import Sequence

from bertpre.model.bert_cost import (
    BYTES_PER_ELEMENT,
    ForwardShape,
    InferenceMemory,
    MemoryEstimate,
    ParameterCounts,
)
from bertpre.model.config import BertConfig
from bertpre.model.families import family
from bertpre.model.modernbert_cost import (
    ModernBertFlops,
    global_layer_count,
    modernbert_flops_by_part,
)
from bertpre.model.xlnet_cost import (
    XLNetFlops,
    plm_query_rows,
    xlnet_activations,
    xlnet_training_flops,
)

__all__ = ["BYTES_PER_ELEMENT", "ForwardShape", "InferenceMemory", "MemoryEstimate", "ModernBertFlops",
           "ParameterCounts", "XLNetFlops", "count_parameters", "estimate_inference_memory", "estimate_memory",
           "global_layer_count", "inference_shortfall", "memory_shortfall", "modernbert_flops_by_part", "plm_query_rows", "readable",
           "training_flops_per_token", "training_memory_floor", "xlnet_activations", "xlnet_training_flops"]


def count_parameters(config: BertConfig) -> ParameterCounts:
    """Parameters of the family's pretraining model by part, computed from the shapes."""
    return family(config).count_parameters(config)


def training_flops_per_token(config: BertConfig, seq_length: int, predicted_share: float, *,
                             memory_length: int | None = None, query_rows: int | None = None,
                             micro_batch_size: int = 1) -> float:
    """FLOPs of forward + backward per input token (see `bert_cost.bert_training_flops` and
    `xlnet_cost.xlnet_training_flops`, which alone reads `memory_length`, `query_rows` and
    `micro_batch_size`)."""
    return family(config).training_flops(config, seq_length, predicted_share, memory_length=memory_length,
                                         query_rows=query_rows, micro_batch_size=micro_batch_size)


def estimate_memory(config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32", *,
                    memory_length: int | None = None, query_rows: int | None = None,
                    device_type: str = "cuda", micro_batch_size: int | None = None) -> MemoryEstimate:
    """Training memory on a device of `device_type` (see `bert_cost.estimate_bert_memory`,
    `xlnet_cost.estimate_xlnet_memory`, `modernbert_cost.estimate_modernbert_memory`). With
    `micro_batch_size`, the masked LM's loss as a step of that many rows runs it: in chunks where
    `model.loss_chunk_rows` says so (`MemoryEstimate.loss_chunks`); without, its whole logits."""
    return family(config).estimate_memory(config, seq_length, predicted_share, precision,
                                          memory_length=memory_length, query_rows=query_rows,
                                          device_type=device_type, micro_batch_size=micro_batch_size)


def estimate_inference_memory(config: BertConfig, shape: ForwardShape, precision: str = "fp32", *,
                              device_type: str = "cuda") -> InferenceMemory:
    """The peak of a forward pass without gradients on a device of `device_type` (see
    `bert_cost.estimate_bert_inference_memory`, `xlnet_cost.estimate_xlnet_inference_memory`,
    `modernbert_cost.estimate_modernbert_inference_memory`)."""
    return family(config).estimate_inference_memory(config, shape, precision, device_type=device_type)


def inference_shortfall(need: InferenceMemory, available: int, where: str) -> str | None:
    """Why a forward pass needing `need` cannot run in `available` bytes, or None when it fits;
    `where` names the memory ('this machine has')."""
    if need.total <= available:
        return None
    return (f"needs about {readable(need.total)} ({readable(need.weights)} of weights, "
            f"{readable(need.activations)} of activations), but {where} {readable(available)}")


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
                          query_rows: int | None = None, memory_rows: int | None = None,
                          device_type: str = "cuda") -> tuple[int, int]:
    """(model bytes, activation bytes) that training on a device of `device_type` needs at the
    least: fp32 weights, gradients and AdamW's two moments; one micro-batch's activations with
    gradient checkpointing in 16-bit and the masks its forward holds beside them
    (`MemoryEstimate.checkpointed_activation_peak`: ModernBERT's dense window on a CPU; the masked
    LM's loss in chunks where `model.loss_chunk_rows` runs it so at `micro_batch_size`), and for
    XLNet the memory states of `memory_rows` sequences (every row of the device's share of a
    step keeps its own: micro_batch_size × accumulation steps; default micro_batch_size)."""
    memory = estimate_memory(config, seq_length, predicted_share, "bf16", memory_length=memory_length,
                             query_rows=query_rows, device_type=device_type, micro_batch_size=micro_batch_size)
    model = memory.weights + memory.gradients + memory.adamw_state
    rows = micro_batch_size if memory_rows is None else memory_rows
    return model, (memory.checkpointed_activation_peak(micro_batch_size)
                   + rows * memory.memory_states_per_sequence)


def memory_shortfall(config: BertConfig, seq_length: int, predicted_share: float,
                     micro_batch_size: int, available: int, where: str, *, memory_length: int | None = None,
                     query_rows: int | None = None, memory_rows: int | None = None,
                     device_type: str = "cuda", beside: Sequence[tuple[BertConfig, float]] = ()) -> str | None:
    """Why a run on a device of `device_type` cannot fit in `available` bytes even at its leanest
    (`training_memory_floor`), or None when it may; `where` names the memory ('the GPU has').
    `beside`: other networks the run trains with it, each (config, predicted share) (ELECTRA's
    generator), whose floors are added."""
    model, activations = training_memory_floor(config, seq_length, predicted_share, micro_batch_size,
                                               memory_length=memory_length, query_rows=query_rows,
                                               memory_rows=memory_rows, device_type=device_type)
    parameters = count_parameters(config).total
    for other, share in beside:
        other_model, other_activations = training_memory_floor(other, seq_length, share, micro_batch_size,
                                                               device_type=device_type)
        model, activations = model + other_model, activations + other_activations
        parameters += count_parameters(other).total
    if model > available:
        return (f"the model has {parameters:,} parameters, whose weights, gradients "
                f"and AdamW state alone need {readable(model)}, but {where} {readable(available)}; make "
                "model.hidden_size, num_hidden_layers, intermediate_size or vocab_size smaller")
    if model + activations > available:
        memory = " and XLNet's memory states" if config.mem_len else ""
        return (f"a micro-batch of {micro_batch_size:,} sequences of {seq_length:,} tokens needs at least "
                f"{readable(activations)} of activations (16-bit, gradient checkpointing){memory} beside the "
                f"model's {readable(model)}, but {where} {readable(available)}; make "
                "train.micro_batch_size or data.max_seq_length" + (", model.mem_len" if memory else "")
                + " smaller")
    return None
