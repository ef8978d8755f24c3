"""The optimisation recipe: the optimizer (AdamW or LAMB) with its parameter groups, and the
learning-rate schedule."""
from __future__ import annotations

import math

import torch

from bertpre.config import WSD_DEFAULTS, Config, OptimConfig
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
                  schedule: str = "linear", decay_fraction: float | None = None,
                  decay_shape: str | None = None) -> float:
    """The learning rate for the update at 0-based `step`.

    Warmup reaches `lr` on its last step (`warmup_steps - 1`), so no update is wasted at 0.
    After warmup, `linear` and `cosine` decay from `lr` at `warmup_steps` towards 0 at
    `max_steps` (the first step that never runs); `constant` stays at `lr`; `wsd` stays at `lr`
    until `wsd_decay_start`, then decays to 0 at `max_steps` by `decay_shape` (`1-sqrt`:
    lr·(1 - √progress), or `linear`). `decay_fraction` and `decay_shape` are read by `wsd`
    alone (None: WSD_DEFAULTS).
    """
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if schedule == "constant":
        return lr
    if schedule == "wsd":
        fraction = WSD_DEFAULTS["decay_fraction"] if decay_fraction is None else decay_fraction
        decay_start = wsd_decay_start(warmup_steps, max_steps, fraction)
        if step < decay_start:
            return lr
        progress = min(1.0, (step - decay_start) / max(1, max_steps - decay_start))
        shape = WSD_DEFAULTS["decay_shape"] if decay_shape is None else decay_shape
        if shape == "1-sqrt":
            return lr * (1.0 - math.sqrt(progress))
        if shape == "linear":
            return lr * (1.0 - progress)
        raise ValueError(f"unknown decay shape {shape!r}")
    decay_steps = max(1, max_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    if schedule == "linear":
        return lr * (1.0 - progress)
    if schedule == "cosine":
        return lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {schedule!r}")


def wsd_decay_start(warmup_steps: int, max_steps: int, decay_fraction: float) -> int:
    """The 0-based step where a WSD schedule's decay begins (its lr there is still `lr`): the
    last `decay_fraction` of the `max_steps` steps, rounded to whole steps, and never before
    warmup ends (a decay longer than what follows warmup starts at warmup's end)."""
    return max(warmup_steps, max_steps - round(decay_fraction * max_steps))


def scheduled_learning_rate(config: Config, step: int) -> float:
    """The learning rate `config` gives the update at 0-based `step`, its phases included (as
    the Trainer sets it)."""
    index = config.phase_at(step)
    start, end = config.schedule_span(index)
    optim = config.for_phase(index).optim
    return learning_rate(step - start, lr=optim.lr, warmup_steps=optim.warmup_steps,
                         max_steps=end - start, schedule=optim.schedule,
                         decay_fraction=optim.decay_fraction, decay_shape=optim.decay_shape)
