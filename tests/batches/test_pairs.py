"""bertpre.batches.pairs: NSP / SOP / single-segment instances, truncation, epochs and DDP shards."""

from __future__ import annotations

import math
import pickle

import datasets
import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from bertpre.batches.pairs import MappedTokens, PretrainingInstances, truncated_lengths
from bertpre.errors import UserError

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
FIRST_ID = 10  # token ids of the corpus below start here, one fresh id per token


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS + [f"w{i}" for i in range(20)])}
    return Tokenizer(WordPiece(vocab, unk_token="[UNK]"))


def make_corpus(num_documents: int, seed: int, max_sentences: int = 8, max_length: int = 12):
    """Documents whose every token id is unique and consecutive across the corpus, so a run of
    ids tells exactly which document and sentences it came from."""
    rng = np.random.default_rng(seed)
    documents, where = [], {}  # where: token id -> (document, sentence)
    next_id = FIRST_ID
    for d in range(num_documents):
        document = []
        for s in range(int(rng.integers(1, max_sentences + 1))):
            length = int(rng.integers(1, max_length + 1))
            document.append(list(range(next_id, next_id + length)))
            where.update({t: (d, s) for t in document[-1]})
            next_id += length
        documents.append(document)
    return datasets.Dataset.from_dict({"input_ids": documents}), documents, where


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(300, seed=1)


def segments(instance: dict, cls_id: int = 2, sep_id: int = 3) -> tuple[list[int], list[int]]:
    ids, types = instance["input_ids"], instance["token_type_ids"]
    assert ids[0] == cls_id and ids[-1] == sep_id
    first_sep = ids.index(sep_id)
    assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    return ids[1:first_sep], ids[first_sep + 1 : -1]


def whole_sentences(ids: list[int], where: dict, documents: list) -> list[tuple[int, int]]:
    """The (document, sentence) list that `ids` is exactly the concatenation of (else fail)."""
    parts, i = [], 0
    while i < len(ids):
        d, s = where[ids[i]]
        sentence = documents[d][s]
        assert ids[i : i + len(sentence)] == sentence, "not whole consecutive sentences"
        parts.append((d, s))
        i += len(sentence)
    assert all(p[0] == parts[0][0] for p in parts) and [p[1] for p in parts] == list(
        range(parts[0][1], parts[0][1] + len(parts))
    )
    return parts


def all_instances(instances: PretrainingInstances) -> list[dict]:
    return [instances[i] for i in range(len(instances))]


def within_binomial(successes: int, trials: int, p: float, sigmas: float = 4.5) -> bool:
    return abs(successes - trials * p) <= sigmas * math.sqrt(trials * p * (1 - p))


def test_nsp_actual_next_and_random_next(corpus, tokenizer):
    dataset, documents, where = corpus
    instances = PretrainingInstances(dataset, tokenizer, max_seq_length=64, pair_task="nsp", seed=3)
    checked = {0: 0, 1: 0}
    for instance in all_instances(instances):
        assert len(instance["input_ids"]) <= 64
        a, b = segments(instance)
        assert a and b
        if instance["truncated"]:
            continue
        a_parts, b_parts = (
            whole_sentences(a, where, documents),
            whole_sentences(b, where, documents),
        )
        assert a_parts[0][0] == instance["document_index"]
        if instance["next_sentence_label"] == 0:
            assert b_parts[0] == (a_parts[0][0], a_parts[-1][1] + 1)  # exactly the next sentences
        else:
            assert b_parts[0][0] != a_parts[0][0]  # another document
        checked[instance["next_sentence_label"]] += 1
    assert min(checked.values()) > 100


def test_nsp_label_balance_and_one_sentence_skew(tokenizer):
    dataset, _, _ = make_corpus(1500, seed=2)
    instances = PretrainingInstances(dataset, tokenizer, max_seq_length=48, pair_task="nsp", seed=5)
    rows = all_instances(instances)
    single = [r for r in rows if r["single_sentence_chunk"]]
    multi = [r for r in rows if not r["single_sentence_chunk"]]
    assert single and all(r["next_sentence_label"] == 1 for r in single)
    random_next = sum(r["next_sentence_label"] for r in multi)
    assert within_binomial(random_next, len(multi), 0.5)


def test_sop_segments_are_consecutive_text_swapped_iff_label(corpus, tokenizer):
    dataset, _, where = corpus
    instances = PretrainingInstances(dataset, tokenizer, max_seq_length=64, pair_task="sop", seed=4)
    rows = all_instances(instances)
    for instance in rows:
        a, b = segments(instance)
        assert a and b
        if instance["truncated"]:
            continue
        first, second = (b, a) if instance["next_sentence_label"] == 1 else (a, b)
        text = first + second
        assert text == list(range(text[0], text[0] + len(text)))  # one run of consecutive tokens
        assert where[text[0]][0] == where[text[-1]][0] == instance["document_index"]
    assert within_binomial(sum(r["next_sentence_label"] for r in rows), len(rows), 0.5)
    # one-sentence chunks are split inside their sentence
    single = [r for r in rows if r["single_sentence_chunk"] and not r["truncated"]]
    assert single and all(
        len({where[t] for t in segments(r)[0] + segments(r)[1]}) == 1 for r in single
    )


def test_single_segment_packs_consecutive_sentences(corpus, tokenizer):
    dataset, _, where = corpus
    instances = PretrainingInstances(
        dataset, tokenizer, max_seq_length=40, pair_task="none", seed=4
    )
    for instance in all_instances(instances):
        ids = instance["input_ids"]
        assert len(ids) <= 40 and ids[0] == 2 and ids[-1] == 3 and 3 not in ids[1:-1]
        assert instance["token_type_ids"] == [0] * len(ids)
        assert "next_sentence_label" not in instance
        text = ids[1:-1]
        assert text == list(range(text[0], text[0] + len(text)))
        assert where[text[0]][0] == where[text[-1]][0]


def test_packing_tops_up_a_documents_last_chunk_from_another_document(corpus, tokenizer):
    dataset, documents, where = corpus
    options = dict(max_seq_length=40, short_seq_prob=0.0, pair_task="none", seed=4)
    plain = all_instances(PretrainingInstances(dataset, tokenizer, **options))
    packed = all_instances(PretrainingInstances(dataset, tokenizer, pack_documents=True, **options))
    topped_up = 0
    for instance in packed:
        ids = instance["input_ids"]
        assert len(ids) <= 40 and ids[0] == 2 and ids[-1] == 3
        assert instance["token_type_ids"] == [0] * len(ids) and "next_sentence_label" not in instance
        seps = [i for i, token in enumerate(ids) if token == 3]
        a = ids[1 : seps[0]]
        assert a == list(range(a[0], a[0] + len(a)))  # consecutive tokens of one document
        if len(seps) == 1:
            continue
        topped_up += 1
        assert len(seps) == 2
        b = ids[seps[0] + 1 : -1]
        d, s = where[a[-1]]
        assert a[-1] == documents[d][-1][-1]  # A ran out of document: B fills its room
        other, first = where[b[0]]
        assert other != d and documents[other][first][0] == b[0]  # B starts another's sentence
        assert b == list(range(b[0], b[0] + len(b))) and where[b[-1]][0] == other
        assert len(ids) == 40 or b[-1] == documents[other][-1][-1]  # full, or B's document ended
    assert topped_up > len(packed) // 4
    # The chunks themselves are the unpacked plan's, instance for instance.
    assert [r["input_ids"][1 : r["input_ids"].index(3)] for r in packed] == [
        r["input_ids"][1:-1] for r in plain
    ]
    mean = {name: np.mean([len(r["input_ids"]) for r in rows]) for name, rows in (("plain", plain), ("packed", packed))}
    assert mean["packed"] > 1.1 * mean["plain"]


def test_packing_applies_to_single_segments_only(corpus, tokenizer):
    options = dict(max_seq_length=40, pair_task="sop", seed=4)
    assert all_instances(PretrainingInstances(corpus[0], tokenizer, pack_documents=True, **options)) == \
        all_instances(PretrainingInstances(corpus[0], tokenizer, **options))


def test_packing_a_one_document_split_leaves_its_chunks_alone(tokenizer):
    dataset = datasets.Dataset.from_dict({"input_ids": [[[11, 12, 13], [14, 15], [16]]]})
    options = dict(max_seq_length=16, pair_task="none", seed=3)
    rows = all_instances(PretrainingInstances(dataset, tokenizer, pack_documents=True, **options))
    assert all(r.pop("document_starts") == len(r["input_ids"]) for r in rows)  # no second document
    assert rows == all_instances(PretrainingInstances(dataset, tokenizer, **options))
    assert all(r["input_ids"].count(3) == 1 for r in rows)


def test_every_token_of_an_epoch_is_used_once_without_short_sequences(corpus, tokenizer):
    dataset, documents, _ = corpus
    instances = PretrainingInstances(
        dataset, tokenizer, max_seq_length=512, short_seq_prob=0.0, pair_task="sop"
    )
    # Each document fits one 509-token chunk, so it gives exactly one instance (if it has 2+ tokens).
    tokens = sorted(t for r in all_instances(instances) for t in sum(segments(r), []))
    expected = sorted(t for d in documents if sum(map(len, d)) >= 2 for s in d for t in s)
    assert tokens == expected


def test_truncated_lengths_match_token_by_token_trimming():
    def reference(a: int, b: int, limit: int) -> tuple[int, int]:
        while a + b > limit:
            if a > b:
                a -= 1
            else:
                b -= 1
        return a, b

    for a in range(25):
        for b in range(25):
            for limit in range(1, 40):
                assert truncated_lengths(a, b, limit) == reference(a, b, limit)


def test_truncation_trims_the_longer_segment_from_either_end(tokenizer):
    dataset, _, where = make_corpus(200, seed=6, max_sentences=3, max_length=30)
    instances = PretrainingInstances(dataset, tokenizer, max_seq_length=16, pair_task="nsp", seed=1)
    rows = [r for r in all_instances(instances) if r["truncated"]]
    assert len(rows) > 50
    front_trimmed = back_trimmed = 0
    for instance in rows:
        assert len(instance["input_ids"]) == 16
        for segment in segments(instance):
            assert segment == list(
                range(segment[0], segment[0] + len(segment))
            )  # a contiguous piece
            front_trimmed += where.get(segment[0] - 1, (-1, -1)) == where[segment[0]]
            back_trimmed += where.get(segment[-1] + 1, (-1, -1)) == where[segment[-1]]
    assert front_trimmed > 20 and back_trimmed > 20


def test_same_seed_and_epoch_give_the_same_instances_and_another_epoch_other_ones(
    corpus, tokenizer
):
    dataset, _, _ = corpus
    first = PretrainingInstances(dataset, tokenizer, max_seq_length=32, seed=9)
    second = PretrainingInstances(dataset, tokenizer, max_seq_length=32, seed=9)
    assert all_instances(first) == all_instances(second)
    # any access order gives the same items
    assert [first[i] for i in reversed(range(len(first)))] == all_instances(second)[::-1]
    epoch_0 = all_instances(first)
    first.set_epoch(1)
    epoch_1 = all_instances(first)
    pairs_0 = {(tuple(r["input_ids"]), r["next_sentence_label"]) for r in epoch_0}
    pairs_1 = {(tuple(r["input_ids"]), r["next_sentence_label"]) for r in epoch_1}
    assert len(pairs_0 & pairs_1) < 0.5 * len(pairs_0)
    assert {r["seed_key"] for r in epoch_0}.isdisjoint(r["seed_key"] for r in epoch_1)


def test_ranks_take_equal_disjoint_shares(corpus, tokenizer):
    dataset, _, _ = corpus
    whole = PretrainingInstances(dataset, tokenizer, max_seq_length=32, seed=2)
    shards = [
        PretrainingInstances(dataset, tokenizer, max_seq_length=32, seed=2, rank=r, world_size=3)
        for r in range(3)
    ]
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) == len(whole) // 3
    keys = [r["seed_key"] for s in shards for r in all_instances(s)]
    assert len(set(keys)) == len(keys)
    assert set(keys) <= {r["seed_key"] for r in all_instances(whole)}


def test_selected_view_of_a_dataset(corpus, tokenizer):
    dataset, _, _ = corpus
    subset = dataset.select([5, 3, 7])
    instances = PretrainingInstances(
        subset, tokenizer, max_seq_length=512, short_seq_prob=0.0, pair_task="none"
    )
    assert sorted(r["input_ids"][1:-1] for r in all_instances(instances)) == sorted(
        sum(doc, []) for doc in subset["input_ids"]
    )


@pytest.mark.parametrize(
    "options",
    [
        {"pair_task": "mlm"},
        {"max_seq_length": 4},
        {"short_seq_prob": 1.5},
        {"rank": 2, "world_size": 2},
    ],
)
def test_bad_settings_are_user_errors(corpus, tokenizer, options):
    with pytest.raises(UserError):
        PretrainingInstances(corpus[0], tokenizer, **options)


def test_pickled_copy_gives_the_same_instances(corpus, tokenizer):
    instances = PretrainingInstances(corpus[0], tokenizer, max_seq_length=32, seed=3)
    instances.set_epoch(2)
    copy = pickle.loads(pickle.dumps(instances))  # what a spawned DataLoader worker receives
    assert all_instances(copy) == all_instances(instances)


def test_a_one_document_split_still_gives_instances(tokenizer):
    dataset = datasets.Dataset.from_dict({"input_ids": [[[11, 12, 13], [14, 15], [16]]]})
    rows = all_instances(
        PretrainingInstances(dataset, tokenizer, max_seq_length=16, pair_task="nsp")
    )
    assert rows and all(r["document_index"] == 0 for r in rows)
    assert {t for r in rows for t in sum(segments(r), [])} <= set(range(11, 17))


def test_an_empty_dataset_is_a_user_error(tokenizer):
    with pytest.raises(UserError):
        PretrainingInstances(datasets.Dataset.from_dict({"input_ids": [[[]]]}), tokenizer)


def test_short_seq_prob_shortens_the_targets(tokenizer):
    dataset, _, _ = make_corpus(100, seed=8, max_sentences=80, max_length=6)
    lengths = {}
    for probability in (0.0, 1.0):
        instances = PretrainingInstances(
            dataset, tokenizer, max_seq_length=64, short_seq_prob=probability, pair_task="none"
        )
        lengths[probability] = [len(r["input_ids"]) for r in all_instances(instances)]
    # Without short targets a chunk stops only at its document's end or at >= 62 tokens (then
    # truncated to 64); with targets uniform in [2, 62] the mean length falls to about half.
    full = {p: sum(length == 64 for length in lengths[p]) / len(lengths[p]) for p in lengths}
    assert full[0.0] > 0.5 and full[1.0] < 0.1
    assert np.mean(lengths[1.0]) < 0.65 * np.mean(lengths[0.0])


def test_a_dataset_of_many_arrow_chunks_gives_the_same_instances(corpus, tokenizer):
    dataset = corpus[0]
    pieces = [
        dataset.select(range(start, min(start + 70, len(dataset))))
        for start in range(0, len(dataset), 70)
    ]
    chunked = datasets.concatenate_datasets([piece.flatten_indices() for piece in pieces])
    assert len(chunked.data.column("input_ids").chunks) > 1
    whole = PretrainingInstances(dataset, tokenizer, max_seq_length=48, seed=6)
    parts = PretrainingInstances(chunked, tokenizer, max_seq_length=48, seed=6)
    assert all_instances(parts) == all_instances(whole)


def test_one_huge_document_is_planned_in_stretches(tokenizer):
    # 2000 one-token sentences: chunks of exactly 61 tokens, restarted every 512 sentences.
    document = [[FIRST_ID + i] for i in range(2000)]
    dataset = datasets.Dataset.from_dict({"input_ids": [document]})
    instances = PretrainingInstances(
        dataset, tokenizer, max_seq_length=64, short_seq_prob=0.0, pair_task="sop"
    )
    rows = all_instances(instances)
    assert sorted(t for r in rows for t in sum(segments(r), [])) == list(
        range(FIRST_ID, FIRST_ID + 2000)
    )
    lengths = sorted(len(r["input_ids"]) - 3 for r in rows)
    assert lengths == sorted([61] * 8 * 3 + [24] * 3 + [61] * 7 + [37])  # 3 x 512 + 464 sentences


class Tokens(MappedTokens):
    def __init__(self, dataset: datasets.Dataset) -> None:
        self.dataset = dataset
        self._open()


def test_mapped_tokens_lay_each_arrow_chunk_flat_and_reopen_after_pickling():
    table = datasets.concatenate_datasets([  # two Arrow chunks
        datasets.Dataset.from_dict({"input_ids": [[[5, 6], [7]], [[8]]]}),
        datasets.Dataset.from_dict({"input_ids": [[[9, 10, 11]]]})])
    tokens = Tokens(table)
    assert [chunk.tolist() for chunk in tokens._chunk_tokens] == [[5, 6, 7, 8], [9, 10, 11]]
    assert tokens._chunk_starts == [0, 4] and tokens._chunk_word_starts is None
    state = tokens.__getstate__()
    assert "_chunk_tokens" not in state and "_chunk_word_starts" not in state
    copy = pickle.loads(pickle.dumps(tokens))
    assert [chunk.tolist() for chunk in copy._chunk_tokens] == [[5, 6, 7, 8], [9, 10, 11]]
    assert copy._chunk_starts == [0, 4]
