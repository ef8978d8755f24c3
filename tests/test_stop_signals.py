"""SIGINT and SIGTERM in one process (issue 41, item 4): the signal decides the exit code whatever
the unwinding raised, native work in `interruptible` is cut short and waited for, a stop that C
code swallowed is raised again, and what a stop interrupts (a claim being taken, a JSON file
being written) leaves nothing behind; SIGUSR1 (issue 51) asks training for a save and changes
nothing elsewhere, and a worker takes no signal sent to its group but its main process's SIGTERM.
The commands themselves are stopped from outside in tests/reliability/test_reliability_signals.py."""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from bertpre import errors
from bertpre.claim import Claim
from bertpre.cli import main
from bertpre.errors import Stopped, interruptible
from bertpre.train.runtime import Runtime, StopSignals


@pytest.fixture(autouse=True)
def no_stop_recorded(monkeypatch):
    """Each test records its stops in a list of its own, and no command is running: no stop
    outlives its test."""
    monkeypatch.setattr(errors, "_received", [])
    monkeypatch.setattr(errors, "_command_running", False)


@pytest.fixture
def usr1_raises_stopped():
    """SIGUSR1 raises Stopped here, as SIGTERM does in the CLI; restored afterwards."""
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: errors.stop(signum))
    yield lambda delay: threading.Timer(delay, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    signal.signal(signal.SIGUSR1, previous)


def test_a_stop_that_a_library_cleanup_turned_into_another_error_still_exits_143(monkeypatch, capsys):
    import bertpre.tools.info

    def stopped_in_a_pool_wait(config):
        try:  # as datasets' pool wait: SIGTERM, then its `finally` asks busy workers with a timeout
            errors.stop(signal.SIGTERM)
        finally:
            raise multiprocessing.TimeoutError

    monkeypatch.setattr(bertpre.tools.info, "info_report", stopped_in_a_pool_wait)
    monkeypatch.setattr(sys, "argv", ["bertpre", "info", "--config", "tiny"])
    with pytest.raises(SystemExit) as exit, cli_handlers_restored():
        main()
    assert exit.value.code == 143 and capsys.readouterr().err == "terminated\n"


@contextlib.contextmanager
def cli_handlers_restored():
    """The handlers `main()` installs are this process's again afterwards."""
    previous = {signum: signal.getsignal(signum) for signum in errors.GROUP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_sigusr1_changes_nothing_in_a_command_that_has_nothing_to_save(monkeypatch, capsys):
    import bertpre.tools.info

    def warned_by_the_scheduler(config):  # Slurm's --signal=USR1@90, without B:, reaches the command
        signal.raise_signal(signal.SIGUSR1)  # (its default action would kill it mid-write)
        return "report"

    monkeypatch.setattr(bertpre.tools.info, "info_report", warned_by_the_scheduler)
    monkeypatch.setattr(sys, "argv", ["bertpre", "info", "--config", "tiny"])
    with pytest.raises(SystemExit) as exit, cli_handlers_restored():
        main()
    assert exit.value.code == 0 and capsys.readouterr() == ("report\n", "")


def test_while_training_sigusr1_asks_for_a_save_once_and_a_stop_signal_for_a_stop():
    runtime = Runtime(device=torch.device("cpu"))
    with StopSignals() as signals:
        assert signals.agreed(runtime) == (0, False)
        signal.raise_signal(signal.SIGUSR1)
        assert signals.agreed(runtime) == (0, True)
        assert signals.agreed(runtime) == (0, False)  # answered: one save for one signal
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGUSR1)
        assert signals.agreed(runtime) == (signal.SIGTERM, True)
    assert signal.getsignal(signal.SIGUSR1) is not signals._handle  # put back


def _worker(main_pid: int, ready) -> None:
    """A stand-in for a DataLoader worker: takes the signals over, says so, waits to be ended."""
    errors.worker_ignores_group_signals(main_pid, 0)
    ready.set()
    time.sleep(60)


def test_a_worker_takes_no_group_signal_but_ends_at_its_main_process_sigterm():
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    with errors.group_signals_blocked():  # as BatchStream starts its workers
        worker = context.Process(target=_worker, args=(os.getpid(), ready), daemon=True)
        worker.start()
    assert ready.wait(30)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):  # from elsewhere: the scheduler
        subprocess.run(["kill", f"-{signal.Signals(signum).name.removeprefix('SIG')}", str(worker.pid)], check=True)
    worker.join(0.5)
    assert worker.is_alive()
    worker.terminate()  # SIGTERM from the process that started it: torch's and multiprocessing's way
    worker.join(10)
    assert worker.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("torch_says, user_reads", [
    ("DataLoader worker (pid 4242) is killed by signal: Killed. ",
     "a data loading process ended before training did (DataLoader worker (pid 4242) is killed by signal: "
     "Killed): killed from outside, most often by the out-of-memory killer (see dmesg)"),
    ("DataLoader worker (pid(s) 4242, 4243) exited unexpectedly",
     "a data loading process ended before training did (DataLoader worker (pid(s) 4242, 4243) exited "
     "unexpectedly): killed from outside, most often by the out-of-memory killer (see dmesg)"),
    ("DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory. Please try to raise your shared memory limit.",
     "a data loading process ended before training did (DataLoader worker (pid 4242) is killed by signal: "
     "Bus error): out of shared memory: raise the limit of /dev/shm (a container's --shm-size)"),
    ("DataLoader worker (pid 4242) exited unexpectedly with exit code 1. Details are lost due to "
     "multiprocessing. Rerunning with num_workers=0 may give better error trace.",
     "a data loading process ended before training did (DataLoader worker (pid 4242) exited unexpectedly "
     "with exit code 1): it gave no reason; run with data.num_workers=0 to see the error in the main process"),
])
def test_a_dataloader_worker_lost_is_said_in_one_line(torch_says, user_reads):
    assert errors.dataloader_worker_lost(RuntimeError(torch_says)) == user_reads
    assert errors.dataloader_worker_lost(RuntimeError("shape mismatch")) is None
    assert errors.dataloader_worker_lost(ValueError(torch_says)) is None


def test_interruptible_cuts_native_work_short_and_waits_for_it(usr1_raises_stopped):
    cut, ended = threading.Event(), threading.Event()

    def work() -> None:  # stands for native code holding a thread: it ends only when cut short
        cut.wait(timeout=30)
        time.sleep(0.2)
        ended.set()

    usr1_raises_stopped(0.1)
    with pytest.raises(Stopped):
        interruptible(work, cut.set)
    assert cut.is_set() and ended.is_set()  # the work was over before the stop went on
    assert interruptible(lambda: 7, cut.set) == 7


def test_a_stop_that_c_code_swallowed_is_raised_again(usr1_raises_stopped, monkeypatch):
    monkeypatch.setattr(errors, "_command_running", True)
    monkeypatch.setattr(errors, "_handling_pid", os.getpid())
    monkeypatch.setattr(errors, "_received", [signal.SIGUSR1])
    started = time.monotonic()
    try:
        raise Stopped(signal.SIGUSR1)
    except Stopped:
        pass  # as compile() does with the exception a handler raised inside it
    with pytest.raises(Stopped) as raised_again:
        time.sleep(10)
    monkeypatch.setattr(errors, "_command_running", False)  # the command ended: no more
    del raised_again
    assert time.monotonic() - started < 5


def test_a_stop_as_a_claim_is_taken_leaves_no_claim(tmp_path, monkeypatch):
    real_link = Claim._link

    def link_then_signal(self):
        linked = real_link(self)
        signal.raise_signal(signal.SIGTERM)  # arrives between the link and `held`
        return linked

    monkeypatch.setattr(Claim, "_link", link_then_signal)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: errors.stop(signum))
    try:
        with pytest.raises(Stopped):
            Claim(tmp_path / "out", "tokenize").take()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not (tmp_path / "out").exists()  # neither the claim nor the folder it made


def test_a_json_file_interrupted_before_its_rename_leaves_no_temporary(tmp_path, monkeypatch):
    from bertpre.finetune.results import write_json

    (tmp_path / "results.json").write_text('{"old": 1}\n')

    def stopped(self, target):
        raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(Path, "replace", stopped)
    with pytest.raises(Stopped):
        write_json(tmp_path / "results.json", {"new": 2})
    assert [path.name for path in tmp_path.iterdir()] == ["results.json"]
    assert json.loads((tmp_path / "results.json").read_text()) == {"old": 1}
