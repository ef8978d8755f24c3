"""Token ids of many sentences at once, tokenizing each distinct space-separated chunk only once.

BERT's normalizer works character by character and its pre-tokenizer splits at every space, so
a sentence's ids are the ids of its chunks (`sentence.split(" ")`) in order. Natural text
repeats its words, so a batch of sentences has far fewer distinct chunks than chunks: Arrow
splits and dictionary-encodes the chunks, the tokenizer sees each new chunk once, and numpy
gathers the ids back in sentence order. The result is identical to
`tokenizer.encode_batch(sentences)` (tests/test_chunk_cache.py checks it, fuzzed and on real
corpora) and several times faster on space-separated languages; text without spaces (Chinese)
costs about what the tokenizer alone does.

Byte-level BPE and Unigram tokenizers are not cut at spaces (a piece carries the space before
it, `Ġ` or `▁`): their sentences go through the tokenizer whole, as AutoTokenizer encodes them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tokenizers import Tokenizer, models

from bertpre.tokenizer.roles import tokenizer_kind, unknown_token_id
from bertpre.tokenizer.wordpiece import MAX_INPUT_CHARS_PER_WORD, SEP_TOKEN, UNK_TOKEN

CACHE_ENTRIES = 200_000  # chunks kept between batches; cleared when full (about 40 MB)
SENTENCES_PER_PASS = 1 << 16  # sentences encoded together (a pass of prose: tens of MB of arrays)
MISSING_PER_TEXT = 2_000  # new chunks joined into one text for the tokenizer
MISSING_TEXTS = 64  # texts per encode_batch call (its threads share them)
_SEPARATOR = " [SEP] "


@dataclass
class EncodedSentences:
    """Token ids of a batch of sentences, flat: sentence i is `ids[starts[i]:starts[i] + lengths[i]]`."""

    ids: np.ndarray  # (total tokens,) int32
    lengths: np.ndarray  # (sentences,) int64
    unk_tokens: np.ndarray  # (sentences,) int64: [UNK] ids per sentence
    long_words: np.ndarray  # (sentences,) int64: [UNK]s standing for a word over the length limit

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.lengths) - self.lengths


class ChunkEncoder:
    """Encodes sentences (no special tokens added) through a cache of chunk → ids.

    Text is only text: a literal "[MASK]" (or any other special token's text) in a sentence is
    tokenized as the characters it is, as the original BERT's tokenizer did, never as the
    special token's id; only bertpre puts special tokens into instances. Other added tokens
    (words a user added to a vocab) are matched in text as usual.
    """

    def __init__(self, tokenizer: Tokenizer, cache_entries: int = CACHE_ENTRIES) -> None:
        self.tokenizer = tokenizer
        self.literal_tokenizer = without_special_tokens(tokenizer)
        special = sorted({token.content for token in tokenizer.get_added_tokens_decoder().values()
                          if token.special})
        self.special_text = re.compile("|".join(map(re.escape, special))) if special else None
        # Only WordPiece splits at every space: a byte-level BPE piece carries the space before
        # it (Ġ), so other kinds encode whole sentences.
        self.by_chunks = tokenizer_kind(tokenizer) == "wordpiece"
        self.unk_id = tokenizer.token_to_id(UNK_TOKEN) if self.by_chunks else unknown_token_id(tokenizer)
        self.separator_id = tokenizer.token_to_id(SEP_TOKEN)  # what _SEPARATOR encodes to
        self.cache_entries = cache_entries
        self.ids: dict[str, tuple[int, ...]] = {}
        self.long_words: dict[str, int] = {}  # only chunks that hold an over-long word
        self.whole_words, self.lowercase = _whole_word_vocab(tokenizer)

    def encode(self, sentences: pa.Array | list[str]) -> EncodedSentences:
        sentences = pa.array(sentences, pa.string()) if isinstance(sentences, list) else sentences
        if not self.by_chunks:
            return self._encode_sentences(sentences.to_pylist())
        if len(sentences) <= SENTENCES_PER_PASS:
            return self._encode_pass(sentences)
        # In passes, so that a huge batch (a corpus given as one document) needs bounded memory.
        passes = [self._encode_pass(sentences.slice(first, SENTENCES_PER_PASS))
                  for first in range(0, len(sentences), SENTENCES_PER_PASS)]
        return EncodedSentences(*(np.concatenate([getattr(one, name) for one in passes])
                                  for name in ("ids", "lengths", "unk_tokens", "long_words")))

    def _encode_sentences(self, sentences: list[str]) -> EncodedSentences:
        """Each sentence through the tokenizer as it stands (text only, no special tokens)."""
        encodings = self.literal_tokenizer.encode_batch_fast(sentences, add_special_tokens=False)
        lengths = np.fromiter((len(encoding.ids) for encoding in encodings), np.int64, count=len(encodings))
        ids = np.fromiter(chain.from_iterable(encoding.ids for encoding in encodings), np.int32,
                          count=int(lengths.sum()))
        unk_tokens = (sum_per_group((ids == self.unk_id).astype(np.int64), np.cumsum(lengths))
                      if self.unk_id is not None else np.zeros(len(lengths), np.int64))
        return EncodedSentences(ids, lengths, unk_tokens, np.zeros(len(lengths), np.int64))

    def _encode_pass(self, sentences: pa.Array) -> EncodedSentences:
        chunk_lists = pc.split_pattern(sentences, pattern=" ")
        chunks_per_sentence = pc.list_value_length(chunk_lists).to_numpy(zero_copy_only=False)
        coded = pc.dictionary_encode(chunk_lists.flatten())
        codes = coded.indices.to_numpy(zero_copy_only=False)  # (chunks,) → distinct chunk
        distinct = coded.dictionary.to_pylist()
        pieces, long_words = self._lookup(distinct)

        # Ragged gather: chunk k of the batch contributes distinct_ids[offset[codes[k]]:...+len].
        distinct_lengths = np.fromiter(map(len, pieces), np.int64, count=len(pieces))
        distinct_ids = np.fromiter(chain.from_iterable(pieces), np.int32, count=int(distinct_lengths.sum()))
        distinct_starts = np.cumsum(distinct_lengths) - distinct_lengths
        chunk_lengths = distinct_lengths[codes]
        total = int(chunk_lengths.sum())
        out_starts = np.cumsum(chunk_lengths) - chunk_lengths
        ids = distinct_ids[np.repeat(distinct_starts[codes] - out_starts, chunk_lengths) + np.arange(total)]

        chunk_ends = np.cumsum(chunks_per_sentence)
        lengths = sum_per_group(chunk_lengths, chunk_ends)
        token_ends = np.cumsum(lengths)
        unk_tokens = sum_per_group((ids == self.unk_id).astype(np.int64), token_ends)
        long_per_chunk = long_words[codes] if long_words.any() else np.zeros(len(codes), np.int64)
        if len(self.ids) > self.cache_entries:
            self.ids.clear()
            self.long_words.clear()
        return EncodedSentences(ids, lengths, unk_tokens, sum_per_group(long_per_chunk, chunk_ends))

    def _lookup(self, distinct: list[str]) -> tuple[list[tuple[int, ...]], np.ndarray]:
        """Ids and over-long word counts of each distinct chunk, tokenizing those not cached."""
        self.ids[""] = ()  # between two spaces: nothing to tokenize
        missing = [chunk for chunk in distinct if chunk not in self.ids]
        if self.whole_words is not None:
            missing = self._take_whole_words(missing)
        if self.special_text is not None:
            literal = [chunk for chunk in missing if self.special_text.search(chunk)]
            if literal:
                self._tokenize_literally(literal)
                missing = [chunk for chunk in missing if chunk not in self.ids]
        for first in range(0, len(missing), MISSING_PER_TEXT * MISSING_TEXTS):
            self._tokenize(missing[first : first + MISSING_PER_TEXT * MISSING_TEXTS])
        pieces = list(map(self.ids.__getitem__, distinct))
        long_words = np.fromiter((self.long_words.get(chunk, 0) for chunk in distinct), np.int64,
                                 count=len(distinct)) if self.long_words else np.zeros(len(distinct), np.int64)
        return pieces, long_words

    def _take_whole_words(self, chunks: list[str]) -> list[str]:
        """Cache the chunks that are one vocab token as they stand; return the others.

        A chunk of ASCII letters and digits is a single word to BERT's pre-tokenizer, its only
        normalization is lowercasing (uncased), and WordPiece's longest-first match takes the
        whole word when the vocab has it. About half the distinct words of English prose are
        such chunks (WikiText-2 valid, vocab 8,000), and the tokenizer is spared them.
        """
        others = []
        for chunk in chunks:
            token_id = None
            if chunk.isascii() and chunk.isalnum() and len(chunk) <= MAX_INPUT_CHARS_PER_WORD:
                token_id = self.whole_words.get(chunk.lower() if self.lowercase else chunk)
            if token_id is None:
                others.append(chunk)
            else:
                self.ids[chunk] = (token_id,)
        return others

    def _tokenize(self, chunks: list[str]) -> None:
        """Tokenize new chunks into the cache.

        The tokenizer's cost per text (building its Encoding) far exceeds its cost per chunk,
        so new chunks go in a few long texts, joined by " [SEP] ": [SEP] is matched whole as a
        special token wherever it stands, and its ids mark where one chunk's tokens end. A group
        whose text holds a literal "[SEP]" of its own is tokenized a chunk at a time instead.
        """
        groups = [chunks[first : first + MISSING_PER_TEXT] for first in range(0, len(chunks), MISSING_PER_TEXT)]
        texts = [_SEPARATOR.join(group) for group in groups]
        encodings = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        for group, encoding in zip(groups, encodings, strict=True):
            ids = encoding.ids
            ends = [index for index, token_id in enumerate(ids) if token_id == self.separator_id]
            if len(ends) != len(group) - 1:
                pieces = [encoding.ids for encoding in self.tokenizer.encode_batch_fast(group, add_special_tokens=False)]
            else:
                starts = [0] + [end + 1 for end in ends]
                pieces = list(map(ids.__getitem__, map(slice, starts, [*ends, len(ids)])))
            self.ids.update(zip(group, map(tuple, pieces), strict=True))
            if self.unk_id in ids:  # only a chunk over the limit can hold an over-long word
                self._count_long_words([chunk for chunk, piece in zip(group, pieces, strict=True)
                                        if len(chunk) > MAX_INPUT_CHARS_PER_WORD and self.unk_id in piece])

    def _tokenize_literally(self, chunks: list[str]) -> None:
        """Tokenize chunks holding a special token's text, one by one, as plain text."""
        encodings = self.literal_tokenizer.encode_batch_fast(chunks, add_special_tokens=False)
        pieces = [tuple(encoding.ids) for encoding in encodings]
        self.ids.update(zip(chunks, pieces, strict=True))
        self._count_long_words([chunk for chunk, piece in zip(chunks, pieces, strict=True)
                                if len(chunk) > MAX_INPUT_CHARS_PER_WORD and self.unk_id in piece],
                               self.literal_tokenizer)

    def _count_long_words(self, chunks: list[str], tokenizer: Tokenizer | None = None) -> None:
        """Record the chunks whose [UNK]s stand for words over WordPiece's length limit."""
        if not chunks:
            return
        tokenizer = tokenizer or self.tokenizer
        for chunk, encoding in zip(chunks, tokenizer.encode_batch(chunks, add_special_tokens=False),
                                   strict=True):
            count = sum(1 for token_id, (begin, end) in zip(encoding.ids, encoding.offsets, strict=True)
                        if token_id == self.unk_id and end - begin > MAX_INPUT_CHARS_PER_WORD)
            if count:
                self.long_words[chunk] = count


def _whole_word_vocab(tokenizer: Tokenizer) -> tuple[dict[str, int] | None, bool]:
    """(WordPiece vocab, lowercases) when the tokenizer is a plain BERT WordPiece one, for which
    `ChunkEncoder._take_whole_words` is exact; (None, False) for anything else."""
    def state(component) -> dict:
        return json.loads(component.__getstate__()) if component is not None else {}

    normalizer, pre_tokenizer = state(tokenizer.normalizer), state(tokenizer.pre_tokenizer)
    plain = (normalizer.get("type") == "BertNormalizer" and pre_tokenizer.get("type") == "BertPreTokenizer"
             and isinstance(tokenizer.model, models.WordPiece)
             and tokenizer.model.max_input_chars_per_word == MAX_INPUT_CHARS_PER_WORD)
    # An added token made only of letters and digits could match inside such a chunk.
    added = [token.content for token in tokenizer.get_added_tokens_decoder().values()]
    if not plain or any(content.isascii() and content.isalnum() for content in added):
        return None, False
    return tokenizer.get_vocab(with_added_tokens=False), bool(normalizer.get("lowercase"))


# What a Unigram's special pieces are renamed to in `without_special_tokens`: text never holds
# it, since the pre-tokenizer turns every space into "▁" (and normalizers drop U+0000).
UNREACHABLE = "\x00 special piece \x00 "


def without_special_tokens(tokenizer: Tokenizer) -> Tokenizer:
    """The same tokenizer with no special added tokens: "[MASK]" in a text is six characters.

    A Unigram (SentencePiece) vocabulary also holds its special tokens as pieces of its own, with
    the best score (0), which its model would match in text ("</s>" in a line would be the
    separator's id, as AutoTokenizer gives even with `split_special_tokens`); SentencePiece never
    matches such control pieces in text, and neither does this: they are renamed out of reach,
    their ids unchanged.
    """
    state = json.loads(tokenizer.to_str())
    special = {token["content"] for token in state.get("added_tokens") or [] if token.get("special")}
    state["added_tokens"] = [token for token in state.get("added_tokens") or []
                             if not token.get("special")]
    model = state.get("model") or {}
    if model.get("type") == "Unigram":
        model["vocab"] = [[UNREACHABLE + piece if piece in special else piece, score]
                          for piece, score in model["vocab"]]
    return Tokenizer.from_str(json.dumps(state))


def sum_per_group(values: np.ndarray, group_ends: np.ndarray) -> np.ndarray:
    """Sums of consecutive groups of `values`, group i ending (exclusive) at group_ends[i]; empty groups sum to 0."""
    running = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    ends = running[group_ends]
    return ends - np.concatenate([[0], ends[:-1]])
