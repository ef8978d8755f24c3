"""The built-in sample corpus: large enough, deterministic, and readable by the readers."""

from __future__ import annotations

from pathlib import Path

from data_prep import CorpusStats, read_documents
from data_prep.sample_corpus import SAMPLE_CORPUS_NAME, _prose_paragraphs, write_sample_corpus


def test_sample_corpus_is_large_deterministic_and_readable(tmp_path: Path) -> None:
    first = write_sample_corpus(tmp_path / "one")
    second = write_sample_corpus(tmp_path / "two")
    assert first == tmp_path / "one" / SAMPLE_CORPUS_NAME
    assert first.stat().st_size >= 500_000
    assert first.read_bytes() == second.read_bytes()

    text = first.read_text(encoding="utf-8")
    assert "\n\n\n" not in text and text.endswith("\n") and not text.startswith("\n")
    stats = CorpusStats()
    documents = list(read_documents([first], stats=stats))
    assert stats.duplicate_documents_dropped == 0 and stats.empty_documents_dropped == 0
    assert len(documents) == text.count("\n\n") + 1
    assert stats.sentences > 5_000
    assert sum(len(document) >= 2 for document in documents) > len(documents) // 2
    assert sum(len(sentence) for document in documents for sentence in document) >= 450_000


def test_docstrings_become_prose_paragraphs() -> None:
    docstring = """Return the sum of :func:`len` values, like ``sum(map(len, xs))``.

        Examples::

            total = count(items)

        >>> count(["ab"])
        2

        x: int
        The result is an integer. It is never
        negative.
        """
    assert _prose_paragraphs(docstring) == [
        "Return the sum of len values, like sum(map(len, xs)).",
        "x: int The result is an integer. It is never negative.",
    ]
    assert _prose_paragraphs(None) == []


def test_the_module_writes_the_sample_corpus_into_the_folder_named(tmp_path: Path, capsys) -> None:
    from data_prep.sample_corpus import main

    assert main([str(tmp_path / "corpus"), "--bytes", "600000"]) == 0
    written = tmp_path / "corpus" / SAMPLE_CORPUS_NAME
    assert written.read_bytes() == write_sample_corpus(tmp_path / "again", 600_000).read_bytes()
    assert capsys.readouterr().out == f"wrote {written} ({written.stat().st_size:,} bytes)\n"
