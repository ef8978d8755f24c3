"""Downstream scores over a pretraining run: which of a RUN's checkpoints to evaluate, whether the
run is still going, and the scores written into the RUN's TensorBoard at each checkpoint's step."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bertpre.claim import CLAIM_FILE, is_stale, read_holder
from bertpre.errors import UserError
from bertpre.folders import is_run_folder

STEP_FOLDER = re.compile(r"^step-(\d+)$")
DOWNSTREAM_FILE_SUFFIX = ".downstream"  # the event files `bertpre finetune` adds to RUN/tensorboard


def parse_checkpoints(spec: str) -> tuple[str, int]:
    """`latest`, `all` or `every:N` → (kind, N)."""
    if spec in ("latest", "all"):
        return spec, 0
    kind, _, number = spec.partition(":")
    if kind == "every" and number.isdigit() and int(number) > 0:
        return "every", int(number)
    raise UserError(f"--checkpoints {spec!r} must be latest, all or every:N (N a positive step count)")


def is_run(folder: Path) -> bool:
    """A RUN folder: one with checkpoints/, or one a pretraining has begun and not saved in yet
    (its config.yaml, or before that its live claim), which a watcher waits on; never a model folder."""
    if (folder / "config.json").is_file():
        return False
    return (folder / "checkpoints").is_dir() or is_run_folder(folder) or run_in_progress(folder)


def run_checkpoints(run: Path, spec: str) -> list[tuple[int, Path]]:
    """The checkpoints of `run` that `spec` chooses, oldest first, as (step, folder); `latest` is
    the newest complete one, with any incomplete ones after it (which a sweep says it skips)."""
    kind, every = parse_checkpoints(spec)
    folders = (run / "checkpoints").iterdir() if (run / "checkpoints").is_dir() else ()  # none saved yet
    found = sorted((int(match.group(1)), folder) for folder in folders
                   if (match := STEP_FOLDER.match(folder.name)) and folder.is_dir())
    if kind == "latest":
        complete = [index for index, (_, folder) in enumerate(found) if not missing_files(folder)]
        return found[complete[-1]:] if complete else found
    if kind == "every":
        return [(step, folder) for step, folder in found if step % every == 0]
    return found


def missing_files(checkpoint: Path) -> list[str]:
    """What a checkpoint that a sweep scores must hold and `checkpoint` lacks."""
    return [name for name in ("config.json", "trainer_state.json") if not (checkpoint / name).is_file()]


def run_in_progress(run: Path) -> bool:
    """Whether a live `bertpre pretrain` holds the run's claim."""
    holder = read_holder(run / CLAIM_FILE)
    return holder is not None and holder.get("command") == "pretrain" and not is_stale(holder)


def task_name(train: Path) -> str:
    """The task's name in TensorBoard tags: the training file's folder for a file named like a
    split (sst2/train.tsv → sst2), else the file's stem."""
    stem = train.name.split(".")[0]
    generic = {"train", "training", "dev", "validation", "test", "data"}
    name = train.resolve().parent.name if stem.lower() in generic else stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "task"


def log_to_tensorboard(run: Path, task: str, result: dict[str, Any]) -> None:
    """Each metric's mean at `downstream/TASK/METRIC` and its std at `downstream_std/TASK/METRIC`,
    at the checkpoint's pretraining step, in an event file of its own in RUN/tensorboard (where
    the run's Custom Scalars layout charts them beside the loss)."""
    step = result.get("checkpoint_step")
    if step is None:
        return
    from torch.utils.tensorboard import SummaryWriter  # slow to import

    writer = SummaryWriter(str(run / "tensorboard"), filename_suffix=DOWNSTREAM_FILE_SUFFIX)
    try:
        for metric, values in result["metrics"].items():
            suffix = f"{task}/{metric}" if result["mode"] == "full" else f"{task}_probe/{metric}"
            if values["mean"] is not None:
                writer.add_scalar(f"downstream/{suffix}", values["mean"], step)
            if values["std"] is not None:
                writer.add_scalar(f"downstream_std/{suffix}", values["std"], step)
    finally:
        writer.close()
