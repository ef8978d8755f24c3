"""`bertpre finetune RUN --checkpoints ...`: every chosen checkpoint scored in step order, each
result one line of results.jsonl and a point in the RUN's TensorBoard; a rerun does no work and a
sweep killed with SIGKILL finishes the rest when run again."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_finetune import run_main, write_task

from bertpre.config import load_config
from bertpre.train.trainer import pretrain

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def sweep_run(tiny_data, tmp_path_factory) -> Path:
    """A tiny run with checkpoints at steps 10, 20 and 30."""
    out = tmp_path_factory.mktemp("sweep-source") / "run"
    config = load_config("tiny", [
        f"data.path={tiny_data}", f"train.out={out}", "model.hidden_size=32", "model.num_hidden_layers=2",
        "model.num_attention_heads=4", "model.intermediate_size=64", "model.max_position_embeddings=64",
        "data.max_seq_length=32", "data.max_predictions_per_seq=5", "data.num_workers=0",
        "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=30", "train.precision=fp32",
        "train.save_every=10", "train.keep_last=5", "train.eval_every=1000", "train.log_every=10",
        "optim.warmup_steps=3", "optim.lr=1e-3"])
    pretrain(config, resume=False)
    return out


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("who") / "who-acts"
    folder.mkdir()
    write_task(folder, 120, 0, "train.jsonl")
    write_task(folder, 40, 1, "dev.jsonl")
    return folder


def sweep_args(run: Path, task: Path, out: Path, which: str = "all") -> list:
    return ["finetune", run, "--train", task / "train.jsonl", "--validation", task / "dev.jsonl",
            "--out", out, "--mode", "probe", "--seeds", "2", "--epochs", "5", "--checkpoints", which]


def downstream_scalars(run: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: {event.step: event.value for event in events.Scalars(tag)}
            for tag in events.Tags()["scalars"] if tag.startswith("downstream")}


def test_a_sweep_scores_every_checkpoint_logs_them_and_a_rerun_does_no_work(
        sweep_run, task_folder, tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep"
    code, stdout, stderr = run_main(sweep_args(sweep_run, task_folder, out), monkeypatch, capsys)
    assert code == 0, stderr
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [line["checkpoint_step"] for line in lines] == [10, 20, 30]
    assert len({line["weights_sha256"] for line in lines}) == 3
    assert json.loads((out / "results.json").read_text())["checkpoint_step"] == 30
    assert stdout.splitlines()[0].split() == ["step", "accuracy", "f1", "f1_macro", "mcc"]

    scalars = downstream_scalars(sweep_run)
    assert scalars["downstream/who-acts_probe/accuracy"] == pytest.approx(
        {line["checkpoint_step"]: line["metrics"]["accuracy"]["mean"] for line in lines})
    assert scalars["downstream_std/who-acts_probe/accuracy"] == pytest.approx(
        {line["checkpoint_step"]: line["metrics"]["accuracy"]["std"] for line in lines})

    code, _, stderr = run_main(sweep_args(sweep_run, task_folder, out), monkeypatch, capsys)
    assert code == 0 and stderr.count("already done") == 3 and "seed 0" not in stderr
    assert len((out / "results.jsonl").read_text().splitlines()) == 3

    code, _, stderr = run_main(sweep_args(sweep_run, task_folder, tmp_path / "every", "every:20"),
                               monkeypatch, capsys)
    assert code == 0, stderr
    assert [json.loads(line)["checkpoint_step"]
            for line in (tmp_path / "every" / "results.jsonl").read_text().splitlines()] == [20]


def test_a_killed_sweep_finishes_the_rest_when_run_again(sweep_run, task_folder, tmp_path):
    out = tmp_path / "sweep"
    args = [sys.executable, "-m", "bertpre", *map(str, sweep_args(sweep_run, task_folder, out))]
    args[args.index("--mode") + 1] = "full"  # seconds a checkpoint, so the kill lands mid-sweep
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if results.is_file() and results.read_text().count("\n") >= 1:
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    done_before = results.read_text().count("\n")
    assert 1 <= done_before < 3, "the sweep ended before the kill could land"

    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("already done") == done_before
    assert "taking it over" in again.stderr  # the killed sweep's claim was stale
    assert [json.loads(line)["checkpoint_step"] for line in results.read_text().splitlines()] == [10, 20, 30]


def test_watch_on_a_finished_run_is_one_pass(sweep_run, task_folder, tmp_path, monkeypatch, capsys):
    args = sweep_args(sweep_run, task_folder, tmp_path / "watched", "latest")
    code, _, stderr = run_main([*args, "--watch"], monkeypatch, capsys)
    assert code == 0, stderr
    assert [json.loads(line)["checkpoint_step"]
            for line in (tmp_path / "watched" / "results.jsonl").read_text().splitlines()] == [30]


def test_checkpoints_need_a_run(sweep_run, task_folder, tmp_path, monkeypatch, capsys):
    latest = sorted((sweep_run / "checkpoints").glob("step-*"))[-1]
    code, _, stderr = run_main(sweep_args(latest, task_folder, tmp_path / "x"), monkeypatch, capsys)
    assert code == 2 and "is not a RUN folder" in stderr and not (tmp_path / "x").exists()
    code, _, stderr = run_main(sweep_args(sweep_run, task_folder, tmp_path / "x", "every:1000"), monkeypatch, capsys)
    assert code == 2 and "has no checkpoint that --checkpoints every:1000 chooses" in stderr
    code, _, stderr = run_main(sweep_args(sweep_run, task_folder, tmp_path / "x", "some"), monkeypatch, capsys)
    assert code == 2 and "must be latest, all or every:N" in stderr
    assert not (tmp_path / "x").exists()


def test_a_sweep_skips_damaged_and_incomplete_checkpoints_with_a_note(
        sweep_run, task_folder, tmp_path, monkeypatch, capsys):
    """The intact checkpoints are scored; each skipped one is a note on stderr naming it and what
    is wrong with it. Only a sweep that could score none fails: exit 2, one line."""
    run = shutil.copytree(sweep_run, tmp_path / "run", ignore=shutil.ignore_patterns("tensorboard"))
    checkpoints = run / "checkpoints"
    (checkpoints / "step-00000010" / "trainer_state.json").unlink()
    weights = checkpoints / "step-00000020" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    out = tmp_path / "sweep"
    args = [*sweep_args(run, task_folder, out), "--seeds", "1", "--epochs", "1"]  # the last given counts
    code, stdout, stderr = run_main(args, monkeypatch, capsys)
    assert code == 0, stderr
    assert [json.loads(line)["checkpoint_step"] for line in (out / "results.jsonl").read_text().splitlines()] == [30]
    notes = [line for line in stderr.splitlines() if "skipped" in line]
    assert notes == [f"note: checkpoint step-00000010 skipped: {checkpoints / 'step-00000010'} has no "
                     "trainer_state.json (it is incomplete)",
                     f"note: checkpoint step-00000020 skipped: {weights} is damaged (1,000 bytes, not "
                     f"{(sweep_run / 'checkpoints' / 'step-00000020' / 'model.safetensors').stat().st_size:,}, "
                     f"as {checkpoints / 'step-00000020' / 'checksums.json'} recorded)"], stderr
    result = json.loads((out / "results.json").read_text())
    assert (result["checkpoint_step"], result["seeds"]) == (30, [0]) and "accuracy" in stdout

    shutil.rmtree(checkpoints / "step-00000030")  # none left to score
    code, _, stderr = run_main(sweep_args(run, task_folder, tmp_path / "none"), monkeypatch, capsys)
    assert code == 2 and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(f"error: none of the 2 checkpoints of {run} that --checkpoints all chooses could "
                             "be read (step-00000010: "), stderr
    assert "step-00000020: " in stderr and not (tmp_path / "none").exists()


def test_select_by_dev_reports_the_checkpoint_scoring_best_on_dev(sweep_run, task_folder, tmp_path, monkeypatch,
                                                                   capsys):
    test = write_task(tmp_path, 40, 2, "test.jsonl")
    out = tmp_path / "chosen"
    args = [*sweep_args(sweep_run, task_folder, out), "--test", test, "--select-by", "dev", "--seeds", "1",
            "--epochs", "2"]
    code, stdout, stderr = run_main(args, monkeypatch, capsys)
    assert code == 0, stderr
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    dev = [line["splits"]["validation"]["metrics"]["accuracy"]["mean"] for line in lines]
    best = dev.index(max(dev))  # the earliest of equals
    result = json.loads((out / "results.json").read_text())
    assert result["checkpoint_step"] == lines[best]["checkpoint_step"] and result["split"] == "test"
    assert result["metrics"] == lines[best]["metrics"]  # the test split's scores at that checkpoint
    assert result["checkpoint_selection"]["steps"] == [10, 20, 30] and result["checkpoint_selection"]["means"] == dev
    rows = [line for line in stdout.splitlines() if line.strip().split(" ")[0] in ("10", "20", "30")]
    assert [row.endswith("<- reported") for row in rows] == [number == best for number in range(3)]


def test_watch_waits_for_a_run_that_has_not_saved_yet(sweep_run, task_folder, tmp_path):
    """A pretraining and its watcher started together: the watcher finds RUN claimed, with its
    config.yaml and no checkpoints/, and waits; the checkpoint that lands is scored, and the
    watch ends when the pretraining lets go of the run (it was refused: "is not a RUN folder")."""
    import threading

    from bertpre.claim import Claim
    from bertpre.config.finetune import load_hyperparameters
    from bertpre.finetune.run import TaskFiles, finetune

    run = tmp_path / "run"
    claim = Claim(run, "pretrain", label="run folder")
    claim.take()  # this process plays the live pretraining
    shutil.copy(sweep_run / "config.yaml", run / "config.yaml")
    shutil.copytree(sweep_run / "tokenizer", run / "tokenizer")
    files = TaskFiles(task="classification", train=task_folder / "train.jsonl",
                      validation=task_folder / "dev.jsonl")
    hp = load_hyperparameters("probe", None, [], {"epochs": 2})
    said: list[str] = []
    outcome: dict = {}

    def watch() -> None:
        try:
            outcome["results"] = finetune(run, files, tmp_path / "watched", hp=hp, seeds=[1], watch=True,
                                          poll_seconds=0.05, say=said.append)
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            outcome["error"] = error

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(0.5)
    assert watcher.is_alive() and not outcome, outcome  # waiting, not refused
    staging = run / "checkpoints" / ".staging"
    shutil.copytree(sweep_run / "checkpoints" / "step-00000030", staging)
    staging.rename(run / "checkpoints" / "step-00000030")  # a checkpoint lands whole, as pretrain saves
    time.sleep(0.2)
    claim.release()  # the pretraining ends
    watcher.join(timeout=120)
    assert not watcher.is_alive() and "error" not in outcome, outcome
    assert [result["checkpoint_step"] for result in outcome["results"]] == [30]
    assert any(line.startswith("step 30: ") for line in said)
