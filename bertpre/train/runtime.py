"""Where and how training executes: device, precision, torchrun process group, seeding."""
from __future__ import annotations

import contextlib
import datetime
import os
import random
import signal
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from bertpre.config import DEVICES
from bertpre.config.sections import PRECISIONS
from bertpre.errors import SAVE_SIGNAL, UserError

DEVICE_ENV = "BERTPRE_DEVICE"
FP16_ON_CPU = "precision fp16 needs a CUDA GPU; training in fp32 on this CPU instead"
# NCCL's default of 10 minutes is shorter than a large evaluation or checkpoint save that rank 0
# does while the other ranks wait at a barrier; a real hang still ends, an hour later.
PROCESS_GROUP_TIMEOUT = datetime.timedelta(minutes=60)

# Dense bf16/fp16 tensor-core peaks (FLOP/s) from the makers' data sheets, for MFU; matched
# against the device name in this order, so a PCIe or NVL card is not taken for an SXM one.
PEAK_FLOPS = {
    "H200 NVL": 835e12,
    "H200": 989e12,
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
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
    precision: str = "fp32"  # what is actually used (auto resolved, fp16 falls back on CPU)
    note: str = ""  # said to the user when the precision asked for is not used
    precision_line: str = ""  # which precision is used and why, e.g. "precision bf16 (auto: ...)"
    deterministic: bool = False  # deterministic CUDA kernels are on

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
        return peak_flops_of(torch.cuda.get_device_name(self.device))


def peak_flops_of(device_name: str) -> float | None:
    """The data-sheet dense bf16 peak of a GPU named `device_name` (as CUDA names it), or None."""
    for key, flops in PEAK_FLOPS.items():
        if key in device_name:
            return flops
    return None


def choose_device(requested: str, cuda_available: bool) -> str:
    """"cuda" or "cpu" for `train.device`; `auto` is cuda when there is one.

    `BERTPRE_DEVICE` (cpu or cuda), when set, replaces `auto`: the test suite sets it to cpu so
    that CPU-exact tests stay exact on a machine with a GPU.
    """
    source = "train.device"
    if requested == "auto" and os.environ.get(DEVICE_ENV):
        requested, source = os.environ[DEVICE_ENV], DEVICE_ENV
        if requested not in DEVICES:
            raise UserError(f"{DEVICE_ENV}={requested!r} is not a device; use one of "
                            f"{', '.join(DEVICES)} or unset it")
    if requested == "cuda" and not cuda_available:
        raise UserError(f"{source} is cuda but torch sees no CUDA GPU; use auto or cpu")
    if requested == "auto":
        return "cuda" if cuda_available else "cpu"
    return requested


def choose_precision(requested: str, device_type: str, bf16_supported: bool) -> tuple[str, str]:
    """The precision to train in, and one line saying which and why.

    Args:
        requested: `train.precision`: auto, fp32, fp16 or bf16.
        device_type: "cuda" or "cpu".
        bf16_supported: whether the GPU has native bf16 (Ampere or newer); ignored on a CPU.
    """
    if requested not in PRECISIONS:
        raise UserError(f"precision {requested!r} is not one of {', '.join(PRECISIONS)}")
    if requested == "auto":
        if device_type != "cuda":
            return "fp32", "precision fp32 (auto: mixed precision gains nothing on a CPU)"
        if bf16_supported:
            return "bf16", "precision bf16 (auto: this GPU supports bf16)"
        return "fp16", "precision fp16 with loss scaling (auto: this GPU has no bf16)"
    if requested == "fp16" and device_type != "cuda":
        # CPU autocast to fp16 is slow and needs loss scaling for no gain; fp32 is exact.
        return "fp32", "precision fp32 (fp16 needs a CUDA GPU; this is a CPU)"
    if requested == "bf16" and device_type == "cuda" and not bf16_supported:
        raise UserError("this GPU does not support bf16; use train.precision=fp16 or auto")
    scaling = " with loss scaling" if requested == "fp16" else ""
    return requested, f"precision {requested}{scaling} (as configured)"


def make_deterministic() -> None:
    """Make CUDA kernels bitwise repeatable, at some cost in speed."""
    # cuBLAS is deterministic only with a fixed workspace; it reads this at its first matmul.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # Not warn_only: under it PyTorch keeps the non-deterministic backward of its attention
    # kernels (flash, memory-efficient, cuDNN) and only warns, as the first H100 run showed.
    # Strict, flash and memory-efficient attention take their deterministic backward and cuDNN's
    # is never chosen; an op with no deterministic kernel stops the run at its first step
    # (`bertpre.errors.nondeterministic_op` says why), not silently later.
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def init_runtime(precision: str = "auto", *, device: str = "auto",
                 deterministic: bool = False) -> Runtime:
    """Join the torchrun process group when launched by torchrun, pick the device and precision.

    torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; without them this is a single process.
    NCCL on GPUs, gloo on CPU.

    Args:
        precision: `train.precision` (auto, fp32, fp16, bf16).
        device: `train.device` (auto, cpu, cuda).
        deterministic: `train.deterministic`; changes nothing on a CPU, which is already exact.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if choose_device(device, torch.cuda.is_available()) == "cuda":
        chosen = torch.device("cuda", local_rank)
        torch.cuda.set_device(chosen)
    else:
        chosen = torch.device("cpu")
    # Native bf16 only: emulated bf16 on older GPUs is slower than fp16 for the same range.
    bf16 = chosen.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
    used, line = choose_precision(precision, chosen.type, bf16)
    if world_size > 1 and not dist.is_initialized():
        if chosen.type == "cuda":
            dist.init_process_group(backend="nccl", timeout=PROCESS_GROUP_TIMEOUT, device_id=chosen)
        else:
            dist.init_process_group(backend="gloo", timeout=PROCESS_GROUP_TIMEOUT)
    deterministic = deterministic and chosen.type == "cuda"
    if deterministic:
        make_deterministic()
    elif chosen.type == "cuda":
        # TF32 matmuls: the fp32 parts of mixed precision run on tensor cores.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    note = FP16_ON_CPU if precision != "auto" and used != precision else ""
    return Runtime(device=chosen, rank=rank, local_rank=local_rank, world_size=world_size,
                   precision=used, note=note, precision_line=line, deterministic=deterministic)


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


# The exit code of a run stopped by a signal, after its checkpoint: 128 + the signal's number.
SIGNAL_EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class StopSignals:
    """While training: SIGINT and SIGTERM ask to stop after the current step (which is saved),
    SIGUSR1 (`SAVE_SIGNAL`) to save the current step and go on."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.save_asked = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (*SIGNAL_EXIT_CODES, SAVE_SIGNAL):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == SAVE_SIGNAL:
            self.save_asked = True
        else:
            self.received = signum

    def agreed(self, runtime: Runtime) -> tuple[int, bool]:
        """The stop signal any process received (0 for none) and whether any was asked to save,
        agreed by all processes; a save asked is answered by this call."""
        asked = [self.received or 0, int(self.save_asked)]
        self.save_asked = False
        if runtime.distributed:
            agreed = torch.tensor(asked, device=runtime.device)
            torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
            asked = agreed.tolist()
        return asked[0], bool(asked[1])

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
