"""What a fine-tuning is worth: each seed's scores, their mean, std (ddof 1), min and max, the
majority-class baseline, seeds stuck at one class flagged (never dropped), as JSON and a table."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from bertpre.finetune import metrics


def score(task: str, predictions: Sequence[Any], labels: Sequence[Any], label_names: list[str]) -> dict[str, float]:
    """The task's metrics for one set of predictions (label names, floats, or tag sequences)."""
    if task == "regression":
        predicted, true = np.asarray(predictions, dtype=float), np.asarray(labels, dtype=float)
        return {"pearson": metrics.pearson(predicted, true), "spearman": metrics.spearman(predicted, true)}
    if task == "tagging":
        spans = metrics.span_scores(list(predictions), list(labels))
        flat_predicted = [tag for tags in predictions for tag in tags]
        flat_true = [tag for tags in labels for tag in tags]
        return {"f1": spans["f1"], "precision": spans["precision"], "recall": spans["recall"],
                "accuracy": metrics.accuracy(np.asarray(flat_predicted), np.asarray(flat_true))}
    index = {name: number for number, name in enumerate(label_names)}
    predicted = np.asarray([index[name] for name in predictions])
    true = np.asarray([index[name] for name in labels])
    scores = {"accuracy": metrics.accuracy(predicted, true)}
    if len(label_names) == 2:
        scores["f1"] = metrics.f1_binary(predicted, true, positive=1)
    scores["f1_macro"] = metrics.f1_macro(predicted, true)
    scores["mcc"] = metrics.matthews_corrcoef(predicted, true)
    return scores


def stuck(task: str, predictions: Sequence[Any]) -> str | None:
    """Why a seed's predictions say nothing (one class for everything), or None."""
    if task == "regression":
        values = np.asarray(predictions, dtype=float)
        return "the same value for every example" if values.size and np.ptp(values) < 1e-12 else None
    flat = [tag for tags in predictions for tag in tags] if task == "tagging" else list(predictions)
    distinct = set(flat)
    return f"the class {next(iter(distinct))!r} for every example" if len(distinct) == 1 else None


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


def format_table(result: dict[str, Any]) -> str:
    """The report a person reads: one row per metric, the baseline beside it, flags below."""
    seeds = result["seeds"]
    title = (f"{result['task']} ({result['mode']}) on the {result['split']} split, "
             f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''}: {', '.join(map(str, seeds))}")
    lines = [title, f"{'metric':<10} {'mean':>8} {'± std':>8} {'min':>8} {'max':>8} {'majority':>9}   per seed"]
    baseline = result["baselines"]["majority"]
    for name, values in result["metrics"].items():
        def show(value: float | None) -> str:
            return "-" if value is None else f"{value:.4f}"
        per_seed = " ".join(show(value) for value in values["per_seed"])
        lines.append(f"{name:<10} {show(values['mean']):>8} {show(values['std']):>8} "
                     f"{show(values['min']):>8} {show(values['max']):>8} {show(baseline.get(name)):>9}   {per_seed}")
    for flag in result["flags"]:
        lines.append(f"warning: {flag}")
    return "\n".join(lines)


def format_curve(results: list[dict[str, Any]]) -> str:
    """A sweep's scores by pretraining step: each metric's mean ± std, one row a checkpoint."""
    names = list(results[0]["metrics"])
    lines = [f"{'step':>10}  " + "  ".join(f"{name:>17}" for name in names)]
    for result in results:
        cells = []
        for name in names:
            values = result["metrics"].get(name, {})
            mean, std = values.get("mean"), values.get("std")
            cells.append(f"{'-' if mean is None else f'{mean:.4f}':>8} ± {'-' if std is None else f'{std:.4f}':<6}")
        step = result.get("checkpoint_step")
        lines.append(f"{'-' if step is None else step:>10}  " + "  ".join(cells))
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

