"""Downstream metrics, written here (no scikit-learn, scipy or seqeval at run time) and checked
against those references in the tests: accuracy, binary and macro F1, Matthews correlation,
Pearson and Spearman correlation, and span-level precision / recall / F1 of BIO or BIOES tags."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def accuracy(predictions: Sequence, labels: Sequence) -> float:
    """The share of predictions equal to their label, in [0, 1]."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float((predictions == labels).mean()) if labels.size else 0.0


def f1_of(true_positives: int, false_positives: int, false_negatives: int) -> float:
    """2·tp / (2·tp + fp + fn); 0.0 when a class is neither predicted nor true (scikit-learn's
    `zero_division=0`)."""
    denominator = 2 * true_positives + false_positives + false_negatives
    return 2 * true_positives / denominator if denominator else 0.0


def f1_binary(predictions: Sequence, labels: Sequence, positive: int = 1) -> float:
    """F1 of the `positive` class (GLUE's F1 for MRPC and QQP)."""
    predicted, true = np.asarray(predictions) == positive, np.asarray(labels) == positive
    return f1_of(int((predicted & true).sum()), int((predicted & ~true).sum()), int((~predicted & true).sum()))


def f1_macro(predictions: Sequence, labels: Sequence) -> float:
    """The unweighted mean of every class's F1, over the classes that are true or predicted."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    classes = np.union1d(predictions, labels)
    if not classes.size:
        return 0.0
    return float(np.mean([f1_binary(predictions, labels, positive=value) for value in classes]))


def matthews_corrcoef(predictions: Sequence, labels: Sequence) -> float:
    """Matthews correlation for any number of classes (Gorodkin's R_K); 0.0 when undefined (one
    class only, in the labels or in the predictions)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    classes, codes = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    true, predicted = codes[:labels.size], codes[labels.size:]
    confusion = np.zeros((classes.size, classes.size), dtype=np.float64)
    np.add.at(confusion, (true, predicted), 1.0)
    total, correct = confusion.sum(), np.trace(confusion)
    true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    covariance = correct * total - true_counts @ predicted_counts
    spread = (total**2 - predicted_counts @ predicted_counts) * (total**2 - true_counts @ true_counts)
    return float(covariance / np.sqrt(spread)) if spread > 0 else 0.0


def pearson(predictions: Sequence[float], targets: Sequence[float]) -> float:
    """Pearson's r; nan when either side is constant (as scipy returns)."""
    x, y = np.asarray(predictions, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    if x.size < 2:
        return float("nan")
    x, y = x - x.mean(), y - y.mean()
    norms = np.sqrt((x @ x) * (y @ y))
    if norms == 0:
        return float("nan")
    return float(np.clip((x @ y) / norms, -1.0, 1.0))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing the mean of the ranks they span."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=np.float64)
    sorted_values = values[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_values[1:] != sorted_values[:-1]]))
    ends = np.concatenate([starts[1:], [values.size]])
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end + 1) / 2.0  # mean of ranks start+1 … end
    return ranks


def spearman(predictions: Sequence[float], targets: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the average ranks; nan when either side is constant."""
    x, y = np.asarray(predictions, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    return pearson(average_ranks(x), average_ranks(y))


def closes_span(previous: str, prefix: str) -> bool:
    """Whether tag prefix `prefix` after `previous` ends the open span (conlleval's lenient
    reading, which seqeval's default mode also uses)."""
    return previous in ("E", "S") or (previous in ("B", "I") and prefix in ("B", "S", "O"))


def opens_span(previous: str, prefix: str) -> bool:
    """Whether tag prefix `prefix` after `previous` begins a span (an I- or E- after O starts one)."""
    return prefix in ("B", "S") or (previous in ("E", "S", "O") and prefix in ("E", "I"))


def split_tag(tag: str) -> tuple[str, str]:
    """"B-PER" → ("B", "PER"); "O" → ("O", "_")."""
    return tag[:1], tag[1:].split("-", maxsplit=1)[-1] or "_"


def spans(sequences: Sequence[Sequence[str]]) -> set[tuple[str, int, int]]:
    """(type, first, last) of every span, positions counted over the sentences laid end to end
    with an "O" between them (so a span never crosses sentences)."""
    flat = [tag for sentence in sequences for tag in [*sentence, "O"]]
    found, previous, previous_type, begin = set(), "O", "", 0
    for position, tag in enumerate([*flat, "O"]):
        prefix, kind = split_tag(tag)
        type_changed = kind != previous_type
        if closes_span(previous, prefix) or (previous not in ("O", ".") and type_changed):
            found.add((previous_type, begin, position - 1))
        if opens_span(previous, prefix) or (prefix not in ("O", ".") and type_changed):
            begin = position
        previous, previous_type = prefix, kind
    return found


def span_scores(predicted: Sequence[Sequence[str]], true: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro-averaged span precision, recall and F1 (0.0 where a denominator is 0)."""
    predicted_spans, true_spans = spans(predicted), spans(true)
    hits = len(predicted_spans & true_spans)
    precision = hits / len(predicted_spans) if predicted_spans else 0.0
    recall = hits / len(true_spans) if true_spans else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def majority_class(labels: Sequence):
    """The most frequent label (the smallest among ties)."""
    values, counts = np.unique(np.asarray(labels), return_counts=True)
    return values[np.argmax(counts)].item()


METRICS: dict[str, Callable[..., float]] = {
    "accuracy": accuracy, "f1": f1_binary, "f1_macro": f1_macro, "mcc": matthews_corrcoef,
    "pearson": pearson, "spearman": spearman,
}
