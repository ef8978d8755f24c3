"""The whole pipeline: files to clean, deduplicated documents of sentences, and its counts."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import tracemalloc
from pathlib import Path

import pytest

from data_prep import CorpusError, CorpusStats, read_documents
from data_prep.dedup import DuplicateFilter


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_english_txt_is_cleaned_and_split_into_sentences(tmp_path: Path) -> None:
    path = write(
        tmp_path / "en.txt",
        "Mr. Smith  went\tto Washington. He arrived at 5 p.m. today!\n"
        "A second\u200b line. Short.\n"
        "\n"
        "Cafe\u0301 life is calm.\n",
    )
    assert list(read_documents([path])) == [
        [
            "Mr. Smith went to Washington.",
            "He arrived at 5 p.m. today!",
            "A second line.",
            "Short.",
        ],
        ["Café life is calm."],
    ]


def test_chinese_txt(tmp_path: Path) -> None:
    path = write(
        tmp_path / "zh.txt", "今天天气很好。我们去公园吧！\n“你去吗？”她问。\n\n第二篇文档。\n"
    )
    assert list(read_documents([path])) == [
        ["今天天气很好。", "我们去公园吧！", "“你去吗？”", "她问。"],
        ["第二篇文档。"],
    ]


def test_split_sentences_off_keeps_one_line_one_sentence(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "One. Two.\nThree. Four.\n")
    assert list(read_documents([path], split_sentences=False)) == [["One. Two.", "Three. Four."]]


def test_files_folders_and_globs_stream_in_order(tmp_path: Path) -> None:
    write(tmp_path / "c" / "b.txt", "From b.\n")
    write(tmp_path / "c" / "a" / "x.jsonl", json.dumps({"body": "From x."}) + "\n")
    write(tmp_path / "d.json", json.dumps([{"body": "From d."}]))
    documents = read_documents([tmp_path / "c", f"{tmp_path}/*.json"], text_field="body")
    assert list(documents) == [["From x."], ["From b."], ["From d."]]


def test_text_field_default_is_text(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", json.dumps({"text": "Para one. Two.\n\nPara three."}))
    assert list(read_documents([path])) == [["Para one.", "Two.", "Para three."]]


def test_empty_and_duplicate_documents_are_dropped_and_counted(tmp_path: Path) -> None:
    first = write(
        tmp_path / "1.txt",
        "Same doc.\nTwo lines.\n\n\u200b\n\nOther doc.\n\nSame  doc.\nTwo\tlines.\n",
    )
    second = write(
        tmp_path / "2.jsonl",
        "\n".join(
            json.dumps({"text": text})
            for text in ["Same doc.\nTwo lines.", "", "  ", "Other doc.", "New."]
        ),
    )
    stats = CorpusStats()
    assert list(read_documents([first, second], stats=stats)) == [
        ["Same doc.", "Two lines."],
        ["Other doc."],
        ["New."],
    ]
    counts = stats.as_dict()
    assert counts["duplicate_documents_dropped"] == 3
    assert counts["empty_documents_dropped"] == 3
    assert (counts["documents"], counts["sentences"]) == (3, 4)


def test_deduplicate_off_keeps_duplicates(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "Same.\n\nSame.\n")
    stats = CorpusStats()
    assert list(read_documents([path], stats=stats, deduplicate=False)) == [["Same."], ["Same."]]
    assert stats.duplicate_documents_dropped == 0


def test_duplicate_filter() -> None:
    duplicates = DuplicateFilter()
    assert not duplicates.is_duplicate(["a", "b"])
    assert not duplicates.is_duplicate(["a b"])
    assert not duplicates.is_duplicate(["ab"])
    assert duplicates.is_duplicate(["a", "b"])
    assert all(len(key) == 16 for key in duplicates.seen)


def test_stats_as_dict(tmp_path: Path) -> None:
    path = tmp_path / "a.txt.gz"
    path.write_bytes(gzip.compress(b"Caf\xe9 one. Two.\n\nThree.\n\nThree.\n"))
    stats = CorpusStats()
    documents = list(read_documents([str(path)], stats=stats))
    assert documents == [["Caf\ufffd one.", "Two."], ["Three."]]
    assert stats.as_dict() == {
        "files": [
            {
                "path": str(path),
                "bytes": path.stat().st_size,
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
        ],
        "documents": 2,
        "sentences": 3,
        "characters": len("Caf\ufffd one.Two.Three."),
        "empty_documents_dropped": 0,
        "duplicate_documents_dropped": 1,
        "invalid_utf8_replacements": 1,
    }
    json.dumps(stats.as_dict())


@pytest.mark.parametrize(
    "content", ["", "\n\n\n", " \t \r\n \n", "\u200b\n\ufeff\n", '{"text": ""}\n{"text": "  "}\n']
)
def test_empty_or_blank_corpus(tmp_path: Path, content: str) -> None:
    path = write(tmp_path / ("empty.jsonl" if "{" in content else "empty.txt"), content)
    with pytest.raises(CorpusError) as caught:
        list(read_documents([path]))
    assert str(caught.value) == f"no documents found in {path}: the corpus is empty or blank"


def test_missing_path_is_reported_before_reading(tmp_path: Path) -> None:
    write(tmp_path / "ok.txt", "Fine.\n")
    with pytest.raises(CorpusError, match=r"nope\.txt: no such file or folder"):
        read_documents([tmp_path / "ok.txt", tmp_path / "nope.txt"])


def test_memory_stays_bounded_while_streaming(tmp_path: Path) -> None:
    paragraph = " ".join(f"Sentence number {i} of a long paragraph." for i in range(60))
    path = tmp_path / "large.txt"
    with path.open("w") as file:
        for index in range(1_000):
            file.write(f"{index}. {paragraph}\n{paragraph}\n\n")
    assert path.stat().st_size > 4_000_000
    tracemalloc.start()
    try:
        documents = sum(1 for _ in read_documents([path], split_sentences=False))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert documents == 1_000
    assert peak < 1_000_000  # a few documents and read buffers, never the file


SHARED_CORPORA = Path(__file__).resolve().parents[3] / "shared" / "corpora"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_CORPORA.is_dir(), reason="needs ../shared/corpora")
@pytest.mark.parametrize(
    "name",
    ["tinyshakespeare.txt", "wikitext2-valid.txt", "wikitext2-test.txt", "zh-fortunes.txt"],
)
def test_shared_corpora(tmp_path: Path, name: str) -> None:
    source = SHARED_CORPORA / name
    compressed = tmp_path / f"{name}.gz"
    compressed.write_bytes(gzip.compress(source.read_bytes()))
    stats, compressed_stats = CorpusStats(), CorpusStats()
    documents = list(read_documents([source], stats=stats))
    assert list(read_documents([compressed], stats=compressed_stats)) == documents
    assert stats.files[0].sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert stats.documents == len(documents) > 1_000
    assert stats.invalid_utf8_replacements == 0
    blocks = re.split(r"\n\s*\n", source.read_text(encoding="utf-8"))
    kept = stats.documents + stats.duplicate_documents_dropped + stats.empty_documents_dropped
    assert kept == sum(1 for block in blocks if block.strip())
    for document in documents:
        for sentence in document:
            assert sentence and sentence == " ".join(sentence.split())
    # splitting only cuts lines: without spaces, the text is the same
    lines = list(read_documents([source], split_sentences=False))
    assert [strip_spaces(document) for document in lines] == list(map(strip_spaces, documents))
    assert sum(map(len, lines)) <= stats.sentences


def strip_spaces(document: list[str]) -> str:
    return "".join("".join(document).split())
