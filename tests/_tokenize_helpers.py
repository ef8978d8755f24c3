"""Small corpora and a quiet `tokenize_corpus` call, shared by the tokenize and DATA tests."""
from __future__ import annotations

from pathlib import Path

from bertpre.data.build import tokenize_corpus

ANIMALS = ["cat", "dog", "horse", "parrot", "rabbit"]
PLACES = ["garden", "kitchen", "river bank", "old barn", "city park"]


def documents(count: int) -> list[list[str]]:
    """`count` distinct documents of three sentences each."""
    return [
        [
            f"Document {index} tells of a {ANIMALS[index % 5]} in the {PLACES[index % 5]}.",
            f"The {ANIMALS[(index + 1) % 5]} watched it for {index + 2} hours.",
            f"Nobody knows why the {PLACES[(index + 2) % 5]} was empty.",
        ]
        for index in range(count)
    ]


def write_corpus(path: Path, docs: list[list[str]]) -> Path:
    path.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")
    return path


def run(corpus: Path | list, out: Path, **options) -> dict:
    options = {"vocab_size": 150, "show_progress": False, **options}
    if options.get("tokenizer_type") != "unigram":  # a Unigram trainer has no minimum frequency: refused
        options.setdefault("min_frequency", 1)
    return tokenize_corpus(corpus if isinstance(corpus, list) else [corpus], out, **options)


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}
