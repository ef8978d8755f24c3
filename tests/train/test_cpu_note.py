"""The oversubscribed-CPU note: one line after the first logging window when the step runs far
below this machine's matrix products while the load or torch's threads exceed the cores."""
from __future__ import annotations

import json
from pathlib import Path

import torch

import bertpre.train.cpu_note as cpu_note
import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.train.cpu_note import slow_cpu_line


def test_the_line_needs_a_slow_step_and_a_crowded_cpu():
    slow, fast = 1e9, 30e9
    assert slow_cpu_line(achieved=slow, matmul=40e9, load=1.5, cores=2, threads=2) is None  # not crowded
    assert slow_cpu_line(achieved=fast, matmul=40e9, load=7.0, cores=2, threads=2) is None  # not slow
    line = slow_cpu_line(achieved=slow, matmul=40e9, load=7.3, cores=2, threads=2)
    assert line == ("this CPU is oversubscribed (load 7.3 on 2 cores): the step reaches 1 GFLOP/s where this "
                    "machine's matrix products reach 40; run fewer jobs at once, or set OMP_NUM_THREADS "
                    "(torch.set_num_threads) to the cores left free")
    threads = slow_cpu_line(achieved=slow, matmul=40e9, load=0.5, cores=2, threads=8)
    assert threads is not None and "(load 0.5 on 2 cores, torch on 8 threads)" in threads


def test_the_matmul_rate_is_measured_here():
    assert 1e7 < cpu_note.matmul_rate(size=64, repeats=2) < 1e14


def test_measuring_leaves_the_runs_random_stream_alone():
    """CI's killed-and-resumed runs diverged where the note measured in one process and not the
    other: its operands drew from torch's global generator."""
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    cpu_note.matmul_rate(size=64, repeats=1)
    assert torch.equal(torch.rand(4), expected)


def trained(data: Path, out: Path) -> Path:
    """The run folder of a four-step tiny run logging every two steps."""
    return trainer.pretrain(load_config("tiny", [f"data.path={data}", f"train.out={out}", "train.max_steps=4",
                                                 "train.log_every=2", "train.save_every=1000"])).run_dir


def run(data: Path, out: Path, capsys) -> str:
    trained(data, out)
    return capsys.readouterr().err


def test_a_crowded_run_says_it_once_and_a_quiet_one_not(tiny_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(cpu_note.ENVIRONMENT, "1")
    monkeypatch.setattr(cpu_note, "matmul_rate", lambda: 1e15)  # far above any tiny step
    monkeypatch.setattr(cpu_note.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    crowded = [line for line in run(tiny_data, tmp_path / "crowded", capsys).splitlines() if "oversubscribed" in line]
    assert len(crowded) == 1 and "OMP_NUM_THREADS" in crowded[0] and "load 64.0" in crowded[0]
    monkeypatch.setattr(cpu_note.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(cpu_note.torch, "get_num_threads", lambda: 1)
    assert "oversubscribed" not in run(tiny_data, tmp_path / "quiet", capsys)
    monkeypatch.setenv(cpu_note.ENVIRONMENT, "0")  # off, as the suite keeps it
    monkeypatch.setattr(cpu_note.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert "oversubscribed" not in run(tiny_data, tmp_path / "off", capsys)


def losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def test_a_run_that_measured_trains_as_one_that_did_not(tiny_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(cpu_note.ENVIRONMENT, "1")  # the real measurement, on a machine said crowded
    monkeypatch.setattr(cpu_note.os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    measured = trained(tiny_data, tmp_path / "measured")
    monkeypatch.setenv(cpu_note.ENVIRONMENT, "0")
    assert losses(measured) == losses(trained(tiny_data, tmp_path / "not")) and len(losses(measured)) == 2
