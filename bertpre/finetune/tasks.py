"""Labelled task files for fine-tuning: tables (CSV, TSV, JSONL, JSON, Parquet) and tagged
sentences (CoNLL or JSONL), read into examples with a label set taken from the training file."""
from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertpre.errors import UserError

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
CONLL_SUFFIXES = (".conll", ".conllu", ".bio", ".iob", ".txt")


@dataclass
class Examples:
    """One split: `texts` (a string each, or a list of words for tagging), optional `pairs`,
    and `labels` (a label name, a float for regression, or a list of tag names)."""

    texts: list[Any]
    pairs: list[str] | None
    labels: list[Any]

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class TaskData:
    """What `bertpre finetune` trains on and scores: the splits, the label set, the files."""

    task: str
    train: Examples
    validation: Examples
    test: Examples | None
    label_names: list[str] = field(default_factory=list)  # empty for regression
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # split → path, sha256, bytes
    # More scored splits, trained once and scored on each (GLUE's MNLI: matched and mismatched):
    # metric names get `_SUFFIX`, the first scored split's with `suffix` (none when empty).
    suffix: str = ""
    extra: dict[str, Examples] = field(default_factory=dict)

    @property
    def split(self) -> str:
        """The split the report scores: test when there is one, else validation."""
        return "test" if self.test is not None else "validation"

    @property
    def evaluation(self) -> Examples:
        return self.test if self.test is not None else self.validation

    @property
    def scored(self) -> list[tuple[str, Examples]]:
        """Every scored split as (metric suffix, examples)."""
        return [(self.suffix, self.evaluation), *self.extra.items()]


def metric_name(name: str, suffix: str) -> str:
    return f"{name}_{suffix}" if suffix else name


def label_set(splits: dict[str, Examples], paths: dict[str, Path], *, per_token: bool = False) -> list[str]:
    """The training file's labels (with `per_token`, its tags), sorted (numerically when they are
    all numbers)."""
    def flat(examples: Examples) -> list[str]:
        return [tag for tags in examples.labels for tag in tags] if per_token else examples.labels

    names = sorted(set(flat(splits["train"])), key=numeric_first)
    if len(names) < 2:
        raise UserError(f"{paths['train']}: every example has the label {names[0]!r}; a classifier "
                        "needs at least two classes")
    known = set(names)
    for split, examples in splits.items():
        unknown = sorted(set(flat(examples)) - known, key=numeric_first)
        if unknown:
            raise UserError(f"{paths[split]} has the label {unknown[0]!r}, which the training file "
                            f"{paths['train']} lacks (its labels: {', '.join(names[:20])}); give "
                            "the training file examples of every label")
    return names


def numeric_first(name: str) -> tuple[int, float, str]:
    try:
        return (0, float(name), name)
    except ValueError:
        return (1, 0.0, name)


def read_pairs(path: Path, text_column: str, pair_column: str | None, label_column: str, *,
               regression: bool) -> Examples:
    """A table's text (and pair) column and its label column."""
    rows = read_table(path)
    wanted = [text_column, *([pair_column] if pair_column else []), label_column]
    columns = list(rows[0])
    missing = [name for name in wanted if name not in rows[0]]
    if missing:
        raise UserError(f"{path} has no column {missing[0]!r} (its columns: {', '.join(map(str, columns))}); "
                        "name the right one with --text-column, --text-pair-column or --label-column")
    texts, pairs, labels = [], [] if pair_column else None, []
    for number, row in enumerate(rows, start=1):
        texts.append(text_value(row.get(text_column), path, number, text_column))
        if pairs is not None:
            pairs.append(text_value(row.get(pair_column), path, number, pair_column))
        labels.append(label_value(row.get(label_column), path, number, label_column, regression=regression))
    return Examples(texts, pairs, labels)


def text_value(value: Any, path: Path, number: int, column: str) -> str:
    if not isinstance(value, str):
        if value is None or isinstance(value, (dict, list, bool)):
            raise UserError(f"{path}: example {number} has no text in column {column!r} "
                            f"(found {json.dumps(value)})")
        value = str(value)
    return value


def label_value(value: Any, path: Path, number: int, column: str, *, regression: bool) -> str | float:
    if value is None or value == "" or isinstance(value, (dict, list)):
        raise UserError(f"{path}: example {number} has no label in column {column!r}")
    if regression:
        try:
            number_value = float(value)
        except (TypeError, ValueError):
            raise UserError(f"{path}: example {number} has the label {value!r}, not a number; "
                            "--task regression needs numbers") from None
        if not math.isfinite(number_value):
            raise UserError(f"{path}: example {number} has the label {value!r}; labels must be finite")
        return number_value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def read_table(path: Path) -> list[dict[str, Any]]:
    """The records of a CSV, TSV, JSON lines, JSON (a list, or {"data": [...]}) or Parquet file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file" if not path.exists() else f"{path} is not a file")
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise UserError(f"{path}: unknown file type {suffix or '(none)'}; give a "
                        f"{', '.join(TABLE_SUFFIXES)} file")
    try:
        if suffix == ".parquet":
            rows = read_parquet(path)
        else:
            text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Excel's CSV) is no text
            rows = parse_table(text, suffix, path)
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None
    if not rows:
        raise UserError(f"{path} holds no examples")
    return rows


def json_records(lines: Iterable[str], path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number from 1, object) for each non-blank line of a JSON-lines file; one line naming
    the first that is not a JSON object."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise UserError(f"{path}: line {number} is not valid JSON ({error})") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}: line {number} is not a JSON object")
        yield number, record


def parse_table(text: str, suffix: str, path: Path) -> list[dict[str, Any]]:
    if suffix in (".csv", ".tsv"):
        # TSV as GLUE writes it: tabs separate, quotes are text.
        reader = (csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
                  if suffix == ".tsv" else csv.DictReader(text.splitlines()))
        try:
            rows = list(reader)
        except csv.Error as error:
            raise UserError(f"{path} is not a valid {suffix[1:].upper()} file: {error}") from None
        if reader.fieldnames is None:
            return []
        return rows
    if suffix == ".jsonl":
        return [record for _, record in json_records(text.splitlines(), path)]
    try:
        data = json.loads(text)
    except ValueError as error:
        raise UserError(f"{path} is not valid JSON ({error})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list) or not all(isinstance(record, dict) for record in data):
        raise UserError(f"{path} must hold a list of JSON objects (or {{\"data\": [...]}})")
    return data


def read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as error:
        raise UserError(f"{path} is not a readable Parquet file ({error})") from None


def read_tagged(path: Path, tokens_column: str, tags_column: str) -> Examples:
    """Tagged sentences: JSON lines with a list of tokens and one of tags, or CoNLL (a token and
    its tag per line, the tag last; a blank line between sentences; -DOCSTART- lines skipped)."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".json", ".parquet"):
        rows = read_table(path)
        words, tags = [], []
        for number, row in enumerate(rows, start=1):
            tokens, labels = row.get(tokens_column), row.get(tags_column)
            if not (isinstance(tokens, list) and isinstance(labels, list)):
                raise UserError(f"{path}: example {number} needs lists in {tokens_column!r} and "
                                f"{tags_column!r}; name them with --text-column and --label-column")
            if len(tokens) != len(labels) or not tokens:
                raise UserError(f"{path}: example {number} has {len(tokens)} tokens and "
                                f"{len(labels)} tags; they must match, one tag a token")
            words.append([str(token) for token in tokens])
            tags.append([str(tag) for tag in labels])
        return Examples(words, None, tags)
    return read_conll(path)


def read_conll(path: Path) -> Examples:
    if not path.is_file():
        raise UserError(f"{path}: no such file" if not path.exists() else f"{path} is not a file")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None
    sentences: list[list[str]] = []
    tags: list[list[str]] = []
    words: list[str] = []
    labels: list[str] = []
    for number, line in enumerate([*lines, ""], start=1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                sentences.append(words)
                tags.append(labels)
                words, labels = [], []
            continue
        if len(fields) < 2:
            raise UserError(f"{path}: line {number} has no tag; CoNLL lines are a token and its "
                            "tag (the tag last), with a blank line between sentences")
        words.append(fields[0])
        labels.append(fields[-1])
    if not sentences:
        raise UserError(f"{path} holds no examples")
    return Examples(sentences, None, tags)


def describe_file(path: Path) -> dict[str, Any]:
    """Path, size and sha256 of a task file, for the report."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"path": str(path), "bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def majority_label(labels: Sequence[str]) -> str:
    """The most frequent label (the first in sorted order among ties)."""
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return min(counts, key=lambda name: (-counts[name], numeric_first(name)))
