"""`bertpre pretrain` as a user runs it: exit codes, one-line errors, signals, unsafe checkpoints."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from _tiny_data import build_tiny_data  # tests/ is on sys.path

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


@pytest.fixture
def data_dir(tiny_data: Path) -> Path:
    return tiny_data


def command(data_dir: Path, out: Path, *settings: str) -> list[str]:
    args = [sys.executable, "-m", "bertpre", "pretrain", "--config", str(TINY), "--data",
            str(data_dir), "--out", str(out)]
    for setting in settings:
        args += ["--set", setting]
    return args


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=180)


def test_pretrain_runs_and_says_what_fp16_does_on_cpu(data_dir, tmp_path):
    result = run(command(data_dir, tmp_path / "run", "train.max_steps=3", "train.precision=fp16"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "note: precision fp16 needs a CUDA GPU; training in fp32 on this CPU instead" in result.stderr
    assert "done at step 3" in result.stdout
    assert (tmp_path / "run" / "checkpoints" / "latest").read_text().strip() == "step-00000003"
    assert (tmp_path / "run" / "tokenizer" / "vocab.txt").exists()


@pytest.mark.parametrize("settings, message", [
    (["train.max_step=3"], "error: unknown key in train 'max_step'; did you mean 'max_steps'?"),
    (["data.max_seq_length=128"], "error: data.max_seq_length (128) is larger than"),
])
def test_bad_config_is_one_line_and_exit_2(data_dir, tmp_path, settings, message):
    result = run(command(data_dir, tmp_path / "run", *settings))
    assert result.returncode == 2
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_missing_data_folder_is_exit_2(tmp_path):
    result = run(command(tmp_path / "nowhere", tmp_path / "run"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("signum, code", [
    pytest.param(signal.SIGINT, 130, marks=pytest.mark.slow), (signal.SIGTERM, 143)])
def test_signal_finishes_the_step_saves_and_exits(data_dir, tmp_path, signum, code):
    run_dir = tmp_path / "run"
    process = subprocess.Popen(command(data_dir, run_dir, "train.max_steps=100000", "train.log_every=1"),
                               env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.stat().st_size > 0) and time.monotonic() < deadline:
        time.sleep(0.05)  # a row appears once the first step is done
        if process.poll() is not None:
            break
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr[-2000:]
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    state = json.loads((run_dir / "checkpoints" / latest / "trainer_state.json").read_text())
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert state["step"] == max(row["step"] for row in rows) > 0


class Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_crafted_pickle_in_a_checkpoint_stops_the_run_before_it_starts(data_dir, tmp_path):
    from bertpre.config import load_config
    from bertpre.train.trainer import pretrain

    run_dir = tmp_path / "run"
    pretrain(load_config(TINY, [f"data.path={data_dir}", f"train.out={run_dir}", "train.max_steps=2"]))
    marker = tmp_path / "payload-ran"
    torch.save({"state": Payload(marker)}, run_dir / "checkpoints" / "step-00000002" / "optimizer.pt")
    # An attacker removes the checksums too, so the unpickling guard itself is what stops it.
    (run_dir / "checkpoints" / "step-00000002" / "checksums.json").unlink()
    result = run(command(data_dir, run_dir, "train.max_steps=4"))
    assert result.returncode == 2
    assert "optimizer.pt is not safe to load" in result.stderr
    assert not marker.exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "step-00000002"]


def test_a_mixture_of_folders_from_two_tokenizers_is_one_line_and_exit_2(data_dir, tmp_path):
    other = build_tiny_data(tmp_path / "other", documents=30, seed=2)
    config = yaml.safe_load(TINY.read_text())
    config["data"]["path"] = [{"path": str(data_dir), "weight": 0.7}, {"path": str(other), "weight": 0.3}]
    config_file = tmp_path / "mixture.yaml"
    config_file.write_text(yaml.safe_dump(config))
    result = run([sys.executable, "-m", "bertpre", "pretrain", "--config", str(config_file),
                  "--out", str(tmp_path / "run")])
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: DATA folders {data_dir} and {other} were made by "
                                    "different tokenizers") and result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_init_from_on_the_command_line_starts_from_an_export_and_refuses_a_hub_name(data_dir, tmp_path):
    first = run(command(data_dir, tmp_path / "first", "train.max_steps=2"))
    assert first.returncode == 0, first.stderr[-2000:]
    exported = run([sys.executable, "-m", "bertpre", "export", str(tmp_path / "first"), "--out",
                    str(tmp_path / "export")])
    assert exported.returncode == 0, exported.stderr[-2000:]
    warm = run([*command(data_dir, tmp_path / "warm", "train.max_steps=2"), "--init-from",
                str(tmp_path / "export")])
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert f"note: starting from the weights of {tmp_path / 'export'}" in warm.stderr
    assert yaml.safe_load((tmp_path / "warm" / "config.yaml").read_text())["model"]["init_from"] == str(
        tmp_path / "export")

    hub = run([*command(data_dir, tmp_path / "hub"), "--init-from", "bert-base-uncased"])
    assert hub.returncode == 2 and hub.stderr.count("\n") == 1
    assert hub.stderr.startswith("error: 'bert-base-uncased' is not a local folder; bertpre never downloads")
    assert not (tmp_path / "hub").exists()
