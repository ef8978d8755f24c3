"""Downstream metrics, written here (no scikit-learn, scipy or seqeval at run time) and checked
against those references in the tests: accuracy, binary and macro F1, Matthews correlation,
Pearson and Spearman correlation, span-level precision / recall / F1 of BIO or BIOES tags, and
the per-class and per-entity-type figures with the confusion matrix behind them."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np


def accuracy(predictions: Sequence, labels: Sequence) -> float:
    """The share of predictions equal to their label, in [0, 1] (0.0 for no examples, where
    scikit-learn raises)."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float((predictions == labels).mean()) if labels.size else 0.0


def f1_of(true_positives: int, false_positives: int, false_negatives: int) -> float:
    """2·tp / (2·tp + fp + fn); 0.0 when a class is neither predicted nor true (scikit-learn's
    `zero_division=0`)."""
    denominator = 2 * true_positives + false_positives + false_negatives
    return 2 * true_positives / denominator if denominator else 0.0


def f1_binary(predictions: Sequence, labels: Sequence, positive: int = 1) -> float:
    """F1 of the `positive` class against all others (GLUE's F1 for MRPC and QQP), as scikit-learn's
    `f1_score(average="binary", zero_division=0)`: 0.0 when the class is neither predicted nor
    true, and when it is never predicted correctly."""
    predicted, true = np.asarray(predictions) == positive, np.asarray(labels) == positive
    return f1_of(int((predicted & true).sum()), int((predicted & ~true).sum()), int((~predicted & true).sum()))


def f1_macro(predictions: Sequence, labels: Sequence, num_labels: int | None = None) -> float:
    """The unweighted mean of the classes' F1 (scikit-learn's `average="macro", zero_division=0`).

    Args:
        num_labels: average over the classes 0 … num_labels-1, a class neither true nor predicted
            counting 0.0 (scikit-learn's `labels=range(num_labels)`); by default, over the classes
            that are true or predicted.
    """
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    classes = np.union1d(predictions, labels) if num_labels is None else np.arange(num_labels)
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


def is_undefined(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether a correlation of x and y has no value: fewer than 2 pairs, a nan, or a constant side."""
    return x.size < 2 or bool(np.isnan(x).any() or np.isnan(y).any()) or bool(
        (x == x[0]).all() or (y == y[0]).all())


def pearson(predictions: Sequence[float], targets: Sequence[float]) -> float:
    """Pearson's r, as scipy's `pearsonr`; nan when undefined: either side constant (as scipy
    returns), fewer than 2 pairs (where scipy raises), or a nan in either side."""
    x, y = np.asarray(predictions, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    # Tested on the values, not on the centred sums: [0.1, 0.1, 0.1] minus its mean is not exactly 0.
    if is_undefined(x, y):
        return float("nan")
    x, y = x - x.mean(), y - y.mean()
    x, y = x / np.abs(x).max(), y / np.abs(y).max()  # as scipy: no under- or overflow in the sums
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
    """Spearman's rho, as scipy's `spearmanr`: Pearson's r of the ranks, ties sharing their average
    rank; nan when undefined (as `pearson`)."""
    x, y = np.asarray(predictions, dtype=np.float64), np.asarray(targets, dtype=np.float64)
    if is_undefined(x, y):
        return float("nan")
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
    """(type, first, last) of every span, exactly as seqeval's `get_entities` (its default mode,
    conlleval's reading): B- and S- open a span; I- or E- open one after O, E- or S- or when the type
    changes; a span ends before B-, S- or O, after E- or S-, and where the type changes. Positions
    count over the sentences laid end to end with an "O" between them (so a span never crosses
    sentences)."""
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


STRICT_PREFIXES = {"IOB2": ("B", "I", "O"), "IOBES": ("B", "I", "O", "E", "S")}


def strict_spans(sequences: Sequence[Sequence[str]], scheme: str) -> set[tuple[str, int, int]]:
    """(type, first, last) of every well-formed span, as seqeval's `mode="strict"`: in IOB2 a B-
    and the I- of its type after it; in IOBES an S-, or a B-, I- of its type, and an E- of its type
    closing it (a span left unclosed counts for nothing). Positions as in `spans`.

    Raises:
        ValueError: a tag whose prefix the scheme has not (seqeval raises too).
    """
    allowed, found, offset = STRICT_PREFIXES[scheme], set(), 0
    for sentence in sequences:
        tags = []
        for tag in sentence:
            if tag[:1] not in allowed:
                raise ValueError(f"the tag {tag!r} is not {scheme} (its prefix is none of {', '.join(allowed)})")
            tags.append((tag[:1], tag[1:].strip("-") or "_"))
        position = 0
        while position < len(tags):
            prefix, kind = tags[position]
            end = position + 1
            if prefix == "B":
                while end < len(tags) and tags[end][1] == kind and tags[end - 1][0] != "E" and (
                        tags[end][0] == "I" or (scheme == "IOBES" and tags[end][0] == "E")):
                    end += 1
            if prefix == "S" or (prefix == "B" and (scheme == "IOB2" or tags[end - 1][0] == "E")):
                found.add((kind, offset + position, offset + end - 1))
            position = end
        offset += len(tags) + 1
    return found


def span_scores(predicted: Sequence[Sequence[str]], true: Sequence[Sequence[str]],
                scheme: str | None = None) -> dict[str, float]:
    """Micro-averaged span precision, recall and F1 over all types, as seqeval's
    `precision_score`, `recall_score` and `f1_score` (0.0 where a denominator is 0).

    Args:
        scheme: None for seqeval's default, lenient reading (`spans`: any BIO or BIOES tags, an
            I- or E- with no B- before it opening a span); "IOB2" or "IOBES" for its
            `mode="strict"` with that scheme (`strict_spans`: only well-formed spans count).
    """
    if scheme is not None and scheme not in STRICT_PREFIXES:
        raise ValueError(f"unknown tagging scheme {scheme!r}: use None, 'IOB2' or 'IOBES'")
    find = spans if scheme is None else lambda sequences: strict_spans(sequences, scheme)
    predicted_spans, true_spans = find(predicted), find(true)
    hits = len(predicted_spans & true_spans)
    precision = hits / len(predicted_spans) if predicted_spans else 0.0
    recall = hits / len(true_spans) if true_spans else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def confusion_matrix(predictions: Sequence[int], labels: Sequence[int], num_labels: int) -> np.ndarray:
    """(num_labels, num_labels) counts, a row per true class and a column per predicted class, as
    scikit-learn's `confusion_matrix(labels, predictions, labels=range(num_labels))`."""
    matrix = np.zeros((num_labels, num_labels), dtype=np.int64)
    np.add.at(matrix, (np.asarray(labels, dtype=np.int64), np.asarray(predictions, dtype=np.int64)), 1)
    return matrix


def divide(numerators: np.ndarray, denominators: np.ndarray) -> np.ndarray:
    """Elementwise a / b, 0.0 where b is 0 (scikit-learn's and seqeval's `zero_division=0`)."""
    numerators, denominators = np.asarray(numerators, dtype=np.float64), np.asarray(denominators, dtype=np.float64)
    return np.divide(numerators, denominators, out=np.zeros_like(numerators), where=denominators > 0)


def precision_recall_f1(hits: np.ndarray, predicted: np.ndarray, true: np.ndarray) -> dict[str, np.ndarray]:
    """Precision, recall and F1 (2PR / (P + R), 0.0 where both are 0) from the counts of hits,
    of predictions and of true items; support is the true count."""
    precision, recall = divide(hits, predicted), divide(hits, true)
    f1 = divide(2 * precision * recall, precision + recall)
    return {"precision": precision, "recall": recall, "f1": f1, "support": np.asarray(true, dtype=np.int64)}


def class_scores(predictions: Sequence[int], labels: Sequence[int], num_labels: int) -> dict[str, np.ndarray]:
    """Each class's precision, recall, F1 and support (arrays over classes 0 … num_labels-1), as
    scikit-learn's `precision_recall_fscore_support(labels, predictions, labels=range(num_labels),
    zero_division=0)`."""
    matrix = confusion_matrix(predictions, labels, num_labels)
    return precision_recall_f1(np.diag(matrix), matrix.sum(axis=0), matrix.sum(axis=1))


def span_type_scores(predicted: Sequence[Sequence[str]], true: Sequence[Sequence[str]],
                     scheme: str | None = None) -> dict[str, dict[str, float | int]]:
    """Each entity type's span precision, recall, F1 and support, the types sorted, as the rows of
    seqeval's `classification_report` (every type found in the true or the predicted tags).

    Args:
        scheme: as in `span_scores`.
    """
    if scheme is not None and scheme not in STRICT_PREFIXES:
        raise ValueError(f"unknown tagging scheme {scheme!r}: use None, 'IOB2' or 'IOBES'")
    find = spans if scheme is None else lambda sequences: strict_spans(sequences, scheme)
    predicted_spans, true_spans = find(predicted), find(true)
    types = sorted({kind for kind, _, _ in predicted_spans | true_spans})

    def count(found: set[tuple[str, int, int]]) -> np.ndarray:
        per_type = Counter(kind for kind, _, _ in found)
        return np.array([per_type[name] for name in types], dtype=np.int64)

    scores = precision_recall_f1(count(predicted_spans & true_spans), count(predicted_spans), count(true_spans))
    return {name: {metric: values[number].item() for metric, values in scores.items()}
            for number, name in enumerate(types)}


def majority_class(labels: Sequence):
    """The most frequent label (the smallest among ties)."""
    values, counts = np.unique(np.asarray(labels), return_counts=True)
    return values[np.argmax(counts)].item()


METRICS: dict[str, Callable[..., float]] = {
    "accuracy": accuracy, "f1": f1_binary, "f1_macro": f1_macro, "mcc": matthews_corrcoef,
    "pearson": pearson, "spearman": spearman,
}
