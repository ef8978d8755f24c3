"""Raw corpus to clean documents of sentences: readers, cleaning, sentence splitting, dedup."""

from data_prep.documents import read_documents, sample_documents
from data_prep.errors import CorpusError
from data_prep.paths import (
    SUPPORTED_EXTENSIONS,
    is_stream,
    resolve_paths,
    skipped_folders_note,
    skipped_note,
)
from data_prep.sharding import Shard
from data_prep.stats import CorpusStats

__all__ = [
    "CorpusError", "CorpusStats", "SUPPORTED_EXTENSIONS", "Shard", "is_stream", "read_documents",
    "resolve_paths", "sample_documents", "skipped_folders_note", "skipped_note",
]
