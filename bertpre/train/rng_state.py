"""A process's random state (Python, NumPy, torch CPU and its own GPU) as tensors, saved with
every checkpoint and restored on resume, so a resumed run draws what an uninterrupted one would."""
from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

CUDA_RNG = "cuda_current_device"  # key of this process's own GPU's RNG state in rng_state_<rank>.pt


def capture_rng_state() -> dict[str, Any]:
    """This process's RNG states (python, numpy, torch CPU and its own GPU's) as tensors."""
    version, internal, gauss = random.getstate()
    kind, keys, position, has_gauss, cached_gauss = np.random.get_state()
    state = {
        "python_version": torch.tensor(version),
        "python": torch.tensor(internal, dtype=torch.int64),
        "python_gauss": torch.tensor([float("nan") if gauss is None else gauss], dtype=torch.float64),
        "numpy": torch.from_numpy(keys.astype(np.int64)),
        "numpy_position": torch.tensor([position, has_gauss], dtype=torch.int64),
        "numpy_gauss": torch.tensor([cached_gauss], dtype=torch.float64),
        "torch": torch.get_rng_state(),
    }
    # Only this process's own device: a resume may see fewer GPUs than the save did. A process
    # that never started CUDA (train.device cpu) has no CUDA stream to keep.
    if torch.cuda.is_initialized():
        state[CUDA_RNG] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Undo `capture_rng_state`: set this process's RNGs to the saved states."""
    gauss = float(state["python_gauss"][0])
    random.setstate((int(state["python_version"]), tuple(state["python"].tolist()),
                     None if gauss != gauss else gauss))
    position, has_gauss = state["numpy_position"].tolist()
    np.random.set_state(("MT19937", state["numpy"].numpy().astype(np.uint32), position,
                         has_gauss, float(state["numpy_gauss"][0])))
    torch.set_rng_state(state["torch"])
    if not torch.cuda.is_available():
        return
    if CUDA_RNG in state:
        torch.cuda.set_rng_state(state[CUDA_RNG])  # the current device, this process's own
    elif state.get("cuda"):  # older checkpoints: a list, one state per device the saver saw
        every_device = state["cuda"]
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_rng_state(every_device[local_rank if local_rank < len(every_device) else 0])
