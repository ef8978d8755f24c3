"""Shared by the fine-tuning tests: one small pretrained model (made once a session)."""
from __future__ import annotations

from pathlib import Path

import pytest

from bertpre.config import load_config
from bertpre.train.trainer import pretrain


@pytest.fixture(scope="session")
def run_folder(tiny_data, tmp_path_factory) -> Path:
    """A 2-layer hidden-32 model pretrained for 30 steps on the tiny grammar."""
    out = tmp_path_factory.mktemp("finetune-source") / "run"
    config = load_config("tiny", [
        f"data.path={tiny_data}", f"train.out={out}", "model.hidden_size=32", "model.num_hidden_layers=2",
        "model.num_attention_heads=4", "model.intermediate_size=64", "model.max_position_embeddings=64",
        "data.max_seq_length=32", "data.max_predictions_per_seq=5", "data.num_workers=0",
        "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=30", "train.precision=fp32",
        "train.save_every=30", "train.eval_every=1000", "train.log_every=10", "optim.warmup_steps=3",
        "optim.lr=1e-3"])
    pretrain(config, resume=False)
    return out
