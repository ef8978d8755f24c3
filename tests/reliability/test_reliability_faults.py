"""Disk trouble and numerical faults mid-run: one clear line, and the last complete checkpoint
stays loadable (a resumed run from it finishes exactly like an uninterrupted one)."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from _reliability_harness import (
    assert_same_params,
    check_complete,
    final_params,
    latest_folder,
    metric_rows,
    pretrain_args,
    run_cli,
)


def assert_stopped_with_one_line(result: subprocess.CompletedProcess, *expected: str) -> str:
    """Exit 2, no traceback, and the last stderr line is the one `error:` line (above it only
    the progress bar, which redraws itself with carriage returns)."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.split("\n") if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr[-3000:]
    assert result.stderr.rstrip("\n").split("\n")[-1] == errors[0]
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


def resume_finishes_like_reference(tiny_config, data_dir, run_dir, reference_run) -> None:
    result = run_cli(*pretrain_args(tiny_config, data_dir, run_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert metric_rows(run_dir) == metric_rows(reference_run)
    assert_same_params(final_params(run_dir), final_params(reference_run))


@pytest.mark.parametrize("fault, expected", [
    # the n-th model.safetensors write (step 3n) fails
    ("enospc_checkpoint:3", ["step-00000009", "No space left on device", '"step-00000006"']),
    pytest.param("erofs_checkpoint:2", ["step-00000006", "Read-only file system", '"step-00000003"'],
                 marks=pytest.mark.slow),
    pytest.param("erofs_metrics:8", ["metrics.jsonl", "Read-only file system", '"step-00000006"'],
                 marks=pytest.mark.slow),
])
def test_disk_fault_stops_with_one_line_and_keeps_last_checkpoint(
        fault, expected, tiny_config, data_dir, reference_run, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(*pretrain_args(tiny_config, data_dir, run_dir), fault=fault)
    assert_stopped_with_one_line(result, *expected)
    kept = expected[-1].strip('"')
    assert check_complete(latest_folder(run_dir)) == int(kept.split("-")[1])
    resume_finishes_like_reference(tiny_config, data_dir, run_dir, reference_run)


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: room for the first checkpoint of the tiny model, not for the next ones."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


@pytest.mark.slow
def test_real_full_disk_stops_with_one_line_and_keeps_last_checkpoint(
        small_disk, tiny_config, data_dir, reference_run, tmp_path):
    run_dir = small_disk / "run"
    result = run_cli(*pretrain_args(tiny_config, data_dir, run_dir))
    line = assert_stopped_with_one_line(result, "cannot write checkpoint", "MiB free there")
    step = check_complete(latest_folder(run_dir))
    assert step >= 3 and f'"step-{step:08d}"' in line
    moved = tmp_path / "run"  # the user frees space: here, by moving the run to a roomy disk
    shutil.copytree(run_dir, moved)
    resume_finishes_like_reference(tiny_config, data_dir, moved, reference_run)


def test_nan_loss_under_fp32_stops_with_one_line_and_keeps_last_checkpoint(
        tiny_config, data_dir, reference_run, tmp_path):
    run_dir = tmp_path / "run"
    # forward pass 15 is the first micro-batch of step 8 (2 micro-batches a step)
    result = run_cli(*pretrain_args(tiny_config, data_dir, run_dir), fault="nan_loss:15")
    assert_stopped_with_one_line(result, "training diverged at step 8", "is not finite",
                                 'the last good checkpoint is "step-00000006"')
    assert check_complete(latest_folder(run_dir)) == 6
    assert [row["step"] for row in metric_rows(run_dir)] == list(range(1, 8))
    resume_finishes_like_reference(tiny_config, data_dir, run_dir, reference_run)


@pytest.mark.gpu  # fp16 loss scaling needs a CUDA GPU
def test_inf_gradient_under_fp16_skips_the_step_and_counts_it(tiny_config, data_dir, tmp_path):
    settings = ("train.precision=fp16",)
    clean, faulty = tmp_path / "clean", tmp_path / "faulty"
    assert run_cli(*pretrain_args(tiny_config, data_dir, clean, *settings)).returncode == 0
    result = run_cli(*pretrain_args(tiny_config, data_dir, faulty, *settings), fault="inf_loss:7")
    assert result.returncode == 0, result.stderr[-3000:]
    clean_rows = [r for r in metric_rows(clean) if "train/loss" in r]
    faulty_rows = [r for r in metric_rows(faulty) if "train/loss" in r]
    # the schedule does not advance on a skipped step: step k has the same lr in both runs
    assert [(r["step"], r["train/lr"]) for r in faulty_rows] == [(r["step"], r["train/lr"]) for r in clean_rows]
    assert faulty_rows[-1]["train/skipped_steps"] == clean_rows[-1]["train/skipped_steps"] + 1
    skipped_at = next(r["step"] for r in faulty_rows
                      if r["train/skipped_steps"] > clean_rows[-1]["train/skipped_steps"])
    assert skipped_at == 4  # forward pass 7 belongs to the 4th step
    assert faulty_rows[skipped_at - 1]["train/loss_scale"] < clean_rows[skipped_at - 1]["train/loss_scale"]
