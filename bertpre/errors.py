"""Why a command stops early: a problem the user can fix, or a stop signal."""
from __future__ import annotations

import errno
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# Write failures that mean the disk or the path, not the program, is at fault: the command
# stops with one line (exit 2), never a traceback.
WRITE_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG,
    errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG,
})


class UserError(Exception):
    """Bad input or configuration. The CLI prints its message as one line and exits with code 2."""


def nondeterministic_op(error: BaseException) -> str | None:
    """What to tell the user when `error` is PyTorch refusing, under train.deterministic, an op
    that has no deterministic CUDA kernel; None for any other error."""
    text = str(error)
    if not isinstance(error, RuntimeError) or " does not have a deterministic implementation" not in text:
        return None
    op = text.split(" does not have", 1)[0].split()[-1]
    torch = sys.modules.get("torch")
    version = f" in torch {torch.__version__}" if torch is not None else ""
    return (f"train.deterministic is true, but {op} has no deterministic CUDA kernel{version}; "
            "set train.deterministic=false to train with it (the run then resumes exactly but "
            "does not repeat bit for bit)")


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived: unwind (temporary folders are removed on the way), then exit.

    A BaseException, so that no `except Exception` keeps the command going; not a
    KeyboardInterrupt, which typer turns into a silent exit.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __del__(self) -> None:
        # Dropped before the command ended: C code that runs signal handlers swallowed it (compile()
        # while importing, Arrow, tokenizers' callbacks, an at-fork hook). Send the signal again in
        # a moment, from outside that code (here the handler would run in the same place).
        if _command_running and _received and os.getpid() == _handling_pid:
            threading.Timer(0.05, signal.pthread_kill, args=(threading.main_thread().ident, self.signum)).start()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Slurm's warning ahead of a job's end (`--signal=USR1@90`): pretraining saves a checkpoint and
# goes on (`bertpre.train.runtime.StopSignals`); any other command has nothing to save and takes
# no notice, where the signal's default action would kill it mid-write.
SAVE_SIGNAL = signal.SIGUSR1
# What a scheduler or a terminal sends to a command's whole process group.
GROUP_SIGNALS = (*STOP_SIGNALS, SAVE_SIGNAL)

_received: list[int] = []  # signals recorded by `stop`, for `raise_if_stopped`
_handling_pid: int | None = None  # the process `handle_stop_signals` was called in
_command_running = False  # between `handle_stop_signals` and `stop_signal`


def handle_stop_signals() -> None:
    """SIGINT and SIGTERM raise `Stopped` in this process (the CLI's handlers), so every command
    unwinds and removes its temporaries. Pretraining replaces the handlers while it trains
    (`bertpre.train.runtime.StopSignals`)."""
    global _handling_pid, _command_running
    _received.clear()  # a command starts with no stop (main() may run twice in one process: tests)
    _command_running = True
    if _handling_pid is None:
        sys.unraisablehook = _quiet_about_stops(sys.unraisablehook)
    _handling_pid = os.getpid()
    for signum in STOP_SIGNALS:
        signal.signal(signum, _on_stop_signal)
    # A handler, not SIG_IGN, which every program this one starts would inherit.
    signal.signal(SAVE_SIGNAL, _take_no_notice)


def _take_no_notice(signum: int, frame: object) -> None:
    """SIGUSR1 outside pretraining's loop: nothing to save."""


def _on_stop_signal(signum: int, frame: object) -> None:
    if os.getpid() != _handling_pid:  # a forked child: never unwind the parent's work here
        signal.signal(signum, signal.SIG_DFL)  # (its staging folder): end as the signal ends it
        os.kill(os.getpid(), signum)
        return
    if _command_running:  # once its exit code is chosen, a signal changes nothing
        stop(signum)


def _quiet_about_stops(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """A `sys.unraisablehook` that prints nothing for a `Stopped` raised where Python can only
    print an exception (a `__del__`, an at-fork hook): it is raised again (`Stopped.__del__`)."""

    def unraisable(report: Any) -> None:
        if not isinstance(report.exc_value, Stopped):
            hook(report)

    return unraisable


def stop(signum: int) -> None:
    """Record a stop signal and raise `Stopped` (the CLI's SIGINT and SIGTERM handler)."""
    _received.append(signum)
    raise Stopped(signum)


def stop_signal() -> int | None:
    """The stop signal this process received, if any, when the command ends: its exit code is
    the signal's, whatever exception the unwinding ended in (a library's cleanup may raise its
    own while `Stopped` passes through it: datasets' process pool asks its busy workers for
    their results with a 0.05 s timeout in a `finally`). No stop is raised after this."""
    global _command_running
    _command_running = False
    return _received[0] if _received else None


def raise_if_stopped() -> None:
    """Raise `Stopped` again if a signal arrived while native code was calling back into Python.

    `tokenizers` and Arrow may swallow the exception a handler raised inside a callback and carry
    on with less input; work done after such a call is checked here before it is kept.
    """
    if _received:
        raise Stopped(_received[0])


@contextmanager
def group_signals_blocked() -> Iterator[None]:
    """Block GROUP_SIGNALS in this thread while it starts worker processes.

    A process forked meanwhile starts with them blocked, so that one sent to the whole group
    before the worker has taken them over (`worker_ignores_group_signals`) waits instead of
    killing it; this process's own is delivered as the block ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def worker_ignores_group_signals(main_pid: int, worker_id: int = 0) -> None:
    """A worker process's `worker_init_fn`: take no signal sent to the whole process group.

    Slurm's preemption and `scancel`, `timeout` and Ctrl-C signal every process of the group;
    a worker that died of it would make the main process fail (torch raises "DataLoader worker
    ... killed by signal") before it saved. The main process decides, saves and ends its
    workers. Its own SIGTERM (`Process.terminate()`, which torch and multiprocessing send to a
    worker that did not stop when asked) still ends the worker: the sender tells them apart.

    Args:
        main_pid: the process that started the worker (os.getppid() is not it under forkserver).
    """
    for signum in (signal.SIGINT, SAVE_SIGNAL):
        signal.signal(signum, signal.SIG_IGN)  # (one pending since the fork is dropped)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # read by the thread below only
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, SAVE_SIGNAL})
    threading.Thread(target=_end_at_sigterm_from, args=(main_pid,), daemon=True,
                     name="bertpre-sigterm").start()


def _end_at_sigterm_from(main_pid: int) -> None:
    """In a worker: wait for SIGTERMs; the one from `main_pid` ends the process at once."""
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == main_pid:
            os.kill(os.getpid(), signal.SIGKILL)  # as SIGTERM's default action would


def dataloader_worker_lost(error: BaseException) -> str | None:
    """What to tell the user when `error` is torch saying that a DataLoader worker process died
    (killed from outside: most often the out-of-memory killer); None for any other error."""
    text = " ".join(str(error).split())
    if not isinstance(error, RuntimeError) or not text.startswith("DataLoader worker (pid"):
        return None
    what = text.split(". ", 1)[0].rstrip(".")  # torch's first sentence names the process and how it ended
    if "Bus error" in text:
        why = "out of shared memory: raise the limit of /dev/shm (a container's --shm-size)"
    elif "exit code" in text:  # ended by native code, no Python error to hand over
        why = "it gave no reason; run with data.num_workers=0 to see the error in the main process"
    else:
        why = "killed from outside, most often by the out-of-memory killer (see dmesg)"
    return f"a data loading process ended before training did ({what}): {why}"


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


def interruptible(work: Callable[[], T], cut_short: Callable[[], None]) -> T:
    """`work()`, run in a thread of its own so that a stop signal is handled at once.

    Python runs signal handlers in the main thread only, between its bytecodes: native code that
    holds the main thread for minutes (tokenizers' training, which reads its input from threads
    of its own) would keep SIGINT and SIGTERM waiting until it returned. Here the main thread
    waits instead; when the handler raises, `cut_short()` must make `work` end soon (e.g. by
    ending its input), which is waited for before the exception goes on.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error
        finally:
            done.set()

    thread = threading.Thread(target=run, name="bertpre-native-work")
    thread.start()
    try:
        done.wait()
    except BaseException:
        cut_short()
        raise
    finally:
        # Never go on while native code runs in the thread (Python cannot finalize under it), so
        # a second signal waits too; an Event, since 3.11's join(), interrupted, takes the thread
        # for ended.
        with signals_held():
            done.wait()
            thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
