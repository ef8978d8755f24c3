"""Instances drawn from several DATA folders in proportion to their weights, epoch by epoch.

What a mixture's epoch is:

- Each source i reads its own endless stream: its epoch 0's shuffled instances, then its epoch
  1's, and so on, each source epoch cut to (or, when its coin flips made it shorter, completed
  by cycling to) L_i, the number of instances of the source's epoch 0.
- The mixture's epoch has the size of the sources' epochs together, size = sum of L_i, and takes
  c_i = w_i * size instances from source i (largest-remainder rounding, so the counts sum to
  size): the next c_i of its stream. Mixture epoch E reads positions [E c_i, (E + 1) c_i) of
  source i's stream, a pure function of E: a heavy source runs through several of its own
  epochs per mixture epoch, a light one moves on through its data, epoch after epoch, instead
  of rereading the same prefix.
- The drawn instances are interleaved by a permutation keyed by (seed, epoch), then split
  across ranks like `PretrainingInstances` (every rank the same count, the remainder dropped).

So the realised shares are the weights to within 1 / size in every epoch, and any stretch of
the epoch is a random sample without replacement of it. Each source draws from its own seed
(`source_seed`), so no two sources give the same pair or mask keys.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from bertpre.batches import keyed_random
from bertpre.batches.instance_batch import InstanceBatch
from bertpre.batches.pairs import PretrainingInstances
from bertpre.data.mixture import DataMixture
from bertpre.errors import UserError

if TYPE_CHECKING:  # the run config sits above this package
    from bertpre.config import DataConfig

_SOURCE_TAG = 0x50C  # separates source seeds from other keys derived from the run's seed
_MIXTURE_TAG = 0x313  # the interleaving permutation's stream


def source_seed(seed: int, source: int) -> int:
    """The seed of source `source`'s pairs and masks in a mixture run with `seed`."""
    return keyed_random.derive_key(seed, _SOURCE_TAG, source)


def largest_remainder(weights: Sequence[float], total: int) -> np.ndarray:
    """Integer counts proportional to `weights` that sum to `total` (Hamilton's method)."""
    exact = np.asarray(weights, dtype=np.float64) / sum(weights) * total
    counts = np.floor(exact).astype(np.int64)
    # The largest remainders get one more; ties go to the earlier source.
    counts[np.argsort(-(exact - counts), kind="stable")[: total - int(counts.sum())]] += 1
    return counts


class MixedInstances:
    """One epoch's instances from several sources for one rank; the interface of
    `PretrainingInstances` (`set_epoch`, `len`, `__getitems__`, `__getitem__`, pickling).

    Args:
        sources: one `PretrainingInstances` per source, each with rank 0 of world size 1 (the
            mixture splits across ranks itself) and its own seed.
        weights: each source's share of the instances (normalised here).
        names: each source's name, for reports.
        seed, rank, world_size: the seed of the interleaving; this rank's share.
    """

    def __init__(self, sources: Sequence[PretrainingInstances], weights: Sequence[float], *,
                 names: Sequence[str], seed: int, rank: int = 0, world_size: int = 1) -> None:
        if not len(sources) == len(weights) == len(names):
            raise ValueError("one weight and one name per source")
        if any(source.world_size != 1 for source in sources):
            raise ValueError("the sources must hold every rank's instances (world_size 1)")
        if not 0 <= rank < world_size:
            raise UserError(f"rank {rank} is outside world size {world_size}")
        self.sources, self.names = list(sources), list(names)
        self.weights = [weight / sum(weights) for weight in weights]
        self.seed, self.rank, self.world_size = seed, rank, world_size
        # The last planned epoch of each source: a light source stays in one of its own epochs
        # for many mixture epochs, and planning is the costly part.
        self._planned: list[tuple[int, np.ndarray, np.ndarray] | None] = [None] * len(self.sources)
        self.stream_block = np.array([len(self._source_epoch(index, 0)[0])
                                      for index in range(len(self.sources))])
        for name, block in zip(self.names, self.stream_block.tolist(), strict=True):
            if block == 0:
                raise UserError(f"data source {name} gives no instances; tokenize a larger corpus")
        self.size = int(self.stream_block.sum())
        self.draws = largest_remainder(self.weights, self.size)
        self.set_epoch(0)

    @classmethod
    def from_config(cls, mixture: DataMixture, data_config: DataConfig, *, split: str = "train",
                    seed: int, rank: int = 0, world_size: int = 1) -> MixedInstances:
        """The instances of `mixture`'s `split` as a run's `data:` section describes them."""
        sources = [PretrainingInstances.from_config(getattr(folder, split), mixture.tokenizer,
                                                    data_config, seed=source_seed(seed, index))
                   for index, folder in enumerate(mixture.folders)]
        return cls(sources, mixture.weights, names=mixture.names, seed=seed, rank=rank,
                   world_size=world_size)

    def set_epoch(self, epoch: int) -> None:
        """Draw `epoch`'s instances from every source, interleave them, keep this rank's share."""
        self.epoch = epoch
        drawn = [self._stream(index, epoch * count, count) for index, count in enumerate(self.draws.tolist())]
        rows = np.concatenate([source_rows for source_rows, _ in drawn])
        seed_keys = np.concatenate([source_keys for _, source_keys in drawn])
        source = np.repeat(np.arange(len(self.sources)), self.draws)
        rng = np.random.default_rng([self.seed & ((1 << 64) - 1), epoch, _MIXTURE_TAG])
        order = rng.permutation(self.size)
        per_rank = self.size // self.world_size  # equal steps on every rank: drop the remainder
        kept = order[: per_rank * self.world_size]
        mine = kept[self.rank :: self.world_size]
        self._rows, self._seed_keys, self._source = rows[mine], seed_keys[mine], source[mine]
        self.epoch_counts = np.bincount(source[kept], minlength=len(self.sources))

    def _stream(self, index: int, start: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions [start, start + count) of source `index`'s stream: rows and seed keys."""
        block = int(self.stream_block[index])
        positions = start + np.arange(count, dtype=np.int64)
        source_epochs, offsets = positions // block, positions % block
        rows = np.empty((count, 7), dtype=np.int64)
        seed_keys = np.empty(count, dtype=np.uint64)
        for source_epoch in np.unique(source_epochs).tolist():
            epoch_rows, epoch_keys = self._source_epoch(index, source_epoch)
            if not len(epoch_rows):
                raise UserError(f"data source {self.names[index]} gives no instances in its epoch "
                                f"{source_epoch}; tokenize a larger corpus")
            here = source_epochs == source_epoch
            taken = offsets[here] % len(epoch_rows)  # cycle when this epoch came out shorter
            rows[here], seed_keys[here] = epoch_rows[taken], epoch_keys[taken]
        return rows, seed_keys

    def _source_epoch(self, index: int, source_epoch: int) -> tuple[np.ndarray, np.ndarray]:
        planned = self._planned[index]
        if planned is None or planned[0] != source_epoch:
            planned = (source_epoch, *self.sources[index].epoch_rows(source_epoch))
            self._planned[index] = planned
        return planned[1], planned[2]

    @property
    def shares(self) -> dict[str, float]:
        """Each source's realised share of the current epoch's instances (all ranks)."""
        total = max(int(self.epoch_counts.sum()), 1)
        return {name: count / total for name, count in zip(self.names, self.epoch_counts.tolist(),
                                                           strict=True)}

    def source_of(self, indices: Sequence[int]) -> np.ndarray:
        """Which source (an index into `names`) each of this rank's instances `indices` comes from."""
        return self._source[np.asarray(indices, dtype=np.int64)]

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> dict:
        return self.__getitems__([i]).instance(0)

    def __getitems__(self, indices: Sequence[int]) -> InstanceBatch:
        """Instances `indices` as one batch, in the order asked."""
        return self.build(self.locate(indices))

    def locate(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The current epoch's instances `indices` as plan rows, seed keys and sources: all that
        `build` needs (a worker builds any epoch's batch without planning it)."""
        indices = np.asarray(indices, dtype=np.int64)
        return self._rows[indices], self._seed_keys[indices], self._source[indices]

    def build(self, located: tuple[np.ndarray, np.ndarray, np.ndarray]) -> InstanceBatch:
        """The batch of instances `located`, in their order: built source by source, then put
        back in place."""
        rows, seed_keys, source = located
        parts, asked = [], []
        for index in np.unique(source).tolist():
            picked = np.flatnonzero(source == index)
            parts.append(self.sources[index].build_batch(rows[picked], seed_keys[picked]))
            asked.append(picked)
        if not parts:
            return self.sources[0].build_batch(rows[:0], seed_keys[:0])
        return InstanceBatch.concatenate(parts).take(np.argsort(np.concatenate(asked)))

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)  # a worker fetches; it never plans
        state["_planned"] = [None] * len(self.sources)
        return state


def build_instances(mixture: DataMixture, data_config: DataConfig, *, seed: int, rank: int = 0,
                    world_size: int = 1, split: str = "train") -> PretrainingInstances | MixedInstances:
    """The training instances of `mixture` for one rank: `PretrainingInstances` for one folder
    (exactly as without mixtures), `MixedInstances` for several."""
    if not mixture.is_mixture:
        folder = mixture.folders[0]
        return PretrainingInstances.from_config(getattr(folder, split), mixture.tokenizer, data_config,
                                                seed=seed, rank=rank, world_size=world_size)
    return MixedInstances.from_config(mixture, data_config, split=split, seed=seed, rank=rank,
                                      world_size=world_size)
