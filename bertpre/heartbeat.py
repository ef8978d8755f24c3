"""A line on stderr every 30 s while a long step runs with no terminal to draw a bar on.

A job's log (Slurm, nohup, CI) gets no tqdm bar, so a command that tokenizes, builds a model,
evaluates or exports for minutes would look hung. On a terminal the bars show progress and
this says nothing. `BERTPRE_HEARTBEAT_S` sets the interval in seconds (0: never; the test suite
sets it, so a slow machine's run gains no stderr line a test did not expect).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

INTERVAL_S = 30.0
INTERVAL_VARIABLE = "BERTPRE_HEARTBEAT_S"


class Heartbeat:
    """Say `doing` on `stream` (stderr) every `every` seconds (default: BERTPRE_HEARTBEAT_S, else
    30) between `start()` and `stop()`."""

    def __init__(self, doing: str, *, every: float | None = None, stream: TextIO | None = None) -> None:
        self.doing = doing
        self.every = float(os.environ.get(INTERVAL_VARIABLE, INTERVAL_S)) if every is None else every
        self.stream = sys.stderr if stream is None else stream
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Heartbeat:
        if self._thread is None and self.every > 0 and not _is_terminal(self.stream):
            self._thread = threading.Thread(target=self._beat, args=(time.monotonic(),),
                                            name="bertpre-heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _beat(self, started: float) -> None:
        while not self._stopped.wait(self.every):
            elapsed = round(time.monotonic() - started)
            minutes, seconds = divmod(elapsed, 60)
            took = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
            try:
                print(f"{self.doing}: still working ({took})", file=self.stream, flush=True)
            except (OSError, ValueError):  # a closed or full log: the command's own errors say so
                return

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
