"""SIGINT and SIGTERM in one process (issue 41, item 4): the signal decides the exit code whatever
the unwinding raised, native work in `interruptible` is cut short and waited for, a stop that C
code swallowed is raised again, and what a stop interrupts (a claim being taken, a JSON file
being written) leaves nothing behind. The commands themselves are
stopped from outside in tests/reliability/test_reliability_signals.py."""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from bertpre import errors
from bertpre.claim import Claim
from bertpre.cli import main
from bertpre.errors import Stopped, interruptible


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
    previous = {signum: signal.getsignal(signum) for signum in errors.STOP_SIGNALS}
    try:
        with pytest.raises(SystemExit) as exit:
            main()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert exit.value.code == 143 and capsys.readouterr().err == "terminated\n"


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
