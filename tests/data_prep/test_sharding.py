"""Shards hold every document exactly once; the vocabulary sample is a fixed, bounded set."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from data_prep import CorpusStats, Shard, read_documents, sample_documents
from data_prep.sharding import ByteBudgetSample, raw_digest, sampling_priority


def write_corpus(folder: Path, documents: list[str], files: int = 3) -> list[Path]:
    """`documents` dealt round-robin into `files` plain-text files, a blank line between them."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"part-{number}.txt" for number in range(files)]
    for number, path in enumerate(paths):
        path.write_text("\n\n".join(documents[number::files]) + "\n", encoding="utf-8")
    return paths


def corpus_documents(count: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))).capitalize() + "."
            for _ in range(count)]


def test_four_shards_hold_every_document_once_and_duplicates_stay_together(tmp_path: Path) -> None:
    texts = corpus_documents()
    texts += texts[:20]  # repeated documents, in other files than their first copies
    texts.insert(7, "   ")  # an empty one
    paths = write_corpus(tmp_path, texts)
    whole_stats = CorpusStats()
    whole = list(read_documents(paths, stats=whole_stats))
    parts, part_stats = [], []
    for index in range(4):
        stats = CorpusStats()
        parts.append(list(read_documents(paths, stats=stats, shard=Shard(index, 4))))
        part_stats.append(stats)
    union = [tuple(document) for part in parts for document in part]
    assert Counter(union) == Counter(tuple(document) for document in whole)
    assert all(len(part) > 40 for part in parts)  # 300 documents spread over four shards
    for name in ("documents", "sentences", "characters", "empty_documents_dropped",
                 "duplicate_documents_dropped"):
        assert sum(getattr(stats, name) for stats in part_stats) == getattr(whole_stats, name), name
    assert whole_stats.duplicate_documents_dropped == 20
    # Every shard records every file it read, with its sha256.
    assert all(stats.as_dict()["files"] == whole_stats.as_dict()["files"] for stats in part_stats)


def test_shard_membership_ignores_file_order_and_names(tmp_path: Path) -> None:
    texts = corpus_documents(120)
    forward = write_corpus(tmp_path / "a", texts)
    backward = write_corpus(tmp_path / "b", texts[::-1], files=5)
    shard = Shard(2, 3)
    assert sorted(read_documents(forward, shard=shard)) == sorted(read_documents(backward, shard=shard))


def test_invalid_utf8_is_counted_by_the_shard_that_owns_the_document(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"good one.\n\nbad \xff here.\n\nbad \xfe\xfd again.\n\nfine.\n")
    counts = []
    for index in range(3):
        stats = CorpusStats()
        list(read_documents([path], stats=stats, shard=Shard(index, 3)))
        counts.append(stats.invalid_utf8_replacements)
    whole = CorpusStats()
    list(read_documents([path], stats=whole))
    assert sum(counts) == whole.invalid_utf8_replacements > 0


def test_an_empty_shard_is_no_error_but_an_empty_corpus_is(tmp_path: Path) -> None:
    path = tmp_path / "one.txt"
    path.write_text("A single document.\n", encoding="utf-8")
    sizes = [len(list(read_documents([path], shard=Shard(index, 2)))) for index in range(2)]
    assert sorted(sizes) == [0, 1]
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n", encoding="utf-8")
    with pytest.raises(Exception, match="no documents"):
        list(read_documents([blank], shard=Shard(0, 2)))


def test_a_shard_outside_its_count_is_refused() -> None:
    with pytest.raises(ValueError, match="does not exist"):
        Shard(4, 4)


def test_sample_is_the_lowest_priorities_that_fit_whatever_the_file_order(tmp_path: Path) -> None:
    texts = corpus_documents(400)
    budget = 4000
    sample = sample_documents(write_corpus(tmp_path / "a", texts), budget)
    shuffled = texts[:]
    random.Random(1).shuffle(shuffled)
    assert sample == sample_documents(write_corpus(tmp_path / "b", shuffled, files=2), budget)
    sizes = [len(" ".join(document).encode()) for document in sample]
    assert 0.8 * budget < sum(len(sentence.encode()) for document in sample for sentence in document) <= budget
    assert 10 < len(sample) < 400 and sizes
    # Exactly the longest run in priority order that fits: the next document would not.
    by_priority = sorted(({text: sampling_priority(raw_digest([text])) for text in texts}).items(),
                         key=lambda item: item[1])
    taken = {" ".join(document) for document in sample}
    run_length = len(taken)
    assert {text for text, _ in by_priority[:run_length]} == taken
    next_text = by_priority[run_length][0]
    used = sum(len(sentence.encode()) for document in sample for sentence in document)
    assert used + len(next_text.encode()) > budget


def test_sample_spreads_over_the_whole_corpus(tmp_path: Path) -> None:
    texts = [f"Document number {number} of the corpus." for number in range(2000)]
    sample = sample_documents(write_corpus(tmp_path, texts, files=1), 8000)
    numbers = sorted(int(document[0].split()[2]) for document in sample)
    halves = sum(number < 1000 for number in numbers), sum(number >= 1000 for number in numbers)
    assert len(numbers) > 150
    assert abs(halves[0] - halves[1]) < 0.25 * len(numbers)


def test_budget_keeps_duplicates_once_and_stops_at_the_first_document_that_does_not_fit() -> None:
    sample = ByteBudgetSample(10)
    tiny = raw_digest(["tiny"])
    sample.offer(tiny, ["tiny"])
    assert not sample.wants(tiny)  # a second copy is not taken again
    big = raw_digest(["x" * 50])
    assert sample.wants(big)
    sample.offer(big, ["x" * 50])
    # In priority order the run stops at the oversized document: before it, "tiny" is taken.
    expected = [["tiny"]] if sampling_priority(tiny) < sampling_priority(big) else []
    assert sample.documents() == expected
    assert not sample.wants(big)
