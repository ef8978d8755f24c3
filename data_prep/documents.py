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
from data_prep.sharding import ByteBudgetSample, Shard, raw_digest
from data_prep.stats import CorpusStats


def read_documents(
    paths: Iterable[str | Path],
    text_field: str = "text",
    split_sentences: bool = True,
    stats: CorpusStats | None = None,
    *,
    deduplicate: bool = True,
    max_line_bytes: int = MAX_LINE_BYTES,
    shard: Shard | None = None,
) -> Iterator[list[str]]:
    """Stream the documents of a corpus, one list of clean sentences at a time.

    Args:
        paths: files, folders or globs (see `resolve_paths`).
        text_field: the JSON field or Parquet column that holds the text.
        split_sentences: split each line into sentences; if False a line is one sentence.
        stats: counters to fill while reading (files with sha256, documents, drops, ...).
        deduplicate: drop documents whose cleaned lines equal an earlier document's.
        max_line_bytes: longest line (or JSON record) accepted; longer ones are an error.
        shard: keep only this shard's documents (see `data_prep.sharding`); `stats` then
            counts only them, so the shards' counts sum to the whole corpus's.

    Returns:
        An iterator of documents, each a non-empty list of non-empty sentences.

    Raises:
        CorpusError: a path is missing (raised at the call) or a file cannot be read as its
            extension says, or the corpus holds no documents (raised while iterating).
    """
    files = resolve_paths(paths)  # here, so that a bad path fails before anything is read
    stats = stats if stats is not None else CorpusStats()
    return _stream_documents(files, text_field, split_sentences, stats, deduplicate, max_line_bytes,
                             shard)


def _stream_documents(
    files: list[Path],
    text_field: str,
    split_sentences: bool,
    stats: CorpusStats,
    deduplicate: bool,
    max_line_bytes: int,
    shard: Shard | None,
) -> Iterator[list[str]]:
    duplicates = DuplicateFilter() if deduplicate else None
    yielded = seen = False
    for path in files:
        replacements = before = stats.invalid_utf8_replacements
        for raw_document in read_raw_documents(path, stats, text_field, max_line_bytes):
            seen = True
            if shard is not None and not shard.owns(raw_digest(raw_document)):
                # Its invalid bytes were counted as its lines were read: they are another shard's.
                stats.invalid_utf8_replacements = replacements
                continue
            replacements = stats.invalid_utf8_replacements
            sentences = _clean_document(raw_document, split_sentences, stats, duplicates)
            if sentences is None:
                continue
            stats.documents += 1
            stats.sentences += len(sentences)
            stats.characters += sum(map(len, sentences))
            yielded = True
            yield sentences
        if stats.invalid_utf8_replacements > before:
            stats.invalid_utf8_files.append(str(path))
    if not yielded and not (seen and shard is not None):  # a shard may be empty; a corpus not
        raise CorpusError(f"no documents found in {_describe(files)}: the corpus is empty or blank")


def _clean_document(raw_document: list[str], split_sentences: bool, stats: CorpusStats,
                    duplicates: DuplicateFilter | None) -> list[str] | None:
    """A raw document's clean sentences; None (counted in `stats`) for an empty or repeated one."""
    lines = [line for line in map(clean_text, raw_document) if line]
    if not lines:
        stats.empty_documents_dropped += 1
        return None
    if duplicates is not None and duplicates.is_duplicate(lines):
        stats.duplicate_documents_dropped += 1
        return None
    if split_sentences:
        return [sentence for line in lines for sentence in split_into_sentences(line)]
    return lines


def sample_documents(
    paths: Iterable[str | Path],
    max_bytes: int,
    text_field: str = "text",
    split_sentences: bool = True,
    stats: CorpusStats | None = None,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[list[str]]:
    """A deterministic, evenly spread sample of a corpus's documents, read in one pass.

    The sample is the documents of lowest content-hash priority whose clean sentences total at
    most `max_bytes` UTF-8 bytes (see `ByteBudgetSample`); memory holds the sample alone. A
    document whose priority is already out of reach is not cleaned.

    Returns:
        The sampled documents, in priority order; `stats` counts the corpus's files and the
        sampled documents only.

    Raises:
        CorpusError: as `read_documents`; also when the corpus holds no documents.
    """
    files = resolve_paths(paths)
    stats = stats if stats is not None else CorpusStats()
    sample = ByteBudgetSample(max_bytes)
    for path in files:
        for raw_document in read_raw_documents(path, stats, text_field, max_line_bytes):
            digest = raw_digest(raw_document)
            if not sample.wants(digest):
                continue
            sentences = _clean_document(raw_document, split_sentences, stats, None)
            if sentences is not None:
                sample.offer(digest, sentences)
    documents = sample.documents()
    if not documents:
        raise CorpusError(f"no documents found in {_describe(files)}: the corpus is empty or blank, "
                          f"or no document fits a sample of {max_bytes:,} bytes")
    stats.documents = len(documents)
    stats.sentences = sum(map(len, documents))
    stats.characters = sum(len(sentence) for document in documents for sentence in document)
    return documents


def _describe(files: list[Path]) -> str:
    shown = ", ".join(str(path) for path in files[:3])
    return shown if len(files) <= 3 else f"{shown} and {len(files) - 3} more files"
