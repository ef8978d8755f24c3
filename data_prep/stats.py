"""Counters a corpus read fills in, for the DATA manifest and the tokenize summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SourceFile:
    """One corpus file: where it is, its size on disk, and the sha256 of its bytes on disk."""

    path: str
    bytes: int
    sha256: str | None = None  # set once the file has been read to its end


@dataclass
class CorpusStats:
    """What `read_documents` saw: files, kept documents and sentences, and what it dropped.

    Pass one to `read_documents(..., stats=stats)`; it is filled while the documents stream.
    """

    files: list[SourceFile] = field(default_factory=list)
    documents: int = 0
    sentences: int = 0
    characters: int = 0
    empty_documents_dropped: int = 0
    duplicate_documents_dropped: int = 0
    invalid_utf8_replacements: int = 0
    # the files those replacements were in, for the warning (a list of one shard's: not in as_dict)
    invalid_utf8_files: list[str] = field(default_factory=list)

    def add_file(self, path: Path) -> SourceFile:
        """Record a file as it is opened; the caller sets `sha256` when it has read it all."""
        source = SourceFile(path=str(path), bytes=path.stat().st_size)
        self.files.append(source)
        return source

    def as_dict(self) -> dict:
        """The counts as plain JSON-ready values."""
        return {
            "files": [
                {"path": source.path, "bytes": source.bytes, "sha256": source.sha256}
                for source in self.files
            ],
            "documents": self.documents,
            "sentences": self.sentences,
            "characters": self.characters,
            "empty_documents_dropped": self.empty_documents_dropped,
            "duplicate_documents_dropped": self.duplicate_documents_dropped,
            "invalid_utf8_replacements": self.invalid_utf8_replacements,
        }
