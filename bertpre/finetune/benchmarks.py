"""GLUE and CLUE as their files come: each task's folder, file names, columns and the metrics the
references report, read into `TaskData`; and the benchmark's score (the mean of the task scores,
a task's score being the mean of its reported metrics).

GLUE's TSV files are the download script's (`CoLA/train.tsv` has no header; MNLI is scored on
`dev_matched.tsv` and `dev_mismatched.tsv` from one trained model); CLUE's are JSON lines
(`afqmc_public/train.json`, ...). Test files carry no labels in either, so the dev files are
scored, as the references report."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertpre.errors import UserError
from bertpre.finetune.kinds import task_kind
from bertpre.finetune.tasks import (
    Examples,
    TaskData,
    describe_file,
    json_records,
    label_value,
    text_value,
)


@dataclass(frozen=True)
class BenchmarkTask:
    """One task of a benchmark: where its files are, how to read them, what to report."""

    name: str
    folders: tuple[str, ...]  # the names its folder goes by, in the order they are looked for
    task: str  # classification or regression
    train: str
    scored: tuple[tuple[str, str], ...]  # (metric suffix, file): ("", "dev.tsv"), or MNLI's m and mm
    read: Callable[[Path], tuple[Examples, int]]  # → the examples and how many rows were skipped
    metrics: tuple[str, ...]  # the reported metrics, each averaged over suffixes into the task score


@dataclass(frozen=True)
class Benchmark:
    name: str
    option: str
    tasks: dict[str, BenchmarkTask]
    default: tuple[str, ...]  # the tasks run when --tasks is not given (those present of these)


def glue_reader(text: str | int, pair: str | int | None, label: str | int, *, header: bool = True,
                regression: bool = False) -> Callable[[Path], tuple[Examples, int]]:
    """GLUE's TSV: tab-separated, quotes are text. Columns by header name (by index without one);
    a row with another number of fields than the header (QQP has a few) is skipped and counted."""
    def read(path: Path) -> tuple[Examples, int]:
        lines = [line.removesuffix("\r") for line in read_text(path).split("\n")]
        rows = [line.split("\t") for line in lines if line.strip()]
        if header:
            if not rows:
                raise UserError(f"{path} holds no examples")
            names, rows = rows[0], rows[1:]
            missing = [name for name in (text, pair, label) if name is not None and name not in names]
            if missing:
                raise UserError(f"{path} has no column {missing[0]!r} (its header: {', '.join(names[:12])}); "
                                "is it the GLUE download's file?")
            width = len(names)
            places = [None if name is None else names.index(name) for name in (text, pair, label)]
        else:
            width = max(int(place) for place in (text, label)) + 1
            places = [text, pair, label]
        texts, pairs, labels, skipped = [], [] if pair is not None else None, [], 0
        for number, fields in enumerate(rows, start=2 if header else 1):
            if (header and len(fields) != width) or len(fields) < width:
                skipped += 1
                continue
            texts.append(text_value(fields[places[0]], path, number, str(text)))
            if pairs is not None:
                pairs.append(text_value(fields[places[1]], path, number, str(pair)))
            labels.append(label_value(fields[places[2]], path, number, str(label), regression=regression))
        if not texts:
            raise UserError(f"{path} holds no examples")
        return Examples(texts, pairs, labels), skipped
    return read


def clue_reader(text: str, pair: str | None, label: str, *,
                make: Callable[[dict[str, Any]], tuple[str, str | None]] | None = None,
                ) -> Callable[[Path], tuple[Examples, int]]:
    """CLUE's JSON lines. Rows labelled "-" (annotators disagreed, in CMNLI and OCNLI) are skipped
    and counted, as CLUE's own baselines drop them."""
    def read(path: Path) -> tuple[Examples, int]:
        texts, pairs, labels, skipped = [], [] if pair is not None else None, [], 0
        for number, record in json_records(read_text(path).split("\n"), path):
            if label not in record:
                raise UserError(f"{path}: line {number} has no {label!r}; is it the CLUE download's file?")
            if record[label] == "-":
                skipped += 1
                continue
            if make is not None:
                first, second = make(record)
            else:
                first = text_value(record.get(text), path, number, text)
                second = None if pair is None else text_value(record.get(pair), path, number, pair)
            texts.append(first)
            if pairs is not None:
                pairs.append(second)
            labels.append(label_value(record[label], path, number, label, regression=False))
        if not texts:
            raise UserError(f"{path} holds no examples")
        return Examples(texts, pairs, labels), skipped
    return read


def csl_pair(record: dict[str, Any]) -> tuple[str, str]:
    """CSL: does this keyword list belong to this abstract? The keywords, space-joined, then the abstract."""
    keywords = record.get("keyword")
    if not isinstance(keywords, list) or not isinstance(record.get("abst"), str):
        raise UserError("a CSL line needs a list in 'keyword' and text in 'abst'")
    return " ".join(map(str, keywords)), record["abst"]


def wsc_text(record: dict[str, Any]) -> tuple[str, None]:
    """CLUEWSC2020: does the pronoun refer to the noun? The text with the noun marked _…_ and
    the pronoun […], as CLUE's baseline marks them."""
    text, target = record.get("text"), record.get("target")
    try:
        spans = [(int(target["span1_index"]), str(target["span1_text"]), "_", "_"),
                 (int(target["span2_index"]), str(target["span2_text"]), "[", "]")]
    except (TypeError, KeyError, ValueError):
        raise UserError("a CLUEWSC2020 line needs 'text' and a 'target' with span1/span2 index and text") from None
    if not isinstance(text, str):
        raise UserError("a CLUEWSC2020 line needs 'text'")
    for start, span, left, right in sorted(spans, reverse=True):  # the later span first: indices hold
        text = text[:start] + left + text[start:start + len(span)] + right + text[start + len(span):]
    return text, None


def read_text(path: Path) -> str:
    if not path.is_file():
        raise UserError(f"{path}: no such file" if not path.exists() else f"{path} is not a file")
    try:
        return path.read_text(encoding="utf-8-sig")  # MRPC's files begin with a byte-order mark
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None


def _glue(name: str, folder: str, reader, metrics: tuple[str, ...], *, task: str = "classification",
          scored: tuple[tuple[str, str], ...] = (("", "dev.tsv"),)) -> BenchmarkTask:
    return BenchmarkTask(name, (folder, name, name.upper()), task, "train.tsv", scored, reader, metrics)


GLUE = Benchmark("glue", "--glue-dir", {task.name: task for task in (
    _glue("cola", "CoLA", glue_reader(3, None, 1, header=False), ("mcc",)),
    _glue("sst2", "SST-2", glue_reader("sentence", None, "label"), ("accuracy",)),
    _glue("mrpc", "MRPC", glue_reader("#1 String", "#2 String", "Quality"), ("f1", "accuracy")),
    _glue("qqp", "QQP", glue_reader("question1", "question2", "is_duplicate"), ("accuracy", "f1")),
    _glue("stsb", "STS-B", glue_reader("sentence1", "sentence2", "score", regression=True),
          ("pearson", "spearman"), task="regression"),
    _glue("mnli", "MNLI", glue_reader("sentence1", "sentence2", "gold_label"), ("accuracy",),
          scored=(("m", "dev_matched.tsv"), ("mm", "dev_mismatched.tsv"))),
    _glue("qnli", "QNLI", glue_reader("question", "sentence", "label"), ("accuracy",)),
    _glue("rte", "RTE", glue_reader("sentence1", "sentence2", "label"), ("accuracy",)),
    _glue("wnli", "WNLI", glue_reader("sentence1", "sentence2", "label"), ("accuracy",)),
)}, default=("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "qnli", "rte"))  # WNLI left out, as BERT's paper does


def _clue(name: str, reader) -> BenchmarkTask:
    return BenchmarkTask(name, (f"{name}_public", name, name.upper()), "classification", "train.json",
                         (("", "dev.json"),), reader, ("accuracy",))


CLUE = Benchmark("clue", "--clue-dir", {task.name: task for task in (
    _clue("afqmc", clue_reader("sentence1", "sentence2", "label")),
    _clue("tnews", clue_reader("sentence", None, "label")),
    _clue("iflytek", clue_reader("sentence", None, "label")),
    _clue("cmnli", clue_reader("sentence1", "sentence2", "label")),
    _clue("ocnli", clue_reader("sentence1", "sentence2", "label")),
    _clue("csl", clue_reader("keyword", "abst", "label", make=csl_pair)),
    _clue("cluewsc2020", clue_reader("text", None, "label", make=wsc_text)),
)}, default=("afqmc", "tnews", "iflytek", "cmnli", "ocnli", "csl", "cluewsc2020"))

BENCHMARKS = {"glue": GLUE, "clue": CLUE}


def choose_tasks(benchmark: Benchmark, folder: Path, names: str | None) -> list[tuple[BenchmarkTask, Path]]:
    """The tasks to run and each one's folder: those named (every one must be there), else every
    default task whose folder is there (at least one)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{benchmark.option} {folder}: no such folder" if not folder.exists()
                        else f"{benchmark.option} {folder} is not a folder")
    if names is None:
        found = [(task, place) for task in (benchmark.tasks[name] for name in benchmark.default)
                 if (place := task_folder(task, folder)) is not None]
        if not found:
            raise UserError(f"{benchmark.option} {folder} holds none of the {benchmark.name.upper()} task folders "
                            f"({', '.join(benchmark.tasks[name].folders[0] for name in benchmark.default)})")
        return found
    chosen = []
    for name in (part.strip().lower().replace("-", "") for part in names.split(",")):
        if not name:
            continue
        if name not in benchmark.tasks:
            raise UserError(f"--tasks: {name!r} is not a {benchmark.name.upper()} task "
                            f"({', '.join(benchmark.tasks)})")
        task = benchmark.tasks[name]
        place = task_folder(task, folder)
        if place is None:
            raise UserError(f"{benchmark.option} {folder} has no {task.folders[0]} folder for the task {name}")
        if all(entry[0].name != name for entry in chosen):
            chosen.append((task, place))
    if not chosen:
        raise UserError("--tasks names no task; e.g. --tasks sst2,mrpc")
    return chosen


def task_folder(task: BenchmarkTask, folder: Path) -> Path | None:
    return next((folder / name for name in task.folders if (folder / name).is_dir()), None)


def load_benchmark_task(task: BenchmarkTask, folder: Path, say: Callable[[str], None] = print) -> TaskData:
    """The task's train file and scored dev file(s) as TaskData; a missing file is one line."""
    paths = {"train": folder / task.train}
    for suffix, name in task.scored:
        paths[f"validation_{suffix}" if suffix else "validation"] = folder / name
    for path in paths.values():
        if not path.is_file():
            raise UserError(f"{path}: no such file; the {task.name} folder needs {task.train} and "
                            f"{' and '.join(name for _, name in task.scored)}")
    splits = {}
    for split, path in paths.items():
        splits[split], skipped = task.read(path)
        if skipped:
            say(f"note: {path}: skipped {skipped:,} row{'s' if skipped != 1 else ''} "
                f"({'malformed' if path.suffix == '.tsv' else 'labelled -'})")
    label_names = task_kind(task.task).label_names(splits, paths)
    scored = [examples for split, examples in splits.items() if split != "train"]
    return TaskData(task=task.task, train=splits["train"], validation=scored[0], test=None, label_names=label_names,
                    files={split: describe_file(path) for split, path in paths.items()},
                    suffix=task.scored[0][0],
                    extra={suffix: examples for (suffix, _), examples in zip(task.scored[1:], scored[1:], strict=True)})


def task_score(task: BenchmarkTask, result: dict[str, Any], seed: int | None = None) -> float | None:
    """The task's score: the mean of its reported metrics (over MNLI's m and mm too), of the seeds'
    means, or of one seed's values."""
    values = []
    for name in task.metrics:
        for suffix, _ in task.scored:
            entry = result["metrics"].get(f"{name}_{suffix}" if suffix else name, {})
            value = entry.get("mean") if seed is None else entry.get("per_seed", [None] * (seed + 1))[seed]
            if value is None:
                return None
            values.append(value)
    return sum(values) / len(values)


def reported(task: BenchmarkTask) -> list[str]:
    """The metric names the references report for the task, in their order."""
    return [f"{name}_{suffix}" if suffix else name for name in task.metrics for suffix, _ in task.scored]
