"""Extractive question-answering files read into examples: SQuAD v1.1 / v2.0 JSON (CMRC 2018 and
DRCD come in the same layout) and JSON lines as Hugging Face datasets writes SQuAD
(`context`, `question`, `answers: {text: [...], answer_start: [...]}`), each answer checked
against its context."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertpre.errors import UserError
from bertpre.finetune.tasks import describe_file


@dataclass(frozen=True)
class Answer:
    """An answer as it stands in the context: `context[start:start + len(text)] == text`."""

    text: str
    start: int

    @property
    def end(self) -> int:
        """The character just after the answer."""
        return self.start + len(self.text)


@dataclass(frozen=True)
class QAExample:
    """One question on one context; `answers` empty exactly when the question is unanswerable
    (SQuAD v2.0's `is_impossible`)."""

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]

    @property
    def is_impossible(self) -> bool:
        return not self.answers


def read_qa_file(path: str | Path, version_2_with_negative: bool = False) -> list[QAExample]:
    """The examples of a SQuAD-layout JSON file (`{"data": [{"paragraphs": [{"context", "qas"}]}]}`)
    or a JSON lines file of records, in file order.

    Args:
        version_2_with_negative: SQuAD v2.0: unanswerable questions are allowed. Without it an
            unanswerable question is refused, naming the option that reads it.

    Raises:
        UserError: one line naming the file and the example, for an unreadable file, a missing
            field, an empty context, an answer outside its context or whose `answer_start` does
            not match its text, an unanswerable question read as v1.1.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read question-answering file {path}: {error}") from None
    document = _squad_document(text)
    records = _squad_records(path, document) if document is not None else _jsonl_records(path, text)
    examples, seen = [], set()
    for where, record in records:
        example = _example(path, where, record, version_2_with_negative)
        if example.id in seen:
            raise UserError(f"{path}: question {example.id!r} appears twice (ids must be unique, "
                            "predictions are matched to questions by id)")
        seen.add(example.id)
        examples.append(example)
    if not examples:
        raise UserError(f"{path} holds no questions")
    return examples


def _squad_document(text: str) -> dict | None:
    """The file as one JSON object with a `data` list (SQuAD, CMRC 2018, DRCD), or None."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return None
    return document if isinstance(document, dict) and isinstance(document.get("data"), list) else None


def _squad_records(path: Path, document: dict) -> Iterator[tuple[str, dict]]:
    """(where, record) for each question of a SQuAD-layout document, as JSON lines records."""
    for article_index, article in enumerate(document["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise UserError(f"{path}: article {article_index + 1} has no \"paragraphs\" list (a SQuAD "
                            "file is {\"data\": [{\"paragraphs\": [{\"context\": ..., \"qas\": [...]}]}]})")
        for paragraph_index, paragraph in enumerate(paragraphs):
            where = f"paragraph {paragraph_index + 1} of article {article_index + 1}"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise UserError(f"{path}: {where} has no \"qas\" list")
            for question_index, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, dict):
                    raise UserError(f"{path}: question {question_index + 1} of {where} is not an object")
                answers = qa.get("answers", [])
                if not isinstance(answers, list) or not all(isinstance(answer, dict) for answer in answers):
                    answers = None  # refused by _example, naming the question
                record = {"id": qa.get("id", f"{where}, question {question_index + 1}"),
                          "question": qa.get("question"), "context": paragraph.get("context"),
                          "is_impossible": qa.get("is_impossible", False)}
                if answers is not None:
                    record["answers"] = {"text": [answer.get("text") for answer in answers],
                                         "answer_start": [answer.get("answer_start") for answer in answers]}
                yield f"question {record['id']!r}", record


def _jsonl_records(path: Path, text: str) -> Iterator[tuple[str, dict]]:
    """(where, record) for each non-blank line of a JSON lines file."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserError(f"{path}, line {number}: not JSON ({error.msg}); a question-answering "
                            "file is SQuAD JSON or JSON lines with context, question and answers") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}, line {number}: a JSON object with context, question and answers was expected")
        record.setdefault("id", f"line {number}")
        yield f"question {record['id']!r} (line {number})", record


def _example(path: Path, where: str, record: dict, version_2_with_negative: bool) -> QAExample:
    """The example of one record, every answer checked against the context."""
    context, question = record.get("context"), record.get("question")
    for name, value in (("context", context), ("question", question)):
        if not isinstance(value, str):
            raise UserError(f"{path}: {where} has no {name} text")
    if not context.strip():
        raise UserError(f"{path}: {where} has an empty context")
    answers = record.get("answers")
    if not (isinstance(answers, dict) and isinstance(answers.get("text"), list)
            and isinstance(answers.get("answer_start"), list)
            and len(answers["text"]) == len(answers["answer_start"])):
        raise UserError(f"{path}: {where} has no answers of the form "
                        "{\"text\": [...], \"answer_start\": [...]} (as many starts as texts)")
    checked = tuple(_answer(path, where, context, text, start)
                    for text, start in zip(answers["text"], answers["answer_start"], strict=True))
    impossible = record.get("is_impossible", False)
    if impossible and checked:
        raise UserError(f"{path}: {where} is marked is_impossible but has answers")
    if not checked and not version_2_with_negative:
        raise UserError(f"{path}: {where} has no answer (a SQuAD v2.0 file with unanswerable "
                        "questions): read it with --version-2 (version_2_with_negative)")
    return QAExample(str(record["id"]), question, context, checked)


def _answer(path: Path, where: str, context: str, text: object, start: object) -> Answer:
    """An answer whose `start` points at its `text` in `context`."""
    if not isinstance(text, str) or not text:
        raise UserError(f"{path}: {where} has an empty answer text")
    if isinstance(start, bool) or not isinstance(start, int):
        raise UserError(f"{path}: {where} has answer_start {start!r}, not a character position")
    if start < 0 or start + len(text) > len(context):
        raise UserError(f"{path}: {where} has answer {text!r} at characters {start}–{start + len(text)}, "
                        f"outside its context of {len(context)} characters")
    found = context[start:start + len(text)]
    if found != text:
        elsewhere = context.find(text)
        hint = f" (the text is at {elsewhere})" if elsewhere >= 0 else " (the text is not in the context)"
        raise UserError(f"{path}: {where} has answer_start {start} that does not match its answer "
                        f"{text!r}: the context there reads {found!r}{hint}")
    return Answer(text, start)


LANGUAGES = ("auto", "en", "zh")
# "auto" scores as Chinese (CMRC 2018's character F1) when this share of the contexts' characters
# (spaces aside) are CJK ideographs; English words in a Chinese text stay far below it.
CHINESE_SHARE = 0.3


@dataclass(frozen=True)
class QASettings:
    """How questions are windowed, answered and scored (the command's QA options)."""

    # context tokens a window shares with the one before; None: not given, SQuAD's 128 fitted to the
    # run's windows (`fitted_qa_settings`)
    doc_stride: int | None = None
    max_answer_length: int = 30  # tokens
    version_2_with_negative: bool = False  # SQuAD v2.0: unanswerable questions
    language: str = "auto"  # en: SQuAD's EM/F1; zh: CMRC 2018's; auto: by the contexts' script
    n_best_size: int = 20

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise UserError(f"--answer-language {self.language!r} must be one of {', '.join(LANGUAGES)}")
        if self.doc_stride is not None and self.doc_stride < 0:
            raise UserError(f"--doc-stride {self.doc_stride} must be 0 or more")
        if self.max_answer_length < 1:
            raise UserError(f"--max-answer-length {self.max_answer_length} must be 1 or more")


@dataclass
class QATaskData:
    """The question-answering splits and their files (the counterpart of `tasks.TaskData`)."""

    train: list[QAExample]
    validation: list[QAExample]
    test: list[QAExample] | None
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # split → path, sha256, bytes
    task: str = "qa"
    label_names: list[str] = field(default_factory=list)  # none: answers are spans

    @property
    def split(self) -> str:
        """The split the report scores: test when there is one, else validation."""
        return "test" if self.test is not None else "validation"


def load_qa_task(train: Path, validation: Path, test: Path | None, settings: QASettings) -> QATaskData:
    """Read the SQuAD-layout (or JSON lines) files; an empty split is refused in one line."""
    paths = {"train": Path(train), "validation": Path(validation), **({"test": Path(test)} if test else {})}
    splits = {name: read_qa_file(path, settings.version_2_with_negative) for name, path in paths.items()}
    for name, examples in splits.items():
        if not examples:
            raise UserError(f"{paths[name]} has no questions; give a SQuAD-layout file with data/paragraphs/qas")
    return QATaskData(train=splits["train"], validation=splits["validation"], test=splits.get("test"),
                      files={name: describe_file(path) for name, path in paths.items()})
