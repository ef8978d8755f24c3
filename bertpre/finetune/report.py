"""What a fine-tuning is worth: each seed's scores, their mean, std (ddof 1), min and max, the
majority-class baseline, seeds stuck at one class flagged (never dropped), each class's or entity
type's figures and the confusion matrix, as JSON and a table."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bertpre.finetune.kinds import TASK_KINDS, task_kind

# The metric a task is judged by first: the dev score that chooses an epoch or a checkpoint, and
# the best seed's for --save-model.
MAIN_METRIC = {kind.name: kind.main_metric for kind in TASK_KINDS.values()}


def score(task: str, predictions: Sequence[Any], labels: Sequence[Any], label_names: list[str]) -> dict[str, float]:
    """The task's metrics for one set of predictions (label names, floats, or tag sequences)."""
    return task_kind(task).score(predictions, labels, label_names)


def label_scores(task: str, predictions: Sequence[Any], labels: Sequence[Any], label_names: list[str]
                 ) -> tuple[dict[str, dict[str, float | int]], np.ndarray | None]:
    """One set of predictions' figures per label: each class's precision, recall, F1 and support
    with the confusion matrix (rows gold, columns predicted), or each entity type's over spans as
    seqeval's report counts them (no matrix); nothing for regression."""
    return task_kind(task).label_scores(predictions, labels, label_names)


def summarize_labels(per_seed: list[dict[str, dict[str, float | int]]]) -> dict[str, dict[str, Any]]:
    """Each label's precision, recall and F1 over the seeds (as `summarize`) and its support. An
    entity type one seed neither predicted nor found in the gold tags scores 0.0 for that seed."""
    names = list(dict.fromkeys(name for seed in per_seed for name in seed))
    if per_seed and all(set(seed) == set(per_seed[0]) for seed in per_seed):
        names = list(per_seed[0])  # the classes, in the label set's order
    elif all(isinstance(name, str) for name in names):
        names = sorted(names)  # entity types, sorted as seqeval's report
    absent = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    summary = {}
    for name in names:
        rows = [seed.get(name, absent) for seed in per_seed]
        summary[name] = {**summarize([{metric: row[metric] for metric in ("precision", "recall", "f1")}
                                      for row in rows]),
                         "support": max(int(row["support"]) for row in rows)}
    return summary


@dataclass
class SplitScores:
    """One scored split's figures, added a seed at a time: the task's metrics, each label's, the
    confusion matrix (classification) and the predictions themselves."""

    name: str
    reported: bool  # its metrics are the report's headline (else: dev, beside a test split)
    labels: Sequence[Any]  # the gold labels, values or tag sequences
    task: str
    label_names: list[str]
    scores: list[dict[str, float]] = field(default_factory=list)
    per_label: list[dict[str, dict[str, float | int]]] = field(default_factory=list)
    matrices: list[list[list[int]]] = field(default_factory=list)
    predictions: list[list[Any]] = field(default_factory=list)

    def add(self, predictions: list[Any]) -> None:
        """One seed's predictions."""
        self.predictions.append(predictions)
        self.scores.append(score(self.task, predictions, self.labels, self.label_names))
        per_label, matrix = label_scores(self.task, predictions, self.labels, self.label_names)
        self.per_label.append(per_label)
        if matrix is not None:
            self.matrices.append(matrix.tolist())

    def report(self, majority: dict[str, float | None]) -> dict[str, Any]:
        """The split's entry in results.json: its metrics over seeds beside the majority baseline's,
        each label's figures and the confusion matrices (a row per gold label, one per seed)."""
        report: dict[str, Any] = {"reported": self.reported, "examples": len(self.labels),
                                  "metrics": summarize(self.scores), "majority": majority}
        if task_kind(self.task).per_label:
            report["per_label"] = summarize_labels(self.per_label)
        if self.matrices:
            report["confusion_matrix"] = {"rows": "gold", "columns": "predicted", "labels": self.label_names,
                                          "per_seed": self.matrices}
        return report


def stuck(task: str, predictions: Sequence[Any]) -> str | None:
    """Why a seed's predictions say nothing (one class for everything), or None."""
    return task_kind(task).stuck(predictions)


def summarize(per_seed: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """mean, std (ddof 1; null for one seed), min, max and per_seed of every metric."""
    summary = {}
    for name in per_seed[0]:
        values = [run[name] for run in per_seed]
        finite = [value for value in values if value is not None and math.isfinite(value)]
        summary[name] = {
            "mean": float(np.mean(finite)) if finite else None,
            "std": float(np.std(finite, ddof=1)) if len(finite) > 1 else None,
            "min": min(finite) if finite else None,
            "max": max(finite) if finite else None,
            "per_seed": [value if value is not None and math.isfinite(value) else None for value in values],
        }
    return summary


def show(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def metrics_rows(scores: dict[str, dict[str, Any]], baseline: dict[str, float | None],
                 baseline_name: str = "majority") -> list[str]:
    """A row per metric: mean, std, min, max, the baseline (the majority class's; question
    answering: answering nothing) and each seed's value."""
    width = max(10, *(len(name) + 1 for name in scores))
    lines = [f"{'metric':<{width}} {'mean':>8} {'± std':>8} {'min':>8} {'max':>8} {baseline_name:>9}   per seed"]
    for name, values in scores.items():
        per_seed = " ".join(show(value) for value in values["per_seed"])
        lines.append(f"{name:<{width}} {show(values['mean']):>8} {show(values['std']):>8} "
                     f"{show(values['min']):>8} {show(values['max']):>8} {show(baseline.get(name)):>9}   {per_seed}")
    return lines


def baseline_of(entry: dict[str, Any], task: str) -> tuple[dict[str, float | None], str]:
    """The baseline a report's rows are read beside (from `baselines`, or a split's entry), and its
    column's name: answering nothing for question answering (0 on SQuAD v1.1, the unanswerable
    share on v2.0), else always the majority class."""
    key, column = task_kind(task).baseline
    return entry.get(key, {}), column


def format_table(result: dict[str, Any]) -> str:
    """The report a person reads: a row per metric with the baseline beside it on the reported
    split, then the same on dev (beside a test split), flags, the chosen epochs (SQuAD v2.0: the
    null thresholds), and each label's figures (and the confusion matrix) on the reported split."""
    seeds, task = result["seeds"], result["task"]
    count = f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}"
    lines = [f"{task} ({result['mode']}) on the {result['split']} split, {count}: "
             f"{', '.join(map(str, seeds))}",
             *metrics_rows(result["metrics"], *baseline_of(result["baselines"], task))]
    if (note := task_kind(task).note(result)) is not None:
        lines.append(note)
    if result.get("positive_label") is not None:
        lines.append(f"f1 is the F1 of the label {result['positive_label']!r} (the positive label: "
                     "the second of the sorted labels)")
    splits = result.get("splits", {})
    for name, split in splits.items():
        if not split["reported"]:
            lines += ["", f"on the {name} split (dev)", *metrics_rows(split["metrics"], *baseline_of(split, task))]
    for flag in result["flags"]:
        lines.append(f"warning: {flag}")
    selection = result.get("selection")
    if selection and selection["by"] == "dev":
        chosen = ", ".join(f"seed {seed}: {epoch}" for seed, epoch in zip(seeds, selection["epochs"], strict=True))
        lines.append(f"epochs chosen by {selection['split']} {selection['metric']} (of "
                     f"{result['hyperparameters']['epochs']}): {chosen}")
    threshold = result.get("null_threshold")
    if threshold:
        chosen = ", ".join(f"seed {seed}: {'-inf (no answer to every question)' if value is None else f'{value:.4f}'}"
                           for seed, value in zip(seeds, threshold["per_seed"], strict=True))
        lines.append(f"null thresholds chosen on {threshold['chosen_on']} {threshold['metric']} (no answer where "
                     f"the null score beats the best span's by more): {chosen}")
    for name, split in splits.items():
        if split["reported"] and split.get("per_label"):
            lines += ["", *format_labels(name, split, len(seeds))]
    return "\n".join(lines)


def format_labels(split_name: str, split: dict[str, Any], seeds: int) -> list[str]:
    """Each label's precision, recall and F1 (means over seeds) and support; then the confusion
    matrix summed over the seeds, a row per gold label."""
    per_label = split["per_label"]
    width = max(10, *(len(name) + 1 for name in per_label))
    over = f"mean over {seeds} seeds" if seeds > 1 else "one seed"
    lines = [f"per label on the {split_name} split ({over})",
             f"{'label':<{width}} {'precision':>9} {'recall':>8} {'f1':>8} {'support':>8}"]
    for name, entry in per_label.items():
        lines.append(f"{name:<{width}} {show(entry['precision']['mean']):>9} {show(entry['recall']['mean']):>8} "
                     f"{show(entry['f1']['mean']):>8} {entry['support']:>8}")
    matrix = split.get("confusion_matrix")
    if matrix:
        total = np.sum(matrix["per_seed"], axis=0)
        names = matrix["labels"]
        cell = max(7, *(len(name) + 1 for name in names), len(str(int(total.max()))) + 1)
        summed = f"summed over {seeds} seeds" if seeds > 1 else "one seed"
        lines += ["", f"confusion matrix on the {split_name} split (rows: gold, columns: predicted; {summed})",
                  f"{'':<{width}}" + "".join(f"{name:>{cell}}" for name in names)]
        for name, row in zip(names, total, strict=True):
            lines.append(f"{name:<{width}}" + "".join(f"{int(value):>{cell}}" for value in row))
    return lines


def format_curve(results: list[dict[str, Any]]) -> str:
    """A sweep's scores by pretraining step: each metric's mean ± std, one row a checkpoint, each
    column as wide as its widest figure (question answering's are percentages)."""
    names = list(results[0]["metrics"])
    figures = [[(show(values.get("mean")), show(values.get("std")))
                for values in (result["metrics"].get(name, {}) for name in names)] for result in results]
    means = [max(8, *(len(row[column][0]) for row in figures)) for column in range(len(names))]
    stds = [max(6, *(len(row[column][1]) for row in figures)) for column in range(len(names))]
    widths = [max(len(name), mean + 3 + std) for name, mean, std in zip(names, means, stds, strict=True)]
    lines = [f"{'step':>10}  " + "  ".join(f"{name:>{width}}" for name, width in zip(names, widths, strict=True))]
    for result, row in zip(results, figures, strict=True):
        cells = [f"{f'{mean:>{mean_width}} ± {std:<{std_width}}':>{width}}"
                 for (mean, std), mean_width, std_width, width in zip(row, means, stds, widths, strict=True)]
        step = result.get("checkpoint_step")
        chosen = "  <- reported" if "checkpoint_selection" in result else ""
        lines.append(f"{'-' if step is None else step:>10}  " + "  ".join(cells) + chosen)
    selection = next((result["checkpoint_selection"] for result in results if "checkpoint_selection" in result), None)
    if selection is not None:
        lines.append(f"reported: the checkpoint with the best {selection['split']} {selection['metric']} "
                     "(mean over seeds); the rows are the test split's")
    return "\n".join(lines)


def format_benchmark(summary: dict[str, Any]) -> str:
    """A benchmark's report: each task's reported metrics (seed means) and score ± std, then the
    benchmark score ± std (the std of the per-seed benchmark scores)."""
    seeds = summary["seeds"]
    name = summary["benchmark"].upper()
    lines = [f"{name} ({summary['mode']}), {len(seeds)} seed{'s' if len(seeds) != 1 else ''}: "
             f"{', '.join(map(str, seeds))}",
             f"{'task':<12} {'score':>8} {'± std':>8}   reported metrics (mean over seeds)"]

    def show(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    for task, result in summary["tasks"].items():
        values = summary["metrics"][task]
        shown = ", ".join(f"{metric} {show(entry['mean'])}" for metric, entry in result["metrics"].items()
                          if metric in summary["reported"][task])
        lines.append(f"{task:<12} {show(values['mean']):>8} {show(values['std']):>8}   {shown}")
        lines.extend(f"  warning: {task}: {flag}" for flag in result["flags"])
    overall = summary["metrics"]["score"]
    lines.append(f"{name + ' score':<12} {show(overall['mean']):>8} {show(overall['std']):>8}   "
                 f"the mean of the task scores")
    return "\n".join(lines)

