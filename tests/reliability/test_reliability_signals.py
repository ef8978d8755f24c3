"""Preemption: SIGTERM / SIGINT at a random step → that step's checkpoint, exit 143 / 130,
flushed TensorBoard events, and a resumed run that continues exactly. Every other command
(issue 41): SIGTERM to the process or to its group, or SIGINT to its group (Ctrl-C), at several
points of a two-process tokenize, a finetune sweep over a RUN's checkpoints and an export → exit
143 / 130 with one line, no process left running, no temporary or claim left, the previous
output intact. Signals as a cluster sends them (issue 51): to the whole process group, DataLoader
workers included, while training, evaluating and saving; SIGUSR1; a worker killed outright."""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _reliability_harness import (
    SENDS,
    assert_group_ended,
    assert_same_params,
    assert_stopped,
    check_complete,
    corpus_text,
    file_contents,
    final_params,
    folder_state,
    group_processes,
    latest_folder,
    live_children,
    logged_steps,
    metric_rows,
    pretrain_args,
    run_cli,
    send_stop,
    start_paused,
    start_pretrain,
    temporaries_under,
    wait_for,
)
from safetensors.torch import load_file


def tensorboard_losses(run_dir: Path) -> dict[int, float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return {event.step: event.value for event in events.Scalars("train/loss")}


@pytest.mark.parametrize("signum, exit_code, seed", [
    (signal.SIGTERM, 143, 1),
    pytest.param(signal.SIGINT, 130, 2, marks=pytest.mark.slow),
    pytest.param(signal.SIGTERM, 143, 3, marks=pytest.mark.slow),
])
def test_signal_checkpoints_that_step_and_resume_continues_exactly(
        signum, exit_code, seed, tiny_config, data_dir, reference_run, tmp_path):
    run_dir = tmp_path / "run"
    target = random.Random(seed).randint(2, 30)
    process = start_pretrain(tiny_config, data_dir, run_dir)
    assert wait_for(lambda: logged_steps(run_dir) >= target, process), process.communicate()[1][-3000:]
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == exit_code, stderr[-3000:]
    assert "Traceback" not in stderr

    stopped = check_complete(latest_folder(run_dir))
    assert stopped >= target and f"stopped by signal at step {stopped}" in stdout
    assert logged_steps(run_dir) == stopped  # nothing logged beyond the checkpoint
    reference_losses = tensorboard_losses(reference_run)
    losses = tensorboard_losses(run_dir)  # flushed before the exit: readable at once
    assert losses == {step: reference_losses[step] for step in range(1, stopped + 1)}

    result = run_cli(*pretrain_args(tiny_config, data_dir, run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming from {latest_folder(run_dir).parent / f'step-{stopped:08d}'}" in result.stderr
    assert metric_rows(run_dir) == metric_rows(reference_run)
    assert tensorboard_losses(run_dir) == reference_losses
    assert_same_params(final_params(run_dir), final_params(reference_run))


def stop_at(args: list, fault: str, send: str, tmp_path: Path, *, processes: int = 1) -> None:
    """Run `bertpre ARGS` until `fault` pauses it, send a stop signal as `send` (a key of SENDS)
    says, and assert it stopped cleanly: exit code, one line, no process left, and nothing left
    in its TMPDIR. `processes`: how many of its group must be running at the pause (the command
    and its workers)."""
    signum, group = SENDS[send]
    paused, scratch = tmp_path / "paused", tmp_path / "scratch"
    process = start_paused(args, fault, paused, scratch)
    assert wait_for(lambda: paused.is_file() and len(group_processes(process.pid)) >= processes, process,
                    timeout=120), process.communicate()[1][-3000:]
    send_stop(process, signum, group=group)
    paused.unlink()
    try:
        stdout, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # its workers too
        pytest.fail(f"still running 120 s after {signal.Signals(signum).name}: "
                    f"{process.communicate()[1][-3000:]}")
    assert_stopped(process, signum, stdout, stderr)
    # No scratch file, no internal-error report (torch's compile cache is made by any run).
    assert [path for path in scratch.iterdir() if not path.name.startswith("torchinductor_")] == []


# --- tokenize --num-proc 2, over an earlier DATA folder (--overwrite) ---
TOKENIZE_POINTS = {
    "vocab": "pause_in_vocab:2",  # inside tokenizers' training, reading sentences
    "encoding": "pause_before:bertpre.data.encode.encode_documents:1",  # in both workers
    "saving": "pause_before:datasets.Dataset.save_to_disk:2",  # train split written, validation not
    "commit": "pause_before:bertpre.folders.Output.commit:1",  # DATA complete, not yet in place
}


@pytest.mark.parametrize("send", SENDS)
@pytest.mark.parametrize("point", [pytest.param(point, marks=() if point == "encoding" else pytest.mark.slow)
                                   for point in TOKENIZE_POINTS])
def test_a_signal_stops_a_two_process_tokenize_cleanly(point, send, data_dir, tmp_path):
    corpus, out = tmp_path / "corpus.txt", tmp_path / "data"
    corpus.write_text(corpus_text(documents=4000, seed=1), encoding="utf-8")
    shutil.copytree(data_dir, out)
    before = folder_state(out)
    args = ["tokenize", corpus, "--out", out, "--vocab-size", "200", "--num-proc", "2", "--overwrite"]
    # At the encoding point: the command and its two encoding processes.
    stop_at(args, TOKENIZE_POINTS[point], send, tmp_path, processes=3 if point == "encoding" else 1)
    assert folder_state(out) == before  # the earlier DATA, untouched
    assert temporaries_under(tmp_path / "data") == [] and sorted(tmp_path.glob(".data*")) == []


@pytest.fixture(scope="module")
def small_run(tiny_config, data_dir, tmp_path_factory) -> Path:
    """A 4-step run with checkpoints at steps 2 and 4; read only (copy it to write into it)."""
    out = tmp_path_factory.mktemp("signals") / "run"
    result = run_cli(*pretrain_args(tiny_config, data_dir, out, "train.max_steps=4", "train.save_every=2",
                                    "train.keep_last=5"))
    assert result.returncode == 0, result.stderr[-3000:]
    return out


# --- export --overwrite over an earlier export ---
EXPORT_POINTS = {
    "loading": "pause_before:bertpre.tools.export.load_pretraining_model:1",  # nothing written yet
    "writing": "pause_before:bertpre.model.hf_format.save_file:1",  # the staging folder half written
    "commit": "pause_before:bertpre.folders.Output.commit:1",  # the export complete, not yet in place
}


@pytest.fixture(scope="module")
def earlier_export(small_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("earlier") / "export"
    done = run_cli("export", small_run, "--out", out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("send", SENDS)
@pytest.mark.parametrize("point", EXPORT_POINTS)
def test_a_signal_stops_an_export_cleanly(point, send, small_run, earlier_export, tmp_path):
    out = tmp_path / "export"
    shutil.copytree(earlier_export, out)
    before = folder_state(out)
    stop_at(["export", small_run, "--out", out, "--overwrite"], EXPORT_POINTS[point], send, tmp_path)
    assert folder_state(out) == before
    assert temporaries_under(out) == [] and sorted(tmp_path.glob(".export*")) == []


# --- finetune --checkpoints all over a RUN, into an earlier sweep's --out ---
FINETUNE_POINTS = {
    "training": "pause_before:bertpre.finetune.seeds.train_probe:1",  # step 2's first seed
    "recording": "pause_before:bertpre.finetune.jobs.log_to_tensorboard:1",  # step 2 scored, not recorded
    "report": "pause_before:bertpre.finetune.run.write_json:2",  # every step recorded, results.json not (1: run.json)
}


def write_who_acts(path: Path, count: int, seed: int) -> Path:
    """Sentences of the corpus's grammar labelled by who acts: an animal or a person."""
    rng = random.Random(seed)
    animals, people = ["The cat", "A dog", "A small bird"], ["The old man", "My sister", "The farmer"]
    rows = []
    for _ in range(count):
        animal = rng.random() < 0.5
        rows.append({"text": f"{rng.choice(animals if animal else people)} sees the river today.",
                     "label": "animal" if animal else "person"})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def sweep_args(folder: Path, run: Path, out: Path, which: str) -> list:
    return ["finetune", run, "--train", folder / "train.jsonl", "--validation", folder / "dev.jsonl",
            "--out", out, "--mode", "probe", "--seeds", "2", "--epochs", "2", "--checkpoints", which]


@pytest.fixture(scope="module")
def earlier_sweep(small_run, tmp_path_factory) -> Path:
    """A copy of the run, its task files, and the --out of a sweep of its latest checkpoint (step 4)."""
    folder = tmp_path_factory.mktemp("earlier-sweep")
    shutil.copytree(small_run, folder / "run")
    write_who_acts(folder / "train.jsonl", 40, 0)
    write_who_acts(folder / "dev.jsonl", 20, 1)
    done = run_cli(*sweep_args(folder, folder / "run", folder / "sweep", "latest"))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("send", SENDS)
@pytest.mark.parametrize("point", FINETUNE_POINTS)
def test_a_signal_stops_a_finetune_sweep_cleanly(point, send, earlier_sweep, tmp_path):
    run, out = tmp_path / "run", tmp_path / "sweep"
    shutil.copytree(earlier_sweep / "run", run)
    shutil.copytree(earlier_sweep / "sweep", out)
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))  # one --out holds one run:
    record["source"] = str(run.resolve())  # the earlier sweep, as if made of this copy of the run
    (out / "run.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    before, checkpoints = file_contents(out), folder_state(run / "checkpoints")

    stop_at(sweep_args(earlier_sweep, run, out, "all"), FINETUNE_POINTS[point], send, tmp_path)
    after = file_contents(out)
    # Step 2's line is kept once it is written (the report point); the earlier lines always are.
    assert after.pop("results.jsonl").startswith(before.pop("results.jsonl"))
    # The probe's features of step 2 are kept (a cache for later commands) once computed, and its
    # predictions once scored: each whole.
    for name in set(after) - set(before):
        if name.startswith("predictions/"):
            assert all(json.loads(line) for line in after[name].splitlines())
        else:
            assert name.startswith("features/") and load_file(out / name)["features"].isfinite().all()
        del after[name]
    assert after == before and folder_state(run / "checkpoints") == checkpoints
    assert temporaries_under(out) == [] and temporaries_under(run) == []


# --- signals as a cluster sends them: to the whole group, DataLoader workers included (issue 51) ---
WORKERS = "data.num_workers=2"  # the same batches as without workers: compared with reference_run
# Where the signal finds the run, and the step it then stops at (None: wherever it is).
PRETRAIN_MOMENTS = {
    "training": (None, None),
    # Step 4's evaluation begun: it ends, is logged, and step 4 is saved.
    "evaluation": ("pause_before:bertpre.train.objectives.mlm.Evaluator.__call__:1", 4),
    # Step 3's checkpoint being moved into place (signals held there): the stop is seen after
    # step 4, which is saved too.
    "checkpoint": ("pause_before:bertpre.train.checkpoint.swap_in:1", 4),
}


def without_evaluations(rows: list[dict]) -> list[dict]:
    """metrics.jsonl's rows less eval/* (a run that evaluates more often trains the same)."""
    kept = [{key: value for key, value in row.items() if not key.startswith("eval/")} for row in rows]
    return [row for row in kept if set(row) != {"step"}]


def start_group_run(tiny_config: Path, data_dir: Path, run_dir: Path, moment: str,
                    tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A pretrain with two workers in a group of its own, paused at `moment` where it has one;
    returns the process and the file whose removal ends the pause."""
    fault, _ = PRETRAIN_MOMENTS[moment]
    settings = [WORKERS, "train.eval_every=4"] if moment == "evaluation" else [WORKERS]
    paused = tmp_path / "paused"
    if fault is None:
        process = start_pretrain(tiny_config, data_dir, run_dir, *settings, group=True)
    else:
        process = start_paused(pretrain_args(tiny_config, data_dir, run_dir, *settings), fault, paused,
                               tmp_path / "scratch")
    return process, paused


@pytest.mark.parametrize("send", [
    pytest.param((signal.SIGTERM, 143), id="SIGTERM"),
    pytest.param((signal.SIGINT, 130), id="SIGINT", marks=pytest.mark.slow),
])
@pytest.mark.parametrize("moment", PRETRAIN_MOMENTS)
def test_a_group_signal_with_workers_saves_that_step_and_resume_continues_exactly(
        moment, send, tiny_config, data_dir, reference_run, tmp_path):
    signum, exit_code = send
    run_dir = tmp_path / "run"
    process, paused = start_group_run(tiny_config, data_dir, run_dir, moment, tmp_path)
    started = lambda: len(group_processes(process.pid)) >= 3  # noqa: E731 (the run and its 2 workers)
    if PRETRAIN_MOMENTS[moment][0] is None:
        ready = lambda: logged_steps(run_dir) >= 5 and started()  # noqa: E731
    else:
        ready = lambda: paused.is_file() and started()  # noqa: E731
    assert wait_for(ready, process), process.communicate()[1][-3000:]
    os.killpg(process.pid, signum)  # as Slurm, scancel and timeout send it: the workers get it too
    paused.unlink(missing_ok=True)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == exit_code, stderr[-3000:]
    assert "Traceback" not in stderr and "error" not in stderr, stderr[-3000:]
    stopped = check_complete(latest_folder(run_dir))
    assert stdout.splitlines()[-1].startswith(f"stopped by signal at step {stopped};")
    assert stopped == PRETRAIN_MOMENTS[moment][1] or PRETRAIN_MOMENTS[moment][1] is None
    assert logged_steps(run_dir) == stopped  # nothing logged beyond the checkpoint
    if moment == "evaluation":  # the evaluation the signal came in ended and was kept
        assert any("eval/loss" in row for row in metric_rows(run_dir) if row["step"] == stopped)
    assert_group_ended(process.pid)  # the workers were ended with the run

    settings = ["train.eval_every=4"] if moment == "evaluation" else []
    result = run_cli(*pretrain_args(tiny_config, data_dir, run_dir, WORKERS, *settings))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming from {latest_folder(run_dir).parent / f'step-{stopped:08d}'}" in result.stderr
    assert without_evaluations(metric_rows(run_dir)) == without_evaluations(metric_rows(reference_run))
    assert_same_params(final_params(run_dir), final_params(reference_run))


def test_sigusr1_to_the_group_saves_that_step_and_training_goes_on(tiny_config, data_dir, reference_run,
                                                                     tmp_path):
    """Slurm's `--signal=USR1@90`: a checkpoint now, and the run goes on unchanged."""
    run_dir = tmp_path / "run"
    process = start_pretrain(tiny_config, data_dir, run_dir, WORKERS, "train.save_every=1000",
                             "train.keep_last=5", group=True)
    assert wait_for(lambda: logged_steps(run_dir) >= 8 and len(group_processes(process.pid)) >= 3, process), \
        process.communicate()[1][-3000:]
    os.killpg(process.pid, signal.SIGUSR1)
    assert wait_for(lambda: latest_folder(run_dir) is not None, process), process.communicate()[1][-3000:]
    saved = check_complete(latest_folder(run_dir))
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-3000:]
    assert 8 <= saved < 36 and stdout.splitlines()[-1].startswith("done at step 36;")
    assert stderr.count("note: saved step") == 1
    assert f"note: saved step {saved} as SIGUSR1 asked; training goes on" in stderr
    assert sorted(path.name for path in (run_dir / "checkpoints").glob("step-*")) == [
        f"step-{saved:08d}", "step-00000036"]
    assert metric_rows(run_dir) == metric_rows(reference_run)  # the save changed nothing
    assert_same_params(final_params(run_dir), final_params(reference_run))


def test_a_worker_killed_outright_is_one_line_not_a_bug(tiny_config, data_dir, tmp_path):
    """SIGKILL (the out-of-memory killer's) reaches the workers, not the run: it cannot go on,
    and says so in one line with the checkpoint it keeps; exit 2, as for a full disk."""
    run_dir = tmp_path / "run"
    process = start_pretrain(tiny_config, data_dir, run_dir, WORKERS, group=True)
    assert wait_for(lambda: logged_steps(run_dir) >= 4 and len(group_processes(process.pid)) >= 3, process), \
        process.communicate()[1][-3000:]
    killed: set[int] = set()
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:  # until one is seen dead: a worker
        for worker in live_children(process.pid):  # killed as its epoch ends may be seen by no one
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.kill(worker, signal.SIGKILL)
                killed.add(worker)
        time.sleep(0.2)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 2, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    # torch names the signal when its SIGCHLD handler sees the death first, else says "exited unexpectedly".
    said = re.match(r"error: a data loading process ended before training did \(DataLoader worker "
                    r"\(pid(\(s\))? ([0-9, ]+)\) (is killed by signal: Killed|exited unexpectedly)\): killed "
                    r"from outside, most often by the out-of-memory killer", errors[0])
    assert said and {int(pid) for pid in said[2].split(", ")} <= killed, errors[0]
    kept = latest_folder(run_dir)
    assert f'the last good checkpoint is "{kept.name}"' in errors[0]
    check_complete(kept)
    deadline = time.monotonic() + 30
    while group_processes(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_processes(process.pid) == []
