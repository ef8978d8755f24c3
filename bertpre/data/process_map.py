"""`--num-proc`: a dataset mapped one contiguous shard per forked process, which a stop ends at once.

Each process maps its shard into an Arrow file of its own and reports on a pipe of its own (rows
done, then None or the exception that ended it), so nothing is shared that a killed process could
leave locked; the parent waits on the pipes, where SIGINT and SIGTERM reach it, and kills and
reaps every process on any way out. datasets' own `map(num_proc=...)` runs a multiprocessing Pool
whose `terminate()` can wait forever on a queue lock that a worker killed mid-write still holds,
and whose wait turns a stop signal into TimeoutError.
"""
from __future__ import annotations

import multiprocessing
import pickle
import signal
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import datasets
from tqdm import tqdm

from bertpre.errors import signals_held


def map_in_processes(dataset: datasets.Dataset, function: Callable, *, num_proc: int, folder: Path,
                     new_fingerprint: str, desc: str, **map_options: Any) -> datasets.Dataset:
    """`dataset.map(function, **map_options)` over `num_proc` forked processes, the shards'
    Arrow files written to `folder` and joined in order: the same rows as one process gives."""
    context = multiprocessing.get_context("fork")
    num_proc = min(num_proc, len(dataset))
    processes: list[multiprocessing.process.BaseProcess] = []
    reports: dict[Connection, int] = {}
    paths = [folder / f"{new_fingerprint}-{index:05d}-of-{num_proc:05d}.arrow" for index in range(num_proc)]
    try:
        for index, path in enumerate(paths):
            receive, send = context.Pipe(duplex=False)
            shard = dataset.shard(num_proc, index, contiguous=True)
            process = context.Process(target=_map_shard, daemon=True, name=f"{desc} {index}",
                                      args=(shard, function, path, f"{new_fingerprint}-{index}", send, map_options))
            # Held until the process is listed (so that it is ended), and out of os.fork's hooks
            # (logging's, in this process), where a raised stop would only be printed.
            with signals_held():
                process.start()
                processes.append(process)
                reports[receive] = index
                send.close()  # the parent's copy: its end reads EOF once the process is gone
        with tqdm(total=len(dataset), desc=f"{desc} (num_proc={num_proc})", unit=" examples",
                  file=sys.stderr, disable=not datasets.is_progress_bar_enabled()) as bar:
            while reports:
                for receive in wait(list(reports)):
                    message = _receive(receive, processes[reports[receive]])
                    if isinstance(message, int):
                        bar.update(message)
                    else:
                        del reports[receive]
    finally:
        with signals_held():  # on a stop or an error too, and a second signal waits: none is left running
            for process in processes:
                if process.is_alive():
                    process.kill()
                process.join()
            for receive in reports:
                receive.close()
    return datasets.concatenate_datasets([datasets.Dataset.from_file(str(path)) for path in paths])


def _receive(receive: Connection, process: multiprocessing.process.BaseProcess) -> int | None:
    """A shard's next report: rows done (an int) or None when done; its exception is raised."""
    try:
        message = receive.recv()
    except EOFError:  # ended without a word: killed from outside (SIGKILL, out of memory)
        process.join()
        raise RuntimeError(f"process {process.name!r} ended before its shard was done (exit code "
                           f"{process.exitcode}: a negative one is the signal that killed it)") from None
    if isinstance(message, BaseException):
        raise message
    return message


def _map_shard(shard: datasets.Dataset, function: Callable, path: Path, fingerprint: str,
               send: Connection, map_options: dict[str, Any]) -> None:
    """In a forked process: map `shard` into `path`, reporting each batch's rows on `send`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent ends us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # at once, whatever we are doing
    datasets.disable_progress_bars()  # the parent shows one bar for all

    def reported(batch: Any, *args: Any, **kwargs: Any) -> Any:
        result = function(batch, *args, **kwargs)
        send.send(len(batch))
        return result

    try:
        shard.map(reported, cache_file_name=str(path), new_fingerprint=fingerprint, **map_options)
        send.send(None)
    except BaseException as error:
        send.send(_picklable(error))


def _picklable(error: BaseException) -> BaseException:
    """`error`, with the process's traceback as a note, or, if it cannot be pickled, a
    RuntimeError naming it."""
    error.add_note("in the encoding process:\n" + "".join(traceback.format_exception(error)))
    try:
        pickle.dumps(error)
        rebuild, args = error.__reduce__()[:2]
        rebuild(*args)  # what unpickling calls in the parent: a constructor that wants other arguments fails here
    except Exception:
        replacement = RuntimeError(f"{type(error).__name__}: {error}")
        replacement.add_note("".join(traceback.format_exception(error)))
        return replacement
    return error
