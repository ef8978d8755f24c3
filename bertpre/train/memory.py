"""Whether a command's work fits the device's memory, asked of the cost model before anything is
allocated (the device's memory read one way for every command)."""
from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from bertpre.errors import UserError
from bertpre.model import BertConfig
from bertpre.model.cost import (
    ForwardShape,
    estimate_inference_memory,
    estimate_memory,
    inference_shortfall,
    memory_shortfall,
    readable,
)


def device_memory(device: torch.device) -> tuple[int, str]:
    """(bytes, how a message names them) of the whole memory that work on `device` may use: the
    GPU's, or on a CPU this machine's (what the kernel lets a process have at the most)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory, "the GPU has"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine has"


def pretraining_shortfall(config: BertConfig, seq_length: int, predicted_share: float, micro_batch_size: int,
                          device: torch.device, beside: Sequence[tuple[BertConfig, float]] = (),
                          **options: int | None) -> str | None:
    """Why pretraining on `device` cannot fit its whole memory even at its leanest
    (`cost.memory_shortfall`), judged by the estimate for the device's type (a CPU runs no
    FlexAttention: ModernBERT's dense window grows as T² there), or None when it may.

    Args:
        beside: other networks trained with it, each (config, predicted share): ELECTRA's generator.
        options: the objective's cost options (XLNet's `memory_length`, `query_rows`, `memory_rows`).
    """
    available, where = device_memory(device)
    return memory_shortfall(config, seq_length, predicted_share, micro_batch_size, available, where,
                            device_type=device.type, beside=beside, **options)


def check_forward_fits(config: BertConfig, shape: ForwardShape, device: torch.device, *, what: str,
                       advice: str, precision: str = "fp32") -> None:
    """Refuse, in one line, a forward pass without gradients whose peak (the cost model's
    `estimate_inference_memory`) is more than the device's memory.

    Args:
        what: the work, as the subject of the sentence: "reading the text (3,001 tokens at once)".
        advice: what to make smaller: "shorten the text".
    """
    available, where = device_memory(device)
    need = estimate_inference_memory(config, shape, precision, device_type=device.type)
    problem = inference_shortfall(need, available, where)
    if problem:
        raise UserError(f"{what} {problem}; {advice}")


def check_finetuning_fits(config: BertConfig, *, batch_size: int, seq_length: int, precision: str,
                          device: torch.device, advice: str, unit: str = "examples") -> None:
    """Refuse, in one line, fine-tuning whose fp32 weights, gradients and AdamW state and one
    batch's activations (the tensors autograd keeps for backward and the masks the forward holds
    beside them, on this device: `MemoryEstimate.activation_peak`, a floor of the peak; no head
    over the vocabulary) are more than the device's memory. `unit` names a batch's rows in the
    message (question answering's are "windows")."""
    memory = estimate_memory(config, seq_length, 0.0, precision, memory_length=0, query_rows=0,
                             device_type=device.type)
    model = memory.weights + memory.gradients + memory.adamw_state
    activations = memory.activation_peak(batch_size)
    available, where = device_memory(device)
    if model + activations > available:
        raise UserError(f"fine-tuning a batch of {batch_size:,} {unit} of {seq_length:,} tokens needs at "
                        f"least {readable(model + activations)} ({readable(model)} of weights, gradients and "
                        f"AdamW state, {readable(activations)} of activations in {precision}), but {where} "
                        f"{readable(available)}; {advice}")
