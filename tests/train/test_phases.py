"""Phases in one run: config, learning rate across a boundary, and exact resume across it."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from _killed_run import KILLED_RUN
from safetensors.torch import load_file

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.train.optim import learning_rate
from bertpre.train.trainer import Trainer, pretrain

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
TWO_PHASES = [
    {"steps": 4, "data": {"max_seq_length": 128, "max_predictions_per_seq": 20}},
    {"steps": 4, "data": {"max_seq_length": 256, "max_predictions_per_seq": 40},
     "train": {"batch_size": 16, "micro_batch_size": 8}, "optim": {"lr": 1.0e-3, "warmup_steps": 2}},
]
def phased_config_file(tmp_path: Path, phases: list, **model) -> Path:
    raw = yaml.safe_load(TINY.read_text())
    raw["model"].update({"max_position_embeddings": 256, **model})
    raw["train"].pop("max_steps")
    raw["phases"] = phases
    path = tmp_path / "phased.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def overrides(data: Path, out: Path, *more: str) -> list[str]:
    return [f"data.path={data}", f"train.out={out}", "train.log_every=1", "train.eval_every=1000",
            "train.save_every=1", *more]


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_phases_set_max_steps_and_each_phase_its_keys(tmp_path):
    config = load_config(phased_config_file(tmp_path, TWO_PHASES))
    assert config.train.max_steps == 8 and config.phase_ends() == [4, 8]
    first, second = config.for_phase(0), config.for_phase(1)
    assert (first.data.max_seq_length, first.train.batch_size, first.optim.lr) == (128, 32, 2.0e-3)
    assert (second.data.max_seq_length, second.data.max_predictions_per_seq) == (256, 40)
    assert (second.train.batch_size, second.train.micro_batch_size, second.optim.warmup_steps) == (16, 8, 2)
    assert config.schedule_span(0) == (0, 4) and config.schedule_span(1) == (4, 8)
    saved = tmp_path / "saved.yaml"
    config.save(saved)
    assert load_config(saved) == config


def test_a_continued_phase_keeps_one_schedule_over_both(tmp_path):
    phases = [{"steps": 6}, {"steps": 2, "lr_schedule": "continue", "data": {"max_seq_length": 256}}]
    config = load_config(phased_config_file(tmp_path, phases))
    assert config.schedule_span(1) == (0, 8) and config.for_phase(1).optim.lr == config.optim.lr


@pytest.mark.parametrize(("phases", "message"), [
    ([{"steps": 4, "data": {"pair_task": "sop"}}],
     r"unknown key in phases\[0\].data \(a phase changes only max_seq_length, max_predictions_per_seq\)"),
    ([{"steps": 4}, {"steps": 4, "lr_schedule": "continue", "optim": {"lr": 1.0e-3}}],
     r"phases\[1\] continues the previous phase's schedule, so it cannot set optim.lr"),
    ([{"steps": 4}, {"steps": 4, "data": {"max_seq_length": 512}}],
     r"phases\[1\]: data.max_seq_length \(512\) is larger than model.max_position_embeddings \(256\)"),
    ([{"steps": 4}, {"steps": 4, "train": {"micro_batch_size": 5}}],
     r"phases\[1\]: train.batch_size \(32\) is not divisible by train.micro_batch_size \(5\)"),
    ([{"steps": 0}], r"phases\[0\].steps must be a positive integer"),
    ([{"steps": 4, "lr_schedule": "continue"}], r"phases\[0\] has no previous phase to continue"),
    ([{"step": 4}], r"unknown key in phases\[0\] 'step'; did you mean 'steps'"),
    ([], "phases must be a list of phases"),
])
def test_bad_phases_are_refused_in_one_line(tmp_path, phases, message):
    with pytest.raises(UserError, match=message):
        load_config(phased_config_file(tmp_path, phases))


def test_max_steps_may_stop_a_phased_run_early_but_not_outrun_it(tmp_path):
    path = phased_config_file(tmp_path, TWO_PHASES)
    assert load_config(path, ["train.max_steps=5"]).train.max_steps == 5
    with pytest.raises(UserError, match=r"train.max_steps \(9\) is more than the phases' 8 steps"):
        load_config(path, ["train.max_steps=9"])


def test_learning_rate_and_lengths_follow_the_phases(tiny_data, tmp_path):
    run = pretrain(load_config(phased_config_file(tmp_path, TWO_PHASES), overrides(tiny_data, tmp_path / "run")))
    logged = [row for row in rows(run.run_dir) if "train/lr" in row]
    assert [row["step"] for row in logged] == list(range(1, 9))  # one step axis
    config = load_config(run.run_dir / "config.yaml")
    expected = [learning_rate(step, lr=2.0e-3, warmup_steps=30, max_steps=4) for step in range(4)]
    expected += [learning_rate(step, lr=1.0e-3, warmup_steps=2, max_steps=4) for step in range(4)]
    assert [row["train/lr"] for row in logged] == pytest.approx(expected)
    assert config.phases and config.train.max_steps == 8
    with Trainer(load_config(phased_config_file(tmp_path, TWO_PHASES),
                             overrides(tiny_data, tmp_path / "probe"))) as trainer:
        for _ in range(4):
            trainer.train_step()
            trainer.step += 1
        assert trainer.step == trainer.phase_end  # where train() crosses into the next phase
        trainer.next_phase()
        trainer.train_step()
        assert trainer.phase == 1 and trainer.accumulation == 2
        assert trainer.stream.instances.max_seq_length == 256 and trainer.stream.epoch >= 1


@pytest.mark.parametrize("killed_at", [4, 5])  # at the boundary, and one step past it
def test_a_two_phase_run_killed_at_the_boundary_resumes_bit_identical(tiny_data, tmp_path, killed_at):
    config_file = phased_config_file(tmp_path, TWO_PHASES)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        straight = pretrain(load_config(config_file, overrides(tiny_data, tmp_path / "straight",
                                                               "data.num_workers=1")))
        args = overrides(tiny_data, tmp_path / "resumed", "data.num_workers=1")
        env = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
               "CUDA_VISIBLE_DEVICES": "", "BERTPRE_DEVICE": "cpu"}
        killed = subprocess.run([sys.executable, "-c", KILLED_RUN, str(config_file), str(killed_at), *args],
                                env=env, capture_output=True, text=True, timeout=180)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        resumed = pretrain(load_config(config_file, args))
    finally:
        torch.set_num_threads(threads)
    losses = [[row["train/loss"] for row in rows(run.run_dir) if "train/loss" in row]
              for run in (straight, resumed)]
    assert losses[0] == losses[1] and len(losses[0]) == 8
    a = load_file(straight.run_dir / "checkpoints" / "step-00000008" / "model.safetensors")
    b = load_file(resumed.run_dir / "checkpoints" / "step-00000008" / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_mixture_crosses_the_boundary_and_resumes_there_exactly(tiny_data, tmp_path):
    from _tiny_data import build_tiny_data

    wiki = build_tiny_data(tmp_path / "wiki", documents=80, seed=1, tokenizer=tiny_data / "tokenizer")
    config_file = phased_config_file(tmp_path, TWO_PHASES)
    raw = yaml.safe_load(config_file.read_text())
    raw["data"]["path"] = [{"path": str(tiny_data), "weight": 0.6}, {"path": str(wiki), "weight": 0.4}]
    config_file.write_text(yaml.safe_dump(raw))
    settings = ["train.log_every=1", "train.eval_every=1000", "train.save_every=4"]
    straight = pretrain(load_config(config_file, [f"train.out={tmp_path / 'straight'}", *settings]))
    stopped = pretrain(load_config(config_file, [f"train.out={tmp_path / 'resumed'}", *settings,
                                                 "train.max_steps=4"]))
    assert stopped.step == 4
    resumed = pretrain(load_config(config_file, [f"train.out={tmp_path / 'resumed'}", *settings]))
    assert resumed.step == 8
    with Trainer(load_config(config_file, [f"train.out={tmp_path / 'probe'}", *settings])) as trainer:
        trainer.enter_phase(1)
        assert trainer.stream.instances.names == ["data", "wiki"]
        assert max(instances.max_seq_length for instances in trainer.stream.instances.sources) == 256
    a = load_file(straight.run_dir / "checkpoints" / "step-00000008" / "model.safetensors")
    b = load_file(resumed.run_dir / "checkpoints" / "step-00000008" / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)
