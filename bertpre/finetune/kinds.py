"""The table of fine-tuning task kinds: classification (one text or a pair), regression, tagging
and extractive question answering, each a row saying how its files are read, its examples
encoded, which head it trains with which loss, how outputs become predictions, how they are
scored and what its report and saved model hold. The rest of `bertpre.finetune` asks the row."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bertpre.errors import UserError
from bertpre.finetune import metrics
from bertpre.finetune.encoding import (
    Encoded,
    encode_texts,
    encode_words,
    space_words_as_trained,
    tags_by_word,
)
from bertpre.finetune.qa_data import QASettings, load_qa_task
from bertpre.finetune.tasks import (
    Examples,
    TaskData,
    describe_file,
    label_set,
    majority_label,
    read_pairs,
    read_tagged,
)
from bertpre.labels import IGNORE_INDEX

# how question answering was scored, by the answers' language
QA_SCORING = {"en": "SQuAD's normalisation", "zh": "CMRC 2018's, F1 over characters"}


@dataclass(frozen=True)
class TaskKind:
    """One row of the table. `head` names the family's head ("sequence", "token" or "span");
    `work` the class that runs its seeds ("module:Class", imported when asked, as transformers'
    auto mappings name theirs). Question answering reads, encodes, decodes and scores in its own
    work (windows and answers), so its row leaves the per-example columns empty."""

    name: str
    main_metric: str  # the dev score that chooses an epoch or a checkpoint, and the best seed to save
    head: str
    work: str
    unit: str  # what a seed trains on, for its progress bar
    baseline: tuple[str, str]  # (key in results.json, the report's column name)
    read: Callable[..., Any]  # (task files) → TaskData or QATaskData
    options: type | None = None  # the kind's own settings (question answering's windows and answers)
    preset: str | None = None  # the hyperparameters' preset when none is named
    per_token: bool = False  # a label a word (tagging): batches of token labels, features a word
    float_labels: bool = False  # values (regression) rather than class ids
    per_label: bool = True  # each class's or entity type's figures in the report
    probe_unit: str = "examples"
    encode: Callable[..., Encoded] | None = None  # (encoder, data, examples, max_seq_length)
    decode: Callable[..., list[Any]] | None = None  # (outputs, encoded, data) → predictions
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None  # (logits, labels)
    predicted: Callable[[torch.Tensor], torch.Tensor] | None = None  # logits → a class id or value a row
    outputs: Callable[[torch.Tensor, dict[str, torch.Tensor]], Any] | None = None  # (logits, batch) → rows
    targets: Callable[[Encoded], torch.Tensor] | None = None  # what a probe's features are trained towards
    output_rows: Callable[[Encoded], int] = len  # a model's (or probe's) output rows on these examples
    pooling: str | None = None  # how a probe's features are read, whatever --set pooling says
    score: Callable[..., dict[str, float]] | None = None  # (predictions, labels, label names)
    label_scores: Callable[..., tuple[dict, np.ndarray | None]] | None = None
    stuck: Callable[[Sequence[Any]], str | None] | None = None
    majority: Callable[[TaskData, Examples], list[Any]] | None = None  # the baseline's predictions
    label_names: Callable[[dict[str, Examples], dict[str, Path]], list[str]] | None = None
    num_labels: Callable[[list[str]], int] = len
    positive_label: Callable[[list[str]], str | None] = lambda names: None
    inputs: Callable[[Examples, int], dict[str, Any]] | None = None  # a prediction row's input columns
    saved_labels: Callable[[list[str]], dict[str, Any]] = lambda names: {}  # config.json's label fields
    saved_tokenizer: Callable[[Path], None] = lambda folder: None  # a saved model's tokenizer files made to fit
    note: Callable[[dict[str, Any]], str | None] = lambda result: None  # a line under the report's metrics

    @property
    def pooler(self) -> bool:
        """Whether a saved model keeps the encoder's pooler (a sequence head reads it)."""
        return self.head == "sequence"

    def work_class(self) -> type:
        module, name = self.work.split(":")
        return getattr(importlib.import_module(module), name)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Over classes, (B, K) or a token's (B, T, K); labels IGNORE_INDEX are no target."""
    return nn.functional.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE_INDEX)


def mean_squared_error(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float())


def class_ids(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


def values(logits: torch.Tensor) -> torch.Tensor:
    return logits.squeeze(-1)


def example_rows(predicted: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A batch's outputs, one an example: (B,)."""
    return lambda logits, batch: predicted(logits).cpu()


def word_tags(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The tag ids at each word's first piece, (words,) a row."""
    predicted, kept = logits.argmax(-1).cpu(), (batch["labels"] != IGNORE_INDEX).cpu()
    return [row[keep] for row, keep in zip(predicted, kept, strict=True)]


def kept_tags(encoded: Encoded) -> torch.Tensor:
    """The tag ids of the words a tagging probe has features of (each kept word's first piece)."""
    return torch.tensor([label for labels in encoded.labels for label in labels if label != IGNORE_INDEX])


def read_labelled(task: str) -> Callable[..., TaskData]:
    """The reader of a kind whose files are tables (or tagged sentences): (task files) → TaskData."""
    def read(files: Any) -> TaskData:
        return load_task(task, files.train, files.validation, files.test, text_column=files.text_column,
                         text_pair_column=files.text_pair_column, label_column=files.label_column)
    return read


def read_questions(files: Any) -> Any:
    return load_qa_task(files.train, files.validation, files.test, files.qa or QASettings())


def encode_classes(encoder: Any, data: TaskData, examples: Examples, max_seq_length: int) -> Encoded:
    labels = [data.label_names.index(label) for label in examples.labels]
    return encode_texts(encoder.tokenizer, examples.texts, examples.pairs, labels, max_seq_length,
                        config=encoder.config)


def encode_values(encoder: Any, data: TaskData, examples: Examples, max_seq_length: int) -> Encoded:
    return encode_texts(encoder.tokenizer, examples.texts, examples.pairs, examples.labels, max_seq_length,
                        config=encoder.config)


def encode_tags(encoder: Any, data: TaskData, examples: Examples, max_seq_length: int) -> Encoded:
    index = {name: number for number, name in enumerate(data.label_names)}
    return encode_words(encoder.tokenizer, examples.texts, [[index[tag] for tag in tags] for tags in examples.labels],
                        max_seq_length, config=encoder.config)


def majority_tag(data: TaskData) -> str:
    return majority_label([tag for tags in data.train.labels for tag in tags])


def score_classes(predictions: Sequence[Any], labels: Sequence[Any], label_names: list[str]) -> dict[str, float]:
    index = {name: number for number, name in enumerate(label_names)}
    predicted = np.asarray([index[name] for name in predictions])
    true = np.asarray([index[name] for name in labels])
    scores = {"accuracy": metrics.accuracy(predicted, true)}
    if len(label_names) == 2:
        scores["f1"] = metrics.f1_binary(predicted, true, positive=1)
    scores["f1_macro"] = metrics.f1_macro(predicted, true)
    scores["mcc"] = metrics.matthews_corrcoef(predicted, true)
    return scores


def score_values(predictions: Sequence[Any], labels: Sequence[Any], label_names: list[str]) -> dict[str, float]:
    predicted, true = np.asarray(predictions, dtype=float), np.asarray(labels, dtype=float)
    return {"pearson": metrics.pearson(predicted, true), "spearman": metrics.spearman(predicted, true)}


def score_tags(predictions: Sequence[Any], labels: Sequence[Any], label_names: list[str]) -> dict[str, float]:
    spans = metrics.span_scores(list(predictions), list(labels))
    flat_predicted = [tag for tags in predictions for tag in tags]
    flat_true = [tag for tags in labels for tag in tags]
    return {"f1": spans["f1"], "precision": spans["precision"], "recall": spans["recall"],
            "accuracy": metrics.accuracy(np.asarray(flat_predicted), np.asarray(flat_true))}


def class_figures(predictions: Sequence[Any], labels: Sequence[Any], label_names: list[str]
                  ) -> tuple[dict[str, dict[str, float | int]], np.ndarray | None]:
    """Each class's precision, recall, F1 and support, and the confusion matrix (rows gold)."""
    index = {name: number for number, name in enumerate(label_names)}
    predicted = np.asarray([index[name] for name in predictions], dtype=np.int64)
    true = np.asarray([index[name] for name in labels], dtype=np.int64)
    scores = metrics.class_scores(predicted, true, len(label_names))
    per_label = {name: {metric: values[number].item() for metric, values in scores.items()}
                 for number, name in enumerate(label_names)}
    return per_label, metrics.confusion_matrix(predicted, true, len(label_names))


def one_class(predictions: Sequence[Any]) -> str | None:
    distinct = set(predictions)
    return f"the class {next(iter(distinct))!r} for every example" if len(distinct) == 1 else None


def one_value(predictions: Sequence[Any]) -> str | None:
    values = np.asarray(predictions, dtype=float)
    return "the same value for every example" if values.size and np.ptp(values) < 1e-12 else None


def text_inputs(examples: Examples, index: int) -> dict[str, Any]:
    return {"text": examples.texts[index],
            **({"text_pair": examples.pairs[index]} if examples.pairs is not None else {})}


def class_fields(label_names: list[str]) -> dict[str, Any]:
    return {"id2label": {str(number): name for number, name in enumerate(label_names)},
            "label2id": {name: number for number, name in enumerate(label_names)}}


def qa_note(result: dict[str, Any]) -> str:
    return (f"exact match and F1 in percent ({QA_SCORING.get(result.get('language'), 'SQuAD')}); "
            "the baseline answers nothing")


MAJORITY = ("majority", "majority")
LABELLED = "bertpre.finetune.seeds:LabelledWork"
TASK_KINDS: dict[str, TaskKind] = {kind.name: kind for kind in (
    TaskKind(
        "classification", main_metric="accuracy", head="sequence", work=LABELLED, unit="examples",
        baseline=MAJORITY, read=read_labelled("classification"), encode=encode_classes,
        decode=lambda raw, encoded, data: [data.label_names[int(index)] for index in raw],
        loss=cross_entropy, predicted=class_ids, outputs=example_rows(class_ids),
        targets=lambda encoded: torch.tensor(encoded.labels, dtype=torch.long), score=score_classes, label_scores=class_figures, stuck=one_class,
        majority=lambda data, examples: [majority_label(data.train.labels)] * len(examples),
        label_names=label_set, inputs=text_inputs,
        positive_label=lambda names: names[1] if len(names) == 2 else None,
        saved_labels=lambda names: {**class_fields(names), "problem_type": "single_label_classification"}),
    TaskKind(
        "regression", main_metric="pearson", head="sequence", work=LABELLED, unit="examples",
        baseline=MAJORITY, read=read_labelled("regression"), float_labels=True, per_label=False,
        encode=encode_values, decode=lambda raw, encoded, data: [float(value) for value in raw],
        loss=mean_squared_error, predicted=values, outputs=example_rows(values),
        targets=lambda encoded: torch.tensor(encoded.labels, dtype=torch.float32), score=score_values,
        label_scores=lambda predictions, labels, names: ({}, None), stuck=one_value,
        majority=lambda data, examples: [float(np.mean(data.train.labels))] * len(examples),
        label_names=lambda splits, paths: [], num_labels=lambda names: 1, inputs=text_inputs,
        saved_labels=lambda names: {"num_labels": 1, "problem_type": "regression", "id2label": {"0": "LABEL_0"},
                                    "label2id": {"LABEL_0": 0}}),
    TaskKind(
        "tagging", main_metric="f1", head="token", work=LABELLED, unit="sentences", probe_unit="tokens",
        baseline=MAJORITY, read=read_labelled("tagging"), per_token=True, encode=encode_tags,
        decode=lambda raw, encoded, data: tags_by_word(raw, encoded, data.label_names, majority_tag(data)),
        loss=cross_entropy, predicted=class_ids, outputs=word_tags, targets=kept_tags, pooling="first-piece",
        output_rows=lambda encoded: sum(encoded.kept_words),
        score=score_tags,
        label_scores=lambda predictions, labels, names: (
            metrics.span_type_scores(list(predictions), list(labels)), None),
        stuck=lambda predictions: one_class([tag for tags in predictions for tag in tags]),
        majority=lambda data, examples: [[majority_tag(data)] * len(tags) for tags in examples.labels],
        label_names=lambda splits, paths: label_set(splits, paths, per_token=True),
        inputs=lambda examples, index: {"words": examples.texts[index]}, saved_labels=class_fields,
        saved_tokenizer=space_words_as_trained),
    TaskKind(
        "qa", main_metric="f1", head="span", work="bertpre.finetune.qa_seeds:QuestionAnsweringWork",
        unit="windows", baseline=("no_answer", "no answer"), read=read_questions, options=QASettings,
        preset="squad",
        per_label=False, num_labels=lambda names: 2, saved_labels=lambda names: {"num_labels": 2}, note=qa_note),
)}
TASKS = tuple(TASK_KINDS)  # --task's choices


def task_kind(name: str) -> TaskKind:
    """The row of `--task NAME`; an unknown name is refused in one line naming the choices."""
    if name not in TASK_KINDS:
        raise UserError(f"--task {name!r} must be one of {', '.join(TASKS)}")
    return TASK_KINDS[name]


def load_task(task: str, train: Path, validation: Path, test: Path | None = None, *,
              text_column: str | None = None, text_pair_column: str | None = None,
              label_column: str | None = None) -> TaskData:
    """Read a labelled task's files; the label set is the training file's, and a label the other
    files have but training lacks is refused (one line)."""
    kind = task_kind(task)
    if kind.label_names is None:
        raise UserError(f"--task {task} reads question-answering files, not a table of labelled examples")
    paths = {"train": Path(train), "validation": Path(validation), **({"test": Path(test)} if test else {})}
    if kind.per_token:
        splits = {name: read_tagged(path, text_column or "tokens", label_column or "tags")
                  for name, path in paths.items()}
    else:
        splits = {name: read_pairs(path, text_column or "text", text_pair_column, label_column or "label",
                                   regression=kind.float_labels)
                  for name, path in paths.items()}
    return TaskData(task=task, train=splits["train"], validation=splits["validation"],
                    test=splits.get("test"), label_names=kind.label_names(splits, paths),
                    files={name: describe_file(path) for name, path in paths.items()})
