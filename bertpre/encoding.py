"""Corpus documents to a tokenized Arrow dataset: spool to disk, encode with `datasets.map`, split."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets
import numpy as np
from datasets.arrow_writer import ArrowWriter
from tokenizers import Tokenizer
from tqdm import tqdm

from bertpre.alphabet import CharacterCounts
from bertpre.data import TRAIN_SPLIT, VALIDATION_SPLIT
from bertpre.errors import UserError
from bertpre.tokenizer import MAX_INPUT_CHARS_PER_WORD, UNK_TOKEN, build_tokenizer

DOCUMENTS_FEATURES = datasets.Features({"sentences": datasets.List(datasets.Value("string"))})
COUNT_COLUMNS = ["num_sentences", "num_tokens", "num_unk_tokens", "num_long_words"]
ENCODED_FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.List(datasets.Value("int32"))),
        **{name: datasets.Value("int64") for name in COUNT_COLUMNS},
    }
)
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
    documents: Iterable[list[str]], path: Path, show_progress: bool
) -> tuple[datasets.Dataset, CharacterCounts]:
    """Write documents to an Arrow file and memory-map it, so no later stage holds them in RAM.

    Returns:
        The documents (column `sentences`), and their character counts (for the vocab's alphabet).
    """
    # Which characters separate words is the same for cased and uncased BERT tokenizers.
    char_counts = CharacterCounts(build_tokenizer(None, lowercase=True))
    pending: list[str] = []
    with ArrowWriter(features=DOCUMENTS_FEATURES, path=str(path), writer_batch_size=BATCH_DOCUMENTS) as writer:
        for index, document in enumerate(tqdm(documents, desc="Reading corpus", unit=" docs",
                                              file=sys.stderr, disable=not show_progress), 1):
            writer.write({"sentences": document})
            pending.extend(document)
            if index % BATCH_DOCUMENTS == 0:
                char_counts.update(pending)
                pending.clear()
        char_counts.update(pending)
        writer.finalize()
    return datasets.Dataset.from_file(str(path)), char_counts


class SentenceBatches:
    """All sentences, a batch of documents at a time, for `train_from_iterator`; re-iterable."""

    def __init__(self, documents: datasets.Dataset, show_progress: bool) -> None:
        self.documents = documents
        self.show_progress = show_progress

    def __len__(self) -> int:
        return len(self.documents)

    def __iter__(self) -> Iterator[list[str]]:
        # Our own bar on stderr: tokenizers' bar writes to stdout, where the summary goes.
        with tqdm(total=len(self.documents), desc="Training vocab", unit=" docs", file=sys.stderr,
                  disable=not self.show_progress) as bar:
            for batch in self.documents.iter(batch_size=BATCH_DOCUMENTS):
                bar.update(len(batch["sentences"]))
                yield [sentence for document in batch["sentences"] for sentence in document]


def encode_documents(batch: dict, tokenizer: Tokenizer, unk_id: int) -> dict:
    """Encode a batch of documents' sentences in one batch call, counting as it goes.

    Sentences without tokens (only characters the normalizer removes) are dropped, and so are
    documents left without sentences: pair sampling could draw nothing from them.
    """
    documents = batch["sentences"]
    sentences = [sentence for document in documents for sentence in document]
    # The fast variant skips offsets; the rare sentences with [UNK] are encoded again for them.
    encodings = tokenizer.encode_batch_fast(sentences, add_special_tokens=False)
    columns: dict[str, list] = {"input_ids": [], **{name: [] for name in COUNT_COLUMNS}}
    start = 0
    for document in documents:
        input_ids, num_tokens, num_unk, num_long = [], 0, 0, 0
        for sentence, encoding in zip(document, encodings[start : start + len(document)], strict=True):
            ids = encoding.ids
            if not ids:
                continue
            input_ids.append(ids)
            num_tokens += len(ids)
            unk_here = ids.count(unk_id)
            if unk_here:
                num_unk += unk_here
                num_long += count_long_words(tokenizer, sentence, unk_id)
        start += len(document)
        if not input_ids:
            continue
        columns["input_ids"].append(input_ids)
        columns["num_sentences"].append(len(input_ids))
        columns["num_tokens"].append(num_tokens)
        columns["num_unk_tokens"].append(num_unk)
        columns["num_long_words"].append(num_long)
    return columns


def count_long_words(tokenizer: Tokenizer, sentence: str, unk_id: int) -> int:
    """[UNK] tokens standing for a whole word over WordPiece's character limit."""
    encoding = tokenizer.encode(sentence, add_special_tokens=False)
    return sum(
        1
        for token_id, (begin, end) in zip(encoding.ids, encoding.offsets, strict=True)
        if token_id == unk_id and end - begin > MAX_INPUT_CHARS_PER_WORD
    )


def encode_corpus(
    documents: datasets.Dataset, tokenizer: Tokenizer, num_proc: int, fingerprint: str
) -> tuple[datasets.Dataset, dict[str, int]]:
    """Token ids of every sentence, one row per document, and the summed counts.

    `fingerprint` replaces datasets' own, which would hash the temporary folder's path and so
    differ from run to run (and with it DATA's state.json).
    """
    with _single_threaded_tokenizers_in_workers(num_proc):
        encoded = documents.map(
            encode_documents,
            batched=True,
            batch_size=BATCH_DOCUMENTS,
            num_proc=num_proc if num_proc > 1 else None,
            remove_columns=["sentences"],
            features=ENCODED_FEATURES,
            fn_kwargs={"tokenizer": tokenizer, "unk_id": tokenizer.token_to_id(UNK_TOKEN)},
            new_fingerprint=f"{fingerprint}-encoded",
            load_from_cache_file=False,
            desc="Encoding sentences",
        )
    counts = {name: int(encoded.data.column(name).to_numpy().sum()) for name in COUNT_COLUMNS}
    return encoded.remove_columns(COUNT_COLUMNS, new_fingerprint=f"{fingerprint}-ids"), counts


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
