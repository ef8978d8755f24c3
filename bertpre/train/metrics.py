"""Training scalars: TensorBoard events, `metrics.jsonl` rows and the tqdm progress bar."""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

from tqdm import tqdm


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
