"""bertpre.tokenizer.alphabet: character counts and the alphabet fixed before WordPiece training."""
from __future__ import annotations

from collections import Counter

from bertpre.tokenizer.alphabet import CharacterCounts, plan_alphabet
from bertpre.tokenizer.wordpiece import build_tokenizer

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
