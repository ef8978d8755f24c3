"""Every seed of an extractive question-answering task on one encoder: the files read, the
questions cut into windows, each seed trained, every question answered from its windows and
scored (exact match and F1; SQuAD v2.0: the null threshold chosen on the validation split)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import bertpre
from bertpre.config.finetune import Hyperparameters
from bertpre.errors import UserError
from bertpre.finetune.loop import pad_token_id
from bertpre.finetune.qa_answers import QAPrediction, predict_answers
from bertpre.finetune.qa_data import QAExample, read_qa_file
from bertpre.finetune.qa_loop import train_question_answering, window_logits
from bertpre.finetune.qa_metrics import best_null_threshold, qa_scores
from bertpre.finetune.qa_windows import encode_qa_windows
from bertpre.finetune.report import summarize
from bertpre.finetune.saved_model import save_task_model
from bertpre.finetune.source import Encoder
from bertpre.finetune.tasks import describe_file
from bertpre.train.runtime import Runtime

LANGUAGES = ("auto", "en", "zh")
# "auto" scores as Chinese (CMRC 2018's character F1) when this share of the contexts' characters
# (spaces aside) are CJK ideographs; English words in a Chinese text stay far below it.
CHINESE_SHARE = 0.3


@dataclass(frozen=True)
class QASettings:
    """How questions are windowed, answered and scored (the command's QA options)."""

    doc_stride: int = 128  # context tokens a window shares with the one before
    max_answer_length: int = 30  # tokens
    version_2_with_negative: bool = False  # SQuAD v2.0: unanswerable questions
    language: str = "auto"  # en: SQuAD's EM/F1; zh: CMRC 2018's; auto: by the contexts' script
    n_best_size: int = 20

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise UserError(f"--answer-language {self.language!r} must be one of {', '.join(LANGUAGES)}")
        if self.doc_stride < 0:
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


def answer_language(examples: Sequence[QAExample], language: str) -> str:
    """`language`, or for "auto" the script of the contexts: zh where CJK ideographs are at least
    CHINESE_SHARE of their characters, else en."""
    if language != "auto":
        return language
    characters = [character for example in examples for character in example.context if not character.isspace()]
    chinese = sum("\u4e00" <= character <= "\u9fff" for character in characters)
    return "zh" if characters and chinese / len(characters) >= CHINESE_SHARE else "en"


def null_differences(predictions: Sequence[QAPrediction]) -> tuple[dict[str, float], dict[str, str]]:
    """Per question, its null score minus its best span's score, and the best span's text."""
    differences = {prediction.id: prediction.null_score - prediction.n_best[0].score if prediction.n_best
                   else math.inf for prediction in predictions}
    return differences, {prediction.id: prediction.n_best[0].text if prediction.n_best else ""
                         for prediction in predictions}


def final_answers(predictions: Sequence[QAPrediction], threshold: float | None) -> dict[str, str]:
    """Each question's answer: its best span, or (with a threshold) "" where the null score beats
    the best span by more than it."""
    differences, spans = null_differences(predictions)
    if threshold is None:
        return {prediction.id: prediction.text for prediction in predictions}
    return {id_: "" if differences[id_] > threshold else spans[id_] for id_ in spans}


def run_qa_seeds(encoder: Encoder, data: QATaskData, settings: QASettings, hp: Hyperparameters, seeds: list[int],
                 runtime: Runtime, say: Callable[[str], None], save_to: Path | None = None
                 ) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """Every seed's exact match and F1 on the reported split (test when given, else validation)
    and, beside a test split, on validation; and the prediction rows of each scored split. With
    SQuAD v2.0, each seed's null threshold is chosen on the validation split. With `save_to`, the
    seed scoring best on validation F1 is written there as a Hugging Face folder."""
    language = answer_language(data.validation, settings.language)
    splits = [(data.split, data.test if data.test is not None else data.validation)]
    if data.test is not None:
        splits.append(("validation", data.validation))
    dev = len(splits) - 1
    train = encode_qa_windows(encoder.tokenizer, data.train, hp.max_seq_length, settings.doc_stride)
    windows = [encode_qa_windows(encoder.tokenizer, examples, hp.max_seq_length, settings.doc_stride)
               for _, examples in splits]
    say(f"question answering ({language}): {len(data.train):,} training questions in {len(train):,} windows of "
        f"at most {hp.max_seq_length} tokens")
    scores: list[list[dict[str, float]]] = [[] for _ in splits]
    answers: list[list[dict[str, str]]] = [[] for _ in splits]
    thresholds: list[float | None] = []
    best: tuple[float, int, dict] | None = None
    model = None
    for seed in seeds:
        say(f"seed {seed}: {'training' if hp.mode == 'full' else 'probing'} on {len(train):,} windows")
        model = train_question_answering(encoder, train, hp=hp, seed=seed, runtime=runtime)
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
        thresholds.append(threshold)
        for number, ((_, examples), predictions) in enumerate(zip(splits, predicted, strict=True)):
            chosen = final_answers(predictions, threshold)
            answers[number].append(chosen)
            scores[number].append({name: value for name, value in qa_scores(
                chosen, examples, language, settings.version_2_with_negative).items() if not name.endswith("total")})
        if save_to is not None and (best is None or scores[dev][-1]["f1"] > best[0]):
            best = (scores[dev][-1]["f1"], seed, {name: tensor.detach().cpu().clone()
                                                  for name, tensor in model.state_dict().items()})
    saved = None
    if save_to is not None and model is not None and best is not None:
        model.load_state_dict(best[2])
        saved = {"path": str(save_task_model(save_to, model, encoder.config, task="qa", label_names=[],
                                             tokenizer_folder=encoder.tokenizer_folder)), "seed": best[1]}
        say(f"saved seed {best[1]}'s model (the best by validation f1) to {saved['path']}")
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
        "metrics": summarize(scores[0]),
        # answering nothing: 0 on SQuAD v1.1, the unanswerable share on v2.0 (no majority label here)
        "baselines": {"majority": {}, "no_answer": {
            name: value for name, value in qa_scores({}, splits[0][1], language,
                                                     settings.version_2_with_negative).items()
            if not name.endswith("total")}},
        "flags": [],
        "labels": [],
        "positive_label": None,
        "language": language,
        "selection": {"by": "last", "split": "validation", "metric": "f1", "epochs": [hp.epochs] * len(seeds)},
        "splits": {name: {"reported": number == 0, "examples": len(examples), "windows": len(windows[number]),
                          "metrics": summarize(scores[number]), "majority": {}}
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
        result["null_threshold"] = {"chosen_on": "validation", "metric": "f1", "per_seed": [
            value if value is not None and math.isfinite(value) else None for value in thresholds]}
    rows = {name: [{"index": index, "id": example.id, "question": example.question,
                    "gold": [answer.text for answer in example.answers],
                    "predicted": {str(seed): chosen[example.id] for seed, chosen in zip(seeds, answers[number],
                                                                                       strict=True)}}
                   for index, example in enumerate(examples)]
            for number, (name, examples) in enumerate(splits)}
    return result, rows
