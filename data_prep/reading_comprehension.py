"""Reading-comprehension sets written as SQuAD files: answers found once in their context and
checked, documents split three ways by seed, splits capped, counted and written.

The question makers (`wordnet_questions` for English, `poem_questions` for Chinese) decide
what a context is and what is asked about it; this module holds what they share: the rule that
an answer is a span found exactly once in its context (so `answer_start` is never a guess), the
split of documents into train/dev/test (a document never in two splits), the grouping of a
split's documents into contexts, the SQuAD v1.1 / v2.0 layout that `bertpre finetune --task qa`
reads, and the summary.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

SPLITS = ("train", "dev", "test")
SPLIT_SHARES = (0.8, 0.1, 0.1)
# SQuAD v2.0's dev set: about a third of its questions have no answer.
UNANSWERABLE_SHARE = 1 / 3

Document = TypeVar("Document")


class SourceError(Exception):
    """The installed text a set is made from is missing or not in the expected format."""


@dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset in the context


@dataclass(frozen=True)
class Question:
    question: str
    kind: str  # the template's name: definition, example, next, author ...
    answers: tuple[Answer, ...]  # empty for an unanswerable question (SQuAD v2.0)


@dataclass
class Passage:
    """One context and its questions (a SQuAD paragraph)."""

    title: str
    context: str
    documents: int  # how many documents the context is made of
    questions: list[Question] = field(default_factory=list)


def occurrences(context: str, text: str) -> int:
    """How many times `text` occurs in `context`, overlapping occurrences included."""
    count, start = 0, context.find(text)
    while start >= 0:
        count += 1
        start = context.find(text, start + 1)
    return count


def checked_answer(context: str, text: str, start: int) -> Answer:
    """The answer at `start`, after checking that the context there reads `text`."""
    if not text or context[start:start + len(text)] != text:
        raise AssertionError(f"answer {text!r} is not at character {start} of its context "
                             f"(there: {context[start:start + len(text)]!r})")
    return Answer(text, start)


def unique_answer(context: str, text: str) -> Answer | None:
    """`text` as an answer where it occurs exactly once in `context`; None where it occurs twice
    or more (its position would be a guess) or not at all."""
    if not text or occurrences(context, text) != 1:
        return None
    return checked_answer(context, text, context.find(text))


def split_documents(documents: Sequence[Document], key: Callable[[Document], str],
                    seed: int) -> dict[str, list[Document]]:
    """Documents shuffled by `seed` and cut 80/10/10 into train, dev and test. Documents with
    the same key (say, one definition shared by two synsets) go to the same split."""
    keys = sorted({key(document) for document in documents})
    random.Random(f"{seed}:split").shuffle(keys)
    cut_train = round(len(keys) * SPLIT_SHARES[0])
    cut_dev = cut_train + round(len(keys) * SPLIT_SHARES[1])
    split_of = {name: "train" if index < cut_train else "dev" if index < cut_dev else "test"
                for index, name in enumerate(keys)}
    splits: dict[str, list[Document]] = {name: [] for name in SPLITS}
    for document in documents:
        splits[split_of[key(document)]].append(document)
    return splits


def group_documents(documents: Iterable[Document], sizes: tuple[int, int], rng: random.Random,
                    names: Callable[[Document], Iterable[Hashable]]) -> list[list[Document]]:
    """The documents, in order, as groups of `sizes[0]` to `sizes[1]` (drawn per group) in
    which no two documents share a name (a lemma, an author, a title): a document that clashes
    with its group waits for the next. The last groups may be smaller."""
    groups: list[list[Document]] = []
    current: list[Document] = []
    taken: set[Hashable] = set()
    size = rng.randint(*sizes)

    def place(queue: list[Document]) -> list[Document]:
        """Put each of `queue` in the current group where it fits; returns those that wait."""
        nonlocal current, taken, size
        waiting = []
        for document in queue:
            own = set(names(document))
            if own & taken:
                waiting.append(document)
                continue
            current.append(document)
            taken |= own
            if len(current) == size:
                groups.append(current)
                current, taken, size = [], set(), rng.randint(*sizes)
        return waiting

    waiting: list[Document] = []
    for document in documents:
        waiting = place(waiting + [document])
    while waiting:
        before = len(waiting)
        waiting = place(waiting)
        if len(waiting) == before:  # each clashes with the group as it stands: close it
            groups.append(current)
            current, taken, size = [], set(), rng.randint(*sizes)
    if current:
        groups.append(current)
    return groups


def unanswerable_count(answerable: int, share: float, rng: random.Random) -> int:
    """How many unanswerable questions to add to `answerable` ones so that, on average, they
    are `share` of all: answerable × share / (1 − share), its fraction drawn."""
    expected = answerable * share / (1 - share)
    return int(expected) + (rng.random() < expected - int(expected))


def mix_in(questions: Sequence[Question], extra: Iterable[Question], rng: random.Random) -> list[Question]:
    """`questions` in their order, each of `extra` put in at a drawn place (with its own `rng`,
    a set with unanswerable questions keeps the contexts and answerable questions of the set
    without them)."""
    mixed = list(questions)
    for question in extra:
        mixed.insert(rng.randrange(len(mixed) + 1), question)
    return mixed


def cap_questions(passages: list[Passage], limit: int | None) -> list[Passage]:
    """The first passages holding at most `limit` questions in all (the last one cut short)."""
    if limit is None:
        return passages
    kept, left = [], limit
    for passage in passages:
        if left <= 0:
            break
        if len(passage.questions) > left:
            passage = Passage(passage.title, passage.context, passage.documents, passage.questions[:left])
        kept.append(passage)
        left -= len(passage.questions)
    return kept


def squad_document(passages: Sequence[Passage], split: str, prefix: str, version_2: bool) -> dict[str, Any]:
    """The SQuAD layout (`version`, `data` → `paragraphs` → `qas` → `answers`), one article a
    passage; every answer checked against its context once more."""
    articles = []
    for passage_index, passage in enumerate(passages):
        qas = []
        for question_index, question in enumerate(passage.questions):
            if not question.answers and not version_2:
                raise AssertionError(f"unanswerable question {question.question!r} in a SQuAD v1.1 file")
            for answer in question.answers:
                checked_answer(passage.context, answer.text, answer.start)
            qa: dict[str, Any] = {
                "id": f"{prefix}-{split}-{passage_index:05d}-{question_index:02d}",
                "question": question.question,
                "answers": [{"text": answer.text, "answer_start": answer.start} for answer in question.answers],
            }
            if version_2:
                qa["is_impossible"] = not question.answers
            qas.append(qa)
        articles.append({"title": passage.title, "paragraphs": [{"context": passage.context, "qas": qas}]})
    return {"version": "v2.0" if version_2 else "v1.1", "data": articles}


def split_summary(passages: Sequence[Passage]) -> dict[str, Any]:
    """A split's counts: documents, contexts, questions (unanswerable, by template), the mean
    context length in characters."""
    questions = [question for passage in passages for question in passage.questions]
    return {
        "documents": sum(passage.documents for passage in passages),
        "contexts": len(passages),
        "questions": len(questions),
        "unanswerable": sum(not question.answers for question in questions),
        "by_type": dict(sorted(Counter(question.kind for question in questions).items())),
        "mean_context_chars": round(sum(len(passage.context) for passage in passages) / len(passages), 1)
        if passages else 0.0,
    }


def write_splits(out: Path, splits: dict[str, list[Passage]], *, prefix: str, version_2: bool,
                 max_train: int | None, max_eval: int | None, about: dict[str, Any]) -> dict[str, Any]:
    """Write out/train.json, dev.json, test.json (capped: `max_train` questions for train,
    `max_eval` for dev and for test) and out/summary.json; returns the summary: `about` (the
    source, parsing and dropped-question counts) and each split's counts."""
    summary: dict[str, Any] = {**about, "version": "v2.0" if version_2 else "v1.1", "splits": {}}
    capped = {name: cap_questions(splits[name], max_train if name == "train" else max_eval) for name in SPLITS}
    for name, passages in capped.items():
        if not any(passage.questions for passage in passages):
            raise SourceError(f"the {name} split has no questions: the source holds too few documents")
    documents = {name: squad_document(passages, name, prefix, version_2) for name, passages in capped.items()}
    out.mkdir(parents=True, exist_ok=True)
    for name, document in documents.items():
        (out / f"{name}.json").write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        summary["splits"][name] = split_summary(capped[name])
    (out / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return summary


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """--out, --seed, --max-train, --max-eval, --version-2, --unanswerable-share."""
    parser.add_argument("--out", type=Path, required=True, help="folder for train.json, dev.json, test.json, summary.json")
    parser.add_argument("--seed", type=int, default=0, help="the split, the contexts and the questions drawn (default 0)")
    parser.add_argument("--max-train", type=int, default=None, help="at most N training questions")
    parser.add_argument("--max-eval", type=int, default=None, help="at most N questions in dev and in test each")
    parser.add_argument("--version-2", action="store_true",
                        help="SQuAD v2.0: add unanswerable questions (asked about what the context lacks)")
    parser.add_argument("--unanswerable-share", type=float, default=UNANSWERABLE_SHARE,
                        help="with --version-2, the share of questions without an answer (default 1/3)")


def run_command(parser: argparse.ArgumentParser, argv: list[str] | None,
                build: Callable[[argparse.Namespace], dict[str, Any]]) -> int:
    """Parse, check the common options, build, print the summary; exit code 2 with one line
    when the source is missing or unreadable."""
    args = parser.parse_args(argv)
    for name in ("max_train", "max_eval"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 < args.unanswerable_share < 1:
        parser.error("--unanswerable-share must be between 0 and 1")
    try:
        summary = build(args)
    except SourceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, counts in summary["splits"].items():
        types = ", ".join(f"{kind} {count:,}" for kind, count in counts["by_type"].items())
        unanswerable = f" ({counts['unanswerable']:,} unanswerable)" if counts["unanswerable"] else ""
        print(f"{args.out / (name + '.json')}: {counts['questions']:,} questions{unanswerable} on "
              f"{counts['contexts']:,} contexts of {counts['documents']:,} documents, "
              f"{counts['mean_context_chars']:,.0f} characters a context on average; {types}")
    dropped = ", ".join(f"{reason} {count:,}" for reason, count in summary["dropped_questions"].items() if count)
    print(f"questions not asked: {dropped or 'none'}; summary: {args.out / 'summary.json'}")
    return 0
