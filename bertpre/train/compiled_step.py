"""The objective's step module as the Trainer runs it: compiled whole (`train.compile`) and/or
DDP-wrapped, and what a failure to compile it is."""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from bertpre.errors import UserError
from bertpre.train.objectives import Objective
from bertpre.train.runtime import Runtime


def wrap_step(objective: Objective, model: nn.Module, runtime: Runtime, *, label_smoothing: float,
              compiled: bool) -> nn.Module:
    """`objective`'s step module on `model`: compiled whole when `compiled`, DDP-wrapped when the
    run is distributed."""
    step = objective.step_module(model, label_smoothing)
    if compiled:
        step = torch.compile(step, fullgraph=True)
    if runtime.distributed:
        device_ids = [runtime.local_rank] if runtime.device.type == "cuda" else None
        step = DistributedDataParallel(step, device_ids=device_ids)
    return step


def eager_fallback_note(reason: str, *, auto: bool) -> str:
    """The note for a step that could not be compiled (`reason`) and runs eager under
    `train.compile: auto`; under a typed true, the one-line refusal."""
    if not auto:
        raise UserError(f"train.compile true: torch.compile could not compile the step ({reason}); "
                        "set train.compile false or auto") from None
    return f"train.compile auto: torch.compile could not compile the step ({reason}); training with the eager step"


def compile_failure(error: BaseException) -> str | None:
    """Why torch.compile failed, in one line, where `error` is compile's (TorchDynamo's or
    Inductor's, e.g. no C compiler or Triton for the device); None for anything else, an
    out-of-memory error included."""
    if isinstance(error, torch.OutOfMemoryError):
        return None
    if not any(kind.__module__.startswith(("torch._dynamo", "torch._inductor")) for kind in type(error).__mro__):
        return None
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."
