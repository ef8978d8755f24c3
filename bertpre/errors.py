"""Why a command stops early: a problem the user can fix, or a stop signal."""
from __future__ import annotations

import errno
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Write failures that mean the disk or the path, not the program, is at fault: the command
# stops with one line (exit 2), never a traceback.
WRITE_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG,
    errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG,
})


class UserError(Exception):
    """Bad input or configuration. The CLI prints its message as one line and exits with code 2."""


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived: unwind (temporary folders are removed on the way), then exit.

    A BaseException, so that no `except Exception` keeps the command going; not a
    KeyboardInterrupt, which typer turns into a silent exit.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_received: list[int] = []  # signals recorded by `stop`, for `raise_if_stopped`


def stop(signum: int) -> None:
    """Record a stop signal and raise `Stopped` (the CLI's SIGINT and SIGTERM handler)."""
    _received.append(signum)
    raise Stopped(signum)


def raise_if_stopped() -> None:
    """Raise `Stopped` again if a signal arrived while native code was calling back into Python.

    `tokenizers` and Arrow may swallow the exception a handler raised inside a callback and carry
    on with less input; work done after such a call is checked here before it is kept.
    """
    if _received:
        raise Stopped(_received[0])


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for a few renames that must finish together; a signal that arrives
    meanwhile is delivered, to the handler in place before, as the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: held.append(signum))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])
