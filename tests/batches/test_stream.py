"""bertpre.batches.stream: the trainer's micro-batches, the same with and without worker processes."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from _tiny_data import build_tiny_data  # tests/ is on sys.path

from bertpre.batches.collator import MaskingCollator
from bertpre.batches.pairs import PretrainingInstances
from bertpre.batches.stream import BatchStream, OneTensorCollate, unpack_batch
from bertpre.data.folder import load_data
from bertpre.errors import UserError

MICRO = 8


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory):
    """40 documents: about six micro-batches of 8 an epoch, so three epochs are quick."""
    return load_data(build_tiny_data(tmp_path_factory.mktemp("stream") / "data", documents=40))


def new_instances(data) -> PretrainingInstances:
    return PretrainingInstances(data.train, data.tokenizer, max_seq_length=32, seed=3)


def new_collate(data) -> MaskingCollator:
    return MaskingCollator(data.tokenizer, seed=3, pad_to_length=32)


def sampler_order(instances, collate, epochs: int) -> list[tuple[dict, dict]]:
    """The stream's batches by their definition: epoch e planned, its instances read in order in
    micro-batches, the last partial one dropped; each with the stream's state after it."""
    batches = []
    for epoch in range(epochs):
        instances.set_epoch(epoch)
        for start in range(0, len(instances) - MICRO + 1, MICRO):
            batch = collate(instances.__getitems__(range(start, start + MICRO)))
            batches.append(({"epoch": epoch, "position": start + MICRO}, batch))
    return batches


def assert_same(one: dict, two: dict) -> None:
    assert list(one) == list(two) and all(torch.equal(one[name], two[name]) for name in one)


class WithWorkerPid:
    """A collate that also says which process built the batch."""

    def __init__(self, collate) -> None:
        self.collate = collate

    def __call__(self, instances) -> dict:
        return {**self.collate(instances), "worker_pid": torch.tensor([os.getpid()])}


def alive(pid: int) -> bool:
    """`pid` runs (a zombie has ended: its parent has only not reaped it yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_one_tensor_batches_come_back_whole_with_their_dtypes():
    batch = {"input_ids": torch.arange(12).view(3, 4), "labels": torch.full((3, 4), -100),
             "mask": torch.tensor([[True, False], [False, True]]), "weights": torch.tensor([0.5, 0.25])}
    unpacked = unpack_batch(OneTensorCollate(lambda items: batch)([{}]))
    assert list(unpacked) == list(batch)
    for name, tensor in batch.items():
        assert unpacked[name].dtype == tensor.dtype and torch.equal(unpacked[name], tensor)


def test_two_workers_give_the_same_batches_as_none_across_an_epoch_boundary(tmp_path):
    data = load_data(build_tiny_data(tmp_path / "data", documents=40))
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=32, seed=3)
    collate = MaskingCollator(data.tokenizer, seed=3, pad_to_length=32)
    count = len(instances) // 8 + 2  # into the next epoch

    def batches(num_workers: int) -> tuple[list[dict], int]:
        stream = BatchStream(instances, collate, micro_batch_size=8, num_workers=num_workers,
                             pin_memory=False, seed=3, position=8)
        return [stream.next() for _ in range(count)], stream.epoch

    (serial, serial_epoch), (parallel, parallel_epoch) = batches(0), batches(2)
    assert serial_epoch == parallel_epoch == 1
    for one, two in zip(serial, parallel, strict=True):
        assert list(one) == list(two) and all(torch.equal(one[k], two[k]) for k in one)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_three_epochs_come_in_the_sampler_order_with_the_state_after_each(data, num_workers):
    expected = sampler_order(new_instances(data), new_collate(data), epochs=3)
    stream = BatchStream(new_instances(data), new_collate(data), micro_batch_size=MICRO,
                         num_workers=num_workers, pin_memory=False, seed=3)
    for state, batch in expected:
        assert_same(stream.next(), batch)
        assert stream.state_dict() == state
    stream.close()


@pytest.mark.parametrize("at", ["mid-epoch", "epoch end", "next epoch"])
def test_a_resumed_stream_continues_exactly_across_the_epoch_boundary(data, at):
    expected = sampler_order(new_instances(data), new_collate(data), epochs=3)
    first_of_epoch_1 = next(index for index, (state, _) in enumerate(expected) if state["epoch"] == 1)
    # Resume from the state saved after batch `after`: the middle of epoch 0, its last batch
    # (position at the epoch's end), or the first batch of epoch 1.
    after = {"mid-epoch": first_of_epoch_1 // 2, "epoch end": first_of_epoch_1 - 1,
             "next epoch": first_of_epoch_1}[at]
    stream = BatchStream(new_instances(data), new_collate(data), micro_batch_size=MICRO, num_workers=2,
                         pin_memory=False, seed=3)
    stream.load_state_dict(expected[after][0])
    for state, batch in expected[after + 1:]:
        assert_same(stream.next(), batch)
        assert stream.state_dict() == state
    stream.close()


def test_the_workers_live_through_every_epoch_and_end_with_the_stream(data):
    stream = BatchStream(new_instances(data), WithWorkerPid(new_collate(data)), micro_batch_size=MICRO,
                         num_workers=2, pin_memory=False, seed=3)
    pids: dict[int, set[int]] = {}
    while stream.epoch < 3:
        pid = int(stream.next()["worker_pid"])
        pids.setdefault(stream.state_dict()["epoch"], set()).add(pid)
    workers = pids[0]
    assert len(workers) == 2 and os.getpid() not in workers
    assert pids[1] == pids[2] == workers  # the same two processes, not new ones each epoch
    stream.close()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers)


def test_an_epoch_smaller_than_a_micro_batch_is_one_line(data):
    stream = BatchStream(new_instances(data), new_collate(data), micro_batch_size=10_000, num_workers=1,
                         pin_memory=False, seed=3)
    with pytest.raises(UserError, match=r"epoch 0 has \d+ training instances per process, fewer than "
                                        r"train.micro_batch_size \(10000\)"):
        stream.next()
    stream.close()
