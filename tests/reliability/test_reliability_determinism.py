"""Determinism: the same seed gives identical losses and parameters, whatever the number of
DataLoader workers and however often the run is stopped; another seed gives others."""
from __future__ import annotations

import signal

import pytest
import torch
from _reliability_harness import (
    assert_same_params,
    final_params,
    logged_steps,
    metric_rows,
    pretrain_args,
    run_cli,
    start_pretrain,
    wait_for,
)


def train(tiny_config, data_dir, out, *settings):
    result = run_cli(*pretrain_args(tiny_config, data_dir, out, *settings))
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_same_seed_is_identical_another_seed_differs(tiny_config, data_dir, reference_run, tmp_path):
    again = train(tiny_config, data_dir, tmp_path / "again")
    assert metric_rows(again) == metric_rows(reference_run)
    assert_same_params(final_params(again), final_params(reference_run))

    other = train(tiny_config, data_dir, tmp_path / "other", "train.seed=7")
    losses = [row["train/loss"] for row in metric_rows(other) if "train/loss" in row]
    reference_losses = [row["train/loss"] for row in metric_rows(reference_run) if "train/loss" in row]
    assert len(losses) == len(reference_losses) == 36
    assert all(a != b for a, b in zip(losses, reference_losses, strict=True))
    params, reference_params = final_params(other), final_params(reference_run)
    assert all(not torch.equal(params[name], reference_params[name]) for name in params
               if reference_params[name].std() > 0)  # constant inits (LayerNorm) may coincide


@pytest.mark.slow
def test_two_workers_and_a_preemption_change_nothing(tiny_config, data_dir, reference_run, tmp_path):
    run_dir = tmp_path / "workers"
    process = start_pretrain(tiny_config, data_dir, run_dir, "data.num_workers=2")
    assert wait_for(lambda: logged_steps(run_dir) >= 13, process), process.communicate()[1][-3000:]
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=120)
    assert process.returncode == 143
    train(tiny_config, data_dir, run_dir, "data.num_workers=2")
    assert metric_rows(run_dir) == metric_rows(reference_run)
    assert_same_params(final_params(run_dir), final_params(reference_run))
