"""Documents read as consecutive segments, one lane per batch row, so that a recurrent model's
memory (Transformer-XL, XLNet) carries the real context before each segment.

An epoch's documents, in a shuffled order, each followed by [SEP], are cut into segments of
`segment_length` tokens starting every `reuse_length` tokens (XLNet's `reuse_len`: with it
below the segment length, consecutive segments overlap, and the memory a segment leaves is its
first `reuse_length` tokens' hidden states, exactly the context before the next segment; equal
to it, Transformer-XL's disjoint segments). The segments of all documents, in order, form one
stream that is split into as many contiguous parts as there are lanes (every rank's micro-batch
rows of every accumulation step); lane l reads its part one segment a step. A segment that
begins a document, or a lane, resets that row's memory (`memory_reset`); the stream's
remainder that does not fill a whole step is left for the next epoch's shuffle.

Item i of this dataset is step i // lanes, lane i % lanes of this rank, so reading it in order
in micro-batches of `micro_batch_size` gives each micro-batch the same rows step after step,
and resuming at item i needs no replay.
"""
from __future__ import annotations

import bisect
import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import datasets
import numpy as np
import torch
from tokenizers import Tokenizer

from bertpre.batches import keyed_random
from bertpre.batches.instance_batch import InstanceBatch
from bertpre.batches.pairs import MappedTokens, index_sentences
from bertpre.errors import UserError
from bertpre.tokenizer.roles import token_roles

if TYPE_CHECKING:  # the run config sits above this package
    from bertpre.config import DataConfig
    from bertpre.data.mixture import DataMixture

_SEGMENT_TAG = 0x5E6
_MIXED_SEGMENT_TAG = 0x5E7


@dataclass
class SegmentPlan:
    """One epoch's stream of segments: segment s is tokens [start, stop) of the documents'
    concatenation (positions past a document's end mean its [SEP]), of `document`."""

    document: np.ndarray  # (S,) int64
    start: np.ndarray  # (S,) int64 positions within the document, [SEP] at its length
    stop: np.ndarray  # (S,) int64
    first: np.ndarray  # (S,) bool: the segment begins its document


def plan_segments(lengths: np.ndarray, order: np.ndarray, *, segment_length: int, reuse_length: int) -> SegmentPlan:
    """The segments of documents `order` (their lengths `lengths`, [SEP] added), in order."""
    total = lengths[order] + 1  # each document and its [SEP]
    counts = 1 + np.maximum(0, -(-(total - segment_length) // reuse_length))
    document = np.repeat(order, counts)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    index = np.arange(int(counts.sum())) - np.repeat(offsets, counts)
    start = index * reuse_length
    stop = np.minimum(start + segment_length, np.repeat(total, counts))
    return SegmentPlan(document.astype(np.int64), start.astype(np.int64), stop.astype(np.int64), index == 0)


class SegmentInstances(MappedTokens, torch.utils.data.Dataset):
    """Map-style dataset of one epoch's segments for one rank, lane by lane (see the module).

    Args:
        dataset: DATA's documents ({"input_ids": list[list[int]]}, sentences of ids).
        tokenizer: gives [SEP], which ends every document.
        segment_length: tokens a segment (the model's sequence length).
        reuse_length: tokens between the starts of consecutive segments (≤ segment_length).
        lanes: rows this rank reads each step (micro_batch_size × accumulation steps).
        seed, rank, world_size: the document order's seed; this rank's lanes.
    """

    def __init__(self, dataset: datasets.Dataset, tokenizer: Tokenizer, *, segment_length: int,
                 reuse_length: int | None = None, lanes: int, seed: int = 42, rank: int = 0,
                 world_size: int = 1) -> None:
        reuse_length = segment_length if reuse_length is None else reuse_length
        if segment_length < 2:
            raise UserError(f"the segment length must be at least 2, not {segment_length}")
        if not 1 <= reuse_length <= segment_length:
            raise UserError(f"reuse_length must be from 1 to the segment length {segment_length}, not {reuse_length}")
        if lanes < 1 or not 0 <= rank < world_size:
            raise UserError(f"lanes ({lanes}) must be positive and rank {rank} inside world size {world_size}")
        if dataset._indices is not None:  # noqa: SLF001 — a select()/shuffle() view: materialize once
            dataset = dataset.flatten_indices()
        self.dataset, self.sep_token_id = dataset, token_roles(tokenizer).sep_token_id
        self.segment_length, self.reuse_length = segment_length, reuse_length
        self.lanes, self.seed, self.rank, self.world_size = lanes, seed, rank, world_size
        index = index_sentences(dataset)
        token_offsets = index.sentence_token_offsets[index.document_sentence_offsets]
        self.document_start = token_offsets[:-1]
        self.document_length = np.diff(token_offsets)
        if token_offsets[-1] == 0:
            raise UserError("the dataset has no tokens; tokenize a non-empty corpus")
        self._open()
        self.set_epoch(0)

    @classmethod
    def from_config(cls, dataset: datasets.Dataset, tokenizer: Tokenizer, data_config: DataConfig, *,
                    lanes: int, seed: int, rank: int = 0, world_size: int = 1) -> SegmentInstances:
        """The segments a run's `data:` section describes: `max_seq_length` tokens every
        `segment_step` tokens."""
        return cls(dataset, tokenizer, segment_length=data_config.max_seq_length,
                   reuse_length=data_config.segment_step, lanes=lanes, seed=seed, rank=rank,
                   world_size=world_size)

    def with_lanes(self, lanes: int, *, rank: int = 0, world_size: int = 1) -> SegmentInstances:
        """The same documents and segments read in `lanes` rows a step by `rank` of `world_size`
        (the documents are not indexed again)."""
        if lanes < 1 or not 0 <= rank < world_size:
            raise UserError(f"lanes ({lanes}) must be positive and rank {rank} inside world size {world_size}")
        other = copy.copy(self)
        other.lanes, other.rank, other.world_size = lanes, rank, world_size
        other.set_epoch(self.epoch)
        return other

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The documents epoch `epoch` reads, in order: a shuffle of all of them."""
        rng = np.random.default_rng([self.seed & ((1 << 64) - 1), epoch, _SEGMENT_TAG])
        return rng.permutation(len(self.document_length))

    def segment_count(self) -> int:
        """Segments in the current epoch's stream (all ranks')."""
        return len(self.plan.document)

    def set_epoch(self, epoch: int) -> None:
        """Plan `epoch`: its document order, segments and this rank's lanes."""
        self.epoch = epoch
        order = self.epoch_order(epoch)
        self.plan = plan_segments(self.document_length, order, segment_length=self.segment_length,
                                  reuse_length=self.reuse_length)
        all_lanes = self.lanes * self.world_size
        self.steps = len(self.plan.document) // all_lanes
        if self.steps == 0:
            raise UserError(f"epoch {epoch} has {len(self.plan.document):,} segments, fewer than the "
                            f"{all_lanes:,} rows a step reads; use more data or a smaller batch")
        self.segment_keys = keyed_random.derive_key(self.seed, epoch, _SEGMENT_TAG)

    def __len__(self) -> int:
        return self.steps * self.lanes

    def segment_of(self, items: np.ndarray) -> np.ndarray:
        """The stream index of items (step i // lanes, this rank's lane i % lanes)."""
        step, lane = np.divmod(np.asarray(items, dtype=np.int64), self.lanes)
        return (self.rank * self.lanes + lane) * self.steps + step

    def __getitem__(self, i: int) -> dict:
        return self.__getitems__([i]).instance(0)

    def __getitems__(self, items: Sequence[int]) -> InstanceBatch:
        return self.build(self.locate(items))

    def locate(self, items: Sequence[int]) -> tuple[SegmentPlan, np.ndarray, np.ndarray]:
        """The current epoch's items as their segments, memory resets and seed keys: all that
        `build` needs (a worker builds any epoch's batch without planning it)."""
        items = np.asarray(items, dtype=np.int64)
        segments = self.segment_of(items)
        plan = self.plan
        lane_start = np.divmod(items, self.lanes)[0] == 0  # the first step of every lane
        picked = SegmentPlan(plan.document[segments], plan.start[segments], plan.stop[segments],
                             plan.first[segments])
        return picked, picked.first | lane_start, keyed_random.derive_keys(self.segment_keys, segments)

    def build(self, located: tuple[SegmentPlan, np.ndarray, np.ndarray]) -> InstanceBatch:
        """The batch of the segments `located` (see `locate`), whichever epoch is current."""
        plan, reset, seed_keys = located
        pieces, flags, lengths = [], [], []
        for segment in range(len(plan.document)):
            document = int(plan.document[segment])
            begin = int(self.document_start[document])
            length = int(self.document_length[document])
            start, stop = int(plan.start[segment]), int(plan.stop[segment])
            body = self._tokens(begin + start, begin + min(stop, length))
            with_sep = stop > length
            pieces += [body, np.array([self.sep_token_id])] if with_sep else [body]
            if self._chunk_word_starts is not None:
                starts = self._tokens(begin + start, begin + min(stop, length), self._chunk_word_starts).copy()
                if len(starts):
                    starts[0] = 1
                flags += [starts, np.ones(1, np.uint8)] if with_sep else [starts]
            lengths.append(len(body) + with_sep)
        lengths = np.asarray(lengths, dtype=np.int64)
        return InstanceBatch(
            input_ids=np.concatenate(pieces).astype(np.int64),
            token_type_ids=np.zeros(int(lengths.sum()), np.int64),
            lengths=lengths,
            seed_keys=seed_keys,
            document_index=plan.document,
            word_starts=np.concatenate(flags).astype(np.uint8) if self._chunk_word_starts is not None else None,
            memory_reset=reset,
        )

    def _tokens(self, start: int, stop: int, chunks: list[np.ndarray] | None = None) -> np.ndarray:
        if stop <= start:
            return np.zeros(0, np.int64)
        chunk = bisect.bisect_right(self._chunk_starts, start) - 1
        base = self._chunk_starts[chunk]
        source = (chunks or self._chunk_tokens)[chunk]
        if stop - base <= len(source):
            return source[start - base:stop - base]
        # A document whose tokens cross a chunk boundary cannot happen (a chunk holds whole
        # documents), but a segment's range is checked rather than assumed.
        raise UserError("a segment crosses an Arrow chunk of the dataset; tokenize the corpus again")


class MixedSegments(SegmentInstances):
    """Segments of several DATA folders' documents in proportion to their weights (by tokens),
    for plm/clm mixtures; the interface of `SegmentInstances`.

    As `MixedInstances` does for pairs: each source reads its own endless stream of documents
    (its epoch e's shuffle, then e + 1's, ...), and mixture epoch E takes from source i the
    documents that begin within tokens [E t_i, (E + 1) t_i) of that stream, t_i = w_i × the
    sources' tokens together; the chosen documents are interleaved by a permutation keyed by
    (seed, E), then cut into segments and lanes as one corpus. Whole documents keep every lane's
    memory the real context of its next segment; the realised shares are the weights to within
    one document a source and epoch. Every epoch is a pure function of E (exact resume).
    """

    def __init__(self, sources: Sequence[datasets.Dataset], weights: Sequence[float], tokenizer: Tokenizer, *,
                 segment_length: int, reuse_length: int | None = None, lanes: int, seed: int = 42,
                 rank: int = 0, world_size: int = 1) -> None:
        if len(sources) != len(weights) or not sources:
            raise ValueError("one weight per source, and at least one source")
        columns = set.intersection(*(set(source.column_names) for source in sources))
        keep = [name for name in ("input_ids", "word_starts") if name in columns]
        sources = [source.flatten_indices() if source._indices is not None else source  # noqa: SLF001
                   for source in sources]
        self.weights = [weight / sum(weights) for weight in weights]
        self.source_documents = np.array([len(source) for source in sources], dtype=np.int64)
        self.source_offsets = np.concatenate([[0], np.cumsum(self.source_documents)[:-1]])
        self.source_seeds = [keyed_random.derive_key(seed, _MIXED_SEGMENT_TAG, index) for index in range(len(sources))]
        merged = datasets.concatenate_datasets([source.select_columns(keep) for source in sources])
        super().__init__(merged, tokenizer, segment_length=segment_length, reuse_length=reuse_length, lanes=lanes,
                         seed=seed, rank=rank, world_size=world_size)

    @classmethod
    def from_mixture(cls, mixture: DataMixture, data_config: DataConfig, *, lanes: int, seed: int, rank: int = 0,
                     world_size: int = 1, split: str = "train") -> MixedSegments:
        return cls([getattr(folder, split) for folder in mixture.folders], mixture.weights, mixture.tokenizer,
                   segment_length=data_config.max_seq_length, reuse_length=data_config.segment_step,
                   lanes=lanes, seed=seed, rank=rank, world_size=world_size)

    def epoch_order(self, epoch: int) -> np.ndarray:
        sizes = self.document_length + 1  # each document and its [SEP]
        totals = [int(sizes[offset:offset + count].sum())
                  for offset, count in zip(self.source_offsets, self.source_documents, strict=True)]
        budget = sum(totals)
        chosen = []
        for index, (offset, count, total) in enumerate(zip(self.source_offsets, self.source_documents, totals,
                                                           strict=True)):
            if not count or not total:
                continue
            start, stop = epoch * self.weights[index] * budget, (epoch + 1) * self.weights[index] * budget
            for own_epoch in range(int(start // total), int(np.ceil(stop / total))):
                rng = np.random.default_rng([self.source_seeds[index], own_epoch, _MIXED_SEGMENT_TAG])
                order = rng.permutation(int(count))
                begins = own_epoch * total + np.concatenate([[0], np.cumsum(sizes[offset + order])[:-1]])
                chosen.append(offset + order[(begins >= start) & (begins < stop)])
        documents = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
        rng = np.random.default_rng([self.seed & ((1 << 64) - 1), epoch, _MIXED_SEGMENT_TAG])
        return documents[rng.permutation(len(documents))]

    def source_of(self, documents: np.ndarray) -> np.ndarray:
        """The source index of each (merged) document index."""
        return np.searchsorted(self.source_offsets, documents, side="right") - 1
