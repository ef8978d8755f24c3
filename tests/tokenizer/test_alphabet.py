"""bertpre.tokenizer.alphabet: character counts and the alphabet fixed before WordPiece training."""
from __future__ import annotations

from collections import Counter

import pytest
from _long_tail import (  # tests/ is on sys.path
    character,
    long_tailed_counts,
    long_tailed_documents,
    unk_share,
)

from bertpre.tokenizer.alphabet import CharacterCounts, plan_alphabet
from bertpre.tokenizer.wordpiece import build_tokenizer, train_tokenizer

TEXTS = ["Hello, World!", "Zoë said 你好 twice.", "", "𝔘nicode beyond the BMP"]


def counts_of(texts: list[str]) -> CharacterCounts:
    counts = CharacterCounts(build_tokenizer(None, lowercase=True))
    counts.update(texts)
    return counts


def test_character_counts_match_a_counter():
    counts = CharacterCounts(build_tokenizer(None, lowercase=True))
    for text in TEXTS:
        counts.update([text])
    counts.update([])
    assert counts.as_dict() == dict(Counter("".join(TEXTS)))


def test_continuing_characters_follow_a_word_character_within_a_text():
    counts = counts_of(["ab c-d 你好", "e", "f"])
    # b follows a; c, d, e, f start words (after space, '-', or a new text); 好 follows a CJK
    # character, which is a word of its own.
    assert counts.continuing_characters() == ["b"]


def test_alphabet_is_normalized_limited_by_frequency_and_sorted():
    counts = counts_of(["aaaa bbb É cc, 你 ab ba ca éa"])
    alphabet, seeds = plan_alphabet(build_tokenizer(None, lowercase=True), counts, "##", 3)
    # lowercased and accent-stripped: a=7, b=5, c=3, e=2; ',' and 你 once; spaces are no symbol.
    assert alphabet == ["a", "b", "c"]
    assert seeds == ["##a", "##b", "##c"]  # "cc": the second c continues the word


def test_cased_alphabet_keeps_accents_and_seeds_only_continuing_characters():
    counts = counts_of(["Éa, 你a"])
    alphabet, seeds = plan_alphabet(build_tokenizer(None, lowercase=False), counts, "##", 100)
    assert alphabet == [",", "a", "É", "你"]
    assert seeds == ["##a"]


# --- the default alphabet: every character as frequent as the rarest subword kept --------------

SYLLABLES = ["ka", "to", "mi", "ren", "sol", "vu", "pe", "dan"]
# 120 made-up words of three syllables, for subwords to merge beside the CJK characters.
WORDS = [a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES][:120]


def test_default_alphabet_keeps_the_long_tail_of_chinese_text(caplog):
    # 1,500 characters (and 。): the 500 rarest, seen twice each, are 4.2% of the text.
    documents = long_tailed_documents(long_tailed_counts())
    capped = train_tokenizer(documents, vocab_size=2000, limit_alphabet=1000)
    assert unk_share(capped, documents) > 0.04
    assert "--limit-alphabet 1000 left out 501 of the corpus's 1,501 characters" in caplog.text
    default = train_tokenizer(documents, vocab_size=2000)
    assert unk_share(default, documents) == 0.0  # ≤ 0.5% asked; with room for all, all stay
    assert default.get_vocab_size() == 5 + 1501


@pytest.fixture(scope="module")
def competing() -> tuple[list[list[str]], dict[str, int]]:
    """1,000 common characters (30 times each), 100 middling (5), 100 rare (once), and 120 words
    seen 4 times each; and the vocab that holds every character and every subword seen 3+ times."""
    documents = long_tailed_documents([30] * 1000 + [5] * 100 + [1] * 100, words=WORDS * 4)
    everything = train_tokenizer(documents, vocab_size=100_000, limit_alphabet=10**6, min_frequency=3)
    return documents, everything.get_vocab()


def test_rarest_characters_give_way_when_the_vocab_cannot_hold_everything(competing):
    documents, everything = competing
    tokenizer = train_tokenizer(documents, vocab_size=len(everything) - 50, min_frequency=3)
    # Seen once, less than any subword (3+): the 50 last of the rare ones (ties by character).
    assert set(everything) - set(tokenizer.get_vocab()) == {character(rank) for rank in range(1150, 1200)}
    assert tokenizer.get_vocab_size() == len(everything) - 50
    again = train_tokenizer(documents, vocab_size=len(everything) - 50, min_frequency=3)
    assert again.to_str() == tokenizer.to_str()


def test_characters_seen_more_often_than_the_rarest_subwords_stay(competing):
    documents, everything = competing
    tokenizer = train_tokenizer(documents, vocab_size=len(everything) - 150, min_frequency=3)
    vocab = tokenizer.get_vocab()
    assert len(vocab) == len(everything) - 150
    # The middling characters (5 times) beat the words' subwords (4 times); the rare ones do not.
    assert all(character(rank) in vocab for rank in range(1100))
    assert not any(character(rank) in vocab for rank in range(1100, 1200))
    gone_subwords = set(everything) - set(vocab) - {character(rank) for rank in range(1100, 1200)}
    assert len(gone_subwords) == 50 and all(len(token.removeprefix("##")) > 1 for token in gone_subwords)
    assert unk_share(tokenizer, documents) < unk_share(
        train_tokenizer(documents, vocab_size=len(everything) - 150, min_frequency=3, limit_alphabet=1000),
        documents)
