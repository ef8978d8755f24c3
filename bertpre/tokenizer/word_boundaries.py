"""Where words begin, for whole-word masking: by the pieces' own marks (`continues_word`), or, for
text a WordPiece vocab splits into characters, by a Chinese word segmenter (`WordStarts`).

Each kind of tokenizer marks its words in its pieces: a WordPiece `##` piece continues the word
before it; a byte-level BPE piece that begins after a space starts with `Ġ`, a Unigram
(SentencePiece) piece that begins a word with `▁`, and the pieces without the mark continue one.
`continues_word` turns that into a table by token id for the collators (special tokens never
continue a word).

A Chinese BERT tokenizes one character at a time, so `##` pieces cannot say which characters
form a word. `WordStarts` asks a Chinese word segmenter instead and marks, for each token of a
sentence, whether it begins a word:

- a `##` piece never does (WordPiece's rule: it continues the word before it);
- a CJK character does when the segmenter starts a word at it;
- any other token (a Latin word's first piece, a digit group, punctuation) does.

So mixed Chinese-English text keeps WordPiece's words for English and the segmenter's for
Chinese. The segmenter is rjieba, the Rust port of jieba (Python binding, dictionary built
in, no download): the same word lists as jieba's default mode on most sentences, ~18 MB/s here
against ~1 MB/s for pure-Python jieba, and it takes jieba's user dictionaries word by word.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Encoding

from bertpre.errors import UserError
from bertpre.tokenizer.roles import TokenRoles

WORD_BOUNDARIES = ("jieba",)
INSTALL_HINT = "pip install 'bertpre[zh]' (or pip install rjieba)"
# BERT's CJK ideograph blocks (the characters its normalizer puts spaces around).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def continues_word(tokens: np.ndarray, roles: TokenRoles, special_ids: set[int]) -> np.ndarray:
    """(vocab,) bool by token id: the piece continues the word before it (see the module).

    Args:
        tokens: (vocab,) object array, each id's token ("" where the vocab has a gap).
        special_ids: ids that never continue a word (the special tokens).
    """
    table = np.fromiter((not roles.begins_word(token) for token in tokens), bool, len(tokens))
    table[sorted(special_ids)] = False
    return table


def is_cjk(character: str) -> bool:
    code = ord(character)
    return any(low <= code <= high for low, high in _CJK_RANGES)


def read_user_dict(path: str | Path) -> list[tuple[str, int | None, str | None]]:
    """A jieba user dictionary: one word a line, optionally its frequency and part-of-speech tag.

    Raises:
        UserError: the file is missing, not UTF-8, or a frequency is not a number.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UserError(f"--user-dict {path} does not exist; give a file of one word a line") from None
    except UnicodeDecodeError:
        raise UserError(f"--user-dict {path} is not UTF-8 text; save it as UTF-8") from None
    entries = []
    for number, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) > 1 and not parts[1].isdigit():
            raise UserError(f"--user-dict {path} line {number}: {parts[1]!r} is not a frequency; "
                            "write `word [frequency] [tag]`")
        entries.append((parts[0], int(parts[1]) if len(parts) > 1 else None,
                        parts[2] if len(parts) > 2 else None))
    return entries


class WordStarts:
    """Marks the tokens that begin a word; picklable, the segmenter is built where it is used
    (in each encoding process)."""

    def __init__(self, segmenter: str = "jieba", user_dict: list[tuple[str, int | None, str | None]] = (),
                 continuing_subword_prefix: str = "##") -> None:
        if segmenter not in WORD_BOUNDARIES:
            raise UserError(f"--word-boundaries {segmenter!r} is not known; use one of {', '.join(WORD_BOUNDARIES)}")
        self.segmenter = segmenter
        self.user_dict = list(user_dict)
        self.prefix = continuing_subword_prefix
        self._jieba = None

    @staticmethod
    def check_installed() -> None:
        """Refuse at once, in one line, when the segmenter's package is missing."""
        try:
            import rjieba  # noqa: F401
        except ImportError:
            raise UserError(f"--word-boundaries jieba needs the rjieba package: {INSTALL_HINT}") from None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_jieba": None}

    def segment(self, sentence: str) -> list[tuple[str, int, int]]:
        """The segmenter's words of `sentence` with their character offsets."""
        if self._jieba is None:
            self.check_installed()
            import rjieba

            self._jieba = rjieba.Jieba()
            for word, frequency, tag in self.user_dict:
                self._jieba.add_word(word, frequency, tag)
        return self._jieba.tokenize(sentence)

    def of_sentence(self, sentence: str, encoding: Encoding) -> np.ndarray:
        """(tokens,) uint8: 1 where the token begins a word (see the module docstring)."""
        word_starts = {start for _, start, _ in self.segment(sentence)}
        flags = np.ones(len(encoding.ids), dtype=np.uint8)
        for index, (token, (start, _)) in enumerate(zip(encoding.tokens, encoding.offsets, strict=True)):
            if token.startswith(self.prefix):
                flags[index] = 0
            elif start < len(sentence) and is_cjk(sentence[start]) and start not in word_starts:
                flags[index] = 0
        return flags
