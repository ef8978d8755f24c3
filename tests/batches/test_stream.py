"""bertpre.batches.stream: the trainer's micro-batches, the same with and without worker processes."""
from __future__ import annotations

import torch
from _tiny_data import build_tiny_data  # tests/ is on sys.path

from bertpre.batches.collator import MaskingCollator
from bertpre.batches.pairs import PretrainingInstances
from bertpre.batches.stream import BatchStream, OneTensorCollate, unpack_batch
from bertpre.data.folder import load_data


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
