"""Every seed of one task on one encoder: train (the full model, or a probe on frozen features
computed once), choose each seed's epoch (its last, or the best on dev), and score each split
the model is asked about: the reported one(s) and, beside a test split, the validation split."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

import bertpre
from bertpre.config.finetune import Hyperparameters, advice_when_stuck
from bertpre.finetune.encoding import (
    Encoded,
    describe_training,
    encode_texts,
    encode_words,
    encoding_notes,
    join_encoded,
    tags_by_word,
)
from bertpre.finetune.features import cached_features
from bertpre.finetune.loop import (
    pad_token_id,
    predict,
    probe_labels,
    probe_outputs,
    train_full,
    train_probe,
)
from bertpre.finetune.report import MAIN_METRIC, SplitScores, score, stuck, summarize
from bertpre.finetune.saved_model import save_task_model
from bertpre.finetune.source import Encoder
from bertpre.finetune.tasks import Examples, TaskData, majority_label, metric_name
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


def run_seeds(encoder: Encoder, data: TaskData, files: TaskFiles, hp: Hyperparameters, seeds: list[int],
              runtime: Runtime, say: Callable[[str], None], save_to: Path | None = None,
              features_folder: Path | None = None, select_by: str = "last"
              ) -> tuple[dict[str, Any], dict[str, list[list[Any]]]]:
    """Every seed's scores on each scored split, summarized, and every seed's predictions (split →
    a list a seed). With `select_by` "dev", each seed's epoch is the one scoring best on the
    validation split (else its last). With `save_to`, the seed scoring best on the validation split
    is written there as a Hugging Face folder. A probe's frozen features are computed once for all
    seeds, and kept in `features_folder` for later commands."""
    task, main = data.task, MAIN_METRIC[data.task]
    splits = scored_splits(data)
    dev = next((number for number, split in enumerate(splits) if not split.reported), 0)
    train = encode(encoder, data, data.train, hp)
    parts = [encode(encoder, data, split.examples, hp) for split in splits]
    scored = join_encoded(parts)  # one model scores every split; its outputs are cut apart below
    check_fits(encoder, hp, train, scored, runtime)
    reported_parts = parts[:len(data.scored)]  # the notes count the reported splits, as before dev was scored
    for note in encoding_notes(data, train, reported_parts, hp.max_seq_length,
                               max_input_tokens(encoder.config)):
        say(note)
    num_labels = 1 if task == "regression" else len(data.label_names)
    features = None
    if hp.mode == "probe":
        features = [cached_features(encoder, split, task=task, pooling=hp.pooling, batch_size=hp.eval_batch_size,
                                    runtime=runtime, folder=features_folder, say=say)
                    for split in (train, scored)]

    def outputs(model: nn.Module) -> np.ndarray:
        """The model's (or probe head's) outputs on every scored split, joined."""
        if features is not None:
            return probe_outputs(model, features[1], task)
        return predict(model, scored, task=task, batch_size=hp.eval_batch_size, pad_id=pad_token_id(encoder),
                       runtime=runtime, padding_side=encoder.padding_side)

    def decoded(raw: np.ndarray) -> list[list[Any]]:
        return [decode(output, part, data) for output, part in zip(cut_outputs(raw, parts, task), parts, strict=True)]

    def dev_score(raw: np.ndarray) -> float:
        predictions = decode(cut_outputs(raw, parts, task)[dev], parts[dev], data)
        return score(task, predictions, splits[dev].examples.labels, data.label_names)[main]

    tallies = [SplitScores(split.name, split.reported, split.examples.labels, task, data.label_names)
               for split in splits]
    flags, epochs, dev_curves, model = [], [], [], None
    best: tuple[float, int, dict] | None = None  # (dev score, seed, weights) of the best seed so far
    for seed in seeds:
        say(f"seed {seed}: {'training' if hp.mode == 'full' else 'probing'} on {describe_training(train)}")
        choice = EpochChoice(outputs, dev_score, keep_weights=save_to is not None) if select_by == "dev" else None
        if features is None:
            model = train_full(encoder, train, task=task, num_labels=num_labels, hp=hp, seed=seed,
                               runtime=runtime, after_epoch=choice)
            raw = outputs(model) if choice is None else choice.raw
            if choice is not None and choice.weights is not None:
                model.load_state_dict(choice.weights)
        else:
            raw = train_probe(features[0], probe_labels(train, task), features[1], task=task,
                              num_labels=num_labels, hp=hp, seed=seed, after_epoch=choice)
            raw = raw if choice is None else choice.raw
        epochs.append(hp.epochs if choice is None else choice.epoch)
        if choice is not None:
            dev_curves.append(choice.scores)
            say(f"seed {seed}: epoch {choice.epoch} of {hp.epochs} chosen by {splits[dev].name} {main} "
                f"{choice.score:.4f}")
        for tally, predictions in zip(tallies, decoded(raw), strict=True):
            tally.add(predictions)
        reason = stuck(task, tallies[0].predictions[-1])  # flagged once, on the first scored split
        if reason:
            flags.append(f"seed {seed} predicted {reason} (stuck at one class: "
                         f"{advice_when_stuck(hp, encoder.config.hidden_size)})")
        dev_value = finite_or_worst(tallies[dev].scores[-1][main])
        if save_to is not None and model is not None and (best is None or dev_value > best[0]):
            best = (dev_value, seed, cpu_copy(model))
    saved = None
    if save_to is not None and model is not None and best is not None:
        model.load_state_dict(best[2])
        saved = {"path": str(save_task_model(save_to, model, encoder.config, task=task,
                                             label_names=data.label_names,
                                             tokenizer_folder=encoder.tokenizer_folder)),
                 "seed": best[1]}
        say(f"saved seed {best[1]}'s model (the best by {splits[dev].name} {main}) to {saved['path']}")
    baselines = majority_baseline(data, splits)
    reported = [(split, tally) for split, tally in zip(splits, tallies, strict=True) if split.reported]
    result = {
        "saved_model": saved,
        "source": str(encoder.source),
        "checkpoint": str(encoder.model_folder),
        "checkpoint_step": encoder.step,
        "weights_sha256": encoder.weights_sha256,
        "task": task,
        "mode": hp.mode,
        "split": data.split,
        "seeds": seeds,
        "metrics": summarize([{metric_name(name, split.suffix): value for split, tally in reported
                               for name, value in tally.scores[number].items()} for number in range(len(seeds))]),
        "baselines": {"majority": {metric_name(name, split.suffix): value for split, _ in reported
                                   for name, value in baselines[split.name].items()}},
        "flags": flags,
        "labels": data.label_names,
        "positive_label": data.label_names[1] if task == "classification" and len(data.label_names) == 2 else None,
        "selection": {"by": select_by, "split": splits[dev].name, "metric": main, "epochs": epochs,
                      **({"scores_by_epoch": dev_curves} if select_by == "dev" else {})},
        "splits": {tally.name: tally.report(baselines[tally.name]) for tally in tallies},
        "hyperparameters": asdict(hp),
        "precision": runtime.precision,
        "data": {**data.files, "columns": {"text": files.text_column, "text_pair": files.text_pair_column,
                                           "label": files.label_column},
                 "examples": {"train": len(data.train),
                              **{metric_name(data.split, suffix): len(examples) for suffix, examples in data.scored}}},
        "bertpre_version": bertpre.__version__,
    }
    return result, {tally.name: tally.predictions for tally in tallies}


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
    sizes = [sum(part.kept_words) if task == "tagging" else len(part) for part in parts]
    bounds = np.cumsum([0, *sizes])
    return [raw[start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]


def encode(encoder: Encoder, data: TaskData, examples, hp: Hyperparameters) -> Encoded:
    if data.task == "tagging":
        index = {name: number for number, name in enumerate(data.label_names)}
        return encode_words(encoder.tokenizer, examples.texts,
                            [[index[tag] for tag in tags] for tags in examples.labels], hp.max_seq_length,
                            config=encoder.config)
    labels = (examples.labels if data.task == "regression"
              else [data.label_names.index(label) for label in examples.labels])
    return encode_texts(encoder.tokenizer, examples.texts, examples.pairs, labels, hp.max_seq_length,
                        config=encoder.config)


def decode(raw: np.ndarray, scored: Encoded, data: TaskData) -> list[Any]:
    """Model outputs → label names, values, or one tag a word (a word with no piece, lost to
    truncation or to the tokenizer: the training file's most frequent tag, in its own place)."""
    if data.task == "regression":
        return [float(value) for value in raw]
    if data.task != "tagging":
        return [data.label_names[int(index)] for index in raw]
    return tags_by_word(raw, scored, data.label_names, majority_label([tag for tags in data.train.labels for tag in tags]))


def majority_baseline(data: TaskData, splits: list[ScoredSplit]) -> dict[str, dict[str, float | None]]:
    """The scores, on each scored split, of always answering the training file's most frequent
    label (for regression, its mean)."""
    baseline: dict[str, dict[str, float | None]] = {}
    for split in splits:
        examples = split.examples
        if data.task == "regression":
            mean = float(np.mean(data.train.labels))
            predictions: list[Any] = [mean] * len(examples)
        elif data.task == "tagging":
            majority = majority_label([tag for tags in data.train.labels for tag in tags])
            predictions = [[majority] * len(tags) for tags in examples.labels]
        else:
            predictions = [majority_label(data.train.labels)] * len(examples)
        baseline[split.name] = {name: value if value is not None and math.isfinite(value) else None
                                for name, value in score(data.task, predictions, examples.labels,
                                                         data.label_names).items()}
    return baseline


