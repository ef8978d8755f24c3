"""A WSD run trained longer: resumed with a larger train.max_steps before its decay, it follows
the longer run's learning rate exactly; resumed after its decay began, it goes back up."""
import json
import signal
from pathlib import Path

import pytest
import torch

from bertpre.config import load_config
from bertpre.train.optim import learning_rate
from bertpre.train.runtime import StopSignals
from bertpre.train.trainer import pretrain

ROOT = Path(__file__).parents[2]
# Warmup 2 steps, decay over the last 0.4 of them: steps 3-4 of 5, steps 6-9 of 10.
WSD = ["optim.schedule=wsd", "optim.warmup_steps=2", "optim.decay_fraction=0.4"]


def wsd_config(data: Path, out: Path, max_steps: int):
    return load_config(ROOT / "configs" / "tiny.yaml", [
        f"data.path={data}", f"train.out={out}", "train.log_every=1", "train.eval_every=1000",
        "train.save_every=1", f"train.max_steps={max_steps}", *WSD])


def logged(run_dir: Path, name: str) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row[name] for row in rows if name in row]


def wsd_lr(step: int, max_steps: int) -> float:
    return learning_rate(step, lr=2e-3, warmup_steps=2, max_steps=max_steps, schedule="wsd",
                         decay_fraction=0.4, decay_shape="1-sqrt")


@pytest.fixture(scope="module")
def longer_run(tiny_data, tmp_path_factory, one_thread_per_module):
    """A fresh 10-step WSD run: the run every lengthened one is compared with."""
    return pretrain(wsd_config(tiny_data, tmp_path_factory.mktemp("fresh") / "run", 10)).run_dir


def test_resumed_before_its_decay_a_wsd_run_equals_the_longer_run(tiny_data, tmp_path, longer_run, monkeypatch):
    """Stopped at step 3 of 5 (its decay starts at step 3, at the full lr), resumed to 10: every
    step's lr and loss equal the fresh 10-step run's, so no decay was taken and lost."""
    calls = iter(range(1, 100))
    monkeypatch.setattr(StopSignals, "agreed", lambda self, runtime: (signal.SIGINT if next(calls) == 3 else 0, False))
    stopped = pretrain(wsd_config(tiny_data, tmp_path / "resumed", 5))
    assert (stopped.step, stopped.exit_code) == (3, 130)
    monkeypatch.undo()
    resumed = pretrain(wsd_config(tiny_data, tmp_path / "resumed", 10))
    assert resumed.notes[-1] == (
        "the learning rate at step 3 stays 0.002 (stable); the WSD stable phase now runs to step 6 and "
        "the 1-sqrt decay over the last 4 steps starts there and ends at step 10 (it was to start at step 3)")
    lrs = logged(resumed.run_dir, "train/lr")
    assert lrs[:3] == [1e-3, 2e-3, 2e-3]  # warmup, then the stable lr: the steps taken
    assert lrs == logged(longer_run, "train/lr") == [wsd_lr(step, 10) for step in range(10)]
    assert lrs[6:] == pytest.approx([2e-3, 2e-3 * (1 - 0.5), 2e-3 * (1 - 0.5**0.5), 2e-3 * (1 - 0.75**0.5)])
    assert logged(resumed.run_dir, "train/loss") == logged(longer_run, "train/loss")  # identical


def test_resumed_after_its_decay_a_wsd_run_goes_back_up_to_the_longer_runs_lr(tiny_data, tmp_path, longer_run):
    """Finished at 5 (decayed over steps 3-4), resumed to 10: steps 1-5 keep the short run's
    decay, steps 6-10 follow the fresh 10-step run's lr, the note says so."""
    short = pretrain(wsd_config(tiny_data, tmp_path / "resumed", 5))
    assert logged(short.run_dir, "train/lr") == [1e-3, 2e-3, 2e-3, 2e-3, 2e-3 * (1 - 0.5**0.5)]
    resumed = pretrain(wsd_config(tiny_data, tmp_path / "resumed", 10))
    assert resumed.notes[-1].startswith(
        "the WSD decay had begun at step 3, so the learning rate jumps back up from 0 to the stable 0.002 "
        "at step 5 (expect the loss the decay brought down to rise again)")
    lrs = logged(resumed.run_dir, "train/lr")
    assert lrs[:5] == [wsd_lr(step, 5) for step in range(5)]
    assert lrs[5:] == logged(longer_run, "train/lr")[5:] == [wsd_lr(step, 10) for step in range(5, 10)]
    assert torch.isfinite(torch.tensor(logged(resumed.run_dir, "train/loss"))).all()
