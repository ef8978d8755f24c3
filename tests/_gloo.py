"""`python -m bertpre ARGS` in two gloo processes on this machine, started as torchrun starts them
(RANK, LOCAL_RANK, WORLD_SIZE, a free MASTER_PORT), one torch thread each."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_two_gloo_processes(args: list, timeout: float = 300) -> None:
    """Run `bertpre ARGS` as ranks 0 and 1 of one job; both must exit 0 (else the failing one's
    stderr tail is the assertion's message)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()))
    command = [sys.executable, "-m", "bertpre", *map(str, args)]
    processes = [subprocess.Popen(command, env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    for process in processes:
        _, stderr = process.communicate(timeout=timeout)
        assert process.returncode == 0, stderr[-2000:]
