"""A `bertpre finetune` --out folder: its marker, `run.json` (the run whose results it holds:
source, task files, columns, settings), `results.json` (the command's report), `results.jsonl` (a
line for each finished piece of work, found again by its key) and `predictions/` (each piece of
work's predictions, an example a line; question answering's n best spans in files of their own)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertpre.claim import Claim, real_path
from bertpre.errors import UserError
from bertpre.finetune.kinds import task_kind
from bertpre.folders import MARKERS, content_names, real_out
from bertpre.links import refuse_links

if TYPE_CHECKING:
    from bertpre.finetune.tasks import Examples

MARKER = MARKERS["finetune"][0]
RESULTS_FILE = "results.json"
SWEEP_FILE = "results.jsonl"
RUN_FILE = "run.json"
PREDICTIONS_FOLDER = "predictions"
SPLIT_OPTIONS = {"train": "--train", "validation": "--validation", "test": "--test"}
COLUMN_OPTIONS = {"text": "--text-column", "text_pair": "--text-pair-column", "label": "--label-column"}


def finished_work(folder: Path, key: str) -> dict[str, Any] | None:
    """The recorded result with this key, if `results.jsonl` has one (damaged lines are skipped)."""
    path = folder / SWEEP_FILE
    if not path.is_file():
        return None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line torn by a kill: its work is simply done again
        if isinstance(record, dict) and record.get("key") == key:
            return record
    return None


def check_finetune_out(out: Path, sources: list[Any], claim: Claim | None = None) -> Path:
    """`--out` may be new, empty or an earlier `bertpre finetune` folder, and may not hold what
    the command reads. Writes nothing."""
    target = real_out(out)
    for source in sources:
        if source is None:
            continue
        source = real_path(source)
        if source == target or target in source.parents:
            raise UserError(f"--out {out} holds {source}, which this command reads; choose another --out")
    if target.exists():
        if not target.is_dir():
            raise UserError(f"--out {out} exists and is not a folder; choose another --out")
        (claim or Claim(target, "finetune")).check_free()
        if content_names(target) and not (target / MARKER).is_file():
            raise UserError(f"--out {out} holds files `bertpre finetune` did not write; choose a new "
                            "or empty folder, or an earlier finetune --out")
    else:
        ancestor = next(parent for parent in target.parents if parent.exists())
        if not ancestor.is_dir():
            raise UserError(f"cannot write --out {out}: {ancestor} is a file, not a folder")
    return target


def check_same_run(out: Path, target: Path, run: dict[str, Any]) -> None:
    """Refuse, in one line naming the first difference, an --out that holds another run's results
    (another source, task, task files, columns or settings); the same run may add seeds or reuse
    them. A folder without `run.json` (new, or from bertpre before it) takes this run's. Writes nothing."""
    path = target / RUN_FILE
    if not path.is_file():
        return
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
        difference = run_difference(recorded, run)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UserError(f"--out {out}: {path} (the run its results are of) cannot be read; put it back "
                        "as `bertpre finetune` wrote it, or choose another --out") from None
    if difference is not None:
        raise UserError(f"--out {out} holds another run's results: {difference}; an --out holds one run "
                        "(the same command again adds seeds or reuses them): choose another --out")


def run_difference(recorded: dict[str, Any], run: dict[str, Any]) -> str | None:
    """The first way `run` differs from the `recorded` one, in words; None when it is the same run."""
    if recorded["source"] != run["source"]:
        return f"it fine-tuned {recorded['source']}, this run {run['source']}"
    if recorded["benchmark"] != run["benchmark"] or list(recorded["tasks"]) != list(run["tasks"]):
        def tasks(record: dict[str, Any]) -> str:
            return f"{record['benchmark'].upper()} " + ", ".join(record["tasks"]) if record["benchmark"] else "one task"
        return f"it holds {tasks(recorded)}, this run {tasks(run)}"
    for name, task in run["tasks"].items():
        old = recorded["tasks"][name]
        where = f"{name}: " if run["benchmark"] else ""
        if old["task"] != task["task"]:
            return f"{where}its --task is {old['task']}, this run's {task['task']}"
        for split in sorted({*old["files"], *task["files"]}, key=split_order):
            option = SPLIT_OPTIONS.get(split, f"{split} file")
            before, now = old["files"].get(split), task["files"].get(split)
            if before is None or now is None:
                return (f"{where}it has no {option}, this run has {now['path']}" if before is None
                        else f"{where}it has {option} {before['path']}, this run none")
            if before["sha256"] != now["sha256"]:
                what = (f"{before['path']} had sha256 {before['sha256'][:12]} and now has {now['sha256'][:12]}"
                        if before["path"] == now["path"] else
                        f"{before['path']} has sha256 {before['sha256'][:12]}, this run's {now['path']} "
                        f"{now['sha256'][:12]}")
                return f"{where}its {option} {what}"
        for column, option in COLUMN_OPTIONS.items():
            if old["columns"].get(column) != task["columns"].get(column):
                return (f"{where}its {option} is {shown_value(old['columns'].get(column))}, "
                        f"this run's {shown_value(task['columns'].get(column))}")
        before_qa, now_qa = old.get("question_answering") or {}, task.get("question_answering") or {}
        for setting in sorted({*before_qa, *now_qa}):  # --task qa's windows, answers and scoring
            if before_qa.get(setting) != now_qa.get(setting):
                return (f"{where}its {setting} is {shown_value(before_qa.get(setting))}, "
                        f"this run's {shown_value(now_qa.get(setting))}")
    for setting in sorted({*recorded["settings"], *run["settings"]}):
        before, now = recorded["settings"].get(setting), run["settings"].get(setting)
        if before != now:
            return f"its {setting} is {shown_value(before)}, this run's {shown_value(now)}"
    return None


def split_order(split: str) -> tuple[int, str]:
    """train, validation, test, then a benchmark's other scored files by name."""
    order = list(SPLIT_OPTIONS)
    return (order.index(split) if split in order else len(order), split)


def shown_value(value: Any) -> str:
    return "the default" if value is None else str(value)


def write_json(path: Path, values: dict[str, Any]) -> None:
    """Write JSON beside `path` and rename it into place: a reader sees the old file or the new."""
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        staging.write_text(json.dumps(values, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        staging.replace(path)
    finally:  # a stop signal or a full disk: no half-written file stays beside it
        staging.unlink(missing_ok=True)


def write_lines(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """JSON lines written beside `path` and renamed into place (folders made as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with staging.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    staging.replace(path)


def prediction_rows(task: str, examples: Examples, seeds: list[int], per_seed: list[list[Any]]
                    ) -> Iterator[dict[str, Any]]:
    """An example a row: its number in the file, its input (text and pair, or the words), the gold
    label (value, tags) and each seed's prediction."""
    kind = task_kind(task)
    for index in range(len(examples)):
        row: dict[str, Any] = {"index": index, **kind.inputs(examples, index)}
        row["gold"] = examples.labels[index]
        row["predicted"] = {str(seed): predictions[index] for seed, predictions in zip(seeds, per_seed, strict=True)}
        yield row


def append_line(path: Path, values: dict[str, Any]) -> None:
    """One JSON line, written whole and flushed to disk before the command reports success; never
    appended through a symbolic link made while the command ran (`bertpre.links`)."""
    refuse_links(path.parent, [path.name])
    line = json.dumps(values, ensure_ascii=False) + "\n"
    if path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
        line = "\n" + line  # after a line torn by a kill, start a fresh one
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
