"""Training scalars: what each logging window measured, TensorBoard events, `metrics.jsonl` rows, the progress bar."""
from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from bertpre.heartbeat import Heartbeat
from bertpre.train.objectives.base import Objective
from bertpre.train.runtime import Runtime


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
            lines = self.jsonl_path.read_text(encoding="utf-8", errors="replace").splitlines()
            kept = [line for line in lines if (step := _row_step(line)) is not None and step <= purge_after]
            damaged = sum(1 for line in lines if line.strip() and _row_step(line) is None)
            if damaged:
                print(f"warning: {self.jsonl_path}: {damaged} damaged line(s) skipped (not JSON "
                      "rows with a step); the rest of the log is kept", file=sys.stderr)
            # Written aside and renamed: a kill during the rewrite must not lose the kept rows.
            staging = self.jsonl_path.with_name(self.jsonl_path.name + ".tmp")
            staging.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            staging.replace(self.jsonl_path)
        elif purge_after is None:  # a fresh start: logs of an attempt that saved nothing go
            self.jsonl_path.unlink(missing_ok=True)
            remove_event_files(run_dir / "tensorboard")
        purge_step = purge_after + 1 if purge_after is not None else None
        self._tensorboard = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge_step)
        self._jsonl = self.jsonl_path.open("a", encoding="utf-8")

    def describe_run(self, layout: dict, texts: dict[str, str]) -> None:
        """Write the Custom Scalars layout and, at step 0, texts (the config, the data)."""
        if not self.enabled:
            return
        self._tensorboard.add_custom_scalars(layout)
        for tag, text in texts.items():
            self._tensorboard.add_text(tag, text, 0)

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
        row = json.loads(line) if line.strip() else None
    except ValueError:
        return None
    step = row.get("step", 0) if isinstance(row, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


class ProgressBar:
    """A tqdm bar on stderr showing loss, lr, tokens/s and the ETA (main process only); with no
    terminal, a line every 30 s until the first log line, so a job's log shows the start-up alive."""

    def __init__(self, *, start_step: int, max_steps: int, enabled: bool = True):
        self._bar = tqdm(total=max_steps, initial=start_step, unit="step", file=sys.stderr,
                         dynamic_ncols=True, disable=not enabled, smoothing=0.1)
        self._until_first_log = Heartbeat("pretrain: before the first log line")
        if enabled:
            self._until_first_log.start()

    def update(self, *, loss: float, lr: float, tokens_per_s: float, steps: int = 1) -> None:
        self._until_first_log.stop()
        self._bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}",
                              refresh=False)
        self._bar.update(steps)

    def write(self, line: str) -> None:
        """A line on stderr above the bar (shown also when the bar is off)."""
        tqdm.write(line, file=sys.stderr)

    def close(self) -> None:
        self._until_first_log.stop()
        try:
            self._bar.close()
        except BaseException:
            # A data loading process's death raises from torch's signal handler wherever the main
            # thread is; a second death, here, would cut the bar's line short and glue the
            # command's error line to it: end the line, then let the error go on.
            sys.stderr.write("\n")
            raise


class MetricsWindow:
    """The objective's stats summed, and the wall time, since the last log, for the `train/*`
    and `perf/*` scalars.

    The device's sums stay on the device until `scalars()` reads them, once per window.
    """

    def __init__(self, start_step: int, objective: Objective) -> None:
        self.objective = objective
        self.device_sums: torch.Tensor | None = None
        self.host_counts = [0] * len(objective.host_stats)
        self.grad_norm: torch.Tensor | None = None
        self.reset(start_step)

    def reset(self, start_step: int) -> None:
        self.device_sums = None
        self.host_counts = [0] * len(self.objective.host_stats)
        self.start_step, self.start_time = start_step, time.perf_counter()

    def add(self, device_sums: torch.Tensor, host_counts: list[int], grad_norm: torch.Tensor) -> None:
        """Count one step: its device stats' sums (on the device), host counts and gradient norm."""
        self.device_sums = device_sums.clone() if self.device_sums is None else self.device_sums + device_sums
        self.host_counts = [a + b for a, b in zip(self.host_counts, host_counts, strict=True)]
        self.grad_norm = grad_norm

    def pause(self, seconds: float) -> None:
        """Leave `seconds` (evaluation, saving) out of the window's tokens/s."""
        self.start_time += seconds

    def read(self) -> tuple[dict[str, float], float]:
        """The window's stats summed, by name, and the last step's gradient norm: one read of the device."""
        device = (self.device_sums if self.device_sums is not None
                  else torch.zeros(len(self.objective.device_stats)))
        grad_norm = self.grad_norm if self.grad_norm is not None else torch.zeros(())
        values = torch.cat([device.double(), grad_norm.detach().double().reshape(1)]).tolist()
        return self.objective.named_stats(values[:-1], self.host_counts), values[-1]

    def scalars(self, *, lr: float, loss_scale: float, skipped_steps: int) -> dict[str, float]:
        """The objective's `train/*` scalars (its terms, by name), then the run's and `perf/tokens_per_s`."""
        sums, grad_norm = self.read()
        elapsed = time.perf_counter() - self.start_time
        return {**self.objective.train_scalars(sums), "train/lr": lr, "train/grad_norm": grad_norm,
                "train/loss_scale": loss_scale, "train/skipped_steps": float(skipped_steps),
                "perf/tokens_per_s": sums["tokens"] / max(elapsed, 1e-9)}


def gpu_scalars(runtime: Runtime, tokens_per_s: float, token_flops: float) -> dict[str, float]:
    """`perf/mfu` (on a GPU of known peak) and `perf/peak_memory_gib` (on any GPU)."""
    if runtime.device.type != "cuda":
        return {}
    scalars = {"perf/peak_memory_gib": torch.cuda.max_memory_allocated(runtime.device) / 2**30}
    peak_flops = runtime.peak_flops()
    if peak_flops is not None:
        scalars["perf/mfu"] = tokens_per_s * token_flops / (peak_flops * runtime.world_size)
    return scalars


@dataclass
class StepStats:
    """One optimizer step, summed over its micro-batches and all processes.

    `device_sums` and `grad_norm` stay on the device: reading them (`sums`, `loss`) waits for
    the GPU, so the loop reads them only once per logging window.
    """

    device_sums: torch.Tensor  # float64 on the device, in the objective's device_stats order
    host_counts: list[int]  # its host_stats order, known before the batch was copied
    lr: float
    grad_norm: torch.Tensor  # on the device
    skipped: bool  # an fp16 overflow: no update was made and the schedule does not advance
    objective: Objective  # what names the sums

    @property
    def sums(self) -> dict[str, float]:
        """Every stat's sum as a number, by name (reads the device)."""
        return self.objective.named_stats(self.device_sums.tolist(), self.host_counts)

    @property
    def loss(self) -> float:
        """The objective's loss terms, each a mean over its count, weighed and added (`train/loss`)."""
        return self.objective.total_loss(self.sums)

    @property
    def tokens(self) -> int:
        """The step's real tokens, over all processes."""
        return self.host_counts[self.objective.host_stats.index("tokens")]


def remove_event_files(folder: Path) -> None:
    """Delete the TensorBoard event files bertpre wrote under `folder`, and the folders that
    leaves empty; anything else found there (yours) stays."""
    if not folder.is_dir():
        return
    for path in folder.rglob("events.out.tfevents.*"):
        if path.is_file() and not path.is_symlink():
            path.unlink()
    for path in sorted((path for path in folder.rglob("*") if path.is_dir()), key=lambda p: len(p.parts),
                       reverse=True) + [folder]:
        with contextlib.suppress(OSError):
            path.rmdir()  # only an empty folder goes
