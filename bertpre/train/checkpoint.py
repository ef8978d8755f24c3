"""Checkpoints: write `RUN/checkpoints/step-NNNNNNNN/` atomically, find `latest`, load safely.

A checkpoint folder holds the model (`config.json` + `model.safetensors`, from
`save_pretrained`; config.json names bertpre's architecture too, `hf_format.record_architecture`), `optimizer.pt`, `scaler.pt` (fp16 only), one `rng_state_<rank>.pt` per
process and `trainer_state.json` (step, epoch, data position, skipped steps). Every `.pt` file
loads with `torch.load(weights_only=True)`; anything else is refused. `checksums.json`, written
last, holds every other file's size and sha256, and those of the run's tokenizer files: a
checkpoint is checked against it before it is used, so a truncated, replaced or bit-flipped file
is refused by name instead of being trained on or exported.
"""
from __future__ import annotations

import json
import os
import pickle
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bertpre.data.folder import check_tokenizer_files
from bertpre.errors import UserError, signals_held
from bertpre.inventory import Inventory, file_digest, foreign_paths, restore_kept, shown, swap_in
from bertpre.links import link_target
from bertpre.model.config import BertConfig
from bertpre.model.families import pretraining_config
from bertpre.model.hf_format import CONFIG_NAME, read_config, record_architecture
from bertpre.tokenizer.wordpiece import load_tokenizer
from bertpre.train.rng_state import capture_rng_state, restore_rng_state
from bertpre.train.runtime import Runtime, barrier

LATEST = "latest"
TRAINER_STATE = "trainer_state.json"
# Each process's recurrent memory (plm, clm: `objectives.plm.RecurrentMemory`), beside its RNG state.
MEMORY_FILE = "memory_{rank}.safetensors"
MEMORY_FILES = re.compile(re.escape(MEMORY_FILE).replace(re.escape("{rank}"), r"\d+"))
CHECKSUMS = "checksums.json"
# The files a checkpoint holds, for one written before checksums.json listed them.
CHECKPOINT_FILE = re.compile(r"config\.json|model\.safetensors|optimizer\.pt|scaler\.pt|trainer_state\.(json|pt)"
                             r"|rng_state_\d+\.pt|memory_\d+\.safetensors|checksums\.json")
TOKENIZER_DIR = "tokenizer"  # RUN/tokenizer: the run's copy of DATA's tokenizer files
DATA_RECORD = "data.json"  # RUN/data.json: the DATA folders the run read (`run_folder.write_data_record`)
# Fields that fix parameter shapes: a checkpoint must agree on all of them to be loaded.
def step_folder_name(step: int) -> str:
    return f"step-{step:08d}"


def _fsync_path(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _fsync_tree(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            _fsync_path(path)
    _fsync_path(folder)


def save_checkpoint(run_dir: Path, step: int, *, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None,
                    trainer_state: dict[str, Any], runtime: Runtime, keep_last: int,
                    rank_tensors: dict[str, dict[str, torch.Tensor]] | None = None) -> Path:
    """Write checkpoint `step` into `run_dir/checkpoints` and point `latest` at it.

    All processes call this (each saves its RNG state, and `rank_tensors`: file name pattern
    with `{rank}` → tensors, as safetensors); only the main process writes the rest.
    The folder is complete and synced before it gets its final name; `latest` is written
    after that, and old checkpoints beyond `keep_last` are removed last.
    """
    checkpoints = run_dir / "checkpoints"
    name = step_folder_name(step)
    staging = checkpoints / f".tmp-{name}"
    final = checkpoints / name
    if runtime.is_main:
        checkpoints.mkdir(parents=True, exist_ok=True)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
    barrier(runtime)
    torch.save(capture_rng_state(), staging / f"rng_state_{runtime.rank}.pt")
    for pattern, tensors in (rank_tensors or {}).items():
        save_file(tensors, str(staging / pattern.format(rank=runtime.rank)))
    barrier(runtime)
    if runtime.is_main:
        model.save_pretrained(staging)
        # the family by bertpre's name: a config.json's model_type may be another family's
        record_architecture(staging, pretraining_config(model).architecture)
        torch.save(optimizer.state_dict(), staging / "optimizer.pt")
        if scaler is not None:
            torch.save(scaler.state_dict(), staging / "scaler.pt")
        state = dict(trainer_state, step=step, world_size=runtime.world_size)
        (staging / TRAINER_STATE).write_text(json.dumps(state, indent=2), encoding="utf-8")
        write_checksums(staging, run_dir / TOKENIZER_DIR)
        _fsync_tree(staging)
        # The same step saved again (e.g. after a resume at it): files of yours in it move over.
        kept = foreign_paths(final, checkpoint_inventory(final)) if final.exists() else []
        with signals_held():
            swap_in(final, staging, checkpoints / f".old-{name}", kept)
        _fsync_path(checkpoints)
        pointer = checkpoints / f".{LATEST}.tmp"
        pointer.write_text(name + "\n", encoding="utf-8")
        _fsync_path(pointer)
        os.replace(pointer, checkpoints / LATEST)
        _fsync_path(checkpoints)
        prune_checkpoints(checkpoints, keep_last)
    barrier(runtime)
    return final


def write_checksums(folder: Path, tokenizer: Path) -> None:
    """Record every file of `folder` and of the run's `tokenizer` folder in `folder/checksums.json`."""
    record: dict[str, Any] = {"files": {path.name: file_digest(path) for path in sorted(folder.iterdir())
                                        if path.is_file() and path.name != CHECKSUMS}}
    if tokenizer.is_dir():
        record[TOKENIZER_DIR] = {path.name: file_digest(path) for path in sorted(tokenizer.iterdir())
                                 if path.is_file()}
    (folder / CHECKSUMS).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def read_checksums(folder: Path) -> dict[str, dict[str, dict[str, Any]]] | None:
    """`folder/checksums.json` checked for shape; None for a checkpoint written before bertpre
    recorded checksums."""
    path = folder / CHECKSUMS
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        record = None

    def well_formed(files: object) -> bool:
        return isinstance(files, dict) and all(
            isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("bytes"), int) and not isinstance(entry.get("bytes"), bool)
            for entry in files.values())

    if not (isinstance(record, dict) and well_formed(record.get("files"))
            and well_formed(record.get(TOKENIZER_DIR, {}))):
        raise UserError(f"{path} is damaged (not the checkpoint's list of file sizes and sha256s); "
                        f"{USE_ANOTHER_CHECKPOINT}")
    return record


USE_ANOTHER_CHECKPOINT = ("use another checkpoint: pass its checkpoints/step-N folder, or write its "
                          "step-N name into checkpoints/latest to resume from it")


def restore_tokenizer(run_dir: Path) -> str:
    """How to get a missing or damaged RUN/tokenizer back: it is a copy of the tokenizer of the
    DATA folder the run trained on, which RUN/data.json names."""
    try:
        source = json.loads((run_dir / DATA_RECORD).read_text(encoding="utf-8"))["sources"][0]
        data = Path((source.get("shards") or [source["path"]])[0])  # a shard set's tokenizer is its first's
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return f"copy the tokenizer/ folder of the DATA folder the run trained on into {run_dir}"
    return (f"copy it back from the DATA folder the run trained on ({data}, as {run_dir / DATA_RECORD} "
            f"records): cp -r {shlex.quote(str(data / TOKENIZER_DIR))} {shlex.quote(str(run_dir))}/")


def is_training_state(name: str) -> bool:
    """Whether a checkpoint's file is state only a resume reads (optimizer, scaler, RNG, recurrent
    memory), not the weights, config and step that export, evaluate and finetune read."""
    return name.endswith(".pt") or MEMORY_FILES.fullmatch(name) is not None


def verify_checkpoint(folder: Path, *, weights_only: bool = False, tokenizer: Path | None = None) -> None:
    """Compare the checkpoint's files (with `weights_only`, not its training state, which the
    caller does not read) and the run's `tokenizer` files with the sizes and sha256s in
    `checksums.json`.

    Raises:
        UserError: a file is missing, or its size or content differs from the record.
    """
    record = read_checksums(folder) or {"files": {}}
    places = [(folder, record["files"], USE_ANOTHER_CHECKPOINT)]
    if tokenizer is not None:  # every checkpoint of the run reads it: no other checkpoint helps
        fix = (f"it is part of the run's tokenizer {tokenizer}, which every checkpoint of the run reads; "
               f"{restore_tokenizer(tokenizer.parent)}")
        if TOKENIZER_DIR in record and not tokenizer.is_dir():
            raise UserError(f"the run's tokenizer folder {tokenizer} is missing (every checkpoint of the run "
                            f"reads it); {restore_tokenizer(tokenizer.parent)}")
        if TOKENIZER_DIR in record:
            places.append((tokenizer, record[TOKENIZER_DIR], fix))
        elif tokenizer.is_dir():  # a run from before checksums: its files agree
            check_tokenizer_files(tokenizer, load_tokenizer(tokenizer), None, fix)
    for place, files, fix in places:
        for name, entry in files.items():
            path = place / name
            if weights_only and place == folder and is_training_state(name):
                continue
            if Path(name).name != name:  # a record naming a path outside the folder is damage
                raise UserError(f"{folder / CHECKSUMS} is damaged (names {name!r}); {USE_ANOTHER_CHECKPOINT}")
            if not path.is_file():
                raise UserError(f"{path} is missing (the checkpoint's {CHECKSUMS} lists it); {fix}")
            size = path.stat().st_size
            if size != entry["bytes"] or file_digest(path)["sha256"] != entry["sha256"]:
                what = f"{size:,} bytes, not {entry['bytes']:,}" if size != entry["bytes"] else "its sha256 differs"
                raise UserError(f"{path} is damaged ({what}, as {folder / CHECKSUMS} recorded); {fix}")


def prune_checkpoints(checkpoints: Path, keep_last: int) -> list[Path]:
    """Remove the oldest `step-*` folders beyond `keep_last`, never the one `latest` names, nor
    one that holds files bertpre did not write there, nor a symbolic link of yours (`bertpre.links`):
    each stays whole, with a note."""
    latest = latest_checkpoint(checkpoints.parent)
    folders = sorted(p for p in checkpoints.glob("step-*") if p.is_dir())
    removed = []
    for folder in folders[:-keep_last] if keep_last > 0 else []:
        if latest is not None and folder.resolve() == latest.resolve():
            continue
        if folder.is_symlink():
            print(f"note: kept {folder.name} beyond train.keep_last: it is a symbolic link (to "
                  f"{link_target(folder)}), and bertpre removes nothing through a link; remove the link yourself "
                  "when you no longer need it", file=sys.stderr)
            continue
        if yours := foreign_paths(folder, checkpoint_inventory(folder)):
            print(f"note: kept checkpoint {folder.name} beyond train.keep_last: it holds files bertpre "
                  f"did not write ({shown(yours)}); delete it yourself when you no longer need them",
                  file=sys.stderr)
            continue
        shutil.rmtree(folder)
        removed.append(folder)
    return removed


def checkpoint_inventory(folder: Path) -> Inventory:
    """What bertpre wrote in a checkpoint folder: the files `checksums.json` lists and itself; in
    a checkpoint from before checksums, the files a checkpoint holds, by name."""
    record = read_checksums_quietly(folder)
    if record is not None:
        return Inventory("pretrain", {name: {} for name in [*record, CHECKSUMS]})
    return Inventory("pretrain", {path.name: {} for path in folder.iterdir() if CHECKPOINT_FILE.fullmatch(path.name)})


def read_checksums_quietly(folder: Path) -> list[str] | None:
    """The file names `folder/checksums.json` lists, or None where it is missing or unreadable."""
    try:
        files = json.loads((folder / CHECKSUMS).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [name for name in files if isinstance(name, str)] if isinstance(files, dict) else None


def remove_partial_checkpoints(run_dir: Path) -> list[Path]:
    """Delete `.tmp-step-*` folders a killed save left behind (never a finished checkpoint), and
    an `.old-step-*` one a killed re-save left, once it gave back the files of yours it held."""
    checkpoints = run_dir / "checkpoints"
    for aside in sorted(checkpoints.glob(".old-step-*")):
        restore_kept(aside, checkpoints / aside.name[len(".old-"):])
        shutil.rmtree(aside, ignore_errors=True)
    partial = sorted(checkpoints.glob(".tmp-step-*"))
    for folder in partial:
        shutil.rmtree(folder, ignore_errors=True)
    return partial


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint folder `run_dir/checkpoints/latest` names, or None when there is none.

    This is the one reader of the pointer: training resumes from it, and export, fill-mask and
    evaluate find a run's model through `find_checkpoint`, which calls it.
    """
    pointer = run_dir / "checkpoints" / LATEST
    if not pointer.is_file():
        return None
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        name = ""
    if not re.fullmatch(r"step-\d{8,}", name):
        raise UserError(f"{pointer} does not name a checkpoint (it should hold a step-NNNNNNNN folder "
                        "name; it is damaged); write the name of a complete step-* folder into it, "
                        "or pass a checkpoints/step-N folder")
    folder = run_dir / "checkpoints" / name
    if not (folder / CONFIG_NAME).is_file():
        raise UserError(f"{pointer} names {name!r}, which is missing or incomplete; point it at a "
                        "complete step-* folder, or pass a checkpoints/step-N folder")
    return folder


def load_safely(path: Path) -> Any:
    """`torch.load(weights_only=True)` with errors for people; never runs pickled code."""
    with path.open("rb") as handle:
        if handle.read(4) != b"PK\x03\x04":  # torch.save writes a zip archive
            raise UserError(f"checkpoint file {path} cannot be read (not a file torch.save wrote); it is "
                            f"damaged, {USE_ANOTHER_CHECKPOINT}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(f"checkpoint file {path} is not safe to load (it holds more than tensors "
                        "and plain data); delete it or resume from another checkpoint") from None
    except Exception as error:  # noqa: BLE001 - torch.load of a damaged file raises many kinds
        detail = " ".join(str(error).split())[:160] or type(error).__name__
        raise UserError(f"checkpoint file {path} cannot be read ({detail}); it is damaged, "
                        f"{USE_ANOTHER_CHECKPOINT}") from None


def check_same_shape(saved: BertConfig, current: BertConfig, folder: Path) -> None:
    """Refuse a checkpoint whose parameters cannot fit the current model."""
    for name in current.shape_fields():
        if getattr(saved, name) != getattr(current, name):
            raise UserError(
                f"checkpoint {folder} is for a different model ({name} {getattr(saved, name)!r}, "
                f"config has {getattr(current, name)!r}); start a new run with another --out"
            )


def load_checkpoint(folder: Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler | None, runtime: Runtime) -> dict[str, Any]:
    """Restore model, optimizer, scaler and this process's RNG from `folder`.

    Every file is read (and refused if unsafe) before any state is changed.

    Returns:
        The trainer state (step, epoch, position, skipped steps, ...).
    """
    if not (folder / TRAINER_STATE).is_file():
        raise UserError(f"checkpoint {folder} has no {TRAINER_STATE}; it is incomplete (export it, "
                        "or resume from another checkpoint)")
    verify_checkpoint(folder, tokenizer=folder.parent.parent / TOKENIZER_DIR)
    state = read_trainer_state(folder)
    current = model.config if isinstance(model.config, BertConfig) else BertConfig.from_hf_dict(
        model.config.to_hf_dict())  # an XLNet model's shape under BertConfig's names
    check_same_shape(read_config(folder), current, folder)
    # Every .pt file is checked, used or not: an unsafe file means the folder is not trusted.
    loaded = {path.name: load_safely(path) for path in sorted(folder.glob("*.pt"))}
    if "optimizer.pt" not in loaded:
        raise UserError(f"checkpoint {folder} has no optimizer.pt; it is incomplete")
    optimizer_state = loaded["optimizer.pt"]
    scaler_state = loaded.get("scaler.pt")
    rng_state = loaded.get(f"rng_state_{runtime.rank}.pt")
    for name, value, keys in [("optimizer.pt", optimizer_state, OPTIMIZER_KEYS),
                              (f"rng_state_{runtime.rank}.pt", rng_state, RNG_KEYS)]:
        if value is not None and not (isinstance(value, dict) and keys <= set(value)):
            raise UserError(f"checkpoint file {folder / name} is damaged or from another setup (it lacks "
                            f"{', '.join(sorted(keys))}); {USE_ANOTHER_CHECKPOINT}")
    if rng_state is not None and not all(isinstance(rng_state[key], torch.Tensor) for key in RNG_KEYS):
        raise UserError(f"checkpoint file {folder / f'rng_state_{runtime.rank}.pt'} is damaged (its RNG "
                        f"states are not tensors); {USE_ANOTHER_CHECKPOINT}")

    saved_model = type(model).from_pretrained(folder)
    # A flipped exponent bit makes a weight inf or NaN: refuse it here rather than as a divergence
    # one step into the resumed run (a checkpoint without checksums.json cannot be checked otherwise).
    for name, tensors in [("model.safetensors", saved_model.state_dict()),
                          ("optimizer.pt", dict(enumerate(tensors_in(optimizer_state))))]:
        bad = next((key for key, tensor in tensors.items()
                    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())), None)
        if bad is not None:
            raise UserError(f"checkpoint file {folder / name} is damaged (it holds a value that is not "
                            f"finite{f', in {bad}' if isinstance(bad, str) else ''}); {USE_ANOTHER_CHECKPOINT}")
    model.load_state_dict(saved_model.state_dict())
    for name, restore in [("optimizer.pt", lambda: optimizer.load_state_dict(optimizer_state)),
                          ("scaler.pt", lambda: scaler is not None and scaler_state is not None
                           and scaler.load_state_dict(scaler_state)),
                          (f"rng_state_{runtime.rank}.pt", lambda: rng_state is not None
                           and restore_rng_state(rng_state))]:
        try:
            restore()
        except (KeyError, ValueError, TypeError, RuntimeError, IndexError, AttributeError) as error:
            raise UserError(f"checkpoint file {folder / name} is damaged or from another setup "
                            f"({type(error).__name__}: {' '.join(str(error).split())[:120]}); "
                            f"{USE_ANOTHER_CHECKPOINT}") from None
    return state


def read_rank_tensors(folder: Path, pattern: str, rank: int) -> dict[str, torch.Tensor] | None:
    """This process's `rank_tensors` file of a checkpoint (None if it has none)."""
    path = folder / pattern.format(rank=rank)
    if not path.is_file():
        return None
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise UserError(f"checkpoint file {path} cannot be read ({' '.join(str(error).split())[:120]}); "
                        f"it is damaged, {USE_ANOTHER_CHECKPOINT}") from None


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor inside nested dicts and lists (an optimizer's state)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [tensor for item in value.values() for tensor in tensors_in(item)]
    if isinstance(value, (list, tuple)):
        return [tensor for item in value for tensor in tensors_in(item)]
    return []


# What optimizer.pt and rng_state_<rank>.pt must hold to be restored.
OPTIMIZER_KEYS = frozenset({"state", "param_groups"})
RNG_KEYS = frozenset({"python_version", "python", "python_gauss", "numpy", "numpy_position", "numpy_gauss",
                      "torch"})


# What trainer_state.json must hold: integer counters, none negative (world_size at least 1).
TRAINER_STATE_INTEGERS = {"step": 0, "epoch": 0, "position": 0, "skipped_steps": 0}
TRAINER_STATE_OPTIONAL = {"tokens_seen": 0, "phase": 0, "world_size": 1}


def read_trainer_state(folder: Path) -> dict[str, Any]:
    """`folder/trainer_state.json`, checked: a JSON object of non-negative integer counters whose
    step is the folder's own (step-NNNNNNNN)."""
    path = folder / TRAINER_STATE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{path} is not valid JSON (damaged); {USE_ANOTHER_CHECKPOINT}") from None
    if not isinstance(state, dict):
        raise UserError(f"{path} must be a JSON object of counters (step, epoch, ...); it is damaged, "
                        f"{USE_ANOTHER_CHECKPOINT}")
    for key, low in [*TRAINER_STATE_INTEGERS.items(),
                     *((key, low) for key, low in TRAINER_STATE_OPTIONAL.items() if key in state)]:
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise UserError(f"{path}: {key} must be an integer of at least {low}, got {repr(value)[:60]}; the "
                            f"file is damaged, {USE_ANOTHER_CHECKPOINT}")
    if folder.name.startswith("step-") and folder.name != step_folder_name(state["step"]):
        raise UserError(f"{path} says step {state['step']}, but its folder is {folder.name}; the file "
                        f"is damaged or was copied from another checkpoint, {USE_ANOTHER_CHECKPOINT}")
    return state
