"""One run, one folder, one config: the RUN folder's lock, what a resume may change, and what a
run writes there besides its checkpoints (config.yaml, data.json, the tokenizer copy)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

import bertpre
from bertpre.claim import Claim, real_path
from bertpre.config import Config
from bertpre.data import DataMixture
from bertpre.errors import UserError
from bertpre.folders import (
    RUN_MARKER,
    content_names,
    describe,
    enclosing_output,
    is_run_folder,
    is_run_without_config,
    real_out,
)
from bertpre.links import refuse_links
from bertpre.train.checkpoint import DATA_RECORD, LATEST, TOKENIZER_DIR, remove_partial_checkpoints
from bertpre.train.report import schedule_change_note
from bertpre.train.run_config import flatten, read_run_config

# Keys a resumed run may change: how it is watched, saved and fed, not what it computes.
# `train.max_steps` may only grow past the step reached.
RESUMABLE_KEYS = (
    "train.max_steps", "train.log_every", "train.eval_every", "train.save_every",
    "train.keep_last", "train.compile", "train.gradient_checkpointing", "train.out",
    "train.device", "train.deterministic", "data.path", "data.num_workers",
    "model.init_from",  # read only when a run starts: a resume loads its checkpoint
    "model.init_generator_from",  # the same
    "model.loss_chunk_rows",  # the same loss and gradients in chunks: memory, as gradient_checkpointing
)


# What a run writes in RUN besides its step folders (whose links `save_checkpoint` refuses):
# a symbolic link of yours at any of them is refused, never written through (`bertpre.links`).
RUN_PLACES = (RUN_MARKER, DATA_RECORD, TOKENIZER_DIR, "metrics.jsonl", "tensorboard", f"checkpoints/{LATEST}")


class RunLock:
    """The claim on RUN while a process trains in it (`RUN/.bertpre-claim`, see `bertpre.claim`).

    A claim whose process is gone (same host, pid not running) is stale and taken over with a
    note; one held by a live process, or by another host, refuses a second run in one line.
    """

    def __init__(self, run_dir: Path) -> None:
        self.claim = Claim(real_path(run_dir), "pretrain", label="run folder")
        self.path = self.claim.path

    def check_free(self) -> None:
        """Refuse now, before anything is read or written, if a live process holds the run."""
        self.claim.check_free()

    def acquire(self) -> None:
        """Take the claim (creating RUN if needed), replacing a stale one."""
        self.claim.take()

    def release(self) -> None:
        """Remove the claim if this process holds it (and RUN, if the claim made it and it is empty)."""
        self.claim.release()


def check_run_out(run_dir: Path, init_from: str | None = None, data_paths: list[Path] | None = None,
                  init_generator_from: str | None = None) -> None:
    """Refuse a RUN folder `pretrain` may not write: one that exists and is not empty and not a
    RUN, a RUN that lost its config.yaml, a file, a dangling link, or a folder inside (or holding) DATA, an export or the weights
    the run starts from, or one with a symbolic link where the run writes. Writes nothing."""
    target = real_out(run_dir)
    if target.exists():
        if not target.is_dir():
            raise UserError(f"--out {run_dir} exists and is not a folder; choose another --out")
        refuse_links(target, RUN_PLACES)
        if is_run_without_config(target):
            raise UserError(f"--out {run_dir} is a RUN folder without its config.yaml (it has checkpoints/, "
                            f"but {run_dir / RUN_MARKER} is missing), and a resume checks its config against "
                            "the run's own; put the run's config.yaml back (TensorBoard's Text tab shows it "
                            "as run/config), or start a new run with another --out")
        if content_names(target) and not is_run_folder(target):
            raise UserError(f"--out {run_dir} is {describe(target)}, not a RUN folder; `bertpre "
                            "pretrain` writes a new or empty folder, or resumes a RUN; choose "
                            "another --out")
    if (folder := enclosing_output(target)) is not None:
        where = f"the RUN folder {folder}" if is_run_folder(folder) else f"{describe(folder)} at {folder}"
        raise UserError(f"--out {run_dir} is inside {where}; choose a folder outside it")
    for source, what in [*((path, "the DATA folder") for path in data_paths or []),
                         *([(Path(init_from), "model.init_from")] if init_from else []),
                         *([(Path(init_generator_from), "model.init_generator_from")] if init_generator_from else [])]:
        source = real_path(source)
        if source == target or target in source.parents:
            raise UserError(f"--out {run_dir} holds {what} {source}, which this run reads; choose "
                            "another --out")


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



def prepare_run_folder(run_dir: Path, config: Config, mixture: DataMixture) -> None:
    """Create RUN, drop partial checkpoints, write config.yaml, data.json and the tokenizer copy."""
    run_dir.mkdir(parents=True, exist_ok=True)
    remove_partial_checkpoints(run_dir)
    config.save(run_dir / "config.yaml")
    write_data_record(run_dir, mixture)
    if not (run_dir / "tokenizer").exists():
        # Copied aside and renamed: a kill mid-copy must not leave a torn tokenizer that
        # every later resume would refuse.
        staging = run_dir / ".tokenizer.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(mixture.folders[0].tokenizer_dir, staging)
        staging.replace(run_dir / "tokenizer")


def write_data_record(run_dir: Path, mixture: DataMixture) -> None:
    """RUN/data.json: the DATA this (re)start reads, each source with its weight and its
    manifest (a set of shards' merged one, which lists the shards)."""
    record = {"sources": [
        {"name": name, "path": str(folder.path), "weight": weight,
         **({"shards": [str(path) for path in folder.shards]} if folder.shards else {}),
         "manifest": folder.manifest}
        for name, weight, folder in zip(mixture.names, mixture.weights, mixture.folders, strict=True)]}
    staging = run_dir / ".data.json.tmp"
    staging.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    staging.replace(run_dir / DATA_RECORD)


def run_texts(config: Config, mixture: DataMixture) -> dict[str, str]:
    """The resolved config and each DATA source's counts, for TensorBoard's Text tab."""
    text = yaml.safe_dump(config.to_dict(), sort_keys=False)
    sources = []
    for name, weight, folder in zip(mixture.names, mixture.weights, mixture.folders, strict=True):
        counts = folder.manifest.get("counts", {}) if isinstance(folder.manifest, dict) else {}
        sources.append(f"- **{name}** ({folder.path}, weight {weight:.3g}): "
                       f"{counts.get('documents', len(folder.train)):,} documents, "
                       f"{counts.get('tokens', 0):,} tokens, [UNK] share {counts.get('unk_share', 0):.4%}")
    return {"run/config": f"bertpre {bertpre.__version__}\n\n```yaml\n{text}```",
            "run/data": "\n".join(sources)}


def resume_notes(run_dir: Path, config: Config, step: int) -> list[str]:
    """What a resumed run tells its user: the keys it resumes with changed (checked: only those
    that may change) and, if train.max_steps changed, what that does to the schedule."""
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return []
    saved_config = read_run_config(saved)
    notes = [f"resuming with {change}" for change in check_resume_config(saved_config, config, step, run_dir)]
    if saved_config.train.max_steps != config.train.max_steps:
        notes.append(schedule_change_note(saved_config, config, step))
    return notes
