"""LayerNorm that keeps the residual stream in the autocast dtype (`model.low_precision_layernorm`)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# `model.low_precision_layernorm`: True, False, or "auto" (on under bf16 autocast alone: fp16's
# narrow range makes a 16-bit residual stream a risk that bf16, with fp32's range, does not carry).
LOW_PRECISION_CHOICES = (True, False, "auto")


def low_precision_dtype(setting: bool | str, device_type: str) -> torch.dtype | None:
    """The dtype a low-precision LayerNorm computes in now: the autocast dtype of `device_type`
    where autocast is on and `setting` asks for it (see LOW_PRECISION_CHOICES), else None."""
    if setting is False or not torch.is_autocast_enabled(device_type):
        return None
    dtype = torch.get_autocast_dtype(device_type)
    return dtype if setting is True or dtype == torch.bfloat16 else None


def resolve_low_precision(setting: bool | str, precision: str) -> bool:
    """`model.low_precision_layernorm` for a run in `precision` (fp32, fp16, bf16): "auto" is on
    for bf16 only."""
    return precision == "bf16" if setting == "auto" else bool(setting)


class LayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` (same parameters and names) that, under autocast, takes and returns the
    autocast dtype instead of float32.

    CUDA autocast runs `layer_norm` in float32 and returns float32, so every residual add and
    every tensor between two matrix products is float32, and each Linear casts it back. Here the
    kernel reads and writes bf16 with its weights cast to bf16 (a few KB), one kernel as MosaicBERT's
    low-precision LayerNorm; the mean and variance are still accumulated in float32 inside the
    kernel (CUDA's and the CPU's `layer_norm` use float accumulators for 16-bit inputs). Computing
    in float32 and casting the output instead would cost two more passes over the activation.
    Without autocast (fp32 training, evaluation) it is `nn.LayerNorm`, bit for bit.
    """

    def __init__(self, normalized_shape: int, eps: float = 1e-5, bias: bool = True,
                 low_precision: bool | str = False) -> None:
        super().__init__(normalized_shape, eps=eps, bias=bias)
        self.low_precision = low_precision

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        dtype = low_precision_dtype(self.low_precision, input.device.type)
        if dtype is None:
            return super().forward(input)
        weight = None if self.weight is None else self.weight.to(dtype)
        bias = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(input.device.type, enabled=False):  # else CUDA autocast casts to fp32
            return F.layer_norm(input.to(dtype), self.normalized_shape, weight, bias, self.eps)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, low_precision={self.low_precision}"
