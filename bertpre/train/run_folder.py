"""One run, one folder, one config: the RUN folder's lock, and what a resume may change."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from bertpre.config import Config
from bertpre.errors import UserError
from bertpre.folders import process_alive

LOCK_FILE = ".lock"
# Keys a resumed run may change: how it is watched, saved and fed, not what it computes.
# `train.max_steps` may only grow past the step reached.
RESUMABLE_KEYS = (
    "train.max_steps", "train.log_every", "train.eval_every", "train.save_every",
    "train.keep_last", "train.compile", "train.gradient_checkpointing", "train.out",
    "train.device", "train.deterministic", "data.path", "data.num_workers",
    "model.init_from",  # read only when a run starts: a resume loads its checkpoint
)


class RunLock:
    """`RUN/.lock` while a process trains in RUN: host, pid and start time, as JSON.

    A lock whose process is gone (same host, pid not running) is stale and taken over; a lock
    held by a live process, or by another host, refuses a second run in one line.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self.held = False

    def check_free(self) -> None:
        """Refuse now, before anything is read or written, if a live process holds the lock."""
        holder = self._holder()
        if holder is not None and not self._stale(holder):
            raise UserError(
                f"run folder {self.path.parent} is in use by process {holder.get('pid')} on "
                f"{holder.get('host')} (since {holder.get('started')}); wait for it to finish, "
                f"or choose another --out (if that process is gone, delete {self.path})")

    def acquire(self) -> None:
        """Take the lock (creating RUN if needed), replacing a stale one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self.check_free()
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()  # stale: its process is gone
                continue
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump({"host": socket.gethostname(), "pid": os.getpid(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S")}, handle)
            self.held = True
            return
        self.check_free()

    def release(self) -> None:
        """Remove the lock if this process holds it."""
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self.held = False

    def _holder(self) -> dict[str, Any] | None:
        try:
            holder = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):  # torn by a kill mid-write: no live owner wrote it whole
            return {}
        return holder if isinstance(holder, dict) else {}

    @staticmethod
    def _stale(holder: dict[str, Any]) -> bool:
        if not holder:
            return True
        same_host = holder.get("host") == socket.gethostname()
        pid = holder.get("pid")
        return same_host and isinstance(pid, int) and not process_alive(pid)


def check_resume_config(saved: Config, new: Config, step: int, run_dir: Path) -> list[str]:
    """Refuse a resume whose config differs from the run's own, except in RESUMABLE_KEYS.

    Returns:
        One note per accepted change, e.g. "train.max_steps 100 → 200".
    """
    old_values, new_values = flatten(saved.to_dict()), flatten(new.to_dict())
    notes = []
    for key in {**old_values, **new_values}:
        old, value = old_values.get(key), new_values.get(key)
        if value == old:
            continue
        if key not in RESUMABLE_KEYS:
            raise UserError(
                f"run folder {run_dir} was started with {key}={old!r} and this config has "
                f"{value!r}; resume with the run's own value, or start a new run with another "
                "--out")
        if key == "train.max_steps" and value <= step:
            raise UserError(f"run folder {run_dir} is at step {step} already, so train.max_steps "
                            f"{value} leaves nothing to do; raise it above {step}, or start a new "
                            "run with another --out")
        if key not in ("train.out", "data.path"):
            notes.append(f"{key} {old!r} → {value!r}")
    return notes


def flatten(sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`{"train": {"max_steps": 10}}` → `{"train.max_steps": 10}`."""
    flat = {}
    for section, values in sections.items():
        if isinstance(values, dict):
            flat.update({f"{section}.{key}": value for key, value in values.items()})
        else:  # `phases`: one value, a list
            flat[section] = values
    return flat
