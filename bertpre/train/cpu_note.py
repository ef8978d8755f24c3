"""The one line a CPU run gets when its step runs far below what this machine's matrix products
reach while the machine is oversubscribed (issue 52: a 1M-parameter step taking 13 s said nothing)."""
from __future__ import annotations

import os
import time

import torch

# The step's FLOP rate below this share of the machine's matrix-product rate is "far slower than
# the cost model expects" (small models never reach the large-matmul rate: a quarter is far)
SLOW_SHARE = 0.25
# `BERTPRE_CPU_NOTE=0` turns the line off (the test suite does: its load is the suite's own)
ENVIRONMENT = "BERTPRE_CPU_NOTE"


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def matmul_rate(size: int = 512, repeats: int = 4) -> float:
    """Best FLOP/s of `size`-square float32 matrix products on this CPU now (tens of ms). Its
    operands come from a generator of its own: the run's random stream (masking, dropout) is the
    same whether the note measured or not, so a resumed run stays bit-identical."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def slow_cpu_line(*, achieved: float, matmul: float, load: float, cores: int, threads: int) -> str | None:
    """The note, or None where the step is not far below `matmul` FLOP/s or nothing crowds the
    CPU (load above its cores, or torch on more threads than cores)."""
    crowded = load > cores or threads > cores
    if not crowded or achieved >= SLOW_SHARE * matmul:
        return None
    causes = [f"load {load:.1f} on {cores} core{'s' if cores != 1 else ''}"] + \
        ([f"torch on {threads} threads"] if threads > cores else [])
    return (f"this CPU is oversubscribed ({', '.join(causes)}): the step reaches {achieved / 1e9:.2g} "
            f"GFLOP/s where this machine's matrix products reach {matmul / 1e9:.0f}; run fewer jobs "
            "at once, or set OMP_NUM_THREADS (torch.set_num_threads) to the cores left free")


def slow_cpu_note(achieved: float) -> str | None:
    """`slow_cpu_line` for this process and machine now (None where `BERTPRE_CPU_NOTE` is 0)."""
    if os.environ.get(ENVIRONMENT, "1") == "0":
        return None
    return slow_cpu_line(achieved=achieved, matmul=matmul_rate(), load=os.getloadavg()[0],
                         cores=usable_cores(), threads=torch.get_num_threads())
