"""The work of `bertpre finetune`: a Job (one task, its settings and seeds) and Jobs (every task
of the command, with a benchmark's score), each evaluated on one checkpoint after another.

A job's result is keyed by the weights' hash, the task files' hashes, the hyperparameters and the
seeds (`work_key`), so finished work found in `OUT/results.jsonl` is reused, never done twice.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import bertpre
from bertpre.config.finetune import Hyperparameters, advice_when_stuck
from bertpre.finetune.benchmarks import BENCHMARKS, Benchmark, reported, task_score
from bertpre.finetune.encoding import (
    Encoded,
    describe_training,
    encode_texts,
    encode_words,
    encoding_notes,
    join_encoded,
    tags_by_word,
)
from bertpre.finetune.features import FEATURES_FOLDER, cached_features
from bertpre.finetune.loop import finetune_full, probe_labels, train_probe
from bertpre.finetune.report import score, stuck, summarize
from bertpre.finetune.results import SWEEP_FILE, append_line, finished_work
from bertpre.finetune.saved_model import save_task_model
from bertpre.finetune.source import Encoder, load_encoder
from bertpre.finetune.sweep import log_to_tensorboard
from bertpre.finetune.tasks import TaskData, majority_label, metric_name
from bertpre.model.cost import ForwardShape
from bertpre.train.memory import check_finetuning_fits, check_forward_fits
from bertpre.train.runtime import Runtime, init_runtime

if TYPE_CHECKING:  # what the user named; `finetune` builds the jobs from it
    from bertpre.finetune.run import TaskFiles


@dataclass
class Job:
    """One task, its settings and seeds, evaluated on one checkpoint after another."""

    name: str
    data: TaskData
    files: TaskFiles
    hp: Hyperparameters
    seeds: list[int]
    target: Path
    precision: str
    device: str
    say: Callable[[str], None]
    runtime: Runtime | None = None
    save_model: bool = False

    def evaluate(self, encoder: Encoder, *, sweep_of: Path | None = None) -> tuple[dict[str, Any], bool]:
        """The result for `encoder` (reused from results.jsonl when it is there) and whether it is
        new; a new one is recorded there (in a sweep, after the RUN's TensorBoard has it)."""
        hp = fitted_hyperparameters(self.hp, encoder, self.say)
        key = work_key(encoder, self.data, self.files, hp, self.seeds)
        done = finished_work(self.target, key)
        if done is not None and self.save_model and not done.get("saved_model"):
            done = None  # the earlier run kept no model: train again to keep one
        if done is not None:
            self.say(f"already done: {self.target / SWEEP_FILE} has the {self.name} results for "
                     f"{encoder.model_folder} (same weights, data, settings and seeds); reusing them")
            return done, False
        if self.runtime is None:
            self.runtime = init_runtime(self.precision, device=self.device)
            if self.runtime.note:  # fp16 asked of a CPU: said, as pretrain says it
                self.say(f"note: {self.runtime.note}")
        result = run_seeds(encoder, self.data, self.files, hp, self.seeds, self.runtime, self.say,
                           save_to=self.target if self.save_model else None,
                           features_folder=self.target / FEATURES_FOLDER)
        result["key"] = key
        if self.files.benchmark_task:
            result["benchmark_task"] = self.files.benchmark_task
        if sweep_of is not None:  # TensorBoard first: a kill before the line below does both again
            log_to_tensorboard(sweep_of, self.name, result)
        append_line(self.target / SWEEP_FILE, result)
        return result, True


def fitted_hyperparameters(hp: Hyperparameters, encoder: Encoder, say: Callable[[str], None]) -> Hyperparameters:
    """`hp` with max_seq_length cut to the model's positions (a table of absolute positions has
    no row past its last), with a note; relative positions have no such limit."""
    config = encoder.config
    if config.relative_positions or hp.max_seq_length <= config.max_position_embeddings:
        return hp
    say(f"note: max_seq_length {hp.max_seq_length} is longer than the model's "
        f"{config.max_position_embeddings} positions; examples are cut at {config.max_position_embeddings}")
    return replace(hp, max_seq_length=config.max_position_embeddings)


@dataclass
class Jobs:
    """Every task of the command on one checkpoint after another; with a benchmark, its score."""

    jobs: list[Job]
    benchmark: str | None = None
    encoders: dict[Path, Encoder] = field(default_factory=dict)  # loaded ahead of the claim

    @property
    def say(self) -> Callable[[str], None]:
        return self.jobs[0].say

    def evaluate(self, source: Path, *, sweep_of: Path | None = None) -> tuple[dict[str, Any], bool]:
        encoder = self.encoders.pop(source, None) or load_encoder(source)
        outcomes = []
        for job in self.jobs:
            if len(self.jobs) > 1:
                job.say(f"{job.name}: {len(job.data.train):,} training examples")
            outcomes.append(job.evaluate(encoder, sweep_of=sweep_of))
        if self.benchmark is None:
            return outcomes[0]
        summary = benchmark_summary(BENCHMARKS[self.benchmark], encoder,
                                    [(job.name, result) for job, (result, _) in zip(self.jobs, outcomes, strict=True)])
        fresh = any(new for _, new in outcomes)
        if fresh and sweep_of is not None:
            log_to_tensorboard(sweep_of, self.benchmark, summary)
        return summary, fresh


def benchmark_summary(benchmark: Benchmark, encoder: Encoder, results: list[tuple[str, dict[str, Any]]]
                      ) -> dict[str, Any]:
    """The benchmark's report: each task's score (the mean of its reported metrics) and the
    benchmark score (the mean of the task scores), each over the seeds, and every task's result."""
    seeds = results[0][1]["seeds"]
    per_seed = []
    for number in range(len(seeds)):
        scores = {name: task_score(benchmark.tasks[name], result, number) for name, result in results}
        known = [value for value in scores.values() if value is not None]
        overall = sum(known) / len(known) if len(known) == len(scores) else None
        per_seed.append({"score": overall, **scores})
    return {
        "benchmark": benchmark.name,
        "source": str(encoder.source),
        "checkpoint": str(encoder.model_folder),
        "checkpoint_step": encoder.step,
        "weights_sha256": encoder.weights_sha256,
        "mode": results[0][1]["mode"],
        "seeds": seeds,
        "metrics": summarize(per_seed),
        "score_definition": (f"{benchmark.name.upper()} score: the mean of the task scores; a task's score is "
                             "the mean of its reported metrics (" + "; ".join(
                                 f"{name} {', '.join(reported(benchmark.tasks[name]))}" for name, _ in results) + ")"),
        "reported": {name: reported(benchmark.tasks[name]) for name, _ in results},
        "tasks": {name: result for name, result in results},
        "bertpre_version": bertpre.__version__,
    }


def run_seeds(encoder: Encoder, data: TaskData, files: TaskFiles, hp: Hyperparameters, seeds: list[int],
              runtime: Runtime, say: Callable[[str], None], save_to: Path | None = None,
              features_folder: Path | None = None) -> dict[str, Any]:
    """Every seed's scores on the scored split(s), summarized; with `save_to`, the best seed's
    model is written there as a Hugging Face folder. A probe's frozen features are computed once
    for all seeds, and kept in `features_folder` for later commands."""
    task = data.task
    train = encode(encoder, data, data.train, hp)
    parts = [encode(encoder, data, examples, hp) for _, examples in data.scored]
    scored = join_encoded(parts)  # one model scores every split; its outputs are cut apart below
    check_fits(encoder, hp, train, scored, runtime)
    for note in encoding_notes(data, train, parts, hp.max_seq_length,
                               None if encoder.config.relative_positions else encoder.config.max_position_embeddings):
        say(note)
    num_labels = 1 if task == "regression" else len(data.label_names)
    features = None
    if hp.mode == "probe":
        features = [cached_features(encoder, split, task=task, pooling=hp.pooling, batch_size=hp.eval_batch_size,
                                    runtime=runtime, folder=features_folder, say=say)
                    for split in (train, scored)]
    per_seed, flags = [], []
    best: tuple[float, int, dict] | None = None  # (main score, seed, weights) of the best seed so far
    for seed in seeds:
        say(f"seed {seed}: {'training' if hp.mode == 'full' else 'probing'} on {describe_training(train)}")
        if features is None:
            raw, model = finetune_full(encoder, train, scored, task=task, num_labels=num_labels, hp=hp,
                                       seed=seed, runtime=runtime)
        else:
            raw = train_probe(features[0], probe_labels(train, task), features[1], task=task,
                              num_labels=num_labels, hp=hp, seed=seed)
        scores: dict[str, float] = {}
        outputs = cut_outputs(raw, parts, task)
        for number, ((suffix, examples), part) in enumerate(zip(data.scored, parts, strict=True)):
            predictions = decode(outputs[number], part, data)
            scores.update({metric_name(name, suffix): value for name, value in
                           score(task, predictions, examples.labels, data.label_names).items()})
            reason = stuck(task, predictions)
            if reason and number == 0:  # flagged once, on the first scored split
                flags.append(f"seed {seed} predicted {reason} (stuck at one class: "
                             f"{advice_when_stuck(hp, encoder.config.hidden_size)})")
        per_seed.append(scores)
        main_score = next(iter(scores.values()))
        if save_to is not None and (best is None or main_score > best[0]):
            best = (main_score, seed, {name: tensor.detach().cpu().clone()
                                       for name, tensor in model.state_dict().items()})
    baseline = majority_baseline(data)
    saved = None
    if save_to is not None and best is not None:
        model.load_state_dict(best[2])
        saved = {"path": str(save_task_model(save_to, model, encoder.config, task=task,
                                             label_names=data.label_names,
                                             tokenizer_folder=encoder.tokenizer_folder)),
                 "seed": best[1]}
        say(f"saved seed {best[1]}'s model (the best by {next(iter(per_seed[0]))}) to {saved['path']}")
    return {
        "saved_model": saved,
        "source": str(encoder.source),
        "checkpoint": str(encoder.model_folder),
        "checkpoint_step": encoder.step,
        "weights_sha256": encoder.weights_sha256,
        "task": task,
        "mode": hp.mode,
        "split": data.split,
        "seeds": seeds,
        "metrics": summarize(per_seed),
        "baselines": {"majority": baseline},
        "flags": flags,
        "labels": data.label_names,
        "hyperparameters": asdict(hp),
        "precision": runtime.precision,
        "data": {**data.files, "columns": {"text": files.text_column, "text_pair": files.text_pair_column,
                                           "label": files.label_column},
                 "examples": {"train": len(data.train),
                              **{metric_name(data.split, suffix): len(examples) for suffix, examples in data.scored}}},
        "bertpre_version": bertpre.__version__,
    }


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
                            [[index[tag] for tag in tags] for tags in examples.labels], hp.max_seq_length)
    labels = (examples.labels if data.task == "regression"
              else [data.label_names.index(label) for label in examples.labels])
    return encode_texts(encoder.tokenizer, examples.texts, examples.pairs, labels, hp.max_seq_length)


def decode(raw: np.ndarray, scored: Encoded, data: TaskData) -> list[Any]:
    """Model outputs → label names, values, or one tag a word (a word with no piece, lost to
    truncation or to the tokenizer: the training file's most frequent tag, in its own place)."""
    if data.task == "regression":
        return [float(value) for value in raw]
    if data.task != "tagging":
        return [data.label_names[int(index)] for index in raw]
    return tags_by_word(raw, scored, data.label_names, majority_label([tag for tags in data.train.labels for tag in tags]))


def majority_baseline(data: TaskData) -> dict[str, float | None]:
    """The scores of always answering the training file's most frequent label (for regression,
    its mean), on every scored split."""
    baseline: dict[str, float | None] = {}
    for suffix, examples in data.scored:
        if data.task == "regression":
            mean = float(np.mean(data.train.labels))
            predictions: list[Any] = [mean] * len(examples)
        elif data.task == "tagging":
            majority = majority_label([tag for tags in data.train.labels for tag in tags])
            predictions = [[majority] * len(tags) for tags in examples.labels]
        else:
            predictions = [majority_label(data.train.labels)] * len(examples)
        for name, value in score(data.task, predictions, examples.labels, data.label_names).items():
            baseline[metric_name(name, suffix)] = value if value is not None and math.isfinite(value) else None
    return baseline


def work_key(encoder: Encoder, data: TaskData, files: TaskFiles, hp: Hyperparameters, seeds: list[int]) -> str:
    """What makes two results the same: weights, task, files, columns, settings and seeds."""
    described = {"weights": encoder.weights_sha256, "task": data.task, "mode": hp.mode,
                 "files": {split: entry["sha256"] for split, entry in data.files.items()},
                 "columns": [files.text_column, files.text_pair_column, files.label_column],
                 "hyperparameters": asdict(hp), "seeds": seeds}
    if files.benchmark_task:  # added only when set: earlier single-task keys stay as they were
        described["benchmark_task"] = files.benchmark_task
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
