"""SIGKILL `bertpre pretrain` anywhere, resume, finish: the same parameters and losses as a run
never interrupted, and `latest` never names a half-written checkpoint."""
from __future__ import annotations

import random
import re
import signal
import time
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

STAGING = re.compile(r"\.tmp-step-(\d+)")


def staging_steps(run_dir: Path) -> list[int]:
    checkpoints = run_dir / "checkpoints"
    if not checkpoints.exists():
        return []
    try:
        names = [p.name for p in checkpoints.iterdir()]
    except FileNotFoundError:
        return []
    return [int(m.group(1)) for m in map(STAGING.fullmatch, names) if m]


def checked_latest_step(run_dir: Path) -> int:
    """The step `latest` names after a kill (0 when none), asserting that checkpoint is whole."""
    folder = latest_folder(run_dir)
    return check_complete(folder) if folder is not None else 0


def finish(tiny_config: Path, data_dir: Path, run_dir: Path) -> None:
    result = run_cli(*pretrain_args(tiny_config, data_dir, run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "done at step 36" in result.stdout


def assert_same_as(reference_run: Path, run_dir: Path) -> None:
    assert metric_rows(run_dir) == metric_rows(reference_run)
    assert_same_params(final_params(run_dir), final_params(reference_run))


@pytest.mark.slow
def test_sigkill_at_ten_random_points_then_resume_equals_uninterrupted(
        tiny_config, data_dir, reference_run, tmp_path):
    rng = random.Random(8)
    run_dir = tmp_path / "run"
    kills = []
    while len(kills) < 10:
        seen = max(logged_steps(run_dir), checked_latest_step(run_dir))  # stale rows from the last kill
        in_checkpoint = rng.random() < 0.5
        target = seen + rng.randint(1, 2)
        process = start_pretrain(tiny_config, data_dir, run_dir)
        if in_checkpoint:  # a save is under way: its staging folder exists
            reached = wait_for(lambda seen=seen: any(s > seen for s in staging_steps(run_dir)),
                               process)
        else:
            reached = wait_for(lambda target=target: logged_steps(run_dir) >= target, process)
            time.sleep(rng.uniform(0, 0.05))
        if not reached:
            process.communicate()
            pytest.fail(f"run ended before kill {len(kills) + 1}: {process.returncode}")
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        assert process.returncode == -signal.SIGKILL
        mid_write = bool(staging_steps(run_dir))  # the kill caught a save before its rename
        kills.append((in_checkpoint, mid_write, checked_latest_step(run_dir)))
    assert any(mid_write for _, mid_write, _ in kills), kills
    finish(tiny_config, data_dir, run_dir)
    assert_same_as(reference_run, run_dir)
    assert not staging_steps(run_dir)


@pytest.mark.parametrize("fault", [
    "kill_in_checkpoint:2",  # model.safetensors of step 6 torn, staging folder left behind
    pytest.param("kill_in_metrics:8", marks=pytest.mark.slow),  # metrics.jsonl ends in a torn row
    pytest.param("kill_in_tokenizer_copy:2", marks=pytest.mark.slow),  # RUN/tokenizer half copied
])
def test_sigkill_mid_write_then_resume_equals_uninterrupted(
        fault, tiny_config, data_dir, reference_run, tmp_path):
    run_dir = tmp_path / "run"
    killed = run_cli(*pretrain_args(tiny_config, data_dir, run_dir), fault=fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    if fault.startswith("kill_in_checkpoint"):
        assert staging_steps(run_dir) == [6]
        assert checked_latest_step(run_dir) == 3
    finish(tiny_config, data_dir, run_dir)
    assert_same_as(reference_run, run_dir)
    assert not staging_steps(run_dir)
