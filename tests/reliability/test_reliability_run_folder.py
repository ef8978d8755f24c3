"""One run per folder: a second `pretrain` on a folder in use is refused, a stale lock is taken
over, and a resume may change only how the run is watched and fed (issue 18)."""
from __future__ import annotations

import json
import signal
import socket
import subprocess

from _reliability_harness import one_line_error, run_cli, start_pretrain, wait_for

from bertpre.claim import CLAIM_FILE
from bertpre.config import load_config


def test_a_second_pretrain_on_a_folder_in_use_is_refused(tiny_config, data_dir, tmp_path):
    run_dir = tmp_path / "run"
    first = start_pretrain(tiny_config, data_dir, run_dir, "train.max_steps=100000",
                           "train.save_every=100000", "train.eval_every=100000")
    try:
        assert wait_for(lambda: (run_dir / "metrics.jsonl").is_file(), first, timeout=120)
        lock = json.loads((run_dir / CLAIM_FILE).read_text())
        assert lock["pid"] == first.pid
        second = run_cli("pretrain", "--config", tiny_config, "--data", data_dir, "--out", run_dir)
        assert second.returncode == 2
        assert f"is in use by process {first.pid}" in one_line_error(second)
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert first.returncode == 143 and not (run_dir / CLAIM_FILE).exists()


def test_a_stale_lock_is_taken_over(tiny_config, data_dir, copy_run, reference_run):
    run_dir = copy_run(reference_run)
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid now names no process: the lock it "holds" is stale
    (run_dir / CLAIM_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": gone.pid}))
    done = run_cli("pretrain", "--config", tiny_config, "--data", data_dir, "--out", run_dir,
                   "--set", "train.max_steps=38")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (run_dir / CLAIM_FILE).exists()


def test_a_resume_may_change_how_the_run_is_watched_and_is_told_so(tiny_config, data_dir, copy_run,
                                                                   reference_run):
    run_dir = copy_run(reference_run)
    done = run_cli("pretrain", "--config", tiny_config, "--data", data_dir, "--out", run_dir,
                   "--set", "train.max_steps=40", "--set", "train.log_every=2",
                   "--set", "data.num_workers=1", "--set", "train.keep_last=1")
    assert done.returncode == 0, done.stderr[-2000:]
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: resuming with")]
    assert notes == ["note: resuming with data.num_workers 0 → 1",
                     "note: resuming with train.max_steps 36 → 40",
                     "note: resuming with train.log_every 1 → 2",
                     "note: resuming with train.keep_last 2 → 1"], done.stderr
    saved = load_config(run_dir / "config.yaml")
    assert (saved.train.max_steps, saved.train.log_every, saved.data.num_workers) == (40, 2, 1)
