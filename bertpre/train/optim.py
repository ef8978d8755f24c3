"""The learning-rate schedule: linear warmup, then linear, cosine or constant."""
from __future__ import annotations

import math


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
