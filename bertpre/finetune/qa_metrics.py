"""Extractive question answering scored as the official scripts score it: SQuAD's exact match and
word F1 for English (v2.0: split into answerable and unanswerable questions), CMRC 2018's exact
match and character F1 for Chinese."""
from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

from bertpre.finetune.qa_data import QAExample

ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
ENGLISH_PUNCTUATION = frozenset(string.punctuation)
# CMRC 2018's evaluation script's list (`sp_char`), removed before scoring. Its "……" entry is two
# characters, which a character never equals: a lone "…" stays, as it does there.
CHINESE_PUNCTUATION = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
# CMRC 2018 segments the characters of this range one by one
CJK = re.compile("[\u4e00-\u9fa5]")
# and other text with nltk's word_tokenize: here words and single punctuation marks (nltk's
# Treebank rules besides, such as "don't" as "do n't", are not followed)
WORDS = re.compile(r"\w+|[^\w\s]")


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(character for character in text.lower() if character not in ENGLISH_PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def squad_tokens(text: str) -> list[str]:
    """The words SQuAD's F1 counts."""
    return normalize_answer(text).split()


def cmrc_tokens(text: str) -> list[str]:
    """CMRC 2018's segmentation (`mixed_segmentation` with its punctuation removed): lowercased,
    its punctuation list left out (without ending a word, as there), each character of
    U+4E00..U+9FA5 alone, other runs split into words and single punctuation marks."""
    tokens, run = [], ""
    for character in text.lower().strip():
        if character in CHINESE_PUNCTUATION:
            continue
        if CJK.match(character):
            tokens += WORDS.findall(run)
            run = ""
            tokens.append(character)
        else:
            run += character
    return tokens + WORDS.findall(run)


def exact_match(prediction: str, gold: str, language: str = "en") -> float:
    """1.0 when the two are equal after normalization (English: SQuAD's; Chinese: CMRC's, which
    lowercases, strips and removes its punctuation list, ASCII punctuation outside it kept)."""
    if language == "zh":
        return float(_without_punctuation(prediction) == _without_punctuation(gold))
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, language: str = "en") -> float:
    """English: SQuAD's F1 over shared normalized words (1.0 when both are empty, 0.0 when only
    one is). Chinese: CMRC 2018's F1 over the longest common run of characters and words."""
    if language == "zh":
        return _cmrc_f1(cmrc_tokens(prediction), cmrc_tokens(gold))
    predicted, expected = squad_tokens(prediction), squad_tokens(gold)
    if not predicted or not expected:
        return float(predicted == expected)
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(expected)
    return 2 * precision * recall / (precision + recall)


def qa_scores(predictions: Mapping[str, str], examples: Sequence[QAExample], language: str = "en",
              version_2_with_negative: bool = False) -> dict[str, float]:
    """Exact match and F1 in percent, each the best over an example's gold answers, averaged over
    `examples` (a question without a prediction scores 0). An unanswerable question's gold answer
    is "" (the empty prediction scores 1). With `version_2_with_negative`, also HasAns_* and
    NoAns_* over the answerable and unanswerable questions, as SQuAD v2.0's script reports."""
    if language not in ("en", "zh"):
        raise ValueError(f"language must be 'en' or 'zh', not {language!r}")
    exact, f1 = {}, {}
    for example in examples:
        # as SQuAD v2.0's script: answers that normalize to nothing do not count as answers
        golds = [answer.text for answer in example.answers if squad_tokens(answer.text) or language == "zh"] or [""]
        predicted = predictions.get(example.id, "")
        exact[example.id] = max(exact_match(predicted, gold, language) for gold in golds)
        f1[example.id] = max(f1_score(predicted, gold, language) for gold in golds)
    scores = _averages("", exact, f1, [example.id for example in examples])
    if version_2_with_negative:
        scores |= _averages("HasAns_", exact, f1, [example.id for example in examples if not example.is_impossible])
        scores |= _averages("NoAns_", exact, f1, [example.id for example in examples if example.is_impossible])
    return scores


def _averages(prefix: str, exact: dict[str, float], f1: dict[str, float], ids: list[str]) -> dict[str, float]:
    if not ids:
        return {f"{prefix}total": 0}
    return {f"{prefix}exact_match": 100 * sum(exact[id_] for id_ in ids) / len(ids),
            f"{prefix}f1": 100 * sum(f1[id_] for id_ in ids) / len(ids),
            f"{prefix}total": len(ids)}


def _without_punctuation(text: str) -> str:
    return "".join(character for character in text.lower().strip() if character not in CHINESE_PUNCTUATION)


def _cmrc_f1(predicted: list[str], expected: list[str]) -> float:
    """CMRC 2018's F1: precision and recall of the longest common contiguous run of tokens."""
    if not predicted or not expected:
        return float(predicted == expected)
    longest = 0
    previous = [0] * (len(expected) + 1)
    for token in predicted:
        current = [0] * (len(expected) + 1)
        for index, other in enumerate(expected):
            if token == other:
                current[index + 1] = previous[index] + 1
                longest = max(longest, current[index + 1])
        previous = current
    if longest == 0:
        return 0.0
    precision, recall = longest / len(predicted), longest / len(expected)
    return 2 * precision * recall / (precision + recall)


def best_null_threshold(score_differences: Mapping[str, float], best_spans: Mapping[str, str],
                        examples: Sequence[QAExample], language: str = "en", metric: str = "f1"
                        ) -> tuple[float, float]:
    """SQuAD v2.0's threshold search (`find_best_thresh` of the official script): the threshold on
    `null score - best span score` above which answering "" scores best, and that score in percent.

    Args:
        score_differences: per question id, its null score minus its best span's score.
        best_spans: per question id, its best span's text (what it answers below the threshold).
        metric: "f1" or "exact_match".

    Returns: (best score, threshold); with the threshold, answer "" where the difference exceeds it.
    """
    score = f1_score if metric == "f1" else exact_match
    gained, total = [], 0.0  # total: every question answered "" (each unanswerable scores 1)
    for example in examples:
        golds = [answer.text for answer in example.answers] or [""]
        empty = max(score("", gold, language) for gold in golds)
        spoken = max(score(best_spans.get(example.id, ""), gold, language) for gold in golds)
        total += empty
        gained.append((score_differences.get(example.id, float("inf")), spoken - empty))
    best, threshold = total, float("-inf")
    # answering one more question at a time, from the surest: the best point on the way
    for difference, gain in sorted(gained, key=lambda pair: pair[0]):
        total += gain
        if total > best:
            best, threshold = total, difference
    return 100 * best / len(examples), threshold
