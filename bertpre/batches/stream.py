"""The trainer's micro-batches: one DataLoader over epoch after epoch, resumable at any position."""
from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from typing import Any

import torch
from torch.utils.data import DataLoader

from bertpre.errors import UserError, group_signals_blocked, worker_ignores_group_signals


class BatchStream:
    """This process's micro-batches from (epoch, position) on, epoch after epoch, no replay.

    One DataLoader iterator spans every epoch, so its worker processes start once and its
    prefetching runs on across each epoch boundary. The batch sampler (`EpochBatches`, in this
    process) plans each epoch as it reaches it and hands a worker the located instances of a
    micro-batch (`instances.locate`), so workers build any epoch's batches without planning it.

    With worker processes, each batch crosses to the trainer as one flat tensor: every tensor
    a worker returns costs a shared-memory segment and a file descriptor sent over a socket,
    which took more time than making the batch (measured by bench/loader.py).
    """

    def __init__(self, instances: Any, collate: Any, *, micro_batch_size: int, num_workers: int,
                 pin_memory: bool, seed: int, epoch: int = 0, position: int = 0):
        self.instances, self.collate = instances, collate
        self.micro_batch_size, self.num_workers, self.pin_memory = micro_batch_size, num_workers, pin_memory
        self.seed, self.epoch, self.position = seed, epoch, position
        self._batches = None

    def _start(self) -> None:
        collate = OneTensorCollate(self.collate) if self.num_workers > 0 else self.collate
        loader = DataLoader(
            LocatedInstances(self.instances),
            batch_sampler=EpochBatches(self.instances, self.micro_batch_size, self.epoch, self.position),
            collate_fn=KeepPlace(collate),
            num_workers=self.num_workers, pin_memory=self.pin_memory,
            prefetch_factor=2 if self.num_workers > 0 else None,
            # Its own generator: creating a loader must not draw from the global RNG that
            # dropout uses, or a resumed run would diverge from an uninterrupted one.
            generator=torch.Generator().manual_seed(self.seed),
            # A signal sent to the whole group (preemption, Ctrl-C) is the main process's to
            # answer: it saves, then ends the workers. Blocked while they start, so that none
            # dies of one before it has taken them over.
            worker_init_fn=partial(worker_ignores_group_signals, os.getpid()),
        )
        with group_signals_blocked():
            self._batches = iter(loader)

    def state_dict(self) -> dict[str, int]:
        """Where the stream stands: the epoch and the next instance of this process's share."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a saved `state_dict`: the next batch is the one that would have come."""
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._batches = None

    def check_epoch(self) -> None:
        """Refuse now, before a run writes anything, an epoch too small for one micro-batch (the
        sampler would find it at the first batch)."""
        plan_epoch(self.instances, self.epoch, self.micro_batch_size)

    def close(self) -> None:
        """End the worker processes now (the next batch starts new ones, from the same position)."""
        self._batches = None  # the iterator shuts its workers down as it is freed

    def next(self) -> dict[str, torch.Tensor]:
        if self._batches is None:
            self._start()
        # The sampler plans ahead of the trainer; where the trainer stands comes with the batch.
        self.epoch, start, batch = next(self._batches)
        self.position = start + self.micro_batch_size
        return unpack_batch(batch) if self.num_workers > 0 else batch


class EpochBatches:
    """The batch sampler of a `BatchStream`: each micro-batch as (epoch, position, located
    instances), from (epoch, position) on, epoch after epoch without end; an epoch's last
    instances that fill no micro-batch are dropped.

    Planning an epoch (`set_epoch`) happens here, in the trainer's process, when the loader
    first asks for one of its batches: with workers, prefetching asks before the trainer has
    taken the previous epoch's last batches, so `instances` may be an epoch ahead of it.
    """

    def __init__(self, instances: Any, micro_batch_size: int, epoch: int, position: int) -> None:
        self.instances, self.micro_batch_size = instances, micro_batch_size
        self.epoch, self.position = epoch, position

    def __iter__(self) -> Iterator[tuple[int, int, Any]]:
        epoch, position, size = self.epoch, self.position, self.micro_batch_size
        while True:
            count = plan_epoch(self.instances, epoch, size)
            for start in range(position, count - size + 1, size):
                yield epoch, start, self.instances.locate(range(start, start + size))
            epoch, position = epoch + 1, 0


def plan_epoch(instances: Any, epoch: int, micro_batch_size: int) -> int:
    """Plan `epoch` of `instances` and return its count; refused in one line where it fills no
    micro-batch. An epoch already planned (epoch 0 at construction, or by `check_epoch`) is not planned again."""
    if getattr(instances, "epoch", None) != epoch:
        instances.set_epoch(epoch)
    count = len(instances)
    if count < micro_batch_size:
        raise UserError(f"epoch {epoch} has {count} training instances per process, fewer than "
                        f"train.micro_batch_size ({micro_batch_size}); use more data or a smaller batch")
    return count


class LocatedInstances(torch.utils.data.Dataset):
    """The loader's dataset: builds the micro-batch that `EpochBatches` located, keeping its place."""

    def __init__(self, instances: Any) -> None:
        self.instances = instances

    def __getitems__(self, key: tuple[int, int, Any]) -> tuple[int, int, Any]:
        epoch, start, located = key
        return epoch, start, self.instances.build(located)


class KeepPlace:
    """Collate a (epoch, position, instances) micro-batch, keeping its epoch and position."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, keyed: tuple[int, int, Any]) -> tuple[int, int, Any]:
        epoch, start, instances = keyed
        return epoch, start, self.collate(instances)


class OneTensorCollate:
    """Collate, then flatten the batch's tensors into one (with the names, shapes and dtypes
    to take it apart again with `unpack_batch`)."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, instances: Any) -> tuple:
        batch = self.collate(instances)
        dtype = torch.int64 if all(t.dtype == torch.int64 for t in batch.values()) else torch.float64
        layout = tuple((name, tuple(t.shape), t.dtype) for name, t in batch.items())
        return layout, torch.cat([t.reshape(-1).to(dtype) for t in batch.values()])


def unpack_batch(packed: tuple) -> dict[str, torch.Tensor]:
    """The batch dict back from `OneTensorCollate`: views of the flat tensor where the dtype
    allows (so a pinned flat tensor gives pinned parts)."""
    layout, flat = packed
    parts = flat.split([torch.Size(shape).numel() for _, shape, _ in layout])
    return {name: part.view(shape).to(dtype) for (name, shape, dtype), part in zip(layout, parts, strict=True)}
