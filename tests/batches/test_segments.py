"""bertpre.batches.segments: documents read as consecutive segments lane by lane, so that a
recurrent memory sees the real context: every lane's segments join back into its documents,
overlapping by segment − reuse tokens; memory resets exactly where a document (or a lane)
begins; ranks and lanes disjoint; the same plan from the same seed."""
from __future__ import annotations

import datasets
import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from bertpre.batches.plm import PermutationCollator
from bertpre.batches.segments import SegmentInstances, plan_segments
from bertpre.errors import UserError

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS + [f"t{i}" for i in range(5000)])}
    return Tokenizer(WordPiece(vocab, unk_token="[UNK]"))


@pytest.fixture(scope="module")
def documents() -> tuple[datasets.Dataset, list[list[int]]]:
    """40 documents of 1 to 90 tokens in sentences; every token id is unique (5 + its position)."""
    rng = np.random.default_rng(0)
    rows, flat, next_id = [], [], 5
    for _ in range(40):
        length = int(rng.integers(1, 91))
        tokens = list(range(next_id, next_id + length))
        next_id += length
        cuts = sorted(set(rng.integers(1, length, size=3).tolist())) if length > 1 else []
        rows.append([tokens[a:b] for a, b in zip([0, *cuts], [*cuts, length], strict=True)])
        flat.append(tokens)
    return datasets.Dataset.from_dict({"input_ids": rows}), flat


def lanes_of(instances: SegmentInstances) -> list[list[dict]]:
    """Each lane's segments in step order."""
    lanes = [[] for _ in range(instances.lanes)]
    for item in range(len(instances)):
        lanes[item % instances.lanes].append(instances[item])
    return lanes


@pytest.mark.parametrize(("segment", "reuse"), [(16, 16), (16, 8), (12, 5)])
def test_each_lane_reads_its_documents_in_order_and_resets_where_they_begin(
        tokenizer, documents, segment, reuse):
    dataset, flat = documents
    sep = tokenizer.token_to_id("[SEP]")
    instances = SegmentInstances(dataset, tokenizer, segment_length=segment, reuse_length=reuse, lanes=6, seed=1)
    owner = {token: d for d, tokens in enumerate(flat) for token in tokens}
    for lane in lanes_of(instances):
        assert lane[0]["memory_reset"]
        for previous, current in zip(lane, lane[1:], strict=False):
            ids, before = current["input_ids"], previous["input_ids"]
            assert 1 <= len(ids) <= segment
            if current["memory_reset"]:
                document = flat[owner[ids[0]]]
                assert ids[0] == document[0]  # a reset is a document's start
            else:  # the same document, `reuse` tokens on: the overlap is the same tokens
                assert len(before) == segment and before[-1] != sep
                assert ids[:segment - reuse] == before[reuse:]
                if ids[0] == sep:  # only the [SEP] after a document that filled the segment before
                    assert ids == [sep] and before[-1] == flat[owner[before[0]]][-1]
                else:
                    assert ids[0] == before[0] + reuse
        for instance in lane:
            ids = instance["input_ids"]
            body = ids[:-1] if ids[-1] == sep else ids
            document = flat[owner[body[0]]] if body else None
            if body:
                start = document.index(body[0])
                assert body == document[start:start + len(body)]  # contiguous tokens of one document
                assert ids[-1] != sep or start + len(body) == len(document)  # [SEP] ends a document


def test_the_stream_is_every_segment_once_but_the_last_partial_step(tokenizer, documents):
    dataset, flat = documents
    lengths = np.array([len(tokens) for tokens in flat])
    plan = plan_segments(lengths, np.arange(len(flat)), segment_length=16, reuse_length=8)
    expected = sum(1 + max(0, -(-(n + 1 - 16) // 8)) for n in lengths)
    assert len(plan.document) == expected
    ranks = [SegmentInstances(dataset, tokenizer, segment_length=16, reuse_length=8, lanes=4, seed=3,
                              rank=rank, world_size=2) for rank in range(2)]
    read = [tuple(ranks[r].segment_of(np.arange(len(ranks[r]))).tolist()) for r in range(2)]
    everything = sorted(read[0] + read[1])
    assert everything == list(range(ranks[0].steps * 8))  # disjoint, and all but the remainder
    assert len(ranks[0].plan.document) - len(everything) < 8


def test_the_plan_is_a_function_of_the_seed_and_epoch(tokenizer, documents):
    dataset, _ = documents
    first = SegmentInstances(dataset, tokenizer, segment_length=16, lanes=3, seed=5)
    again = SegmentInstances(dataset, tokenizer, segment_length=16, lanes=3, seed=5)
    assert [first[i] for i in range(len(first))] == [again[i] for i in range(len(again))]
    again.set_epoch(1)
    assert [first[i]["input_ids"] for i in range(6)] != [again[i]["input_ids"] for i in range(6)]


def test_micro_batches_in_order_keep_their_rows_step_after_step(tokenizer, documents):
    dataset, _ = documents
    instances = SegmentInstances(dataset, tokenizer, segment_length=10, lanes=4, seed=2)
    collator = PermutationCollator(tokenizer, pad_to_length=12)
    micro = 2  # two micro-batches a step: rows 0-1 and rows 2-3
    batches = [collator(instances.__getitems__(list(range(start, start + micro))))
               for start in range(0, len(instances), micro)]
    assert "memory_reset" in batches[0] and batches[0]["memory_reset"].all()
    lanes = lanes_of(instances)
    for number, batch in enumerate(batches):
        step, slot = divmod(number, 2)
        for row in range(micro):
            expected = lanes[slot * micro + row][step]
            assert bool(batch["memory_reset"][row]) == expected["memory_reset"]
            assert batch["input_ids"][row, :len(expected["input_ids"])].tolist() == expected["input_ids"]


def test_bad_settings_and_too_little_data_are_one_line(tokenizer, documents):
    dataset, _ = documents
    with pytest.raises(UserError, match="reuse_length must be from 1"):
        SegmentInstances(dataset, tokenizer, segment_length=8, reuse_length=9, lanes=2)
    with pytest.raises(UserError, match="fewer than the"):
        SegmentInstances(dataset, tokenizer, segment_length=8, lanes=10_000)
