"""train.compile: auto compiles the step on a CUDA GPU and keeps it eager on a CPU; a failure to
compile falls back to the eager step in one line (auto) or is refused in one line (a typed true)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch._dynamo.exc import TorchDynamoException

import bertpre.train.setup as setup
import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.train.setup import resolve_run, settle_compile
from bertpre.train.trainer import compile_failure

# Without dropout, so that the eager fallback and an eager run draw nothing differently.
STEPS = ["train.max_steps=4", "train.save_every=1000", "train.log_every=1", "model.hidden_dropout_prob=0.0",
         "model.attention_probs_dropout_prob=0.0"]


def tiny(data: Path, out: Path, *more: str):
    return load_config("tiny", [f"data.path={data}", f"train.out={out}", *STEPS, *more])


class NoCompiler(TorchDynamoException):
    """What TorchDynamo raises where Inductor finds no compiler for the device."""


def failing_compile(model, **_options):
    def compiled(*_args, **_kwargs):
        raise NoCompiler("backend='inductor' raised:\nInvalidCxxCompiler: No working C++ compiler found")
    return compiled


def losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def test_auto_is_compiled_on_cuda_and_eager_on_a_cpu(tiny_data, tmp_path):
    assert settle_compile("auto", "cuda") is True and settle_compile("auto", "cpu") is False
    assert settle_compile(True, "cpu") is True and settle_compile(False, "cuda") is False
    assert settle_compile("auto", "cuda", deterministic=True) is False  # bitwise resume: eager
    assert settle_compile(True, "cuda", deterministic=True) is True
    config = tiny(tiny_data, tmp_path / "run")
    assert config.train.compile == "auto"  # the default
    assert resolve_run(config, device=torch.device("cpu")).config.train.compile is False
    assert resolve_run(config).config.train.compile == "auto"  # no device yet (info): unsettled


def test_auto_falls_back_to_the_eager_step_in_one_line(tiny_data, tmp_path, monkeypatch, capsys):
    eager = trainer.pretrain(tiny(tiny_data, tmp_path / "eager", "train.compile=false"))
    monkeypatch.setattr(setup, "settle_compile", lambda setting, device_type, deterministic: True)  # as on a GPU
    monkeypatch.setattr(trainer.torch, "compile", failing_compile)
    fallen = trainer.pretrain(tiny(tiny_data, tmp_path / "auto"))
    err = capsys.readouterr().err
    assert fallen.step == 4
    assert "the step compiled (train.compile" in err  # the start block said so
    lines = [line for line in err.splitlines() if "could not compile" in line]
    assert lines == ["note: train.compile auto: torch.compile could not compile the step (backend='inductor' "
                     "raised:); training with the eager step"]
    # the same data and masks; the compiled shapes pad to max_seq_length
    assert losses(fallen.run_dir) == pytest.approx(losses(eager.run_dir), abs=2e-3)


def test_a_typed_true_that_cannot_compile_is_refused_in_one_line(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer.torch, "compile", failing_compile)
    with pytest.raises(UserError, match=r"^train.compile true: torch.compile could not compile the step "
                                        r"\(backend='inductor' raised:\); set train.compile false or auto$"):
        trainer.pretrain(tiny(tiny_data, tmp_path / "true", "train.compile=true"))


def test_only_compiles_own_errors_are_compile_failures():
    assert compile_failure(NoCompiler("no compiler")) == "no compiler"
    assert compile_failure(RuntimeError("shape mismatch")) is None
    assert compile_failure(torch.OutOfMemoryError("CUDA out of memory")) is None
    assert len(compile_failure(NoCompiler("x" * 500))) == 200
