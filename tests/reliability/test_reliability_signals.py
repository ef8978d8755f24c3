"""Preemption: SIGTERM / SIGINT at a random step → that step's checkpoint, exit 143 / 130,
flushed TensorBoard events, and a resumed run that continues exactly. Every other command
(issue 41): SIGTERM to the process or SIGINT to its group (Ctrl-C) at several points of a
two-process tokenize, a finetune sweep over a RUN's checkpoints and an export → exit 143 / 130
with one line, no process left running, no temporary or claim left, the previous output intact."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from _reliability_harness import (
    assert_same_params,
    assert_stopped,
    check_complete,
    corpus_text,
    file_contents,
    final_params,
    folder_state,
    group_processes,
    latest_folder,
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


SIGNALS = [signal.SIGTERM, signal.SIGINT]


def stop_at(args: list, fault: str, signum: int, tmp_path: Path, *, processes: int = 1) -> None:
    """Run `bertpre ARGS` until `fault` pauses it, send `signum`, and assert it stopped cleanly:
    exit code, one line, no process left, and nothing left in its TMPDIR. `processes`: how many
    of its group must be running at the pause (the command and its workers)."""
    paused, scratch = tmp_path / "paused", tmp_path / "scratch"
    process = start_paused(args, fault, paused, scratch)
    assert wait_for(lambda: paused.is_file() and len(group_processes(process.pid)) >= processes, process,
                    timeout=120), process.communicate()[1][-3000:]
    send_stop(process, signum)
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


@pytest.mark.parametrize("signum", [pytest.param(signum, id=signal.Signals(signum).name) for signum in SIGNALS])
@pytest.mark.parametrize("point", [pytest.param(point, marks=() if point == "encoding" else pytest.mark.slow)
                                   for point in TOKENIZE_POINTS])
def test_a_signal_stops_a_two_process_tokenize_cleanly(point, signum, data_dir, tmp_path):
    corpus, out = tmp_path / "corpus.txt", tmp_path / "data"
    corpus.write_text(corpus_text(documents=4000, seed=1), encoding="utf-8")
    shutil.copytree(data_dir, out)
    before = folder_state(out)
    args = ["tokenize", corpus, "--out", out, "--vocab-size", "200", "--num-proc", "2", "--overwrite"]
    # At the encoding point: the command and its two encoding processes.
    stop_at(args, TOKENIZE_POINTS[point], signum, tmp_path, processes=3 if point == "encoding" else 1)
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
@pytest.mark.parametrize("signum", [pytest.param(signum, id=signal.Signals(signum).name) for signum in SIGNALS])
@pytest.mark.parametrize("point", EXPORT_POINTS)
def test_a_signal_stops_an_export_cleanly(point, signum, small_run, earlier_export, tmp_path):
    out = tmp_path / "export"
    shutil.copytree(earlier_export, out)
    before = folder_state(out)
    stop_at(["export", small_run, "--out", out, "--overwrite"], EXPORT_POINTS[point], signum, tmp_path)
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
@pytest.mark.parametrize("signum", [pytest.param(signum, id=signal.Signals(signum).name) for signum in SIGNALS])
@pytest.mark.parametrize("point", FINETUNE_POINTS)
def test_a_signal_stops_a_finetune_sweep_cleanly(point, signum, earlier_sweep, tmp_path):
    run, out = tmp_path / "run", tmp_path / "sweep"
    shutil.copytree(earlier_sweep / "run", run)
    shutil.copytree(earlier_sweep / "sweep", out)
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))  # one --out holds one run:
    record["source"] = str(run.resolve())  # the earlier sweep, as if made of this copy of the run
    (out / "run.json").write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    before, checkpoints = file_contents(out), folder_state(run / "checkpoints")

    stop_at(sweep_args(earlier_sweep, run, out, "all"), FINETUNE_POINTS[point], signum, tmp_path)
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
