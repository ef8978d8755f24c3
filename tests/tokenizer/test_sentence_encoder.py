"""bertpre.tokenizer.sentence_encoder: ids identical to the tokenizer's own, whatever the text, cache state or grouping."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from bertpre.tokenizer import sentence_encoder as chunk_cache
from bertpre.tokenizer.sentence_encoder import ChunkEncoder, without_special_tokens
from bertpre.tokenizer.wordpiece import MAX_INPUT_CHARS_PER_WORD, train_tokenizer

TRAINING_TEXT = [
    ["The quick brown fox jumps over the lazy dog, twice.", "Zoë visited the café in São Paulo."],
    ["Tokenizers split rarer words into more pieces; common words stay whole.",
     "Numbers like 3.14 and 2,718 appear in writing."],
    ["今天天气很好，我们去公园散步。", "ΣΟΦΙΑ and σοφία are the same word."],
]
# Pieces a fuzzed sentence is built from: words, punctuation, every kind of space and the
# characters BERT's normalizer removes, accents (precomposed and combining), CJK, final sigma,
# special tokens written in the text, and words over WordPiece's 100-character limit.
PIECES = [
    "the", "The", "QUICK", "fox", "jumps", "pieces", "café", "cafe\u0301", "Zoë", "ΣΟΦΙΑΣ", "σοφίας",
    "今天", "天气很好", "，", "。", ".", ",", "!?", "(", ")", "3.14", "2,718", "x-ray", "@", "#tag",
    " ", "  ", "\t", "\u00a0", "\u3000", "\n", "\u200b", "\x00", "\x7f", "\ufeff", "\u0301",
    "[MASK]", "[SEP]", "[CLS]", "[UNK]", "[sep]", "a[SEP]b", "ﬁ", "🙂", "\U0001F600x",
    "q" * (MAX_INPUT_CHARS_PER_WORD + 1), "é" * (MAX_INPUT_CHARS_PER_WORD + 3), "z" * MAX_INPUT_CHARS_PER_WORD,
]


def fuzzed_sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    sentences = ["", " ", "  leading and trailing  ", "[SEP]", " [SEP] "]
    for _ in range(count):
        sentences.append("".join(rng.choice(PIECES) + rng.choice(["", " ", " ", " ", "  "])
                                 for _ in range(rng.randint(1, 25))))
    return sentences


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def tokenizer(request):
    return train_tokenizer(TRAINING_TEXT, vocab_size=200, lowercase=request.param, min_frequency=1)


def reference(tokenizer, sentences: list[str]) -> tuple[list[list[int]], list[int], list[int]]:
    """The tokenizer's ids, [UNK] counts and over-long word counts, sentence by sentence, with
    special tokens' text ("[SEP]" in a sentence) read as plain text."""
    unk = tokenizer.token_to_id("[UNK]")
    ids, unks, longs = [], [], []
    plain = without_special_tokens(getattr(tokenizer, "tokenizer", tokenizer))
    for encoding in plain.encode_batch(sentences, add_special_tokens=False):
        ids.append(encoding.ids)
        unks.append(encoding.ids.count(unk))
        longs.append(sum(1 for token_id, (begin, end) in zip(encoding.ids, encoding.offsets, strict=True)
                         if token_id == unk and end - begin > MAX_INPUT_CHARS_PER_WORD))
    return ids, unks, longs


def split(encoded) -> list[list[int]]:
    return [encoded.ids[start : start + length].tolist()
            for start, length in zip(encoded.starts, encoded.lengths, strict=True)]


def test_fuzzed_sentences_get_exactly_the_tokenizers_ids_and_counts(tokenizer):
    sentences = fuzzed_sentences(400, seed=1)
    ids, unks, longs = reference(tokenizer, sentences)
    encoded = ChunkEncoder(tokenizer).encode(sentences)
    assert split(encoded) == ids
    assert encoded.unk_tokens.tolist() == unks
    assert encoded.long_words.tolist() == longs
    assert sum(longs) > 10 and sum(unks) > sum(longs)  # the fuzz reached both kinds of [UNK]
    assert encoded.ids.dtype == np.int32


class CountingTokenizer:
    """Forwards to a tokenizer, counting the texts each encode_batch_fast call is given."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.calls = tokenizer, []

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def encode_batch_fast(self, texts, **options):
        self.calls.append(list(texts))
        return self.tokenizer.encode_batch_fast(texts, **options)


def test_small_groups_a_warm_cache_and_evictions_change_nothing(tokenizer, monkeypatch):
    monkeypatch.setattr(chunk_cache, "MISSING_PER_TEXT", 7)
    monkeypatch.setattr(chunk_cache, "MISSING_TEXTS", 3)
    monkeypatch.setattr(chunk_cache, "SENTENCES_PER_PASS", 16)  # several passes per call
    counting = CountingTokenizer(tokenizer)
    encoder = ChunkEncoder(counting)
    sentences = fuzzed_sentences(60, seed=2)
    expected = reference(tokenizer, sentences)
    for _ in range(2):  # cold, then every chunk from the cache
        encoded = encoder.encode(sentences)
        assert (split(encoded), encoded.unk_tokens.tolist(), encoded.long_words.tolist()) == expected
    joined = [text for call in counting.calls for text in call if " [SEP] " in text]
    assert joined and not any(text.count("[SEP]") > text.count(" [SEP] ") for text in joined)
    calls = len(counting.calls)
    encoder.encode(sentences)
    assert len(counting.calls) == calls  # warm: the tokenizer is not called at all

    small = ChunkEncoder(tokenizer, cache_entries=50)
    for seed in range(3):
        sentences = fuzzed_sentences(40, seed=seed)
        ids, unks, longs = reference(tokenizer, sentences)
        encoded = small.encode(sentences)
        assert (split(encoded), encoded.unk_tokens.tolist(), encoded.long_words.tolist()) == (ids, unks, longs)
        assert len(small.ids) <= 50


def test_chunks_that_are_whole_vocab_words_skip_the_tokenizer(tokenizer):
    counting = CountingTokenizer(tokenizer)
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    assert {"the", "fox"} <= set(vocab)
    encoded = ChunkEncoder(counting).encode(["the fox", "the  fox the"])
    assert counting.calls == []
    assert split(encoded) == reference(tokenizer, ["the fox", "the  fox the"])[0]


def test_an_added_token_of_letters_turns_the_whole_word_shortcut_off():
    tokenizer = train_tokenizer(TRAINING_TEXT, vocab_size=200, lowercase=True, min_frequency=1)
    tokenizer.add_tokens(["foxy", "quick"])  # "quick" is in the vocab too: the added token wins
    sentences = ["the quick foxy fox", "quickly foxyfox QUICK"]
    encoder = ChunkEncoder(tokenizer)
    assert encoder.whole_words is None
    assert split(encoder.encode(sentences)) == reference(tokenizer, sentences)[0]


def test_an_empty_batch_gives_empty_arrays(tokenizer):
    encoded = ChunkEncoder(tokenizer).encode([])
    assert encoded.ids.size == encoded.lengths.size == encoded.unk_tokens.size == 0


SHARED_CORPORA = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpora"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_CORPORA.is_dir(), reason="../shared/corpora is not there")
@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_every_line_of_the_shared_corpora_gets_the_tokenizers_ids(lowercase):
    files = sorted(SHARED_CORPORA.glob("*.txt"))
    lines = [line for path in files for line in path.read_text(encoding="utf-8").splitlines()]
    tokenizer = train_tokenizer(files, vocab_size=8000, lowercase=lowercase)
    encoder = ChunkEncoder(tokenizer)
    for start in range(0, len(lines), 20_000):
        batch = lines[start : start + 20_000]
        ids, unks, longs = reference(tokenizer, batch)
        encoded = encoder.encode(batch)
        ours = split(encoded)
        mismatches = [index for index, (a, b) in enumerate(zip(ours, ids, strict=True)) if a != b]
        assert not mismatches, f"first mismatch on line {start + mismatches[0] + 1}: {batch[mismatches[0]]!r}"
        assert (encoded.unk_tokens.tolist(), encoded.long_words.tolist()) == (unks, longs)
