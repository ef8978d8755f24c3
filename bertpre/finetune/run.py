"""`bertpre finetune`: one pretrained model, one task, N seeds → results.json in a claimed --out.

The work is keyed by the weights' hash, the task files' hashes and the hyperparameters; a line of
`OUT/results.jsonl` records each finished (checkpoint, task, mode), so running the same command
again reuses it instead of training again. An --out holds one run (`OUT/run.json`: its source,
task files, columns and settings): another run is refused in one line naming the difference.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bertpre.claim import claimed, real_path
from bertpre.config.finetune import Hyperparameters
from bertpre.config.sections import PRECISIONS
from bertpre.errors import UserError
from bertpre.finetune.benchmarks import BENCHMARKS, choose_tasks, load_benchmark_task
from bertpre.finetune.features import FEATURES_FOLDER
from bertpre.finetune.jobs import Job, Jobs
from bertpre.finetune.kinds import task_kind
from bertpre.finetune.model import task_config
from bertpre.finetune.qa_data import QASettings
from bertpre.finetune.results import (
    MARKER,
    PREDICTIONS_FOLDER,
    RESULTS_FILE,
    RUN_FILE,
    SWEEP_FILE,
    check_finetune_out,
    check_same_run,
    write_json,
)
from bertpre.finetune.saved_model import MODEL_FOLDER, check_can_save
from bertpre.finetune.seeds import (  # noqa: F401 (tests and bench import cut_outputs, encode, join_encoded from here)
    cut_outputs,
    encode,
    join_encoded,
)
from bertpre.finetune.source import load_encoder
from bertpre.finetune.sweep import (
    is_run,
    missing_files,
    parse_checkpoints,
    run_checkpoints,
    run_in_progress,
    task_name,
)
from bertpre.links import links_under, refuse_links
from bertpre.train.checkpoint import USE_ANOTHER_CHECKPOINT

MAX_SEEDS = 100
SELECT_BY = ("last", "dev")


def choose_seeds(count: int | None, given: list[int] | None) -> list[int]:
    """`--seed S ...` as given, else `--seeds N` (default 3): 0 … N-1; both given are refused (one
    would be silently dropped)."""
    if given and count is not None:
        raise UserError(f"--seeds {count} runs seeds 0 to {count - 1}, --seed names them: give one of the two")
    if given:
        if len(set(given)) != len(given) or any(seed < 0 or seed >= 2**32 for seed in given):
            raise UserError("--seed values must be distinct integers from 0 to 2**32-1")
        return list(given)
    count = 3 if count is None else count
    if not 1 <= count <= MAX_SEEDS:
        raise UserError(f"--seeds {count} must be from 1 to {MAX_SEEDS}")
    return list(range(count))


@dataclass
class TaskFiles:
    """What the user named: the task, its files and columns (for a benchmark's task, its name)."""

    task: str
    train: Path
    validation: Path
    test: Path | None = None
    text_column: str | None = None
    text_pair_column: str | None = None
    label_column: str | None = None
    benchmark_task: str | None = None  # e.g. glue/mnli: read as the benchmark lays it out
    qa: QASettings | None = None  # --task qa: windows, answers and scoring


def finetune(source: str | Path, files: TaskFiles | None, out: str | Path, *, hp: Hyperparameters,
             seeds: list[int], precision: str = "auto", device: str = "auto",
             checkpoints: str | None = None, watch: bool = False, poll_seconds: float = 30.0,
             save_model: bool = False, benchmark: tuple[str, Path, str | None] | None = None,
             select_by: str = "last", say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Fine-tune (or probe) SOURCE on the task (or on each task of `benchmark`: (glue|clue, its
    folder, the tasks named or None for all there)) with every seed; write and return the report(s),
    one a checkpoint in step order, the one results.json reports last (see `reported_result`).

    With `checkpoints` (latest, all, every:N) or `watch`, SOURCE is a RUN and each chosen
    checkpoint is evaluated in step order, its scores also written to the RUN's TensorBoard;
    `watch` goes on evaluating checkpoints as they land until the run has finished. Finished
    work (a line of OUT/results.jsonl) is never done twice. `select_by` "dev" chooses each seed's
    epoch, and a sweep's reported checkpoint, by the validation split's score, and reports the test
    split; "last" (the default) reports the last epoch, and a sweep's last checkpoint.
    """
    out, source = Path(out), Path(source)
    if precision not in PRECISIONS:
        raise UserError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    check_select_by(select_by, has_test=files is not None and files.test is not None, benchmark=benchmark)
    if benchmark is not None:
        chosen = choose_tasks(BENCHMARKS[benchmark[0]], benchmark[1], benchmark[2])
        target = check_finetune_out(out, [source, benchmark[1]])
        tasks = [(task.name, load_benchmark_task(task, folder, say),
                  TaskFiles(task=task.task, train=folder / task.train, validation=folder / task.scored[0][1],
                            benchmark_task=f"{benchmark[0]}/{task.name}"))
                 for task, folder in chosen]
        if save_model:
            raise UserError(f"--save-model keeps one model; run one task with --train and --validation "
                            f"(e.g. {chosen[0][1] / chosen[0][0].train}) to keep its model")
    else:
        assert files is not None
        target = check_finetune_out(out, [source, files.train, files.validation, files.test])
        kind = task_kind(files.task)
        if kind.options is not None:  # the kind's own settings, recorded with the run
            files = replace(files, qa=files.qa or kind.options())
        data: Any = kind.read(files)
        tasks = [(task_name(files.train), data, files)]
    sweep = checkpoints is not None or watch
    if sweep:
        parse_checkpoints(checkpoints or "all")
        if not is_run(source):
            raise UserError(f"--checkpoints and --watch evaluate a RUN folder's checkpoints; {source} "
                            "is not a RUN folder (one with checkpoints/, or a pretraining's config.yaml)")
    if save_model and sweep:
        raise UserError("--save-model keeps one model; give one checkpoint as SOURCE, not --checkpoints or --watch")
    run = describe_run(source, tasks, hp, select_by, benchmark[0] if benchmark else None)
    check_same_run(out, target, run)
    refuse_linked_places(target, save_model)
    jobs = Jobs([Job(name=name, data=data, files=task_files, hp=hp, seeds=seeds, target=target,
                     precision=precision, device=device, say=say, save_model=save_model, select_by=select_by)
                 for name, data, task_files in tasks], benchmark=benchmark[0] if benchmark else None)
    if not sweep:
        jobs.encoders[source] = load_encoder(source)  # a SOURCE that is no model fails before any write
        for _, data, _ in tasks:  # a setting nothing would read, likewise
            task_config(jobs.encoders[source].config, hp, data.task)
        if save_model:
            check_can_save(jobs.encoders[source].config, hp.mode)
    elif not watch and not run_checkpoints(source, checkpoints):
        raise UserError(f"{source} has no checkpoint that --checkpoints {checkpoints} chooses; see "
                        f"{source / 'checkpoints'}")
    with claimed(target, "finetune") as claim:
        check_finetune_out(out, [], claim)
        check_same_run(out, target, run)
        refuse_linked_places(target, save_model)
        marker, record = target / MARKER, target / RUN_FILE
        marker.write_text("made by `bertpre finetune`; its results are kept and reused\n", encoding="utf-8")
        write_json(record, run)
        try:
            if not sweep:
                results = [jobs.evaluate(source)[0]]
            else:
                results = choose_checkpoint(sweep_run(jobs, source, checkpoints or "all", watch, poll_seconds),
                                            select_by)
            write_json(target / RESULTS_FILE, reported_result(results))
        except BaseException:
            kept = (SWEEP_FILE, FEATURES_FOLDER, PREDICTIONS_FOLDER)
            if claim.created and not any((target / name).exists() for name in kept):
                marker.unlink(missing_ok=True)  # nothing kept: the folder goes with the claim
                record.unlink(missing_ok=True)
            else:
                claim.keep_folder()
            raise
        claim.keep_folder()
    return results


def refuse_linked_places(target: Path, save_model: bool) -> None:
    """Refuse before any work a symbolic link where finetune writes (`bertpre.links`): its files,
    anything in its own folders, and with `save_model` OUT/model, whose files it would replace."""
    refuse_links(target, [MARKER, RUN_FILE, RESULTS_FILE, SWEEP_FILE, *links_under(target, PREDICTIONS_FOLDER),
                          *links_under(target, FEATURES_FOLDER), *([MODEL_FOLDER] if save_model else [])])


def check_select_by(select_by: str, *, has_test: bool, benchmark: tuple | None) -> None:
    """`--select-by dev` chooses on the validation split, so it needs a test split to report: a
    score chosen on the split it is read on overstates what the model does on new data."""
    if select_by not in SELECT_BY:
        raise UserError(f"--select-by {select_by!r} must be last or dev")
    if select_by == "dev" and benchmark is not None:
        raise UserError(f"--select-by dev chooses by the dev score and reports the test split; "
                        f"{benchmark[0].upper()}'s test files have no labels, so its dev files are what is reported: "
                        "leave out --select-by")
    if select_by == "dev" and not has_test:
        raise UserError("--select-by dev chooses the epoch by the --validation score and reports --test; "
                        "give --test (a score chosen on the split it is read on overstates it), or leave "
                        "out --select-by")


def describe_run(source: Path, tasks: list[tuple[str, Any, TaskFiles]], hp: Hyperparameters, select_by: str,
                 benchmark: str | None) -> dict[str, Any]:
    """What makes two commands one run (`OUT/run.json`): the source, the task(s), each file's
    sha256, the columns and the settings; not the seeds, the precision or the checkpoints chosen."""
    described = {}
    for name, data, files in tasks:
        described[name if benchmark else "task"] = {
            "task": data.task,
            "files": {split: {"path": entry["path"], "sha256": entry["sha256"]} for split, entry in data.files.items()},
            "columns": {"text": files.text_column, "text_pair": files.text_pair_column, "label": files.label_column},
            **({"question_answering": asdict(files.qa)} if files.qa is not None else {})}
    return {"source": str(real_path(source)), "benchmark": benchmark, "tasks": described,
            "settings": {**asdict(hp), "select_by": select_by}}


def choose_checkpoint(results: list[dict[str, Any]], select_by: str) -> list[dict[str, Any]]:
    """A sweep's results with the one to report marked (`checkpoint_selection`): with `select_by`
    "dev", the checkpoint whose validation score (the task's main metric, mean over seeds) is
    best, the earliest of equals; else none is marked and the last is reported."""
    if select_by != "dev":
        return results
    metric = task_kind(results[0]["task"]).main_metric
    means = [result.get("splits", {}).get("validation", {}).get("metrics", {}).get(metric, {}).get("mean")
             for result in results]
    ranked = [mean if mean is not None and math.isfinite(mean) else -math.inf for mean in means]
    best = ranked.index(max(ranked))
    chosen = dict(results[best])
    chosen["checkpoint_selection"] = {"by": "dev", "split": "validation", "metric": metric,
                                      "steps": [result["checkpoint_step"] for result in results],
                                      "means": means, "chosen_step": chosen["checkpoint_step"]}
    return [*results[:best], chosen, *results[best + 1:]]


def reported_result(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The result results.json reports: a sweep's chosen checkpoint, else the last one scored."""
    return next((result for result in results if "checkpoint_selection" in result), results[-1])


def sweep_run(jobs: Jobs, run: Path, spec: str, watch: bool, poll_seconds: float) -> list[dict[str, Any]]:
    """Evaluate the run's chosen checkpoints in step order (and, watching, the ones that land
    later, until no pretraining holds the run). A checkpoint that cannot be read is skipped with a
    note, held until one is scored: a sweep that scores none fails in one line that says why."""
    results, seen, skipped = [], set(), []
    while True:
        finished = not (watch and run_in_progress(run))
        for step, folder in run_checkpoints(run, spec):
            if step in seen:
                continue
            seen.add(step)
            problem = load_swept_encoder(jobs, folder)
            if problem is not None and not folder.exists():
                jobs.say(f"note: checkpoint {folder.name} was removed while it was read ({problem}); skipped")
                continue
            if problem is not None:
                skipped.append((folder.name, problem))
                if results:
                    jobs.say(f"note: checkpoint {folder.name} skipped: {problem}")
                continue
            if not results:  # the notes held back: a checkpoint is scored, so they are not the error
                for name, why in skipped:
                    jobs.say(f"note: checkpoint {name} skipped: {why}")
            result, _ = jobs.evaluate(folder, sweep_of=run)
            results.append(result)
            jobs.say(f"step {step}: " + ", ".join(f"{metric} {values['mean']:.4f}"
                                                  for metric, values in result["metrics"].items()
                                                  if values["mean"] is not None))
        if finished:
            break
        time.sleep(poll_seconds)
    if not results and skipped:
        shown = "; ".join(f"{name}: {why}" for name, why in skipped[:3])
        more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        raise UserError(f"none of the {len(skipped)} checkpoints of {run} that --checkpoints {spec} chooses "
                        f"could be read ({shown}{more})")
    if not results:
        raise UserError(f"{run} has no checkpoint that --checkpoints {spec} chooses; see "
                        f"{run / 'checkpoints'}")
    return results


def load_swept_encoder(jobs: Jobs, folder: Path) -> str | None:
    """Load a sweep's checkpoint's encoder for `jobs`, or say what is wrong with the checkpoint."""
    missing = missing_files(folder)
    if missing:
        return f"{folder} has no {' or '.join(missing)} (it is incomplete)"
    try:
        jobs.encoders[folder] = load_encoder(folder)
    except UserError as error:
        # The sweep goes on to the other checkpoints, which is what this advice would ask for.
        return str(error).removesuffix(USE_ANOTHER_CHECKPOINT).rstrip("; ,")
    return None
