"""`bertpre pretrain --set optim.schedule=wsd` as a user runs it: the logged learning rate is
warmup, the stable lr, then the 1-sqrt decay; the start block says where each begins."""
import json

import pytest
from _in_process import run_main


def test_a_tiny_wsd_pretrain_logs_warmup_stable_and_1_sqrt_decay(tiny_data, tmp_path, monkeypatch, capsys, one_thread):
    run = tmp_path / "wsd run"
    code, stdout, stderr = run_main(
        ["pretrain", "--config", "tiny", "--data", tiny_data, "--out", run,
         "--set", "optim.schedule=wsd", "--set", "optim.warmup_steps=2", "--set", "train.max_steps=10",
         "--set", "train.log_every=1", "--set", "train.eval_every=1000"], monkeypatch, capsys)
    assert code == 0, stderr[-2000:]
    assert ("  learning rate 0.002 (wsd): warmup to step 2, stable until step 8, then 1-sqrt decay to 0 "
            "at step 10 (the last 2 steps)\n") in stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lrs = {row["step"]: row["train/lr"] for row in rows if "train/lr" in row}
    # Logged at 1-based step k: the update at 0-based k - 1. Decay: the last 0.2 of 10 steps.
    assert lrs == {1: 1e-3, 2: 2e-3, 3: 2e-3, 4: 2e-3, 5: 2e-3, 6: 2e-3, 7: 2e-3, 8: 2e-3, 9: 2e-3,
                   10: pytest.approx(2e-3 * (1 - 0.5**0.5), abs=1e-18)}
    saved = (run / "config.yaml").read_text()
    assert "schedule: wsd\n  decay_fraction: 0.2\n  decay_shape: 1-sqrt\n" in saved
