"""Preemption: SIGTERM / SIGINT at a random step → that step's checkpoint, exit 143 / 130,
flushed TensorBoard events, and a resumed run that continues exactly."""
from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
from _reliability_harness import (
    assert_same_params,
    check_complete,
    final_params,
    latest_folder,
    logged_steps,
    metric_rows,
    pretrain_args,
    run_cli,
    start_pretrain,
    wait_for,
)


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
