"""train.deterministic on a CUDA GPU: two runs from one seed end in the same weights, bit for bit.

The first GPU run (issue 39) showed why this needs its own test: with `warn_only=True`,
PyTorch keeps the non-deterministic backward of its attention kernels (cuDNN's, and the flash
and memory-efficient ones) and only warns; a short run still repeated, since these kernels
often do at small sizes. Each family's whole trainer path runs here, its attention included
(ModernBERT's local layers on FlexAttention), at a batch large enough for split reductions.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import bertpre.train.trainer as trainer
from bertpre.config import load_config

ROOT = Path(__file__).parents[2]
FAMILIES = {
    "bert": ("tiny.yaml", []),
    "modernbert": ("tiny-modernbert.yaml", []),
    "xlnet": ("tiny.yaml", ["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none"]),
}


@pytest.fixture
def deterministic_flags():
    """Put back the process-wide switches a deterministic run sets."""
    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
     torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) = saved[2:]


@pytest.mark.gpu
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_two_deterministic_cuda_runs_end_in_the_same_weights(family, tiny_data, tmp_path, deterministic_flags):
    config_name, overrides = FAMILIES[family]
    weights = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for run in ("first", "second"):
            config = load_config(ROOT / "configs" / config_name, [
                f"data.path={tiny_data}", f"train.out={tmp_path / run}", "train.device=cuda",
                "train.precision=bf16", "train.deterministic=true", "train.max_steps=3",
                "train.batch_size=64", "train.micro_batch_size=64", "train.log_every=1",
                "train.eval_every=3", "train.save_every=3", *overrides])
            result = trainer.pretrain(config)
            weights.append(load_file(result.run_dir / "checkpoints" / "step-00000003" / "model.safetensors"))
    first, second = weights
    assert first.keys() == second.keys()
    differing = [name for name in first if not torch.equal(first[name], second[name])]
    assert not differing, f"{family}: {len(differing)} tensors differ, e.g. {differing[:3]}"
    loose = [str(w.message) for w in caught if "determinis" in str(w.message).lower()]
    assert not loose, f"{family}: a kernel ran without a deterministic algorithm: {loose[0]}"
