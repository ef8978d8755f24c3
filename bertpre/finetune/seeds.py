"""Every seed of one task on one encoder, for every task kind: train, choose each seed's epoch (its
last, or the best on dev), keep the best seed's model, and report. A kind's own work (`SeedWork`)
encodes and scores; a labelled kind's (`LabelledWork`) trains the full model or a probe on frozen
features computed once, and scores each split the model is asked about: the reported one(s) and,
beside a test split, the validation split."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import nn

import bertpre
from bertpre.config.finetune import Hyperparameters, advice_when_stuck
from bertpre.finetune.encoding import (
    Encoded,
    describe_training,
    encoding_notes,
    join_encoded,
)
from bertpre.finetune.features import cached_features
from bertpre.finetune.kinds import task_kind
from bertpre.finetune.loop import (
    pad_token_id,
    predict,
    probe_labels,
    probe_outputs,
    train_full,
    train_probe,
)
from bertpre.finetune.report import SplitScores, summarize
from bertpre.finetune.results import prediction_rows
from bertpre.finetune.saved_model import save_task_model
from bertpre.finetune.source import Encoder
from bertpre.finetune.tasks import Examples, TaskData, metric_name
from bertpre.model.cost import ForwardShape
from bertpre.model.families import max_input_tokens
from bertpre.train.memory import check_finetuning_fits, check_forward_fits
from bertpre.train.runtime import Runtime

if TYPE_CHECKING:  # what the user named
    from bertpre.finetune.run import TaskFiles


@dataclass
class ScoredSplit:
    """A split a job scores: its name in the report (validation, test, MNLI's validation_m …),
    its metric suffix when its scores are the reported ones (None: dev, scored beside a test
    split) and its examples."""

    name: str
    suffix: str | None
    examples: Examples

    @property
    def reported(self) -> bool:
        return self.suffix is not None


def scored_splits(data: TaskData) -> list[ScoredSplit]:
    """The reported split(s) (test when there is one, else validation; a benchmark's others too),
    then, beside a test split, the validation split: dev, which can choose the epoch."""
    splits = [ScoredSplit(metric_name(data.split, suffix), suffix, examples) for suffix, examples in data.scored]
    if data.test is not None:
        splits.append(ScoredSplit("validation", None, data.validation))
    return splits


class EpochChoice:
    """Called by the loop after each epoch: scores the model on dev, and keeps the outputs on
    every scored split (and, asked, the weights) of the epoch scoring best, the first of equals.
    The outputs are whatever `outputs` returns (a classifier's joined outputs, question
    answering's answers), read only by `dev_score`."""

    def __init__(self, outputs: Callable[[nn.Module], Any], dev_score: Callable[[Any], float],
                 keep_weights: bool) -> None:
        self.outputs, self.dev_score, self.keep_weights = outputs, dev_score, keep_weights
        self.epoch, self.score = 0, -math.inf
        self.scores: list[float | None] = []  # each epoch's dev score, for the report
        self.raw: Any = None
        self.weights: dict[str, torch.Tensor] | None = None

    def __call__(self, epoch: int, model: nn.Module) -> None:
        raw = self.outputs(model)
        value = self.dev_score(raw)
        self.scores.append(value if math.isfinite(value) else None)
        value = finite_or_worst(value)
        if self.raw is None or value > self.score:
            self.epoch, self.score, self.raw = epoch, value, raw
            if self.keep_weights:
                self.weights = cpu_copy(model)


def finite_or_worst(value: float) -> float:
    """A score to rank by: an undefined one (a constant prediction's correlation) ranks last."""
    return value if math.isfinite(value) else -math.inf


def cpu_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().cpu().clone() for name, tensor in model.state_dict().items()}


# results.json's keys in the order every kind writes them (a kind's own keys among them)
RESULT_ORDER = ("saved_model", "source", "checkpoint", "checkpoint_step", "weights_sha256", "task", "mode", "split",
                "seeds", "metrics", "baselines", "flags", "labels", "positive_label", "language", "selection", "splits",
                "hyperparameters", "question_answering", "precision", "data", "bertpre_version", "null_threshold")


class SeedWork(Protocol):
    """What a task kind's seeds need beyond the seed loop (`TaskKind.work` names the class): built
    once from the encoder and the data (encoded, checked against the device's memory), it trains a
    seed, gives a model's outputs on every scored split, scores them on dev and keeps each seed's."""

    training: str  # what a seed trains on, in words
    dev_name: str  # the split that chooses the epoch and the model to save

    def train(self, seed: int, after_epoch: EpochChoice | None) -> tuple[nn.Module | None, Any]:
        """The model trained from `seed` (None when there is none to save: a linear probe) and its
        outputs when training gave them (else None: the loop asks `outputs`)."""

    def outputs(self, model: nn.Module) -> Any: ...

    def dev_score(self, outputs: Any) -> float: ...

    def add(self, seed: int, outputs: Any) -> float:
        """Keep one seed's outputs (scored on every split); return its dev score."""

    def report(self, seeds: list[int]) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]],
                                                dict[str, list[dict[str, Any]]]]:
        """The kind's own entries of results.json, the prediction rows and n-best rows of each split."""

    @staticmethod
    def fitted_files(files: TaskFiles, encoder: Encoder, data: Any, max_seq_length: int,
                     say: Callable[[str], None]) -> TaskFiles:
        """`files` with the kind's settings fitted to the encoder (part of the work's key)."""


def run_seeds(encoder: Encoder, data: Any, files: TaskFiles, hp: Hyperparameters, seeds: list[int],
              runtime: Runtime, say: Callable[[str], None], save_to: Path | None = None,
              features_folder: Path | None = None, select_by: str = "last"
              ) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Every seed of any task kind: its result (each seed's scores on each scored split, summarized),
    each scored split's prediction rows and (question answering) n-best rows. With `select_by`
    "dev", each seed's epoch is the one scoring best on the validation split (else its last). With
    `save_to`, the seed scoring best on the validation split is written there as a Hugging Face
    folder. A probe's frozen features are computed once for all seeds, and kept in
    `features_folder` for later commands."""
    kind = task_kind(data.task)
    work: SeedWork = kind.work_class()(encoder, data, files, hp, runtime, say, features_folder)
    epochs, dev_curves, model = [], [], None
    best: tuple[float, int, dict] | None = None  # (dev score, seed, weights) of the best seed so far
    for seed in seeds:
        say(f"seed {seed}: {'training' if hp.mode == 'full' else 'probing'} on {work.training}")
        choice = (EpochChoice(work.outputs, work.dev_score, keep_weights=save_to is not None)
                  if select_by == "dev" else None)
        model, raw = work.train(seed, choice)
        if choice is not None:
            raw = choice.raw
            if model is not None and choice.weights is not None:
                model.load_state_dict(choice.weights)
            dev_curves.append(choice.scores)
            say(f"seed {seed}: epoch {choice.epoch} of {hp.epochs} chosen by {work.dev_name} {kind.main_metric} "
                f"{choice.score:.4f}")
        elif raw is None:
            raw = work.outputs(model)
        epochs.append(hp.epochs if choice is None else choice.epoch)
        dev_value = finite_or_worst(work.add(seed, raw))
        if save_to is not None and model is not None and (best is None or dev_value > best[0]):
            best = (dev_value, seed, cpu_copy(model))
    saved = None
    if save_to is not None and model is not None and best is not None:
        model.load_state_dict(best[2])
        saved = {"path": str(save_task_model(save_to, model, encoder.config, task=data.task,
                                             label_names=data.label_names,
                                             tokenizer_folder=encoder.tokenizer_folder)),
                 "seed": best[1]}
        say(f"saved seed {best[1]}'s model (the best by {work.dev_name} {kind.main_metric}) to {saved['path']}")
    own, rows, n_best = work.report(seeds)
    result = {
        "saved_model": saved,
        "source": str(encoder.source),
        "checkpoint": str(encoder.model_folder),
        "checkpoint_step": encoder.step,
        "weights_sha256": encoder.weights_sha256,
        "task": data.task,
        "mode": hp.mode,
        "split": data.split,
        "seeds": seeds,
        "selection": {"by": select_by, "split": work.dev_name, "metric": kind.main_metric, "epochs": epochs,
                      **({"scores_by_epoch": dev_curves} if select_by == "dev" else {})},
        "hyperparameters": asdict(hp),
        "precision": runtime.precision,
        "bertpre_version": bertpre.__version__,
        **own,
    }
    return {key: result[key] for key in sorted(result, key=result_place)}, rows, n_best


def result_place(key: str) -> int:
    return RESULT_ORDER.index(key) if key in RESULT_ORDER else len(RESULT_ORDER)


class LabelledWork:
    """The seeds' work of a kind with labelled examples (classification, regression, tagging):
    every scored split encoded and joined (one model scores them all; its outputs are cut apart),
    the full model trained with its head, or a linear probe on frozen features computed once."""

    def __init__(self, encoder: Encoder, data: TaskData, files: TaskFiles, hp: Hyperparameters, runtime: Runtime,
                 say: Callable[[str], None], features_folder: Path | None) -> None:
        self.encoder, self.data, self.files, self.hp, self.runtime = encoder, data, files, hp, runtime
        self.kind, self.splits = task_kind(data.task), scored_splits(data)
        self.dev = next((number for number, split in enumerate(self.splits) if not split.reported), 0)
        self.dev_name = self.splits[self.dev].name
        self.train_encoded = encode(encoder, data, data.train, hp)
        self.parts = [encode(encoder, data, split.examples, hp) for split in self.splits]
        self.scored = join_encoded(self.parts)
        check_fits(encoder, hp, self.train_encoded, self.scored, runtime)
        reported_parts = self.parts[:len(data.scored)]  # the notes count the reported splits, as before dev was scored
        for note in encoding_notes(data, self.train_encoded, reported_parts, hp.max_seq_length,
                                   max_input_tokens(encoder.config)):
            say(note)
        self.training = describe_training(self.train_encoded)
        self.num_labels = self.kind.num_labels(data.label_names)
        self.features = None
        if hp.mode == "probe":
            self.features = [cached_features(encoder, split, task=data.task, pooling=hp.pooling,
                                             batch_size=hp.eval_batch_size, runtime=runtime,
                                             folder=features_folder, say=say)
                             for split in (self.train_encoded, self.scored)]
        self.tallies = [SplitScores(split.name, split.reported, split.examples.labels, data.task, data.label_names)
                        for split in self.splits]
        self.flags: list[str] = []

    @staticmethod
    def fitted_files(files: TaskFiles, encoder: Encoder, data: TaskData, max_seq_length: int,
                     say: Callable[[str], None]) -> TaskFiles:
        return files  # nothing to fit: the files and columns are as the user named them

    def train(self, seed: int, after_epoch: EpochChoice | None) -> tuple[nn.Module | None, Any]:
        task, hp = self.data.task, self.hp
        if self.features is None:
            return train_full(self.encoder, self.train_encoded, task=task, num_labels=self.num_labels, hp=hp,
                              seed=seed, runtime=self.runtime, after_epoch=after_epoch), None
        return None, train_probe(self.features[0], probe_labels(self.train_encoded, task), self.features[1],
                                 task=task, num_labels=self.num_labels, hp=hp, seed=seed, after_epoch=after_epoch)

    def outputs(self, model: nn.Module) -> np.ndarray:
        """The model's (or probe head's) outputs on every scored split, joined."""
        if self.features is not None:
            return probe_outputs(model, self.features[1], self.data.task)
        return predict(model, self.scored, task=self.data.task, batch_size=self.hp.eval_batch_size,
                       pad_id=pad_token_id(self.encoder), runtime=self.runtime,
                       padding_side=self.encoder.padding_side)

    def decoded(self, raw: np.ndarray) -> list[list[Any]]:
        return [decode(output, part, self.data)
                for output, part in zip(cut_outputs(raw, self.parts, self.data.task), self.parts, strict=True)]

    def dev_score(self, raw: np.ndarray) -> float:
        predictions = decode(cut_outputs(raw, self.parts, self.data.task)[self.dev], self.parts[self.dev], self.data)
        return self.kind.score(predictions, self.splits[self.dev].examples.labels,
                               self.data.label_names)[self.kind.main_metric]

    def add(self, seed: int, raw: np.ndarray) -> float:
        for tally, predictions in zip(self.tallies, self.decoded(raw), strict=True):
            tally.add(predictions)
        reason = self.kind.stuck(self.tallies[0].predictions[-1])  # flagged once, on the first scored split
        if reason:
            self.flags.append(f"seed {seed} predicted {reason} (stuck at one class: "
                              f"{advice_when_stuck(self.hp, self.encoder.config.hidden_size)})")
        return self.tallies[self.dev].scores[-1][self.kind.main_metric]

    def report(self, seeds: list[int]) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], dict]:
        data, files = self.data, self.files
        baselines = majority_baseline(data, self.splits)
        reported = [(split, tally) for split, tally in zip(self.splits, self.tallies, strict=True) if split.reported]
        own = {
            "metrics": summarize([{metric_name(name, split.suffix): value for split, tally in reported
                                   for name, value in tally.scores[number].items()} for number in range(len(seeds))]),
            "baselines": {"majority": {metric_name(name, split.suffix): value for split, _ in reported
                                       for name, value in baselines[split.name].items()}},
            "flags": self.flags,
            "labels": data.label_names,
            "positive_label": self.kind.positive_label(data.label_names),
            "splits": {tally.name: tally.report(baselines[tally.name]) for tally in self.tallies},
            "data": {**data.files, "columns": {"text": files.text_column, "text_pair": files.text_pair_column,
                                               "label": files.label_column},
                     "examples": {"train": len(data.train),
                                  **{metric_name(data.split, suffix): len(examples)
                                     for suffix, examples in data.scored}}},
        }
        rows = {tally.name: list(prediction_rows(data.task, split.examples, seeds, tally.predictions))
                for split, tally in zip(self.splits, self.tallies, strict=True)}
        return own, rows, {}


def check_fits(encoder: Encoder, hp: Hyperparameters, train: Encoded, scored: Encoded, runtime: Runtime) -> None:
    """Refuse, before any model is built, a training batch (full mode) or a batch of features or
    predictions that the cost model says would not fit in the device's memory, at the longest
    example's length (batches are padded to their longest)."""
    longest = max(len(ids) for split in (train, scored) for ids in split.input_ids)
    if hp.mode == "full":
        check_finetuning_fits(encoder.config, batch_size=min(hp.batch_size, len(train)), seq_length=longest,
                              precision=runtime.precision, device=runtime.device,
                              advice="lower --batch-size or --max-seq-length")
    rows = min(hp.eval_batch_size, max(len(train), len(scored)))
    check_forward_fits(encoder.config, ForwardShape(batch_size=rows, seq_length=longest, predicted_rows=0),
                       runtime.device, precision=runtime.precision,
                       what=f"reading {rows:,} examples of {longest:,} tokens at once",
                       advice="lower eval_batch_size (--set eval_batch_size=N) or --max-seq-length")


def cut_outputs(raw: np.ndarray, parts: list[Encoded], task: str) -> list[np.ndarray]:
    """The model's outputs on `join_encoded(parts)`, one array a part (tagging: a row a kept word)."""
    sizes = [task_kind(task).output_rows(part) for part in parts]
    bounds = np.cumsum([0, *sizes])
    return [raw[start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]


def encode(encoder: Encoder, data: TaskData, examples: Examples, hp: Hyperparameters) -> Encoded:
    return task_kind(data.task).encode(encoder, data, examples, hp.max_seq_length)


def decode(raw: np.ndarray, scored: Encoded, data: TaskData) -> list[Any]:
    """Model outputs → label names, values, or one tag a word (a word with no piece, lost to
    truncation or to the tokenizer: the training file's most frequent tag, in its own place)."""
    return task_kind(data.task).decode(raw, scored, data)


def majority_baseline(data: TaskData, splits: list[ScoredSplit]) -> dict[str, dict[str, float | None]]:
    """The scores, on each scored split, of always answering the training file's most frequent
    label (for regression, its mean)."""
    kind, baseline = task_kind(data.task), {}
    for split in splits:
        predictions = kind.majority(data, split.examples)
        baseline[split.name] = {name: value if value is not None and math.isfinite(value) else None
                                for name, value in kind.score(predictions, split.examples.labels,
                                                              data.label_names).items()}
    return baseline
