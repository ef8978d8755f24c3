"""The corpus pipeline: files to clean, deduplicated documents of sentences, streamed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from data_prep.cleaning import clean_text
from data_prep.dedup import DuplicateFilter
from data_prep.errors import CorpusError
from data_prep.paths import resolve_paths
from data_prep.readers import MAX_LINE_BYTES, read_raw_documents
from data_prep.sentences import split_sentences as split_into_sentences
from data_prep.stats import CorpusStats


def read_documents(
    paths: Iterable[str | Path],
    text_field: str = "text",
    split_sentences: bool = True,
    stats: CorpusStats | None = None,
    *,
    deduplicate: bool = True,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[list[str]]:
    """Stream the documents of a corpus, one list of clean sentences at a time.

    Args:
        paths: files, folders or globs (see `resolve_paths`).
        text_field: the JSON field or Parquet column that holds the text.
        split_sentences: split each line into sentences; if False a line is one sentence.
        stats: counters to fill while reading (files with sha256, documents, drops, ...).
        deduplicate: drop documents whose cleaned lines equal an earlier document's.
        max_line_bytes: longest line (or JSON record) accepted; longer ones are an error.

    Returns:
        An iterator of documents, each a non-empty list of non-empty sentences.

    Raises:
        CorpusError: a path is missing (raised at the call) or a file cannot be read as its
            extension says, or the corpus holds no documents (raised while iterating).
    """
    files = resolve_paths(paths)  # here, so that a bad path fails before anything is read
    stats = stats if stats is not None else CorpusStats()
    return _stream_documents(files, text_field, split_sentences, stats, deduplicate, max_line_bytes)


def _stream_documents(
    files: list[Path],
    text_field: str,
    split_sentences: bool,
    stats: CorpusStats,
    deduplicate: bool,
    max_line_bytes: int,
) -> Iterator[list[str]]:
    duplicates = DuplicateFilter() if deduplicate else None
    yielded = False
    for path in files:
        for raw_document in read_raw_documents(path, stats, text_field, max_line_bytes):
            lines = [line for line in map(clean_text, raw_document) if line]
            if not lines:
                stats.empty_documents_dropped += 1
                continue
            if duplicates is not None and duplicates.is_duplicate(lines):
                stats.duplicate_documents_dropped += 1
                continue
            if split_sentences:
                sentences = [sentence for line in lines for sentence in split_into_sentences(line)]
            else:
                sentences = lines
            stats.documents += 1
            stats.sentences += len(sentences)
            stats.characters += sum(map(len, sentences))
            yielded = True
            yield sentences
    if not yielded:
        raise CorpusError(f"no documents found in {_describe(files)}: the corpus is empty or blank")


def _describe(files: list[Path]) -> str:
    shown = ", ".join(str(path) for path in files[:3])
    return shown if len(files) <= 3 else f"{shown} and {len(files) - 3} more files"
