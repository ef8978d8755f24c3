"""Every seed of an extractive question-answering task on one encoder: the files read, the
questions cut into windows (their batches checked against the device's memory), each seed trained
(its last epoch, or the one best on dev), every question answered from its windows and scored
(exact match and F1; SQuAD v2.0: the null threshold chosen on the validation split)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from torch import nn

import bertpre
from bertpre.config.finetune import Hyperparameters
from bertpre.errors import UserError
from bertpre.finetune.loop import pad_token_id
from bertpre.finetune.qa_answers import QAPrediction, predict_answers
from bertpre.finetune.qa_data import QAExample, read_qa_file
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
from bertpre.finetune.saved_model import save_task_model
from bertpre.finetune.seeds import EpochChoice, cpu_copy, finite_or_worst
from bertpre.finetune.source import Encoder
from bertpre.finetune.tasks import describe_file
from bertpre.model.cost import ForwardShape
from bertpre.train.memory import check_finetuning_fits, check_forward_fits
from bertpre.train.runtime import Runtime

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
    if stride != SQUAD_DOC_STRIDE:
        scaled = default_doc_stride(max_seq_length, max_seq_length)
        below = f", below the {room} context tokens a window holds beside the longest question" if stride < scaled else ""
        say(f"note: --doc-stride {stride}: SQuAD's {SQUAD_DOC_STRIDE} for windows of {SQUAD_MAX_SEQ_LENGTH} tokens, "
            f"scaled to windows of {max_seq_length}{below} (give --doc-stride to choose)")
    return replace(settings, doc_stride=stride)


def load_qa_task(train: Path, validation: Path, test: Path | None, settings: QASettings) -> QATaskData:
    """Read the SQuAD-layout (or JSON lines) files; an empty split is refused in one line."""
    paths = {"train": Path(train), "validation": Path(validation), **({"test": Path(test)} if test else {})}
    splits = {name: read_qa_file(path, settings.version_2_with_negative) for name, path in paths.items()}
    for name, examples in splits.items():
        if not examples:
            raise UserError(f"{paths[name]} has no questions; give a SQuAD-layout file with data/paragraphs/qas")
    return QATaskData(train=splits["train"], validation=splits["validation"], test=splits.get("test"),
                      files={name: describe_file(path) for name, path in paths.items()})


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


def run_qa_seeds(encoder: Encoder, data: QATaskData, settings: QASettings, hp: Hyperparameters, seeds: list[int],
                 runtime: Runtime, say: Callable[[str], None], save_to: Path | None = None, select_by: str = "last"
                 ) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Every seed's exact match and F1 on the reported split (test when given, else validation)
    and, beside a test split, on validation; each scored split's prediction rows (each seed's
    answer a question) and n-best rows (each seed's best spans and, v2, null score differences).

    With SQuAD v2.0, each seed's null threshold is chosen on the validation split and applied to
    every split. With `select_by` "dev", each seed's epoch is the one whose validation F1 (v2: at
    the threshold chosen there) is best, the earliest of equals; else its last. With `save_to`,
    the seed scoring best on validation F1 is written there as a Hugging Face folder."""
    settings = fitted_qa_settings(settings, encoder.tokenizer, data, hp.max_seq_length, say)
    language = answer_language(data.validation, settings.language)
    splits = [(data.split, data.test if data.test is not None else data.validation)]
    if data.test is not None:
        splits.append(("validation", data.validation))
    dev = len(splits) - 1
    train = encode_qa_windows(encoder.tokenizer, data.train, hp.max_seq_length, settings.doc_stride,
                              config=encoder.config)
    windows = [encode_qa_windows(encoder.tokenizer, examples, hp.max_seq_length, settings.doc_stride,
                                 config=encoder.config)
               for _, examples in splits]
    check_qa_fits(encoder, hp, train, windows, runtime)
    say(f"question answering ({language}): {len(data.train):,} training questions in {len(train):,} windows of "
        f"at most {hp.max_seq_length} tokens")

    def answer(model: nn.Module) -> EpochAnswers:
        """Every scored split answered by `model`; v2: with the threshold chosen on dev."""
        predicted = []
        for (_, examples), split_windows in zip(splits, windows, strict=True):
            starts, ends = window_logits(model, split_windows, batch_size=hp.eval_batch_size,
                                         pad_id=pad_token_id(encoder), runtime=runtime,
                                         padding_side=encoder.padding_side)
            predicted.append(predict_answers(examples, split_windows, starts, ends, settings.n_best_size,
                                             settings.max_answer_length))
        threshold = None
        if settings.version_2_with_negative:
            differences, spans = null_differences(predicted[dev])
            _, threshold = best_null_threshold(differences, spans, splits[dev][1], language)
        answered = []
        for (_, examples), predictions in zip(splits, predicted, strict=True):
            chosen = final_answers(predictions, threshold)
            answered.append(SplitAnswers(predictions, chosen, {
                name: value for name, value in qa_scores(chosen, examples, language,
                                                         settings.version_2_with_negative).items()
                if not name.endswith("total")}))
        return EpochAnswers(answered, threshold)

    per_seed: list[EpochAnswers] = []
    epochs, dev_curves = [], []
    best: tuple[float, int, dict] | None = None
    model = None
    for seed in seeds:
        say(f"seed {seed}: {'training' if hp.mode == 'full' else 'probing'} on {len(train):,} windows")
        choice = (EpochChoice(answer, lambda answered: answered.splits[dev].scores["f1"],
                              keep_weights=save_to is not None) if select_by == "dev" else None)
        model = train_question_answering(encoder, train, hp=hp, seed=seed, runtime=runtime, after_epoch=choice)
        if choice is None:
            answered = answer(model)
        else:
            answered = choice.raw
            if choice.weights is not None:
                model.load_state_dict(choice.weights)
            dev_curves.append(choice.scores)
            say(f"seed {seed}: epoch {choice.epoch} of {hp.epochs} chosen by {splits[dev][0]} f1 {choice.score:.4f}")
        per_seed.append(answered)
        epochs.append(hp.epochs if choice is None else choice.epoch)
        dev_f1 = finite_or_worst(answered.splits[dev].scores["f1"])
        if save_to is not None and (best is None or dev_f1 > best[0]):
            best = (dev_f1, seed, cpu_copy(model))
    saved = None
    if save_to is not None and model is not None and best is not None:
        model.load_state_dict(best[2])
        saved = {"path": str(save_task_model(save_to, model, encoder.config, task="qa", label_names=[],
                                             tokenizer_folder=encoder.tokenizer_folder)), "seed": best[1]}
        say(f"saved seed {best[1]}'s model (the best by {splits[dev][0]} f1) to {saved['path']}")
    no_answer = [{name: value for name, value in qa_scores({}, examples, language,
                                                           settings.version_2_with_negative).items()
                  if not name.endswith("total")} for _, examples in splits]
    result = {
        "saved_model": saved,
        "source": str(encoder.source),
        "checkpoint": str(encoder.model_folder),
        "checkpoint_step": encoder.step,
        "weights_sha256": encoder.weights_sha256,
        "task": "qa",
        "mode": hp.mode,
        "split": data.split,
        "seeds": seeds,
        "metrics": summarize([answered.splits[0].scores for answered in per_seed]),
        # answering nothing: 0 on SQuAD v1.1, the unanswerable share on v2.0 (no majority label here)
        "baselines": {"majority": {}, "no_answer": no_answer[0]},
        "flags": [],
        "labels": [],
        "positive_label": None,
        "language": language,
        "selection": {"by": select_by, "split": splits[dev][0], "metric": "f1", "epochs": epochs,
                      **({"scores_by_epoch": dev_curves} if select_by == "dev" else {})},
        "splits": {name: {"reported": number == 0, "examples": len(examples), "windows": len(windows[number]),
                          "metrics": summarize([answered.splits[number].scores for answered in per_seed]),
                          "majority": {}, "no_answer": no_answer[number]}
                   for number, (name, examples) in enumerate(splits)},
        "hyperparameters": asdict(hp),
        "question_answering": asdict(settings),
        "precision": runtime.precision,
        "data": {**data.files, "examples": {"train": len(data.train), data.split: len(splits[0][1])},
                 "windows": {"train": len(train)}},
        "bertpre_version": bertpre.__version__,
    }
    if settings.version_2_with_negative:
        # chosen on validation, as SQuAD v2.0's best_f1; without --test it is also scored there
        # null stands for -inf: dev scored best with no answer to every question
        result["null_threshold"] = {"chosen_on": splits[dev][0], "metric": "f1",
                                    "per_seed": [finite_or_none(answered.threshold) for answered in per_seed]}
    rows = {name: prediction_rows(examples, seeds, [answered.splits[number] for answered in per_seed])
            for number, (name, examples) in enumerate(splits)}
    n_best = {name: n_best_rows(examples, seeds, [answered.splits[number] for answered in per_seed],
                                settings.version_2_with_negative)
              for number, (name, examples) in enumerate(splits)}
    return result, rows, n_best


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
