"""With no terminal, a long step says it is alive on stderr every interval; on a terminal, nothing."""
from __future__ import annotations

import io
import time

from bertpre.heartbeat import Heartbeat


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_every_interval_until_the_step_ends():
    log = io.StringIO()
    with Heartbeat("tokenize", every=0.05, stream=log):
        time.sleep(0.32)
    lines = log.getvalue().splitlines()
    assert 3 <= len(lines) <= 7, lines
    assert all(line.startswith("tokenize: still working (") and line.endswith(" s)") for line in lines)
    time.sleep(0.15)
    assert log.getvalue().splitlines() == lines  # stopped: nothing after the step


def test_a_terminal_gets_nothing_its_bars_show_progress():
    terminal = Terminal()
    with Heartbeat("export", every=0.02, stream=terminal):
        time.sleep(0.1)
    assert terminal.getvalue() == ""


def test_stop_before_the_first_interval_says_nothing_and_can_be_repeated():
    log = io.StringIO()
    beat = Heartbeat("pretrain: before the first log line", every=30, stream=log).start()
    beat.stop()
    beat.stop()
    assert log.getvalue() == ""


def test_the_environment_sets_the_interval_and_zero_turns_it_off(monkeypatch):
    log = io.StringIO()
    monkeypatch.setenv("BERTPRE_HEARTBEAT_S", "0")
    with Heartbeat("evaluate", stream=log):
        time.sleep(0.05)
    monkeypatch.setenv("BERTPRE_HEARTBEAT_S", "0.02")
    with Heartbeat("finetune", stream=log):
        time.sleep(0.1)
    assert log.getvalue().startswith("finetune: still working (0 s)\n")
