"""The objective suite, over every row of the objective table and a toy objective registered
from tests/ (`_toy_objective.py`): each trains a few steps on the tiny data, logs its own named
terms to metrics.jsonl, and a run stopped after a checkpoint continues bit for bit."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from _killed_run import pretrain_dying_after
from _toy_objective import ToyObjective

import bertpre.config.run as config_run
import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.model.families import FAMILIES
from bertpre.train.objectives import OBJECTIVES, objective_for

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
STEPS = 4
# Each row's settings on the tiny data: the family it trains, and what it reads.
ROWS = {
    "mlm": ["data.objective=mlm", "data.pair_task=nsp"],
    "plm": ["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "model.mem_len=16",
            "data.max_seq_length=32", "data.reuse_length=16", "train.batch_size=8", "train.micro_batch_size=4"],
    "toy": ["data.objective=toy", "data.pair_task=none"],
}


@pytest.fixture
def toy_row(monkeypatch):
    """The toy objective as one more row of OBJECTIVES, for this test only. The config's choice of
    objectives is the family table's (the config sits below the training package, so it cannot
    ask OBJECTIVES): BERT's row is told it trains with `toy` too."""
    monkeypatch.setitem(OBJECTIVES, "toy", ToyObjective)
    bert = FAMILIES["bert"]
    monkeypatch.setitem(FAMILIES, "bert", dataclasses.replace(bert, objectives=(*bert.objectives, "toy")))
    monkeypatch.setattr(config_run, "OBJECTIVES", (*config_run.OBJECTIVES, "toy"))


def run(data: Path, out: Path, objective: str, *, stop_after: int | None = None, monkeypatch=None) -> list[dict]:
    """Train `objective` for STEPS steps into `out` (a checkpoint each step); with `stop_after`, the
    run stops once that checkpoint is saved. Returns metrics.jsonl's rows."""
    config = load_config(TINY, [f"data.path={data}", f"train.out={out}", f"train.max_steps={STEPS}",
                                "train.log_every=1", "train.eval_every=1000", "train.save_every=1",
                                *ROWS[objective]])
    if stop_after is not None:
        pretrain_dying_after(config, stop_after, monkeypatch)
    trainer.pretrain(config)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def train_rows(rows: list[dict]) -> list[dict]:
    return [row for row in rows if "train/loss" in row]


@pytest.mark.parametrize("objective", ["mlm", "plm", "toy"])
def test_an_objective_trains_logs_its_named_terms_and_resumes_exactly(objective, tiny_data, tmp_path, one_thread,
                                                                      request, monkeypatch):
    if objective == "toy":
        request.getfixturevalue("toy_row")
    straight = train_rows(run(tiny_data, tmp_path / "straight", objective))
    assert [row["step"] for row in straight] == list(range(1, STEPS + 1))
    terms = objective_for(objective).terms
    named = {f"train/{term.name}_{what}" for term in terms for what in ("loss", "acc")}
    assert named <= set(straight[-1]), f"{objective} logs {sorted(straight[-1])}"
    for row in straight:
        assert math.isfinite(row["train/loss"]) and row["train/loss"] > 0
        weighed = sum(term.weight * row[f"train/{term.name}_loss"] for term in terms)
        assert row["train/loss"] == pytest.approx(weighed, rel=1e-12)

    resumed = train_rows(run(tiny_data, tmp_path / "resumed", objective, stop_after=2, monkeypatch=monkeypatch))
    assert [row["step"] for row in resumed] == list(range(1, STEPS + 1))
    for name in ["train/loss", *sorted(named)]:
        assert [row[name] for row in resumed] == [row[name] for row in straight], name


def test_the_toy_objective_logs_its_own_statistic_and_weighs_its_terms(toy_row, tiny_data, tmp_path, one_thread,
                                                                         capsys):
    rows = train_rows(run(tiny_data, tmp_path / "toy", "toy"))
    window = next(line for line in capsys.readouterr().err.splitlines() if "last train window:" in line)
    # the closing lines show the objective's own terms (report.py names none of them)
    assert [part.split()[0] for part in window.split(": ", 1)[1].split(", ")] == [
        "loss", "masked_loss", "masked_acc", "copy_loss", "copy_acc"]
    assert all(0 < row["train/mask_share"] < 0.15 for row in rows)
    assert "train/mlm_loss" not in rows[0] and "train/pair_loss" not in rows[0]
    last = rows[-1]
    assert last["train/loss"] == pytest.approx(last["train/masked_loss"] + 0.5 * last["train/copy_loss"], rel=1e-12)
