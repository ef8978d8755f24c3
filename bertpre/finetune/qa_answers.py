"""Start and end logits of every window → each example's answer: the best span over all its
windows, cut from the context's own characters (SQuAD v2.0: or no answer, when the null score
beats the best span by more than a threshold), as Hugging Face's `run_qa.py` post-processes."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bertpre.finetune.qa_data import QAExample
from bertpre.finetune.qa_windows import QAWindows


@dataclass(frozen=True)
class SpanCandidate:
    """A span of the context: its text, its characters and its score (start logit + end logit)."""

    text: str
    start: int  # first character in the context
    end: int  # the character after the span
    score: float


@dataclass(frozen=True)
class QAPrediction:
    """An example's answer ("" for no answer), its best spans, and the null score it was weighed
    against (the lowest [CLS] start + end logit over its windows)."""

    id: str
    text: str
    n_best: tuple[SpanCandidate, ...]
    null_score: float


def predict_answers(examples: Sequence[QAExample], windows: QAWindows, start_logits: np.ndarray,
                    end_logits: np.ndarray, n_best_size: int = 20, max_answer_length: int = 30,
                    version_2_with_negative: bool = False, null_score_diff_threshold: float = 0.0
                    ) -> list[QAPrediction]:
    """One prediction an example, in example order.

    Args:
        start_logits, end_logits: `(windows, tokens)`, a row a window (padding past its length is
            never read).
        n_best_size: the highest start and end logits tried in each window, and the spans kept.
        max_answer_length: the most tokens a span may have.
        version_2_with_negative: answer "" when the null score exceeds the best span's score
            by more than `null_score_diff_threshold`.
    """
    start_logits, end_logits = np.asarray(start_logits, dtype=np.float64), np.asarray(end_logits, dtype=np.float64)
    if start_logits.shape != end_logits.shape or start_logits.shape[0] != len(windows):
        raise ValueError(f"logits of shape {start_logits.shape} and {end_logits.shape} for {len(windows)} windows")
    if start_logits.shape[1] < max(map(len, windows.input_ids), default=0):
        raise ValueError(f"logits for {start_logits.shape[1]} tokens, fewer than the longest window's "
                         f"{max(map(len, windows.input_ids))}")
    by_example: list[list[int]] = [[] for _ in examples]
    for window, example_index in enumerate(windows.example_index):
        by_example[example_index].append(window)
    predictions = []
    for example, window_indices in zip(examples, by_example, strict=True):
        null_score, candidates = float("inf"), []
        for window in window_indices:
            cls = windows.cls_index[window]
            null_score = min(null_score, start_logits[window, cls] + end_logits[window, cls])
            candidates.extend(_window_spans(example.context, windows.context_offsets[window],
                                            start_logits[window], end_logits[window], n_best_size, max_answer_length))
        best: dict[tuple[int, int], SpanCandidate] = {}  # overlapping windows find a span twice
        for candidate in sorted(candidates, key=lambda candidate: candidate.score, reverse=True):
            best.setdefault((candidate.start, candidate.end), candidate)
        n_best = tuple(best.values())[:n_best_size]
        text = n_best[0].text if n_best else ""
        if version_2_with_negative and n_best and null_score - n_best[0].score > null_score_diff_threshold:
            text = ""
        predictions.append(QAPrediction(example.id, text, n_best, float(null_score)))
    return predictions


def _window_spans(context: str, offsets: list[tuple[int, int] | None], start_logits: np.ndarray,
                  end_logits: np.ndarray, n_best_size: int, max_answer_length: int) -> list[SpanCandidate]:
    """The valid spans among the window's `n_best_size` best starts × best ends: both on the
    context, end not before start, at most `max_answer_length` tokens."""
    length = len(offsets)
    starts = np.argsort(start_logits[:length], kind="stable")[::-1][:n_best_size]
    ends = np.argsort(end_logits[:length], kind="stable")[::-1][:n_best_size]
    spans = []
    for start in starts:
        for end in ends:
            if offsets[start] is None or offsets[end] is None or end < start or end - start + 1 > max_answer_length:
                continue
            first, last = offsets[start][0], offsets[end][1]
            spans.append(SpanCandidate(context[first:last], first, last,
                                       float(start_logits[start] + end_logits[end])))
    return spans
