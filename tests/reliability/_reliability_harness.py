"""Drive the real `bertpre` CLI in subprocesses and read what a run leaves on disk."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).parents[2]
FAULT_RUNNER = Path(__file__).with_name("_fault_runner.py")


def child_env() -> dict[str, str]:
    """The environment of a CLI subprocess, read when it starts (a gpu test gives CUDA back)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("BERTPRE_FAULT", None)
    return env


ENV = child_env()
# What a checkpoint folder must hold to be complete (fp32, one process).
CHECKPOINT_FILES = {"config.json", "model.safetensors", "optimizer.pt", "rng_state_0.pt",
                    "trainer_state.json"}
TINY_CONFIG = """\
model:
  hidden_size: 32
  num_hidden_layers: 2
  num_attention_heads: 4
  intermediate_size: 64
  max_position_embeddings: 32
data:
  max_seq_length: 32
  max_predictions_per_seq: 5
  num_workers: 0
optim:
  lr: 1.0e-3
  warmup_steps: 3
train:
  batch_size: 8
  micro_batch_size: 4
  max_steps: 36
  precision: fp32
  seed: 42
  log_every: 1
  eval_every: 1000
  save_every: 3
  keep_last: 2
"""


def corpus_text(documents: int = 50, seed: int = 0) -> str:
    """Plain-text corpus: `documents` documents of 4-8 sentences from a small grammar."""
    import random

    rng = random.Random(seed)
    subjects = ["The cat", "A dog", "The old man", "My sister", "The farmer", "A small bird"]
    verbs = ["sees", "likes", "follows", "feeds", "watches", "finds"]
    objects = ["the river", "a red apple", "the green field", "an open door", "the tall tree"]
    endings = ["today", "at night", "in the morning", "again", "with care"]
    docs = ["\n".join(f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)} "
                      f"{rng.choice(endings)}." for _ in range(rng.randint(4, 8)))
            for _ in range(documents)]
    return "\n\n".join(docs) + "\n"


def bertpre_command(*args: str | Path, fault: str | None = None) -> list[str]:
    entry = [str(FAULT_RUNNER)] if fault else ["-m", "bertpre"]
    return [sys.executable, *entry, *map(str, args)]


def fault_env(fault: str | None) -> dict[str, str]:
    return dict(child_env(), BERTPRE_FAULT=fault) if fault else child_env()


def run_cli(*args: str | Path, fault: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `bertpre ARGS` (through the fault runner when `fault` is given) to completion."""
    return subprocess.run(bertpre_command(*args, fault=fault), env=fault_env(fault),
                          capture_output=True, text=True, timeout=timeout)


def pretrain_args(config: Path, data: Path, out: Path, *settings: str) -> list[str | Path]:
    args: list[str | Path] = ["pretrain", "--config", config, "--data", data, "--out", out]
    for setting in settings:
        args += ["--set", setting]
    return args


def start_pretrain(config: Path, data: Path, out: Path, *settings: str, group: bool = False) -> subprocess.Popen:
    """Start `bertpre pretrain`; `group`: in a process group of its own (its DataLoader workers
    too), as a scheduler starts a job, so that a signal can be sent to the group."""
    return subprocess.Popen(bertpre_command(*pretrain_args(config, data, out, *settings)), env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=group)


def wait_for(condition, process: subprocess.Popen, timeout: float = 120, interval: float = 0.002) -> bool:
    """Poll `condition()` until it holds (True) or the process ends / time runs out (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(interval)
    return False


def metric_rows(run_dir: Path, *, drop_perf: bool = True) -> list[dict]:
    """metrics.jsonl rows; timing scalars (perf/*) differ between runs and are dropped."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    if drop_perf:
        rows = [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in rows]
    return rows


def logged_steps(run_dir: Path) -> int:
    """The highest step in metrics.jsonl (0 when none); torn lines are ignored."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0
    steps = [0]
    for line in path.read_text().splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (json.JSONDecodeError, KeyError):
            pass
    return max(steps)


def latest_folder(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest"
    return run_dir / "checkpoints" / pointer.read_text().strip() if pointer.exists() else None


def check_complete(folder: Path) -> int:
    """Assert `folder` is a complete, loadable checkpoint; return its step."""
    assert CHECKPOINT_FILES <= {p.name for p in folder.iterdir()}, sorted(folder.iterdir())
    state = json.loads((folder / "trainer_state.json").read_text())
    assert folder.name == f"step-{state['step']:08d}"
    load_file(folder / "model.safetensors")
    torch.load(folder / "optimizer.pt", weights_only=True)
    return state["step"]


def final_params(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(latest_folder(run_dir) / "model.safetensors")


def assert_same_params(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different, different


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """Assert stderr is exactly one `error: ...` line and return it."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    return lines[0]


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under `folder` with (size, mtime_ns): equal before and after = nothing written."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.lstat().st_size if p.is_file() else -1, p.lstat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}  # lstat: a link is itself, even one that loops


# Each stop signal's exit code and line.
STOPS = {signal.SIGTERM: (143, "terminated"), signal.SIGINT: (130, "interrupted")}
# How a stop signal is sent: SIGTERM to the process, as `kill` sends it, or to its whole process
# group, as Slurm (preemption, scancel) and `timeout` do; SIGINT to the group, as Ctrl-C in a
# terminal does. A signal to the group reaches the workers too.
SENDS = {"SIGTERM-process": (signal.SIGTERM, False), "SIGTERM-group": (signal.SIGTERM, True),
         "SIGINT-group": (signal.SIGINT, True)}


def start_paused(args: list, fault: str, paused: Path, tmp: Path) -> subprocess.Popen:
    """Start `bertpre ARGS` in a process group of its own, `fault` (a `pause_…` of the fault
    runner) making it wait at one point; `tmp` is its temporary folder (TMPDIR)."""
    tmp.mkdir(exist_ok=True)
    env = dict(fault_env(fault), BERTPRE_PAUSED=str(paused), TMPDIR=str(tmp))
    return subprocess.Popen(bertpre_command(*args, fault=fault), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def send_stop(process: subprocess.Popen, signum: int, *, group: bool) -> None:
    """`signum` to the process, or to its process group (it must lead one: `start_new_session`)."""
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)


def process_stats() -> list[tuple[int, list[str]]]:
    """Each live process's pid and the fields of its /proc stat after `(name)`: state, ppid, pgrp, ..."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            found.append((int(entry.name), (entry / "stat").read_text().rsplit(")", 1)[1].split()))
        except OSError:
            continue  # ended meanwhile
    return found


def group_processes(group: int) -> list[int]:
    """The processes of process group `group` (zombies included: not yet gone)."""
    return [pid for pid, fields in process_stats() if int(fields[2]) == group]


def live_children(parent: int) -> list[int]:
    """The processes `parent` started that have not ended (zombies left out)."""
    return [pid for pid, fields in process_stats() if int(fields[1]) == parent and fields[0] != "Z"]


def assert_stopped(process: subprocess.Popen, signum: int, stdout: str, stderr: str) -> None:
    """The exit code of `signum`, its one line last on stderr and no other complaint, and no
    process of the command's group still running (the workers included)."""
    code, said = STOPS[signum]
    assert process.returncode == code, stderr[-3000:]
    lines = stderr.splitlines()
    assert lines[-1:] == [said] and lines.count(said) == 1, stderr[-3000:]
    assert not any(line.startswith("error") or "Traceback" in line for line in lines), stderr[-3000:]
    assert_group_ended(process.pid)


def assert_group_ended(group: int, timeout: float = 30) -> None:
    """No process of `group` left once its leader ended (a killed worker may take a moment to be reaped)."""
    deadline = time.monotonic() + timeout
    while group_processes(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_processes(group) == [], f"process group {group} still has {group_processes(group)}"


def temporaries_under(folder: Path) -> list[Path]:
    """Anything a stopped command may have left: temporaries and staging folders (`.NAME.tmp…`),
    claims, datasets' scratch files (`tmp…`), old folders set aside (`….old`)."""
    patterns = (".*.tmp*", ".bertpre-claim*", "tmp*", "*.old", "*.new-*")
    return sorted({path for pattern in patterns for path in folder.rglob(pattern)})


def file_contents(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}
