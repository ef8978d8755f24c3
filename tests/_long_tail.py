"""Chinese-like text with a long tail of rare characters, as real Chinese text has, for the
alphabet tests (a vocab of 1000 characters, the old default, leaves much of it [UNK])."""
from __future__ import annotations

import random

FIRST_CJK = 0x4E00  # 一, the first CJK unified ideograph


def character(rank: int) -> str:
    return chr(FIRST_CJK + rank)


def long_tailed_counts(characters: int = 1500, head: int = 3000) -> list[int]:
    """How often the character of each rank occurs: Zipf-like, head/(rank+1), at least twice."""
    return [max(2, head // (rank + 1)) for rank in range(characters)]


def long_tailed_documents(counts: list[int], *, words: list[str] = (), seed: int = 0,
                          per_sentence: int = 30) -> list[list[str]]:
    """Documents of 5 sentences, each `per_sentence` characters and "。", the characters of
    `counts` (and each of `words`, space-separated, once) in a seeded random order."""
    pieces = [character(rank) for rank, count in enumerate(counts) for _ in range(count)]
    pieces += [f" {word} " for word in words]
    random.Random(seed).shuffle(pieces)
    sentences = ["".join(pieces[start:start + per_sentence]).strip() + "。"
                 for start in range(0, len(pieces), per_sentence)]
    return [sentences[start:start + 5] for start in range(0, len(sentences), 5)]


def unk_share(tokenizer, documents: list[list[str]]) -> float:
    """The share of [UNK] among the tokens of `documents` encoded with `tokenizer`."""
    unk = tokenizer.token_to_id("[UNK]")
    ids = [i for document in documents for encoding in tokenizer.encode_batch(document, add_special_tokens=False)
           for i in encoding.ids]
    return ids.count(unk) / len(ids)
