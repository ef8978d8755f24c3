"""Training scalars: what each logging window measured, TensorBoard events, `metrics.jsonl` rows, the progress bar."""
from __future__ import annotations

import json
import math
import shutil
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from bertpre.train.runtime import Runtime

# Per-step sums reduced over micro-batches and processes, in this order.
STATS = ("mlm_loss", "predictions", "mlm_correct", "pair_loss", "pairs", "pair_correct", "tokens")


class MetricsWriter:
    """Write scalars to `RUN/tensorboard` and `RUN/metrics.jsonl`; a no-op when not enabled.

    On resume (`purge_after` = the checkpoint's step), rows logged after that step by the
    interrupted run are dropped, so every step appears once.
    """

    def __init__(self, run_dir: Path, *, enabled: bool = True, purge_after: int | None = None):
        self.enabled = enabled
        self.jsonl_path = run_dir / "metrics.jsonl"
        self._tensorboard = None
        self._jsonl = None
        if not enabled:
            return
        from torch.utils.tensorboard import SummaryWriter  # tensorboard import is slow

        if purge_after is not None and self.jsonl_path.exists():
            kept = [line for line in self.jsonl_path.read_text(encoding="utf-8").splitlines()
                    if (step := _row_step(line)) is not None and step <= purge_after]
            # Written aside and renamed: a kill during the rewrite must not lose the kept rows.
            staging = self.jsonl_path.with_name(self.jsonl_path.name + ".tmp")
            staging.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            staging.replace(self.jsonl_path)
        elif purge_after is None:  # a fresh start: logs of an attempt that saved nothing go
            self.jsonl_path.unlink(missing_ok=True)
            shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
        purge_step = purge_after + 1 if purge_after is not None else None
        self._tensorboard = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge_step)
        self._jsonl = self.jsonl_path.open("a", encoding="utf-8")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """Record `scalars` (tag → value) for `step`."""
        if not self.enabled:
            return
        for tag, value in scalars.items():
            self._tensorboard.add_scalar(tag, value, step)
        row = {"step": step}
        row.update({tag: (value if math.isfinite(value) else str(value))
                    for tag, value in scalars.items()})
        self._jsonl.write(json.dumps(row) + "\n")
        self._jsonl.flush()  # cheap at log cadence; lets `tail -f metrics.jsonl` follow the run

    def flush(self) -> None:
        if self.enabled:
            self._tensorboard.flush()
            self._jsonl.flush()

    def close(self) -> None:
        if self.enabled:
            self._tensorboard.close()
            self._jsonl.close()
            self.enabled = False


def _row_step(line: str) -> int | None:
    """The step of a metrics.jsonl row; None for a blank line or a row torn by a kill mid-write."""
    try:
        return json.loads(line).get("step", 0) if line.strip() else None
    except json.JSONDecodeError:
        return None


class ProgressBar:
    """A tqdm bar on stderr showing loss, lr, tokens/s and the ETA (main process only)."""

    def __init__(self, *, start_step: int, max_steps: int, enabled: bool = True):
        self._bar = tqdm(total=max_steps, initial=start_step, unit="step", file=sys.stderr,
                         dynamic_ncols=True, disable=not enabled, smoothing=0.1)

    def update(self, *, loss: float, lr: float, tokens_per_s: float, steps: int = 1) -> None:
        self._bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}",
                              refresh=False)
        self._bar.update(steps)

    def close(self) -> None:
        self._bar.close()


class MetricsWindow:
    """The STATS sums and wall time since the last log, for the `train/*` and `perf/*` scalars."""

    def __init__(self, start_step: int) -> None:
        self.sums = torch.zeros(len(STATS), dtype=torch.float64)
        self.reset(start_step)

    def reset(self, start_step: int) -> None:
        self.sums.zero_()
        self.start_step, self.start_time = start_step, time.perf_counter()

    def add(self, sums: torch.Tensor) -> None:
        """Count one step's STATS sums."""
        self.sums += sums

    def pause(self, seconds: float) -> None:
        """Leave `seconds` (evaluation, saving) out of the window's tokens/s."""
        self.start_time += seconds

    def scalars(self, *, lr: float, grad_norm: float, scaler: torch.amp.GradScaler | None,
                skipped_steps: int) -> dict[str, float]:
        return step_scalars(self.sums, lr=lr, grad_norm=grad_norm, scaler=scaler,
                            skipped_steps=skipped_steps,
                            elapsed=time.perf_counter() - self.start_time)


def step_scalars(window: torch.Tensor, *, lr: float, grad_norm: float,
                 scaler: torch.amp.GradScaler | None, skipped_steps: int,
                 elapsed: float) -> dict[str, float]:
    """The `train/*` and `perf/*` scalars for a logging window of summed STATS."""
    sums = dict(zip(STATS, window.tolist(), strict=True))
    mlm_loss = sums["mlm_loss"] / max(sums["predictions"], 1)
    pair_loss = sums["pair_loss"] / max(sums["pairs"], 1)
    scalars = {
        "train/loss": mlm_loss + pair_loss,
        "train/mlm_loss": mlm_loss,
        "train/pair_loss": pair_loss,
        "train/mlm_acc": sums["mlm_correct"] / max(sums["predictions"], 1),
        "train/pair_acc": sums["pair_correct"] / max(sums["pairs"], 1),
        "train/lr": lr,
        "train/grad_norm": grad_norm,
        "train/loss_scale": scaler.get_scale() if scaler is not None else 1.0,
        "train/skipped_steps": float(skipped_steps),
        "perf/tokens_per_s": sums["tokens"] / max(elapsed, 1e-9),
    }
    if not sums["pairs"]:  # pair_task none
        del scalars["train/pair_loss"], scalars["train/pair_acc"]
    return scalars


def gpu_scalars(runtime: Runtime, tokens_per_s: float, token_flops: float) -> dict[str, float]:
    """`perf/mfu` (on a GPU of known peak) and `perf/peak_memory_gib` (on any GPU)."""
    if runtime.device.type != "cuda":
        return {}
    scalars = {"perf/peak_memory_gib": torch.cuda.max_memory_allocated(runtime.device) / 2**30}
    peak_flops = runtime.peak_flops()
    if peak_flops is not None:
        scalars["perf/mfu"] = tokens_per_s * token_flops / (peak_flops * runtime.world_size)
    return scalars
