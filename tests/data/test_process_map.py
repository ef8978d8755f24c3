"""bertpre.data.process_map: a dataset mapped in forked processes gives the rows one process
gives; the processes leave Ctrl-C to the caller and end at once on SIGTERM; a shard's error
reaches the caller; a stop in the caller ends every process at once."""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time

import datasets
import pyarrow as pa
import pytest

from bertpre.data.process_map import map_in_processes
from bertpre.errors import UserError


def doubled(batch: pa.Table, *, fail_at: int | None = None, sleep: float = 0.0) -> pa.Table:
    values = batch.column("value").to_pylist()
    if fail_at in values:
        raise UserError(f"value {fail_at} is bad")
    time.sleep(sleep)
    return pa.table({"doubled": [2 * value for value in values]})


@pytest.fixture
def numbers(tmp_path) -> datasets.Dataset:
    datasets.Dataset.from_dict({"value": list(range(50))}).save_to_disk(str(tmp_path / "numbers"))
    return datasets.load_from_disk(str(tmp_path / "numbers")).with_format("arrow")


def options(**fn_kwargs) -> dict:
    return dict(batched=True, batch_size=7, remove_columns=["value"], fn_kwargs=fn_kwargs,
                load_from_cache_file=False)


def test_the_rows_are_those_one_process_gives_in_order(numbers, tmp_path):
    mapped = map_in_processes(numbers, doubled, num_proc=3, folder=tmp_path, new_fingerprint="x",
                              desc="Doubling", **options())
    assert mapped.with_format(None)["doubled"] == [2 * value for value in range(50)]
    assert sorted(path.name for path in tmp_path.glob("x-*.arrow")) == [
        f"x-{index:05d}-of-00003.arrow" for index in range(3)]
    assert multiprocessing.active_children() == []


def signal_handlers(batch: pa.Table) -> pa.Table:
    handlers = [int(signal.getsignal(signal.SIGINT)), int(signal.getsignal(signal.SIGTERM))]
    return pa.table({"doubled": [handlers] * len(batch)})


def test_the_processes_leave_sigint_to_the_caller_and_end_at_once_on_sigterm(numbers, tmp_path):
    mapped = map_in_processes(numbers, signal_handlers, num_proc=2, folder=tmp_path, new_fingerprint="x",
                              desc="Asking", **options())
    assert set(map(tuple, mapped.with_format(None)["doubled"])) == {(signal.SIG_IGN, signal.SIG_DFL)}


def test_a_shards_error_reaches_the_caller_and_no_process_is_left(numbers, tmp_path):
    with pytest.raises(UserError, match="value 40 is bad"):
        map_in_processes(numbers, doubled, num_proc=2, folder=tmp_path, new_fingerprint="x",
                         desc="Doubling", **options(fail_at=40))
    assert multiprocessing.active_children() == []


class Stop(BaseException):
    pass


def test_a_stop_in_the_caller_ends_every_process_at_once(numbers, tmp_path):
    def stop(signum, frame):
        raise Stop

    previous = signal.signal(signal.SIGUSR1, stop)
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    started = time.monotonic()
    try:
        with pytest.raises(Stop):  # each batch sleeps 5 s: the shards are far from done
            map_in_processes(numbers, doubled, num_proc=2, folder=tmp_path, new_fingerprint="x",
                             desc="Doubling", **options(sleep=5.0))
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert time.monotonic() - started < 4.5
    assert multiprocessing.active_children() == []


def test_an_error_the_parent_could_not_rebuild_is_sent_as_a_runtime_error_naming_it():
    from bertpre.data.process_map import _picklable

    class TwoArguments(Exception):
        def __init__(self, a, b):
            super().__init__(f"{a} and {b}")

    sent = _picklable(TwoArguments(1, 2))
    assert type(sent) is RuntimeError and str(sent) == "TwoArguments: 1 and 2"
    kept = ValueError("bad row")
    assert _picklable(kept) is kept and "in the encoding process:" in kept.__notes__[0]
