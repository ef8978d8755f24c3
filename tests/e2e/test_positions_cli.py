"""`bertpre evaluate --max-seq-length` as a user runs it: a relative model reads past its training
length; an absolute one is refused in one line."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertpre.config import load_config
from bertpre.train.trainer import pretrain

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


def train(tiny_data: Path, out: Path, kind: str) -> Path:
    pretrain(load_config(TINY, [f"data.path={tiny_data}", f"train.out={out}", "train.max_steps=2",
                                "train.eval_every=1000", f"model.position_embedding_type={kind}"]))
    return out


def evaluate(run: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertpre", "evaluate", str(run), *args], env=ENV,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["rope", "transformer_xl"])
def test_a_relative_model_evaluates_at_twice_its_length(kind, tiny_data, tmp_path):
    run = train(tiny_data, tmp_path / kind, kind)
    assert load_config(run / "config.yaml").data.max_seq_length == 64
    result = evaluate(run, "--max-seq-length", "128")
    assert result.returncode == 0, result.stderr
    metrics = dict(line.split() for line in result.stdout.splitlines())
    assert float(metrics["mlm_loss"]) > 0 and float(metrics["mlm_acc"]) >= 0


def test_an_absolute_model_refuses_a_length_past_its_table(tiny_data, tmp_path):
    run = train(tiny_data, tmp_path / "absolute", "absolute")
    result = evaluate(run, "--max-seq-length", "128")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --max-seq-length 128 is longer than the 64 positions of {run} (an absolute position "
        "table); models with relative positions (model.position_embedding_type rope or transformer_xl) "
        "read any length"]
    assert evaluate(run, "--max-seq-length", "64").returncode == 0
