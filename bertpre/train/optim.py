"""The optimisation recipe: the optimizer (AdamW or LAMB) with its parameter groups, and the
learning-rate schedule."""
from __future__ import annotations

import math

import torch

from bertpre.config import Config, OptimConfig
from bertpre.train.lamb import Lamb


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: biases and LayerNorm weights are 1-D and get none."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: torch.nn.Module, optim: OptimConfig,
                    device: torch.device) -> torch.optim.Optimizer:
    """`optim.name`'s optimizer over `parameter_groups`: AdamW (decoupled weight decay), or LAMB."""
    groups = parameter_groups(model, optim.weight_decay)
    if optim.name == "lamb":
        return Lamb(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps)
    return torch.optim.AdamW(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps,
                             fused=device.type == "cuda" or None)


def learning_rate(step: int, *, lr: float, warmup_steps: int, max_steps: int,
                  schedule: str = "linear") -> float:
    """The learning rate for the update at 0-based `step`.

    Warmup reaches `lr` on its last step (`warmup_steps - 1`), so no update is wasted at 0.
    After warmup, `linear` and `cosine` decay from `lr` at `warmup_steps` towards 0 at
    `max_steps` (the first step that never runs); `constant` stays at `lr`.
    """
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    decay_steps = max(1, max_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    if schedule == "linear":
        return lr * (1.0 - progress)
    if schedule == "cosine":
        return lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {schedule!r}")


def scheduled_learning_rate(config: Config, step: int) -> float:
    """The learning rate `config` gives the update at 0-based `step`, its phases included (as
    the Trainer sets it)."""
    ends = config.phase_ends()
    index = next((index for index, end in enumerate(ends) if step < end), len(ends) - 1)
    start, end = config.schedule_span(index)
    optim = config.for_phase(index).optim
    return learning_rate(step - start, lr=optim.lr, warmup_steps=optim.warmup_steps,
                         max_steps=end - start, schedule=optim.schedule)
