"""Pretraining instances ([CLS] A [SEP] B [SEP]) drawn afresh each epoch from a dataset of documents.

The sampling follows Google's `create_pretraining_data.py`: sentences are gathered into a chunk
up to a target length, segment A is the chunk's first `a_end` sentences, and B is either the
rest (actual next) or text from another document (NSP), or the rest in either order (SOP).

Every random choice is a keyed hash of (seed, epoch, document index) (see `keyed_random`), so
an epoch's instances are a pure function of the data and the seed: they do not depend on the
number of DataLoader workers, on DDP ranks, or on which items were read before. Planning an
epoch is vectorized over documents (one numpy pass per chunk *round*, not per sentence), and
works on sentence lengths read once from the Arrow column; token ids are only touched when an
instance is fetched, straight from the memory-mapped Arrow buffers.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from tokenizers import Tokenizer

from bertpre.batches import keyed_random
from bertpre.batches.instance_batch import InstanceBatch
from bertpre.errors import UserError
from bertpre.labels import PAIR_TASKS
from bertpre.tokenizer.roles import token_roles

if TYPE_CHECKING:  # the run config sits above this package
    from bertpre.config import DataConfig

# Counter slots of the per-document draws within one chunk round.
_SHORT, _TARGET, _A_END, _COIN, _OTHER_DOC, _OTHER_START, _SPLIT = range(7)
_SLOTS = 8
_INSTANCE_TAG = 0x1D57  # separates instance keys from document keys derived from the same seed
_B_COUNTER_BASE = 1 << 40  # truncation flips of segment B use counters far from A's
_STRETCH_SENTENCES = 512  # documents are planned in stretches of at most this many sentences
_STRETCH_COUNTER_BASE = 1 << 48  # stretch keys come from document keys with counters past rounds'


@dataclass
class SentenceIndex:
    """Where each document's sentences and each sentence's tokens lie, from one pass over Arrow.

    Token positions are global: the tokens of all documents, virtually concatenated; a chunk of
    the Arrow column holds a contiguous range of them (`chunk_token_offsets`).
    """

    document_sentence_offsets: np.ndarray  # (D + 1,) document d = sentences [o[d], o[d + 1])
    sentence_token_offsets: np.ndarray  # (S + 1,) sentence s = tokens [o[s], o[s + 1])
    chunk_token_offsets: np.ndarray  # (C + 1,) Arrow chunk c = tokens [o[c], o[c + 1])

    @property
    def num_documents(self) -> int:
        return len(self.document_sentence_offsets) - 1


def _input_ids_chunks(dataset: datasets.Dataset) -> list[pa.Array]:
    """The `input_ids` column's Arrow chunks, in row order (a selected/shuffled view is
    materialized first, since its rows no longer follow the Arrow layout)."""
    if "input_ids" not in dataset.column_names:
        raise UserError("the dataset has no `input_ids` column; is it a DATA folder's dataset?")
    if dataset._indices is not None:  # noqa: SLF001 — datasets exposes no public test for this
        dataset = dataset.flatten_indices()
    return [chunk for chunk in dataset.data.column("input_ids").chunks if len(chunk)]


def _word_starts_chunks(dataset: datasets.Dataset, token_chunks: list[np.ndarray]) -> list[np.ndarray] | None:
    """The `word_starts` column (when DATA has one) as flat arrays laid out like `token_chunks`."""
    if "word_starts" not in dataset.column_names:
        return None
    if dataset._indices is not None:  # noqa: SLF001
        dataset = dataset.flatten_indices()
    chunks = [_flat_tokens(chunk) for chunk in dataset.data.column("word_starts").chunks if len(chunk)]
    if [len(chunk) for chunk in chunks] != [len(tokens) for tokens in token_chunks]:
        # Columns chunked differently (not as bertpre writes them): lay the flags out anew.
        flat = np.concatenate(chunks) if chunks else np.zeros(0, np.uint8)
        bounds = np.cumsum([0] + [len(tokens) for tokens in token_chunks])
        if len(flat) != bounds[-1]:
            raise UserError("the dataset's word_starts column does not match its input_ids; "
                            "tokenize the corpus again")
        chunks = [flat[start:stop] for start, stop in zip(bounds[:-1], bounds[1:], strict=True)]
    return chunks


def _flat_tokens(chunk: pa.Array) -> np.ndarray:
    """All token ids of an Arrow chunk of documents, as one numpy array (zero-copy when possible)."""
    return chunk.flatten().flatten().to_numpy(zero_copy_only=False)


def index_sentences(dataset: datasets.Dataset) -> SentenceIndex:
    """Read sentence counts and lengths from the Arrow column, without touching token ids."""
    sentences_per_document, tokens_per_sentence = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    tokens_per_chunk = [0]
    for chunk in _input_ids_chunks(dataset):
        sentences = chunk.flatten()  # flatten() honours slicing, .values would not
        lengths = pc.list_value_length(sentences).fill_null(0).to_numpy(zero_copy_only=False)
        sentences_per_document.append(
            pc.list_value_length(chunk).fill_null(0).to_numpy(zero_copy_only=False)
        )
        tokens_per_sentence.append(lengths)
        tokens_per_chunk.append(int(lengths.sum()))
    return SentenceIndex(
        document_sentence_offsets=_offsets(np.concatenate(sentences_per_document)),
        sentence_token_offsets=_offsets(np.concatenate(tokens_per_sentence)),
        chunk_token_offsets=np.cumsum(tokens_per_chunk, dtype=np.int64),
    )


def _offsets(counts: np.ndarray) -> np.ndarray:
    """(n + 1,) start offsets of n consecutive items of the given sizes, then the total."""
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def _first_reaching(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`offsets.searchsorted(values, side="left")`, with the values sorted first: numpy narrows
    each search from the previous one, which turns cache-missing random probes of a large
    array into a near-linear sweep."""
    order = np.argsort(values)
    result = np.empty(len(values), dtype=np.int64)
    result[order] = offsets.searchsorted(values[order], side="left")
    return result


@dataclass
class EpochPlan:
    """An epoch's instances as token ranges, in plan order (by document, then position)."""

    document: np.ndarray  # (N,) int64
    a_start: np.ndarray  # (N,) global token positions of segment A: [a_start, a_stop)
    a_stop: np.ndarray
    b_start: np.ndarray  # segment B: [b_start, b_stop); empty for pair_task "none"
    b_stop: np.ndarray
    label: np.ndarray  # (N,) int64: NSP 1 = random next, SOP 1 = swapped; 0 for "none"
    single_sentence_chunk: np.ndarray  # (N,) bool: chunk of one sentence (NSP: always random)


def plan_epoch(
    index: SentenceIndex,
    *,
    max_seq_length: int,
    short_seq_prob: float,
    pair_task: str,
    seed: int,
    epoch: int,
    pack_documents: bool = False,
    separators_between: int = 1,
) -> EpochPlan:
    """Chunk every document into instances for one epoch, all documents in lockstep.

    Each round takes one chunk from every document (stretch) that has sentences left. NSP's
    random-next instances put the chunk's unused sentences back (Google's recipe), so the number
    of rounds depends on coin flips; they are all drawn here, from the document's key.

    `pack_documents` (pair_task "none" only): a chunk that runs out of document before its
    target length is topped up, as segment B after a [SEP], with sentences from a uniformly
    drawn sentence of another document onwards (not consumed, as NSP's random B segments).
    `separators_between` is the pair layout's separators between A and B (RoBERTa's: 2).
    """
    doc_offsets, token_offsets = index.document_sentence_offsets, index.sentence_token_offsets
    max_num_tokens = max_seq_length - (2 if pair_task == "none" else 2 + separators_between)
    num_sentences = np.diff(doc_offsets)
    donors = np.flatnonzero(num_sentences > 0)  # documents that random B segments come from
    document_keys = keyed_random.derive_keys(
        keyed_random.derive_key(seed, epoch), np.arange(index.num_documents)
    )

    # Long documents are planned as independent stretches of at most _STRETCH_SENTENCES
    # sentences: the rounds below run as many times as the longest stretch has chunks, and a
    # corpus given as one huge document would otherwise need one round per chunk of it. A chunk
    # never spans two stretches, so about one chunk in a hundred ends early; nothing else changes.
    stretches = -(-num_sentences[donors] // _STRETCH_SENTENCES)
    stretch_document = np.repeat(donors, stretches)
    stretch_rank = np.arange(len(stretch_document)) - np.repeat(
        np.cumsum(stretches) - stretches, stretches
    )
    stretch_start = doc_offsets[stretch_document] + stretch_rank * _STRETCH_SENTENCES
    stretch_end = np.minimum(stretch_start + _STRETCH_SENTENCES, doc_offsets[stretch_document + 1])
    stretch_keys = keyed_random.random_bits(
        document_keys[stretch_document], _STRETCH_COUNTER_BASE + stretch_rank
    )

    stretch = np.arange(len(stretch_document))  # the stretches with sentences left
    position = stretch_start.copy()  # next unused sentence of each of them
    rounds: list[tuple[np.ndarray, ...]] = []
    round_number = 0
    while len(stretch):
        document = stretch_document[stretch]
        # All of this round's draws for every active stretch in one hash call: (n, slots).
        draws = keyed_random.uniform(
            stretch_keys[stretch][:, None], round_number * _SLOTS + np.arange(_SLOTS)
        )

        def draw_uniform(slot: int) -> np.ndarray:
            return draws[:, slot]  # noqa: B023 — used within the round only

        def draw_integers(slot: int, low, high) -> np.ndarray:
            return low + np.floor(draws[:, slot] * (high - low + 1)).astype(np.int64)  # noqa: B023

        # Usually fill the sequence; sometimes a short one, so that fine-tuning on short inputs
        # does not meet a length never seen in pretraining. Drawn per chunk, not per document.
        target = np.where(
            draw_uniform(_SHORT) < short_seq_prob,
            draw_integers(_TARGET, 2, max_num_tokens),
            max_num_tokens,
        )
        document_end = stretch_end[stretch]
        # Last sentence of the chunk: the first one at which the length reaches the target.
        chunk_last = _first_reaching(token_offsets, token_offsets[position] + target) - 1
        chunk_last = np.clip(chunk_last, position, document_end - 1)
        chunk_size = chunk_last - position + 1
        single = chunk_size == 1
        a_end = position + np.where(
            single, 1, draw_integers(_A_END, 1, np.maximum(chunk_size - 1, 1))
        )
        a_start_tok, a_stop_tok = token_offsets[position], token_offsets[a_end]
        chunk_stop_tok = token_offsets[chunk_last + 1]
        label = np.zeros(len(document), dtype=np.int64)
        next_position = chunk_last + 1

        if pair_task == "none":
            b_start_tok = b_stop_tok = chunk_stop_tok
            a_stop_tok = chunk_stop_tok
            if pack_documents:
                b_start_tok, b_stop_tok = _top_up(
                    index, document, target - (chunk_stop_tok - a_start_tok) - separators_between,
                    draw_uniform(_OTHER_START), b_start_tok,
                )
        elif pair_task == "sop":
            b_start_tok, b_stop_tok = a_stop_tok.copy(), chunk_stop_tok
            # A one-sentence chunk is split inside the sentence. ALBERT takes B from a random
            # document there, but then the "order" label would be decidable from topic alone,
            # the shortcut SOP exists to remove; both halves of one sentence keep it about order.
            sentence_length = chunk_stop_tok - a_start_tok
            split = a_start_tok + draw_integers(_SPLIT, 1, np.maximum(sentence_length - 1, 1))
            a_stop_tok = np.where(single, split, a_stop_tok)
            b_start_tok = np.where(single, split, b_start_tok)
            swap = draw_uniform(_COIN) < 0.5
            a_start_tok, b_start_tok = (
                np.where(swap, b_start_tok, a_start_tok),
                np.where(swap, a_start_tok, b_start_tok),
            )
            a_stop_tok, b_stop_tok = (
                np.where(swap, b_stop_tok, a_stop_tok),
                np.where(swap, a_stop_tok, b_stop_tok),
            )
            label = swap.astype(np.int64)
        else:  # nsp
            random_next = single | (draw_uniform(_COIN) < 0.5)
            # Another document, uniformly among the others: draw from len - 1 and skip our own.
            if len(donors) > 1:
                own = np.searchsorted(donors, document)
                pick = draw_integers(_OTHER_DOC, 0, len(donors) - 2)
                other = donors[pick + (pick >= own)]
            else:  # a one-document split: nothing else to draw from, as in Google's fallback
                other = document
            other_start = doc_offsets[other] + draw_integers(
                _OTHER_START, 0, num_sentences[other] - 1
            )
            target_b = np.maximum(target - (a_stop_tok - a_start_tok), 1)
            other_last = _first_reaching(token_offsets, token_offsets[other_start] + target_b) - 1
            other_last = np.clip(other_last, other_start, doc_offsets[other + 1] - 1)
            b_start_tok = np.where(random_next, token_offsets[other_start], a_stop_tok)
            b_stop_tok = np.where(random_next, token_offsets[other_last + 1], chunk_stop_tok)
            next_position = np.where(random_next, a_end, next_position)  # put unused sentences back
            label = random_next.astype(np.int64)

        rounds.append((document, a_start_tok, a_stop_tok, b_start_tok, b_stop_tok, label, single))
        active = next_position < document_end
        stretch, position = stretch[active], next_position[active]
        round_number += 1

    plan = EpochPlan(*(np.concatenate(parts) for parts in zip(*rounds, strict=True)))
    # Empty segments (empty sentences, one-token SOP sentences) make no instance.
    keep = plan.a_stop > plan.a_start
    if pair_task != "none":
        keep &= plan.b_stop > plan.b_start
    order = np.argsort(plan.document[keep], kind="stable")  # plan order: by document, then round
    return EpochPlan(*(column[keep][order] for column in vars(plan).values()))


def _top_up(index: SentenceIndex, document: np.ndarray, room: np.ndarray, draw: np.ndarray,
            empty: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segment B (global token range) for chunks with `room` tokens left: sentences of another
    document from a uniformly drawn one of its sentences on, until the room is reached (the
    last one is trimmed when the instance is built) or that document ends; `empty` elsewhere."""
    doc_offsets, token_offsets = index.document_sentence_offsets, index.sentence_token_offsets
    own = doc_offsets[document + 1] - doc_offsets[document]
    others = doc_offsets[-1] - own  # sentences in other documents
    fill = (room > 0) & (others > 0)
    pick = np.minimum(np.floor(draw * others).astype(np.int64), np.maximum(others - 1, 0))
    sentence = pick + np.where(pick >= doc_offsets[document], own, 0)  # skip our own sentences
    sentence = np.where(fill, sentence, doc_offsets[document])  # any valid index where unused
    other = np.searchsorted(doc_offsets, sentence, side="right") - 1
    last = _first_reaching(token_offsets, token_offsets[sentence] + np.maximum(room, 1)) - 1
    last = np.clip(last, sentence, doc_offsets[other + 1] - 1)
    return (np.where(fill, token_offsets[sentence], empty),
            np.where(fill, token_offsets[last + 1], empty))


def truncated_lengths(length_a, length_b, max_num_tokens: int) -> tuple:
    """Segment lengths after trimming the longer one (B on ties) a token at a time until they
    fit; element-wise over arrays."""
    length_a, length_b = np.asarray(length_a), np.asarray(length_b)
    excess = np.maximum(length_a + length_b - max_num_tokens, 0)
    gap = np.abs(length_a - length_b)
    a_longer = length_a > length_b
    short = np.minimum(length_a, length_b)  # both trimmed down to equal, then alternately, B first
    rest = excess - gap
    one_side = gap >= excess
    return (
        np.where(one_side, np.where(a_longer, length_a - excess, length_a), short - rest // 2),
        np.where(one_side, np.where(a_longer, length_b, length_b - excess), short - (rest - rest // 2)),
    )


def _front_trims(removed: int, key: int, counter_base: int) -> int:
    """How many of `removed` trimmed tokens come off the front: a coin flip each (64 flips per
    hash; only the count matters)."""
    front = 0
    for block, first in enumerate(range(0, removed, 64)):
        flips = min(64, removed - first)
        bits = keyed_random.random_bits_int(key, counter_base + block)
        front += (bits & ((1 << flips) - 1)).bit_count()
    return front


class MappedTokens:
    """The token ids (and word-start flags) of `self.dataset`, one flat array an Arrow chunk, read
    in place: views of its memory-mapped buffers. A pickled copy (spawned workers) reopens them
    from the dataset instead of copying the corpus."""

    dataset: datasets.Dataset

    def _open(self) -> None:
        self._chunk_tokens = [_flat_tokens(chunk) for chunk in _input_ids_chunks(self.dataset)]
        self._chunk_word_starts = _word_starts_chunks(self.dataset, self._chunk_tokens)
        self._chunk_starts = np.cumsum([0] + [len(chunk) for chunk in self._chunk_tokens])[:-1].tolist()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_chunk_tokens"], state["_chunk_word_starts"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._open()


class PretrainingInstances(MappedTokens, torch.utils.data.Dataset):
    """Map-style dataset of one epoch's pretraining instances for one DDP rank.

    Instances come in a shuffled order, so reading indices 0..len-1 is one epoch and resuming
    at index i needs no replay. `set_epoch` plans an epoch; `locate` then picks instances of
    it that `build` makes into a batch in any process (a worker that never planned that epoch).

    Args:
        dataset: documents, one row each: {"input_ids": list[list[int]]} (sentences of ids).
        tokenizer: gives the [CLS] and [SEP] ids.
        max_seq_length: length of an instance including its special tokens.
        short_seq_prob: share of chunks whose target length is random in [2, max].
        pair_task: "nsp", "sop" or "none" (one segment, no pair label).
        seed, rank, world_size: the seed of all draws; this rank's share of the instances.
        pack_documents: pair_task "none": top up chunks that end with their document from
            another document, after a [SEP] (see `plan_epoch`); ignored for NSP and SOP.
    """

    def __init__(
        self,
        dataset: datasets.Dataset,
        tokenizer: Tokenizer,
        max_seq_length: int = 128,
        short_seq_prob: float = 0.1,
        pair_task: str = "nsp",
        seed: int = 42,
        rank: int = 0,
        world_size: int = 1,
        pack_documents: bool = False,
    ) -> None:
        if pair_task not in PAIR_TASKS:
            raise UserError(f"pair_task must be one of {', '.join(PAIR_TASKS)}, not {pair_task!r}")
        minimum = 3 if pair_task == "none" else 5
        if max_seq_length < minimum:
            raise UserError(
                f"max_seq_length must be at least {minimum} for pair_task {pair_task}, not {max_seq_length}"
            )
        if not 0.0 <= short_seq_prob <= 1.0:
            raise UserError(f"short_seq_prob must be in [0, 1], not {short_seq_prob}")
        if not 0 <= rank < world_size:
            raise UserError(f"rank {rank} is outside world size {world_size}")
        roles = token_roles(tokenizer)
        self.cls_token_id, self.sep_token_id = roles.cls_token_id, roles.sep_token_id
        # Between A and B: BERT's one [SEP], RoBERTa's two (`<s> A </s></s> B </s>`).
        self.separators_between = roles.separators_between_segments
        if dataset._indices is not None:  # noqa: SLF001 — a select()/shuffle() view: materialize once
            dataset = dataset.flatten_indices()
        self.dataset = dataset
        self.max_seq_length = max_seq_length
        self.short_seq_prob = short_seq_prob
        self.pair_task = pair_task
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.pack_documents = pack_documents and pair_task == "none"
        self.index = index_sentences(dataset)
        if self.index.sentence_token_offsets[-1] == 0:
            raise UserError("the dataset has no tokens; tokenize a non-empty corpus")
        self._open()
        self.set_epoch(0)

    @classmethod
    def from_config(cls, dataset: datasets.Dataset, tokenizer: Tokenizer, data_config: DataConfig, *,
                    seed: int, rank: int = 0, world_size: int = 1) -> PretrainingInstances:
        """The instances a run's `data:` section describes, for one split and one rank."""
        return cls(dataset, tokenizer, max_seq_length=data_config.max_seq_length,
                   short_seq_prob=data_config.short_seq_prob, pair_task=data_config.pair_task,
                   seed=seed, rank=rank, world_size=world_size,
                   pack_documents=data_config.pack_documents)

    def set_epoch(self, epoch: int) -> None:
        """Plan the instances of `epoch` and this rank's share of them, in shuffled order."""
        self.epoch = epoch
        rows, seed_keys = self.epoch_rows(epoch)
        per_rank = len(rows) // self.world_size  # equal steps on every rank: drop the remainder
        self._rows = rows[: per_rank * self.world_size][self.rank :: self.world_size]
        self._seed_keys = seed_keys[: per_rank * self.world_size][self.rank :: self.world_size]

    def epoch_rows(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """All ranks' instances of `epoch` in shuffled order, without changing the current epoch.

        Returns:
            (N, 7) int64 rows (document, segment ranges, label, one-sentence chunk), one per
            instance in reading order, so that fetching one is a single row lookup; and the
            (N,) uint64 seed keys of their masking draws.
        """
        plan = plan_epoch(
            self.index,
            max_seq_length=self.max_seq_length,
            short_seq_prob=self.short_seq_prob,
            pair_task=self.pair_task,
            seed=self.seed,
            epoch=epoch,
            pack_documents=self.pack_documents,
            separators_between=self.separators_between,
        )
        rng = np.random.default_rng([self.seed & ((1 << 64) - 1), epoch, _INSTANCE_TAG])
        order = rng.permutation(len(plan.document))
        rows = np.stack([column.astype(np.int64) for column in vars(plan).values()], axis=1)[order]
        # Keyed by the instance's place in the plan: the same on every rank and worker.
        seed_keys = keyed_random.derive_keys(
            keyed_random.derive_key(self.seed, epoch, _INSTANCE_TAG), order
        )
        return rows, seed_keys

    def __len__(self) -> int:
        return len(self._rows)

    def _tokens(self, start: int, stop: int, chunks: list[np.ndarray] | None = None) -> np.ndarray:
        """Tokens [start, stop) (global positions), or the same range of `chunks`' flags."""
        chunk = bisect.bisect_right(self._chunk_starts, start) - 1
        base = self._chunk_starts[chunk]
        return (chunks or self._chunk_tokens)[chunk][start - base : stop - base]

    def _word_starts(self, start: int, stop: int) -> np.ndarray:
        """The word-start flags of tokens [start, stop); a segment cut inside a word starts one."""
        flags = self._tokens(start, stop, self._chunk_word_starts)
        if len(flags) and not flags[0]:
            flags = flags.copy()
            flags[0] = 1
        return flags

    def __getitem__(self, i: int) -> dict:
        return self.__getitems__([i]).instance(0)

    def __getitems__(self, indices: Sequence[int]) -> InstanceBatch:
        """Instances `indices` as one batch: [CLS] A [SEP] B [SEP] (or [CLS] A [SEP]), each
        segment trimmed by keyed coin flips until the pair fits."""
        return self.build(self.locate(indices))

    def locate(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The current epoch's instances `indices` as plan rows and seed keys: all that `build`
        needs, so that a worker process builds any epoch's batch without planning it."""
        indices = np.asarray(indices, dtype=np.int64)
        return self._rows[indices], self._seed_keys[indices]

    def build(self, located: tuple[np.ndarray, np.ndarray]) -> InstanceBatch:
        """The batch of instances `located` (see `locate`), whichever epoch is current."""
        return self.build_batch(*located)

    def build_batch(self, rows: np.ndarray, seed_keys: np.ndarray) -> InstanceBatch:
        """The instances of `rows` and `seed_keys` (as `epoch_rows` gives them) as one batch."""
        document, a_start, a_stop, b_start, b_stop, label, single = rows.T
        pair = self.pair_task != "none"
        # Pairs always have a B segment (the plan drops empty ones); pair_task "none" has one only
        # where a packed chunk was topped up from another document: its A then fits beside it, and
        # B is trimmed from the back (it starts a sentence).
        with_b = b_stop > b_start
        between = self.separators_between
        num_special = 2 + between * with_b
        if pair:
            length_a, length_b = truncated_lengths(a_stop - a_start, b_stop - b_start,
                                                   self.max_seq_length - 2 - between)
        else:
            length_a = np.minimum(a_stop - a_start, self.max_seq_length - 2)
            length_b = np.clip(self.max_seq_length - 2 - between - length_a, 0, b_stop - b_start)
        truncated = (length_a < a_stop - a_start) | (length_b < b_stop - b_start)
        a_from, b_from = a_start.copy(), b_start.copy()
        for i in np.flatnonzero(truncated).tolist():
            key = int(seed_keys[i])
            a_from[i] += _front_trims(int(a_stop[i] - a_start[i] - length_a[i]), key, 0)
            if pair:
                b_from[i] += _front_trims(int(b_stop[i] - b_start[i] - length_b[i]), key, _B_COUNTER_BASE)
        cls, sep = np.array([self.cls_token_id]), np.array([self.sep_token_id])
        separators = np.full(between, self.sep_token_id)
        pieces, flags, one = [], [], np.ones(1, np.uint8)
        with_words = self._chunk_word_starts is not None
        for a, a_length, b, b_length, has_b in zip(a_from.tolist(), length_a.tolist(), b_from.tolist(),
                                                   length_b.tolist(), with_b.tolist(), strict=True):
            pieces += (cls, self._tokens(a, a + a_length), sep)
            if with_words:
                flags += (one, self._word_starts(a, a + a_length), one)
            if has_b:
                if between > 1:
                    pieces.append(separators[1:])
                    if with_words:
                        flags.append(np.ones(between - 1, np.uint8))
                pieces += (self._tokens(b, b + b_length), sep)
                if with_words:
                    flags += (self._word_starts(b, b + b_length), one)
        lengths = length_a + length_b + num_special
        first_segment = length_a + 1 + between if pair else lengths
        position = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return InstanceBatch(
            input_ids=np.concatenate(pieces).astype(np.int64),
            token_type_ids=(position >= np.repeat(first_segment, lengths)).astype(np.int64),
            lengths=lengths,
            seed_keys=seed_keys,
            next_sentence_label=label if pair else None,  # none: the model computes no pair loss
            truncated=truncated,
            single_sentence_chunk=single.astype(bool),
            document_index=document,
            word_starts=np.concatenate(flags).astype(np.uint8) if with_words else None,
            # A packed row's second document begins after the first's [SEP] (RoBERTa's second </s> is its).
            document_starts=np.where(with_b, length_a + 2, lengths) if self.pack_documents else None,
        )

