"""Corpus documents to a tokenized Arrow dataset: spool to disk, encode with `datasets.map`
(with --num-proc, in `process_map`'s processes), split."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets.arrow_writer import ArrowWriter
from tokenizers import Tokenizer
from tqdm import tqdm

from bertpre.data.folder import TRAIN_SPLIT, VALIDATION_SPLIT
from bertpre.data.process_map import map_in_processes
from bertpre.errors import UserError
from bertpre.tokenizer.alphabet import CharacterCounts
from bertpre.tokenizer.sentence_encoder import ChunkEncoder, sum_per_group
from bertpre.tokenizer.word_boundaries import WordStarts
from bertpre.tokenizer.wordpiece import build_tokenizer

DOCUMENTS_FEATURES = datasets.Features({"sentences": datasets.List(datasets.Value("string"))})
DOCUMENTS_TYPE = DOCUMENTS_FEATURES.arrow_schema.field("sentences").type
COUNT_COLUMNS = ["num_sentences", "num_tokens", "num_unk_tokens", "num_long_words"]
ENCODED_FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.List(datasets.Value("int32"))),
        **{name: datasets.Value("int64") for name in COUNT_COLUMNS},
    }
)
# With --word-boundaries: per sentence, 1 for each token that begins a word.
WORD_STARTS_FEATURE = datasets.List(datasets.List(datasets.Value("uint8")))
BATCH_DOCUMENTS = 1000


@contextmanager
def progress_bars(show: bool) -> Iterator[None]:
    """Show or hide datasets' own bars for the duration, restoring the caller's setting."""
    was_enabled = datasets.is_progress_bar_enabled()
    if show:
        datasets.enable_progress_bars()
    else:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()
        else:
            datasets.disable_progress_bars()


def spool_documents(
    documents: Iterable[list[str]], path: Path, show_progress: bool, count_characters: bool = True
) -> tuple[datasets.Dataset, CharacterCounts | None]:
    """Write documents to an Arrow file and memory-map it, so no later stage holds them in RAM.

    Returns:
        The documents (column `sentences`), and their character counts for the vocab's alphabet
        (None unless `count_characters`: a reused vocab needs none).
    """
    # Which characters separate words is the same for cased and uncased BERT tokenizers.
    char_counts = CharacterCounts(build_tokenizer(None, lowercase=True)) if count_characters else None
    pending: list[list[str]] = []

    def write_pending() -> None:
        writer.write_table(pa.table({"sentences": pa.array(pending, DOCUMENTS_TYPE)}))
        if char_counts is not None:
            char_counts.update(sentence for document in pending for sentence in document)
        pending.clear()

    with ArrowWriter(features=DOCUMENTS_FEATURES, path=str(path)) as writer:
        for document in tqdm(documents, desc="Reading corpus", unit=" docs", file=sys.stderr,
                             disable=not show_progress):
            pending.append(document)
            if len(pending) == BATCH_DOCUMENTS:
                write_pending()
        if pending:
            write_pending()
        writer.finalize()
    return datasets.Dataset.from_file(str(path)), char_counts


class SentenceBatches:
    """All sentences, a batch of documents at a time, for `train_from_iterator`; re-iterable."""

    def __init__(self, documents: datasets.Dataset, show_progress: bool, desc: str = "Training vocab") -> None:
        self.documents = documents
        self.show_progress = show_progress
        self.desc = desc

    def __len__(self) -> int:
        return len(self.documents)

    def __iter__(self) -> Iterator[list[str]]:
        # Our own bar on stderr: tokenizers' bar writes to stdout, where the summary goes.
        with tqdm(total=len(self.documents), desc=self.desc, unit=" docs", file=sys.stderr,
                  disable=not self.show_progress) as bar:
            for batch in self.documents.iter(batch_size=BATCH_DOCUMENTS):
                bar.update(len(batch["sentences"]))
                yield [sentence for document in batch["sentences"] for sentence in document]


def encode_documents(batch: pa.Table, encoder: ChunkEncoder, word_starts: WordStarts | None = None) -> pa.Table:
    """Encode a batch of documents' sentences in one call, counting as it goes.

    Sentences without tokens (only characters the normalizer removes) are dropped, and so are
    documents left without sentences: pair sampling could draw nothing from them. With
    `word_starts`, a `word_starts` column holds each kept sentence's word-start flags.
    """
    documents = batch.column("sentences").combine_chunks()
    sentences_per_document = pc.list_value_length(documents).to_numpy(zero_copy_only=False)
    encoded = encoder.encode(documents.flatten())
    if encoded.ids.size >= 2**31:  # Arrow list offsets are int32
        raise UserError(f"{BATCH_DOCUMENTS:,} documents hold {encoded.ids.size:,} tokens, more than one "
                        "Arrow batch can; separate documents with blank lines (plain text) or use one record each")
    kept = encoded.lengths > 0
    document_ends = np.cumsum(sentences_per_document)
    kept_per_document = sum_per_group(kept.astype(np.int64), document_ends)
    has_sentences = kept_per_document > 0
    # Dropped sentences hold no ids, so the flat ids stand as they are; only offsets change.
    sentence_offsets = np.concatenate([[0], np.cumsum(encoded.lengths[kept])]).astype(np.int32)
    document_offsets = np.concatenate([[0], np.cumsum(kept_per_document[has_sentences])]).astype(np.int32)
    sentences = pa.ListArray.from_arrays(sentence_offsets, pa.array(encoded.ids, pa.int32()))
    columns = {
        "input_ids": pa.ListArray.from_arrays(document_offsets, sentences),
        **({"word_starts": _word_starts_column(documents.flatten(), encoder, word_starts, encoded,
                                               kept, sentence_offsets, document_offsets)}
           if word_starts is not None else {}),
        "num_sentences": kept_per_document,
        "num_tokens": sum_per_group(encoded.lengths, document_ends),
        "num_unk_tokens": sum_per_group(encoded.unk_tokens, document_ends),
        "num_long_words": sum_per_group(encoded.long_words, document_ends),
    }
    return pa.table({name: column if name in ("input_ids", "word_starts")
                     else pa.array(column[has_sentences], pa.int64())
                     for name, column in columns.items()})


def _word_starts_column(sentences: pa.Array, encoder: ChunkEncoder, word_starts: WordStarts,
                        encoded, kept: np.ndarray, sentence_offsets: np.ndarray,
                        document_offsets: np.ndarray) -> pa.ListArray:
    """The kept sentences' word-start flags, shaped like `input_ids` (documents of sentences)."""
    texts = sentences.to_pylist()
    encodings = encoder.literal_tokenizer.encode_batch(texts, add_special_tokens=False)
    flags = [word_starts.of_sentence(text, encoding)
             for text, encoding, keep in zip(texts, encodings, kept.tolist(), strict=True) if keep]
    ids = [encoding.ids for encoding, keep in zip(encodings, kept.tolist(), strict=True) if keep]
    flat = np.concatenate(flags) if flags else np.zeros(0, np.uint8)
    if len(flat) != len(encoded.ids) or not np.array_equal(np.concatenate(ids or [[]]), encoded.ids):
        raise RuntimeError("word boundaries were computed on other tokens than the sentence "
                           "encoder's; please report this as a bug")
    per_sentence = pa.ListArray.from_arrays(sentence_offsets, pa.array(flat, pa.uint8()))
    return pa.ListArray.from_arrays(document_offsets, per_sentence)


def encode_corpus(
    documents: datasets.Dataset, tokenizer: Tokenizer, num_proc: int, fingerprint: str,
    word_starts: WordStarts | None = None,
) -> tuple[datasets.Dataset, dict[str, int]]:
    """Token ids of every sentence, one row per document, and the summed counts (and, with
    `word_starts`, each token's word-start flag, segmented in the encoding processes).

    `fingerprint` replaces datasets' own, which would hash the temporary folder's path and so
    differ from run to run (and with it DATA's state.json). With `num_proc` > 1 the shards are
    encoded in forked processes (`process_map`), their files written beside `documents`' own; a
    dataset held in memory has no such folder and is encoded in this process.
    """
    options = dict(
        batched=True,
        batch_size=BATCH_DOCUMENTS,
        remove_columns=["sentences"],
        features=ENCODED_FEATURES if word_starts is None else datasets.Features(
            {"input_ids": ENCODED_FEATURES["input_ids"], "word_starts": WORD_STARTS_FEATURE,
             **{name: ENCODED_FEATURES[name] for name in COUNT_COLUMNS}}),
        fn_kwargs={"encoder": ChunkEncoder(tokenizer), "word_starts": word_starts},
        load_from_cache_file=False,
    )
    documents = documents.with_format("arrow")
    if num_proc > 1 and len(documents) > 1 and documents.cache_files:  # the shards' files go beside it
        with _single_threaded_tokenizers_in_workers(num_proc):
            encoded = map_in_processes(documents, encode_documents, num_proc=num_proc,
                                       folder=Path(documents.cache_files[0]["filename"]).parent,
                                       new_fingerprint=f"{fingerprint}-encoded", desc="Encoding sentences",
                                       **options)
    else:
        encoded = documents.map(encode_documents, new_fingerprint=f"{fingerprint}-encoded",
                                desc="Encoding sentences", **options)
    counts = {name: int(encoded.data.column(name).to_numpy().sum()) for name in COUNT_COLUMNS}
    encoded = encoded.with_format(None).remove_columns(COUNT_COLUMNS, new_fingerprint=f"{fingerprint}-ids")
    return encoded, counts


@contextmanager
def _single_threaded_tokenizers_in_workers(num_proc: int) -> Iterator[None]:
    """Forked workers inherit this; without it tokenizers warns in each one (the trainer's
    threads ran before the fork) and turns its threads off anyway. Restored afterwards, so the
    calling process keeps its threads."""
    if num_proc <= 1:
        yield
        return
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TOKENIZERS_PARALLELISM"]
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def split_by_document(
    encoded: datasets.Dataset, validation_share: float, seed: int, fingerprint: str
) -> datasets.DatasetDict:
    """A seeded share of documents for validation (at least one), the rest for training, each
    kept in corpus order."""
    total = len(encoded)
    if total < 2:
        raise UserError(
            f"the corpus has {total} document with tokens, but DATA needs one for training and one "
            "for validation; separate documents with a blank line (plain text) or use one record each"
        )
    num_validation = min(total - 1, max(1, round(total * validation_share)))
    order = np.random.default_rng(seed).permutation(total)
    validation = np.sort(order[:num_validation])
    train = np.sort(order[num_validation:])
    return datasets.DatasetDict(
        {
            TRAIN_SPLIT: encoded.select(train, new_fingerprint=f"{fingerprint}-train"),
            VALIDATION_SPLIT: encoded.select(validation, new_fingerprint=f"{fingerprint}-validation"),
        }
    )
