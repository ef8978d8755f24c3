"""A pretraining run under `model.unpad`: the trainer's batches carry the collator's layout, and
without dropout the run's losses are the padded run's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bertpre.config import load_config
from bertpre.train.trainer import pretrain

TINY = Path(__file__).parents[2] / "configs" / "tiny.yaml"


def run_losses(data_dir: Path, out: Path, *overrides: str) -> list[float]:
    config = load_config(TINY, [f"data.path={data_dir}", f"train.out={out}", "train.log_every=1",
                                "train.eval_every=1000", "train.max_steps=4", "model.hidden_dropout_prob=0",
                                "model.attention_probs_dropout_prob=0", *overrides])
    result = pretrain(config)
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def test_an_unpadded_run_gives_the_padded_runs_losses(tiny_data, tmp_path):
    padded = run_losses(tiny_data, tmp_path / "padded")
    unpadded = run_losses(tiny_data, tmp_path / "unpadded", "model.unpad=true")
    assert len(unpadded) == 4
    assert unpadded == pytest.approx(padded, abs=1e-5)
