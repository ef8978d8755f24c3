"""A batch of pretraining instances as flat arrays: what pair sampling hands the masking collator."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

_KEY_MASK = (1 << 64) - 1


@dataclass
class InstanceBatch:
    """Instances side by side, without padding: instance i's tokens are
    `input_ids[starts[i] : starts[i] + lengths[i]]`, and likewise its token types.

    Fetching a batch as one (`PretrainingInstances.build`, which a DataLoader worker calls) and
    padding it in one scatter costs a fraction of building a dict of lists per instance.
    """

    input_ids: np.ndarray  # (total,) int64
    token_type_ids: np.ndarray  # (total,) int64
    lengths: np.ndarray  # (B,) int64
    seed_keys: np.ndarray  # (B,) uint64: the key of each instance's masking draws
    next_sentence_label: np.ndarray | None = None  # (B,) int64; None: no pair task
    # Where the instance came from, for `inspect` and tests; None when built from dicts.
    truncated: np.ndarray | None = None  # (B,) bool
    single_sentence_chunk: np.ndarray | None = None  # (B,) bool
    document_index: np.ndarray | None = None  # (B,) int64
    # (total,) uint8, 1 where a token begins a word: from DATA's `word_starts` column (Chinese
    # whole-word masking); None: words are a token and its `##` pieces.
    word_starts: np.ndarray | None = None
    # (B,) bool, for segments read lane by lane (`SegmentInstances`): the row's recurrent memory
    # starts empty here (a new document, or the lane's first step); None: no memory.
    memory_reset: np.ndarray | None = None
    # (B,) int64, for rows packed from two documents (`data.pack_documents`): the position where
    # the second begins (the row's length where there is none); None: one document a row.
    document_starts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.lengths) - self.lengths

    @classmethod
    def from_instances(cls, instances: Sequence[dict]) -> InstanceBatch:
        """From dicts with `input_ids` and optionally `token_type_ids` (default 0),
        `next_sentence_label` and `document_starts` (each kept when every instance has it) and
        `seed_key` (default: a hash of the ids; Python's int/tuple hash is not salted per process)."""
        lengths = np.fromiter((len(instance["input_ids"]) for instance in instances), np.int64, len(instances))
        total = int(lengths.sum())
        input_ids = np.fromiter(chain.from_iterable(instance["input_ids"] for instance in instances),
                                np.int64, total)
        if all("token_type_ids" in instance for instance in instances):
            token_type_ids = np.fromiter(
                chain.from_iterable(instance["token_type_ids"] for instance in instances), np.int64, total)
        else:
            token_type_ids = np.zeros(total, np.int64)
        keys = [int(instance["seed_key"]) if "seed_key" in instance else hash(tuple(instance["input_ids"]))
                for instance in instances]
        labels = None
        if all("next_sentence_label" in instance for instance in instances):
            labels = np.array([int(instance["next_sentence_label"]) for instance in instances], np.int64)
        word_starts = None
        if all("word_starts" in instance for instance in instances):
            word_starts = np.fromiter(chain.from_iterable(instance["word_starts"] for instance in instances),
                                      np.uint8, total)
        reset = None
        if all("memory_reset" in instance for instance in instances):
            reset = np.array([bool(instance["memory_reset"]) for instance in instances])
        document_starts = None
        if all("document_starts" in instance for instance in instances):
            document_starts = np.array([int(instance["document_starts"]) for instance in instances], np.int64)
        return cls(input_ids, token_type_ids, lengths, np.array([key & _KEY_MASK for key in keys], np.uint64),
                   labels, word_starts=word_starts, memory_reset=reset, document_starts=document_starts)

    def instance(self, i: int) -> dict:
        """Instance i as a dict of Python values (the form `PretrainingInstances[i]` gives)."""
        start, stop = int(self.starts[i]), int(self.starts[i] + self.lengths[i])
        instance = {
            "input_ids": self.input_ids[start:stop].tolist(),
            "token_type_ids": self.token_type_ids[start:stop].tolist(),
            "seed_key": int(self.seed_keys[i]),
        }
        if self.word_starts is not None:
            instance["word_starts"] = self.word_starts[start:stop].tolist()
        for name in ("truncated", "single_sentence_chunk", "document_index", "next_sentence_label",
                     "memory_reset", "document_starts"):
            column = getattr(self, name)
            if column is not None:
                instance[name] = column[i].item()
        return instance

    @classmethod
    def concatenate(cls, batches: Sequence[InstanceBatch]) -> InstanceBatch:
        """The instances of `batches` one after another; an optional column is kept when every
        batch has it."""

        def joined(name: str) -> np.ndarray | None:
            columns = [getattr(batch, name) for batch in batches]
            return None if any(column is None for column in columns) else np.concatenate(columns)

        return cls(**{name: joined(name) for name in cls.__dataclass_fields__})

    def take(self, order: np.ndarray) -> InstanceBatch:
        """Instances `order[0]`, `order[1]`, ... of this batch, as a new batch."""
        order = np.asarray(order, dtype=np.int64)
        lengths = self.lengths[order]
        # Token positions of the chosen instances, in their new order.
        tokens = np.repeat(self.starts[order] - (np.cumsum(lengths) - lengths), lengths) + np.arange(
            int(lengths.sum()))
        return InstanceBatch(
            input_ids=self.input_ids[tokens],
            token_type_ids=self.token_type_ids[tokens],
            word_starts=None if self.word_starts is None else self.word_starts[tokens],
            lengths=lengths,
            seed_keys=self.seed_keys[order],
            **{name: None if getattr(self, name) is None else getattr(self, name)[order]
               for name in ("next_sentence_label", "truncated", "single_sentence_chunk", "document_index",
                            "memory_reset", "document_starts")},
        )


def as_instance_batch(instances: Sequence[dict] | InstanceBatch) -> InstanceBatch:
    """What a collator is given, as one InstanceBatch (a list of dicts is converted); an empty
    batch is refused."""
    if not len(instances):
        raise ValueError("cannot collate an empty list of instances")
    return instances if isinstance(instances, InstanceBatch) else InstanceBatch.from_instances(instances)
