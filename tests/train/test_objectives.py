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

import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.config.objectives import OBJECTIVE_RULES, ObjectiveRules
from bertpre.errors import UserError
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
    "rtd": ["data.objective=rtd", "data.pair_task=none"],
}


@pytest.fixture
def toy_row(monkeypatch):
    """The toy objective as one more row of OBJECTIVES and of the config's OBJECTIVE_RULES (the
    config sits below the training package, so it cannot ask OBJECTIVES), for this test only;
    BERT's row is told it trains with `toy` too."""
    monkeypatch.setitem(OBJECTIVES, "toy", ToyObjective)
    monkeypatch.setitem(OBJECTIVE_RULES, "toy", ObjectiveRules("toy"))
    bert = FAMILIES["bert"]
    monkeypatch.setitem(FAMILIES, "bert", dataclasses.replace(bert, objectives=(*bert.objectives, "toy")))


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


@pytest.mark.parametrize("objective", ["mlm", "plm", "toy", "rtd"])
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


def test_each_objective_s_config_rules_are_its_row(toy_row):
    """The config and the Trainer read one answer of each objective (`Objective.rules`), and every
    objective a family trains with has its row on both sides."""
    trained = {name for row in FAMILIES.values() for name in row.objectives}
    assert trained == set(OBJECTIVES) == set(OBJECTIVE_RULES)
    for name in OBJECTIVES:
        assert objective_for(name).rules is OBJECTIVE_RULES[name]
    assert [name for name in OBJECTIVES if objective_for(name).recurrent] == ["plm", "clm"]


def test_an_objective_s_row_decides_what_the_config_asks_of_it(toy_row, tiny_data):
    """A new objective that reads sentence pairs is one row that says so: the config does not
    take every objective but the masked LM for a recurrent one (as it did by name)."""
    config = load_config(TINY, [f"data.path={tiny_data}", "data.objective=toy", "data.pair_task=nsp",
                                "data.max_span_length=100"])
    assert (config.data.recurrent, config.data.segment_step) == (False, config.data.max_seq_length)
    segments = load_config(TINY, [f"data.path={tiny_data}", "model.architecture=xlnet", "data.objective=plm",
                                  "data.pair_task=none", "data.max_seq_length=32"])
    assert (segments.data.recurrent, segments.data.segment_step) == (True, 16)
    with pytest.raises(UserError, match="data.pair_task: none"):
        load_config(TINY, [f"data.path={tiny_data}", "model.architecture=xlnet", "data.objective=clm",
                           "data.pair_task=nsp"])
