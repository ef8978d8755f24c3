"""Deterministic Unigram training: SentencePiece's trainer, its model turned into a `tokenizers` Unigram.

`tokenizers`' own UnigramTrainer (0.23) sums and breaks ties in hash-map order, so two trainings
on the same text keep different rare pieces. SentencePiece's trainer (the one XLM-R's vocab came
from) gives the same model bytes for the same sentences and options, run after run, as long as
the number of threads it splits the sentences into is the same (each thread sums its share, and
float sums depend on the grouping): that number is fixed here, not taken from the machine.

SentencePiece is trained on text already normalized by the pipeline bertpre builds (NFKC, and
lowercase when asked) and already given the word-start space the `▁` Metaspace pre-tokenizer
adds, with its own normalization off: the pieces it learns are then the pieces that pipeline
will cut text into. Encoding with the converted tokenizer gives SentencePiece's ids on every
text but two kinds: exact ties (a run of one repeated character cut into the same pieces in
another order, equal in score) and literal special-token text (`<unk>` written in the corpus is
the special piece to `tokenizers`' Unigram, as in XLM-R's own tokenizer.json; SentencePiece
spells it out).
"""
from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterable, Iterator

import sentencepiece
from tokenizers import Tokenizer, models, normalizers

from bertpre.errors import UserError

# The trainer's E-step splits the sentences into this many shares, whatever the machine's cores:
# changing it changes the vocab (a 2-core machine runs the 16 threads two at a time).
TRAINING_THREADS = 16
# Piece ids as XLM-R's (and RoBERTa's) are: <s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4.
SENTENCEPIECE_SPECIAL_PIECES = dict(bos_id=0, bos_piece="<s>", pad_id=1, pad_piece="<pad>", eos_id=2,
                                    eos_piece="</s>", unk_id=3, unk_piece="<unk>", control_symbols=["<mask>"])
# SentencePiece skips longer sentences silently (4,192 bytes by default); bertpre trains on all.
MAX_SENTENCE_BYTES = 1 << 30


def sentencepiece_text(text: str, normalizer: normalizers.Normalizer) -> str:
    """`text` as the Unigram model of bertpre's pipeline sees it, spaces not yet `▁`: normalized,
    and with the space the Metaspace pre-tokenizer prepends (it adds none before a space or `▁`)."""
    normalized = normalizer.normalize_str(text)
    return normalized if normalized.startswith((" ", "▁")) else " " + normalized


def train_sentencepiece(texts: Iterable[list[str]], tokenizer: Tokenizer, vocab_size: int,
                        max_piece_length: int, stopping: threading.Event | None = None) -> bytes | None:
    """A SentencePiece Unigram model (its serialized bytes) of `vocab_size` pieces, the five
    special ones included (fewer where the text has fewer), trained on batches of texts as
    `tokenizer`'s normalizer reads them. None when `stopping` was set: the trainer is abandoned
    while it reads, not left to train on part of the text.

    Raises:
        UserError: there is no text, or the vocab cannot hold every character of the text.
    """
    normalizer = tokenizer.normalizer
    given = 0

    def sentences() -> Iterator[str]:
        nonlocal given
        for batch in texts:
            if stopping is not None and stopping.is_set():
                raise RuntimeError("stopped")  # SentencePiece ends training with the iterator's error
            for text in batch:
                if text:
                    given += 1
                    yield sentencepiece_text(text, normalizer)

    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=sentences(), model_writer=model, model_type="unigram", vocab_size=vocab_size,
            # every character is kept (no <unk> in the training text) and no bytes, as before
            character_coverage=1.0, byte_fallback=False, max_sentencepiece_length=max_piece_length,
            # the text comes normalized and spaced as the tokenizers pipeline reads it
            normalization_rule_name="identity", add_dummy_prefix=False, remove_extra_whitespaces=False,
            input_sentence_size=0, shuffle_input_sentence=False, max_sentence_length=MAX_SENTENCE_BYTES,
            # a small corpus gives the pieces it has (the summary says so), as WordPiece's does
            hard_vocab_limit=False, num_threads=TRAINING_THREADS, minloglevel=2, **SENTENCEPIECE_SPECIAL_PIECES)
    except RuntimeError as error:
        if stopping is not None and stopping.is_set():
            return None
        if not given:
            raise UserError("the corpus has no text to train a vocab on; check the corpus files") from None
        raise _user_error(str(error), vocab_size) from None
    return model.getvalue()


def _user_error(message: str, vocab_size: int) -> Exception:
    """SentencePiece's refusals, said for `bertpre tokenize`; anything else stays a bug."""
    too_small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
    if too_small:
        return UserError(f"--vocab-size {vocab_size:,} is too small for a unigram vocab of this corpus: it must "
                         f"hold every character of the text and the 5 special tokens, {int(too_small[1]):,} "
                         "in all; raise --vocab-size")
    return RuntimeError(f"SentencePiece's Unigram trainer failed: {message}")


def unigram_from_sentencepiece(model_proto: bytes) -> models.Unigram:
    """The `tokenizers` Unigram model of a SentencePiece Unigram model: its pieces in id order
    with their scores (the special ones 0.0), its unknown piece."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
    vocab = [(processor.id_to_piece(index), processor.get_score(index))
             for index in range(processor.get_piece_size())]
    return models.Unigram(vocab, unk_id=processor.unk_id(), byte_fallback=False)
