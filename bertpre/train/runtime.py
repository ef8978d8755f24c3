"""Where and how training executes: device, precision, torchrun process group, seeding."""
from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from bertpre.errors import UserError

# Dense bf16/fp16 tensor-core peaks (FLOP/s) for MFU; matched against the device name.
PEAK_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "A10G": 125e12,
    "L40S": 362e12,
    "L4": 121e12,
    "V100": 125e12,
    "T4": 65e12,
}


@dataclass
class Runtime:
    """The process's place in the job and its numeric setup."""

    device: torch.device
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    precision: str = "fp32"  # what is actually used (fp16 falls back on CPU)
    note: str = ""  # said to the user when the precision asked for is not used

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast for the forward pass; a no-op under fp32."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.float16 if self.precision == "fp16" else torch.bfloat16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A GradScaler for fp16 (fp16's narrow range needs one); None otherwise."""
        if self.precision != "fp16":
            return None
        return torch.amp.GradScaler(self.device.type)

    def peak_flops(self) -> float | None:
        """The device's peak FLOP/s for MFU, when it is a known GPU."""
        if self.device.type != "cuda":
            return None
        name = torch.cuda.get_device_name(self.device)
        for key, flops in PEAK_FLOPS.items():
            if key in name:
                return flops
        return None


def init_runtime(precision: str) -> Runtime:
    """Join the torchrun process group when launched by torchrun, pick the device and precision.

    torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; without them this is a single process.
    NCCL on GPUs, gloo on CPU.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    runtime = Runtime(device=device, rank=rank, local_rank=local_rank, world_size=world_size,
                      precision=precision)
    if device.type == "cpu" and precision == "fp16":
        # CPU autocast to fp16 is slow and needs loss scaling for no gain; fp32 is exact.
        runtime.precision = "fp32"
        runtime.note = "precision fp16 needs a CUDA GPU; training in fp32 on this CPU instead"
    if device.type == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise UserError("this GPU does not support bf16; use train.precision=fp16")
    if device.type == "cuda":
        # TF32 matmuls: the fp32 parts of mixed precision run on tensor cores.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return runtime


def shutdown(runtime: Runtime) -> None:
    """Leave the process group, if one was joined."""
    if runtime.distributed and dist.is_initialized():
        dist.destroy_process_group()


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and all GPUs)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def barrier(runtime: Runtime) -> None:
    """Wait for all processes (no-op in a single process)."""
    if runtime.distributed:
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    """Sum `tensor` over all processes in place and return it."""
    if runtime.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor
