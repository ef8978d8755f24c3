"""The vocab's alphabet, fixed before WordPiece training: character counts, kept characters, ## forms.

`tokenizers`' WordPiece trainer breaks frequency ties at the alphabet limit, and numbers the
`##c` tokens it creates, in hash-map order, so the same corpus gives a different vocab from run
to run (its ids, and through merge tie-breaking its merges; huggingface/tokenizers#1794).
Choosing the alphabet and the `##c` tokens here, in a fixed order, and handing them to the
trainer makes training deterministic.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np
from tokenizers import Tokenizer


class CharacterCounts:
    """How often each character occurs, and how often right after a word character (so that
    it continues a word and the trainer will make a `##c` token of it).

    Counted with numpy over code points: a `Counter` over characters would be the slowest step
    of vocab training. `tokenizer` decides what separates words (its normalizer and
    pre-tokenizer; BERT's split at whitespace, punctuation and CJK characters either way).
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.normalize = tokenizer.normalizer.normalize_str
        self.pre_tokenize = tokenizer.pre_tokenizer.pre_tokenize_str
        self.counts = np.zeros(0, dtype=np.int64)
        self.after_word_character = np.zeros(0, dtype=np.int64)
        self.is_word_character = np.zeros(0, dtype=bool)
        self.classified = np.zeros(0, dtype=bool)

    def update(self, texts: Iterable[str]) -> None:
        """Count the characters of `texts`; call with many texts at once, it is per call that
        numpy's overhead is paid."""
        # utf-32 gives one uint32 per code point; "\n" keeps texts from running together.
        text = "\n".join(texts)
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        if codes.size == 0:
            return
        self._grow(int(codes.max()) + 1)
        for code in np.unique(codes[~self.classified[codes]]):
            self.is_word_character[code] = self._joins_words(chr(code))
            self.classified[code] = True
        self._add(self.counts, codes)
        self._add(self.after_word_character, codes[1:][self.is_word_character[codes[:-1]]])

    def as_dict(self) -> dict[str, int]:
        """character → count."""
        return {chr(code): int(self.counts[code]) for code in np.flatnonzero(self.counts)}

    def continuing_characters(self) -> list[str]:
        """Word characters seen right after another word character."""
        found = np.flatnonzero((self.after_word_character > 0) & self.is_word_character[: self.counts.size])
        return [chr(code) for code in found]

    def _joins_words(self, char: str) -> bool:
        """Whether "a{char}a" stays one word (a character the normalizer drops also does)."""
        return len(self.pre_tokenize(self.normalize(f"a{char}a"))) == 1

    def _grow(self, size: int) -> None:
        if size <= self.counts.size:
            return
        extra = size - self.counts.size
        self.counts = np.concatenate([self.counts, np.zeros(extra, np.int64)])
        self.after_word_character = np.concatenate([self.after_word_character, np.zeros(extra, np.int64)])
        self.is_word_character = np.concatenate([self.is_word_character, np.zeros(extra, bool)])
        self.classified = np.concatenate([self.classified, np.zeros(extra, bool)])

    @staticmethod
    def _add(totals: np.ndarray, codes: np.ndarray) -> None:
        found = np.bincount(codes)
        totals[: found.size] += found


def plan_alphabet(
    tokenizer: Tokenizer, counts: CharacterCounts, prefix: str, limit_alphabet: int
) -> tuple[list[str], list[str]]:
    """The alphabet and its continuing-subword tokens, both sorted.

    Args:
        tokenizer: gives the normalizer and pre-tokenizer the trainer will see the text through.
        counts: raw (unnormalized) character counts of the training texts.
        prefix: the continuing-subword prefix, "##".
        limit_alphabet: keep the most frequent normalized characters, ties broken by character.

    Returns:
        The alphabet, and `prefix + c` for each alphabet character c seen continuing a word.
    """
    normalize = tokenizer.normalizer.normalize_str
    pre_tokenize = tokenizer.pre_tokenizer.pre_tokenize_str
    normalized_counts: Counter[str] = Counter()
    for char, count in counts.as_dict().items():
        for normalized in normalize(char):
            if not normalized.isspace():
                normalized_counts[normalized] += count
    continuing: set[str] = set()
    for char in counts.continuing_characters():
        # What the character becomes inside a word ("É" → "e" when lowercasing).
        for word, _ in pre_tokenize(normalize("a" + char)):
            continuing.update(word[1:])
    ranked = sorted(normalized_counts, key=lambda char: (-normalized_counts[char], char))
    alphabet = sorted(ranked[:limit_alphabet])
    return alphabet, sorted(prefix + char for char in continuing.intersection(alphabet))
