"""The work of `bertpre finetune`: a Job (one task, its settings and seeds) and Jobs (every task
of the command, with a benchmark's score), each evaluated on one checkpoint after another.

A job's result is keyed by the weights' hash, the task files' hashes, the hyperparameters and the
seeds (`work_key`), so finished work found in `OUT/results.jsonl` is reused, never done twice.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import bertpre
from bertpre.config.finetune import Hyperparameters
from bertpre.finetune.benchmarks import BENCHMARKS, Benchmark, reported, task_score
from bertpre.finetune.features import FEATURES_FOLDER
from bertpre.finetune.kinds import task_kind
from bertpre.finetune.model import task_config
from bertpre.finetune.qa_data import QATaskData
from bertpre.finetune.report import summarize
from bertpre.finetune.results import (
    PREDICTIONS_FOLDER,
    SWEEP_FILE,
    append_line,
    finished_work,
    write_lines,
)
from bertpre.finetune.seeds import run_seeds
from bertpre.finetune.source import Encoder, load_encoder
from bertpre.finetune.sweep import log_to_tensorboard
from bertpre.finetune.tasks import TaskData
from bertpre.model.families import max_input_tokens
from bertpre.train.runtime import Runtime, init_runtime

if TYPE_CHECKING:  # what the user named; `finetune` builds the jobs from it
    from bertpre.finetune.run import TaskFiles


@dataclass
class Job:
    """One task, its settings and seeds, evaluated on one checkpoint after another."""

    name: str
    data: TaskData | QATaskData
    files: TaskFiles
    hp: Hyperparameters
    seeds: list[int]
    target: Path
    precision: str
    device: str
    say: Callable[[str], None]
    runtime: Runtime | None = None
    save_model: bool = False
    select_by: str = "last"  # the epoch: the last, or the best on the validation split (dev)

    def evaluate(self, encoder: Encoder, *, sweep_of: Path | None = None) -> tuple[dict[str, Any], bool]:
        """The result for `encoder` (reused from results.jsonl when it is there) and whether it is
        new; a new one is recorded there (in a sweep, after the RUN's TensorBoard has it)."""
        hp = fitted_hyperparameters(self.hp, encoder, self.say)
        encoder = replace(encoder, config=task_config(encoder.config, hp, self.data.task))
        work = task_kind(self.data.task).work_class()
        files = work.fitted_files(self.files, encoder, self.data, hp.max_seq_length, self.say)  # QA: the windows' stride
        key = work_key(encoder, self.data, files, hp, self.seeds, self.select_by)
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
        save_to = self.target if self.save_model else None
        result, rows, n_best = run_seeds(encoder, self.data, files, hp, self.seeds, self.runtime, self.say,
                                         save_to=save_to, features_folder=self.target / FEATURES_FOLDER,
                                         select_by=self.select_by)
        result["key"] = key
        # Written before the line that records the work: a line's predictions are always there.
        folder = Path(PREDICTIONS_FOLDER) / f"{self.name}-{key[:12]}"
        for name, split_rows in rows.items():
            path = folder / f"{name}.jsonl"
            write_lines(self.target / path, split_rows)
            result["splits"][name]["predictions"] = path.as_posix()
        for name, split_rows in n_best.items():  # question answering: each seed's best spans
            path = folder / f"{name}-nbest.jsonl"
            write_lines(self.target / path, split_rows)
            result["splits"][name]["n_best"] = path.as_posix()
        if self.files.benchmark_task:
            result["benchmark_task"] = self.files.benchmark_task
        if sweep_of is not None:  # TensorBoard first: a kill before the line below does both again
            log_to_tensorboard(sweep_of, self.name, result)
        append_line(self.target / SWEEP_FILE, result)
        return result, True


def fitted_hyperparameters(hp: Hyperparameters, encoder: Encoder, say: Callable[[str], None]) -> Hyperparameters:
    """`hp` with max_seq_length cut, with a note, to the tokens the family reads at once
    (`Family.max_input_tokens`: a table of absolute positions has no row past its last, RoBERTa's
    514 rows read 512 tokens; ModernBERT reads the length it was trained to); BERT's relative
    positions and XLNet have no such limit. Cut rather than refused, as fine-tuning truncates
    every longer example to max_seq_length anyway (QA reads the rest in further windows)."""
    config = encoder.config
    limit = max_input_tokens(config)
    if limit is None or hp.max_seq_length <= limit:
        return hp
    positions = config.max_position_embeddings
    reads = "" if limit == positions else f" (which read {limit} tokens)"
    say(f"note: max_seq_length {hp.max_seq_length} is longer than the model's {positions} positions{reads}; "
        f"examples are cut at {limit}")
    return replace(hp, max_seq_length=limit)


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


def work_key(encoder: Encoder, data: TaskData | QATaskData, files: TaskFiles, hp: Hyperparameters, seeds: list[int],
             select_by: str = "last") -> str:
    """What makes two results the same: weights, task, files, columns, settings, the epoch's
    choice and seeds."""
    described = {"weights": encoder.weights_sha256, "task": data.task, "mode": hp.mode,
                 "files": {split: entry["sha256"] for split, entry in data.files.items()},
                 "columns": [files.text_column, files.text_pair_column, files.label_column],
                 "hyperparameters": asdict(hp), "seeds": seeds}
    if hp.classifier_pooling is None:  # left out unless set: earlier keys stay as they were
        del described["hyperparameters"]["classifier_pooling"]
    if files.qa is not None:  # added only when set: the other tasks' keys stay as they were
        described["question_answering"] = asdict(files.qa)
    if files.benchmark_task:  # added only when set: earlier single-task keys stay as they were
        described["benchmark_task"] = files.benchmark_task
    if select_by != "last":  # likewise: the last epoch is what every earlier result reported
        described["select_by"] = select_by
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
