"""The vocab's alphabet: character counts, which characters a vocab keeps, their ## forms.

`tokenizers`' WordPiece trainer breaks frequency ties at the alphabet limit, and numbers the
`##c` tokens it creates, in hash-map order, so the same corpus gives a different vocab from run
to run (its ids, and through merge tie-breaking its merges; huggingface/tokenizers#1794).
Choosing the alphabet and the `##c` tokens here, in a fixed order, and handing them to the
trainer makes training deterministic.

Which characters: by default every one that occurs at least as often as the rarest subword the
vocab keeps (`keep_frequent_characters`), never fewer than the ALWAYS_KEPT_CHARACTERS most
frequent. A fixed count cannot serve every script: English text uses a few hundred characters,
Chinese and Japanese thousands, each a token of its own, so the old fixed 1,000 left 10% of the
tokens of a Chinese corpus [UNK] while holding every character of an English one. Counts
measured against the subwords adapt to both without a language switch, and to corpus size:
in a large corpus a stray symbol seen a few times loses its place to subwords seen thousands
of times, in a small one it keeps it when there is room.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np
from tokenizers import Tokenizer, trainers

# Words encoded at once when counting token uses: bounds the memory of the encodings.
_WORDS_PER_BATCH = 100_000
# The most frequent characters a vocab keeps whatever their counts (room allowing): the old
# default, Hugging Face's `limit_alphabet`. Text of fewer distinct characters, as most English
# is, keeps every one as before; its rare ones (stray symbols, a name in another script) would
# otherwise give way to merges that shorten the text by a token or two each, and turn whole
# words into [UNK] (measured in bench/alphabet.py).
ALWAYS_KEPT_CHARACTERS = 1000


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


def normalized_counts(tokenizer: Tokenizer, counts: CharacterCounts) -> Counter[str]:
    """character → count, as the trainer sees the characters (through `tokenizer`'s normalizer;
    whitespace is no symbol)."""
    normalize = tokenizer.normalizer.normalize_str
    found: Counter[str] = Counter()
    for char, count in counts.as_dict().items():
        for normalized in normalize(char):
            if not normalized.isspace():
                found[normalized] += count
    return found


def continuing_characters(tokenizer: Tokenizer, counts: CharacterCounts) -> set[str]:
    """The normalized characters seen continuing a word (those that need a `##c` token)."""
    pre_tokenize = tokenizer.pre_tokenizer.pre_tokenize_str
    normalize = tokenizer.normalizer.normalize_str
    continuing: set[str] = set()
    for char in counts.continuing_characters():
        # What the character becomes inside a word ("É" → "e" when lowercasing).
        for word, _ in pre_tokenize(normalize("a" + char)):
            continuing.update(word[1:])
    return continuing


def plan_alphabet(
    tokenizer: Tokenizer, counts: CharacterCounts, prefix: str, limit_alphabet: int | None
) -> tuple[list[str], list[str]]:
    """The alphabet and its continuing-subword tokens, both sorted.

    Args:
        tokenizer: gives the normalizer and pre-tokenizer the trainer will see the text through.
        counts: raw (unnormalized) character counts of the training texts.
        prefix: the continuing-subword prefix, "##".
        limit_alphabet: keep the most frequent normalized characters, ties broken by character;
            None keeps every one (`keep_frequent_characters` then chooses among them once the
            trainer has made its subwords).

    Returns:
        The alphabet, and `prefix + c` for each alphabet character c seen continuing a word.
    """
    character_counts = normalized_counts(tokenizer, counts)
    continuing = continuing_characters(tokenizer, counts)
    ranked = sorted(character_counts, key=lambda char: (-character_counts[char], char))
    alphabet = sorted(ranked if limit_alphabet is None else ranked[:limit_alphabet])
    return alphabet, sorted(prefix + char for char in continuing.intersection(alphabet))


def keep_frequent_characters(
    vocab: dict[str, int],
    uses: np.ndarray,
    character_counts: Mapping[str, int],
    alphabet: list[str],
    kept_tokens: list[str],
    vocab_size: int,
    prefix: str,
    always_kept: int,
) -> dict[str, int]:
    """Cut a vocab trained with every character down to `vocab_size`: which characters stay.

    Characters and merged subwords compete on one scale, how often the text uses them: a
    character by its count, a subword by how often the trainer saw the pair it merged. The
    vocab keeps the most frequent entries of both kinds, so a character stays whenever it
    occurs at least as often as the rarest subword kept (ties go to the character: leaving out
    a character turns its text into [UNK], leaving out a subword only splits its text into one
    more piece). A character that continues words comes with its `##c`, both or neither. The
    `always_kept` most frequent characters stay whatever their counts (see
    ALWAYS_KEPT_CHARACTERS).

    The trainer does not say how often it saw each merge, so it is estimated from `uses`: a
    subword used u times when the trainer's words are encoded with `vocab` was seen about u
    times when merged (later merges absorb few of its uses). Merges come in falling frequency,
    so a merge is given the largest use of any merge made at or after it: the estimate falls as
    the trainer's counts did.

    Args:
        vocab: token → id from the trainer, given every character of `alphabet` and at least
            `vocab_size` minus the alphabet's entries of room for merges.
        uses: id → how often the trainer's words use it (`token_uses`).
        character_counts: each alphabet character's count in the text.
        kept_tokens: tokens kept whatever the counts (the special tokens).
        prefix: the continuing-subword prefix, "##".
        always_kept: how many of the most frequent characters stay whatever their counts.

    Returns:
        token → id, at most `vocab_size` entries, ids renumbered in the trainer's order.
    """
    characters = set(alphabet)
    continuing = {prefix + char for char in alphabet} & vocab.keys()
    kept = set(kept_tokens)
    merges = sorted((token for token in vocab if token not in kept and token not in characters
                     and token not in continuing), key=vocab.__getitem__)
    merge_uses = np.array([uses[vocab[token]] for token in merges], dtype=np.int64)
    seen = np.maximum.accumulate(merge_uses[::-1])[::-1] if merges else merge_uses
    ranked = sorted(alphabet, key=lambda char: (-character_counts.get(char, 0), char))
    room = vocab_size - len(kept)
    kept_characters: set[str] = set()

    def keep_character(char: str) -> None:
        nonlocal room
        entries = [char, *([prefix + char] if prefix + char in continuing else [])]
        if len(entries) <= room:
            kept.update(entries)
            kept_characters.add(char)
            room -= len(entries)

    for char in ranked[:always_kept]:
        keep_character(char)
    next_char, next_merge = min(always_kept, len(ranked)), 0
    while room > 0 and next_merge < len(merges):
        if next_char < len(ranked) and character_counts.get(ranked[next_char], 0) >= seen[next_merge]:
            keep_character(ranked[next_char])
            next_char += 1
            continue
        token = merges[next_merge]
        next_merge += 1
        # A merge of a character left out (rarer than the merge, against the estimate) is dropped.
        if set(token.removeprefix(prefix)) <= kept_characters:
            kept.add(token)
            room -= 1
    for char in ranked[next_char:]:  # the merges ran out first: every character that fits
        keep_character(char)
    order = sorted(kept, key=vocab.__getitem__)
    return {token: index for index, token in enumerate(order)}


def token_uses(encoder: Tokenizer, word_counts: dict[str, int]) -> np.ndarray:
    """id → how often the words use it, each word encoded by `encoder` (a bare model, no
    normalizer or pre-tokenizer: the words are already as the trainer saw them)."""
    uses = np.zeros(encoder.get_vocab_size(with_added_tokens=True), dtype=np.int64)
    words = list(word_counts)
    for start in range(0, len(words), _WORDS_PER_BATCH):  # batches bound the encodings' memory
        batch = words[start : start + _WORDS_PER_BATCH]
        encodings = encoder.encode_batch(batch, add_special_tokens=False)
        lengths = np.fromiter((len(encoding.ids) for encoding in encodings), np.int64, len(batch))
        ids = np.fromiter((i for encoding in encodings for i in encoding.ids), np.int64, int(lengths.sum()))
        counts = np.fromiter((word_counts[word] for word in batch), np.int64, len(batch))
        uses += np.bincount(ids, weights=np.repeat(counts, lengths), minlength=uses.size).astype(np.int64)
    return uses


def trained_word_counts(trainer: trainers.Trainer) -> dict[str, int]:
    """The words a trained WordPiece trainer counted, from its serialized state."""
    state = json.loads(trainer.__getstate__())
    return state["WordPieceTrainer"]["bpe_trainer"]["words"]


def alphabet_coverage(tokenizer: Tokenizer, counts: CharacterCounts) -> dict[str, int]:
    """How much of the text's characters a trained vocab holds (characters outside it are [UNK]).

    Returns:
        characters: distinct characters of the text (normalized as the tokenizer does);
        continuing: how many of them continue words (so need a `##c` token too); in_vocab: how
        many the vocab holds; least_count_in_vocab: the count of the rarest of those;
        occurrences and occurrences_outside: all characters of the text, and those of
        characters the vocab lacks.
    """
    vocab = tokenizer.get_vocab()
    found = normalized_counts(tokenizer, counts)
    inside = [count for char, count in found.items() if char in vocab]
    return {
        "characters": len(found),
        "continuing": len(continuing_characters(tokenizer, counts) & found.keys()),
        "in_vocab": len(inside),
        "least_count_in_vocab": min(inside, default=0),
        "occurrences": sum(found.values()),
        "occurrences_outside": sum(found.values()) - sum(inside),
    }
