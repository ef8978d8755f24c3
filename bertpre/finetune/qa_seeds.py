"""Question answering's part of the seed loop (`QuestionAnsweringWork`): the questions cut into
windows (their batches checked against the device's memory), each seed's model trained, every
question answered from its windows and scored (exact match and F1; SQuAD v2.0: the null threshold
chosen on the validation split), and the prediction and n-best rows."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer
from torch import nn

from bertpre.config.finetune import Hyperparameters
from bertpre.finetune.loop import pad_token_id
from bertpre.finetune.qa_answers import QAPrediction, predict_answers
from bertpre.finetune.qa_data import (  # noqa: F401 (tests import QASettings, load_qa_task from here)
    CHINESE_SHARE,
    QAExample,
    QASettings,
    QATaskData,
    load_qa_task,
)
from bertpre.finetune.qa_loop import train_question_answering, window_logits
from bertpre.finetune.qa_metrics import best_null_threshold, qa_scores
from bertpre.finetune.qa_windows import (
    SQUAD_DOC_STRIDE,
    SQUAD_MAX_SEQ_LENGTH,
    QAWindows,
    context_room,
    default_doc_stride,
    encode_qa_windows,
)
from bertpre.finetune.report import summarize
from bertpre.finetune.source import Encoder
from bertpre.model.cost import ForwardShape
from bertpre.train.memory import check_finetuning_fits, check_forward_fits
from bertpre.train.runtime import Runtime

if TYPE_CHECKING:  # what the user named
    from bertpre.finetune.run import TaskFiles


def fitted_qa_settings(settings: QASettings, tokenizer: Tokenizer, data: QATaskData, max_seq_length: int,
                       say: Callable[[str], None]) -> QASettings:
    """`settings` with the stride the windows take: one the user gave as given (the windowing
    refuses it in one line if it cannot work), else SQuAD's fitted to windows of `max_seq_length`
    tokens (`default_doc_stride`), said in a note where it is not SQuAD's own."""
    if settings.doc_stride is not None:
        return settings
    examples = [*data.train, *data.validation, *(data.test or [])]
    room = context_room(tokenizer, examples, max_seq_length)
    stride = default_doc_stride(max_seq_length, room)
    if stride != SQUAD_DOC_STRIDE and room >= 1:  # no room at all: the windowing refuses that question
        scaled = default_doc_stride(max_seq_length, max_seq_length)
        below = f", below the {room} context tokens a window holds beside the longest question" if stride < scaled else ""
        say(f"note: --doc-stride {stride}: SQuAD's {SQUAD_DOC_STRIDE} for windows of {SQUAD_MAX_SEQ_LENGTH} tokens, "
            f"scaled to windows of {max_seq_length}{below} (give --doc-stride to choose)")
    return replace(settings, doc_stride=stride)


def answer_language(examples: Sequence[QAExample], language: str) -> str:
    """`language`, or for "auto" the script of the contexts: zh where CJK ideographs are at least
    CHINESE_SHARE of their characters, else en."""
    if language != "auto":
        return language
    characters = [character for example in examples for character in example.context if not character.isspace()]
    chinese = sum("\u4e00" <= character <= "\u9fff" for character in characters)
    return "zh" if characters and chinese / len(characters) >= CHINESE_SHARE else "en"


def null_difference(prediction: QAPrediction) -> float:
    """The question's null score minus its best span's score (+inf where no span was found)."""
    return prediction.null_score - prediction.n_best[0].score if prediction.n_best else math.inf


def null_differences(predictions: Sequence[QAPrediction]) -> tuple[dict[str, float], dict[str, str]]:
    """Per question, its null score minus its best span's score, and the best span's text."""
    differences = {prediction.id: null_difference(prediction) for prediction in predictions}
    return differences, {prediction.id: prediction.n_best[0].text if prediction.n_best else ""
                         for prediction in predictions}


def final_answers(predictions: Sequence[QAPrediction], threshold: float | None) -> dict[str, str]:
    """Each question's answer: its best span, or (with a threshold) "" where the null score beats
    the best span by more than it."""
    differences, spans = null_differences(predictions)
    if threshold is None:
        return {prediction.id: prediction.text for prediction in predictions}
    return {id_: "" if differences[id_] > threshold else spans[id_] for id_ in spans}


@dataclass
class SplitAnswers:
    """One scored split as one model answers it: each question's prediction (its best spans and
    null score), the answers given (SQuAD v2.0: after the null threshold) and their scores."""

    predictions: list[QAPrediction]
    answers: dict[str, str]
    scores: dict[str, float]


@dataclass
class EpochAnswers:
    """A model's answers on every scored split, dev's last; SQuAD v2.0: the null threshold
    chosen on dev and applied to every split."""

    splits: list[SplitAnswers]
    threshold: float | None


class QuestionAnsweringWork:
    """The seeds' work of extractive question answering (`seeds.SeedWork`): the questions cut into
    windows (their batches checked against the device's memory); a seed's model trained on the
    training windows; every scored split's questions answered from its windows and scored (exact
    match and F1; SQuAD v2.0: the null threshold chosen on the validation split, applied to every
    split); scored on the reported split (test when given, else validation) and, beside a test
    split, on validation, which chooses the epoch and the model to save by its F1."""

    def __init__(self, encoder: Encoder, data: QATaskData, files: TaskFiles, hp: Hyperparameters, runtime: Runtime,
                 say: Callable[[str], None], features_folder: Path | None = None) -> None:
        self.encoder, self.data, self.hp, self.runtime = encoder, data, hp, runtime
        self.settings = settings = fitted_qa_settings(files.qa or QASettings(), encoder.tokenizer, data,
                                                      hp.max_seq_length, say)
        self.language = answer_language(data.validation, settings.language)
        self.splits = [(data.split, data.test if data.test is not None else data.validation)]
        if data.test is not None:
            self.splits.append(("validation", data.validation))
        self.dev = len(self.splits) - 1
        self.dev_name = self.splits[self.dev][0]
        self.train_windows = encode_qa_windows(encoder.tokenizer, data.train, hp.max_seq_length, settings.doc_stride,
                                               config=encoder.config)
        self.windows = [encode_qa_windows(encoder.tokenizer, examples, hp.max_seq_length, settings.doc_stride,
                                          config=encoder.config)
                        for _, examples in self.splits]
        check_qa_fits(encoder, hp, self.train_windows, self.windows, runtime)
        say(f"question answering ({self.language}): {len(data.train):,} training questions in "
            f"{len(self.train_windows):,} windows of at most {hp.max_seq_length} tokens")
        self.training = f"{len(self.train_windows):,} windows"
        self.per_seed: list[EpochAnswers] = []

    @staticmethod
    def fitted_files(files: TaskFiles, encoder: Encoder, data: QATaskData, max_seq_length: int,
                     say: Callable[[str], None]) -> TaskFiles:
        """`files` with the stride these windows take (part of the work's key)."""
        return replace(files, qa=fitted_qa_settings(files.qa or QASettings(), encoder.tokenizer, data,
                                                    max_seq_length, say))

    def train(self, seed: int, after_epoch: Callable[[int, nn.Module], None] | None) -> tuple[nn.Module, None]:
        return train_question_answering(self.encoder, self.train_windows, hp=self.hp, seed=seed,
                                        runtime=self.runtime, after_epoch=after_epoch), None

    def outputs(self, model: nn.Module) -> EpochAnswers:
        """Every scored split answered by `model`; v2: with the threshold chosen on dev."""
        settings, predicted = self.settings, []
        for (_, examples), split_windows in zip(self.splits, self.windows, strict=True):
            starts, ends = window_logits(model, split_windows, batch_size=self.hp.eval_batch_size,
                                         pad_id=pad_token_id(self.encoder), runtime=self.runtime,
                                         padding_side=self.encoder.padding_side)
            predicted.append(predict_answers(examples, split_windows, starts, ends, settings.n_best_size,
                                             settings.max_answer_length))
        threshold = None
        if settings.version_2_with_negative:
            differences, spans = null_differences(predicted[self.dev])
            _, threshold = best_null_threshold(differences, spans, self.splits[self.dev][1], self.language)
        answered = []
        for (_, examples), predictions in zip(self.splits, predicted, strict=True):
            chosen = final_answers(predictions, threshold)
            answered.append(SplitAnswers(predictions, chosen, self.scores(chosen, examples)))
        return EpochAnswers(answered, threshold)

    def scores(self, answers: dict[str, str], examples: Sequence[QAExample]) -> dict[str, float]:
        return {name: value for name, value in qa_scores(answers, examples, self.language,
                                                         self.settings.version_2_with_negative).items()
                if not name.endswith("total")}

    def dev_score(self, answered: EpochAnswers) -> float:
        return answered.splits[self.dev].scores["f1"]

    def add(self, seed: int, answered: EpochAnswers) -> float:
        self.per_seed.append(answered)
        return self.dev_score(answered)

    def report(self, seeds: list[int]) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]],
                                                dict[str, list[dict[str, Any]]]]:
        data, settings, per_seed = self.data, self.settings, self.per_seed
        no_answer = [self.scores({}, examples) for _, examples in self.splits]
        own: dict[str, Any] = {
            "metrics": summarize([answered.splits[0].scores for answered in per_seed]),
            # answering nothing: 0 on SQuAD v1.1, the unanswerable share on v2.0 (no majority label here)
            "baselines": {"majority": {}, "no_answer": no_answer[0]},
            "flags": [],
            "labels": [],
            "positive_label": None,
            "language": self.language,
            "splits": {name: {"reported": number == 0, "examples": len(examples),
                              "windows": len(self.windows[number]),
                              "metrics": summarize([answered.splits[number].scores for answered in per_seed]),
                              "majority": {}, "no_answer": no_answer[number]}
                       for number, (name, examples) in enumerate(self.splits)},
            "question_answering": asdict(settings),
            "data": {**data.files, "examples": {"train": len(data.train), data.split: len(self.splits[0][1])},
                     "windows": {"train": len(self.train_windows)}},
        }
        if settings.version_2_with_negative:
            # chosen on validation, as SQuAD v2.0's best_f1; without --test it is also scored there
            # null stands for -inf: dev scored best with no answer to every question
            own["null_threshold"] = {"chosen_on": self.dev_name, "metric": "f1",
                                     "per_seed": [finite_or_none(answered.threshold) for answered in per_seed]}
        rows = {name: prediction_rows(examples, seeds, [answered.splits[number] for answered in per_seed])
                for number, (name, examples) in enumerate(self.splits)}
        n_best = {name: n_best_rows(examples, seeds, [answered.splits[number] for answered in per_seed],
                                    settings.version_2_with_negative)
                  for number, (name, examples) in enumerate(self.splits)}
        return own, rows, n_best


def finite_or_none(value: float | None) -> float | None:
    """A number JSON can hold: an infinite one is None (a null score difference where no span was
    found, +inf; a threshold of -inf, dev scoring best with no answer to every question)."""
    return value if value is not None and math.isfinite(value) else None


def prediction_rows(examples: Sequence[QAExample], seeds: list[int], answered: list[SplitAnswers]
                    ) -> list[dict[str, Any]]:
    """A question a row: its number in the file, id, question, gold answers and each seed's answer
    ("" for no answer)."""
    return [{"index": index, "id": example.id, "question": example.question,
             "gold": [answer.text for answer in example.answers],
             "predicted": {str(seed): split.answers[example.id] for seed, split in zip(seeds, answered, strict=True)}}
            for index, example in enumerate(examples)]


def n_best_rows(examples: Sequence[QAExample], seeds: list[int], answered: list[SplitAnswers],
                version_2_with_negative: bool) -> list[dict[str, Any]]:
    """A question a row: each seed's best spans, best first (text, first character in the context,
    score: start logit + end logit) and, with SQuAD v2.0, its null score minus its best span's
    (the question is answered "" where this exceeds the seed's null threshold)."""
    rows = []
    for index, example in enumerate(examples):
        row: dict[str, Any] = {"index": index, "id": example.id, "n_best": {}}
        for seed, split in zip(seeds, answered, strict=True):
            prediction = split.predictions[index]
            row["n_best"][str(seed)] = [{"text": span.text, "start": span.start, "score": span.score}
                                        for span in prediction.n_best]
            if version_2_with_negative:
                row.setdefault("null_score_difference", {})[str(seed)] = finite_or_none(null_difference(prediction))
        rows.append(row)
    return rows


def check_qa_fits(encoder: Encoder, hp: Hyperparameters, train: QAWindows, scored: list[QAWindows],
                  runtime: Runtime) -> None:
    """Refuse, before any model is built, a training batch of windows (full mode: encoder and
    start/end layer trained; probe mode: the frozen encoder read without gradients) or a batch of
    windows answered, that the cost model says would not fit in the device's memory, at the
    longest window (batches are padded to their longest). The start/end layer (2 × hidden + 2
    weights, 2 logits a token) is smaller than the pretraining heads the cost model counts."""
    longest = max(len(ids) for windows in (train, *scored) for ids in windows.input_ids)
    rows = min(hp.batch_size, len(train))
    if hp.mode == "full":
        check_finetuning_fits(encoder.config, batch_size=rows, seq_length=longest, precision=runtime.precision,
                              device=runtime.device, advice="lower --batch-size or --max-seq-length", unit="windows")
    else:
        check_forward_fits(encoder.config, ForwardShape(batch_size=rows, seq_length=longest, predicted_rows=0),
                           runtime.device, precision=runtime.precision,
                           what=f"probing a batch of {rows:,} windows of {longest:,} tokens",
                           advice="lower --batch-size or --max-seq-length")
    rows = min(hp.eval_batch_size, max(len(windows) for windows in scored))
    check_forward_fits(encoder.config, ForwardShape(batch_size=rows, seq_length=longest, predicted_rows=0),
                       runtime.device, precision=runtime.precision,
                       what=f"answering from {rows:,} windows of {longest:,} tokens at once",
                       advice="lower eval_batch_size (--set eval_batch_size=N) or --max-seq-length")
