"""Watching a run for divergence: a step whose loss or gradient norm is not finite, or too many
fp16 overflow skips in a row, stops the run with the last good checkpoint kept."""
from __future__ import annotations

from pathlib import Path

import torch

from bertpre.errors import UserError
from bertpre.train.report import diverged_message

MAX_CONSECUTIVE_SKIPS = 20  # fp16 overflow skips in a row before the run is declared diverged


class TrainingDiverged(UserError):
    """The loss or gradients stopped being finite; the last good checkpoint is kept."""


class DivergenceWatch:
    """The first step whose loss or gradient norm was not finite (0: none), kept on the device
    and read only by `check` (before a log, an evaluation or a save); and the fp16 skips in a row."""

    def __init__(self, device: torch.device, run_dir: Path) -> None:
        self.diverged_at = torch.zeros((), dtype=torch.int64, device=device)
        self.consecutive_skips = 0
        self.run_dir = run_dir

    def record(self, finite: torch.Tensor, step: int) -> None:
        """Note (without reading the device) whether 0-based `step`'s sums and gradient were finite."""
        first = (self.diverged_at > 0) | finite
        self.diverged_at = torch.where(first, self.diverged_at, step + 1)

    def check(self) -> None:
        """Stop if a step since the start went non-finite (one read of the device)."""
        step = int(self.diverged_at)
        if step:
            raise TrainingDiverged(diverged_message(step, "the loss or the gradient norm is not finite",
                                                    self.run_dir))

    def count_skip(self, skipped: bool, step: int) -> None:
        """Count an fp16 overflow skip at 0-based `step`; too many in a row means the run diverged."""
        if not skipped:
            self.consecutive_skips = 0
            return
        self.consecutive_skips += 1
        if self.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
            raise TrainingDiverged(diverged_message(
                step + 1, f"{self.consecutive_skips} fp16 steps in a row overflowed", self.run_dir))
