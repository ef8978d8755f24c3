"""A tiny DATA folder built in-process (no corpus files, no network) for trainer tests."""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import datasets

from bertpre.tokenizer.wordpiece import save_tokenizer, train_tokenizer

SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the farmer", "a small bird"]
VERBS = ["sees", "likes", "follows", "feeds", "watches", "finds"]
OBJECTS = ["the river", "a red apple", "the green field", "an open door", "the tall tree"]
ENDINGS = ["today", "at night", "in the morning", "again", "with care"]


def tiny_documents(count: int, seed: int = 0) -> list[list[str]]:
    """`count` documents of 3-7 simple sentences from a small grammar (learnable quickly)."""
    rng = random.Random(seed)
    return [
        [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(ENDINGS)} ."
         for _ in range(rng.randint(3, 7))]
        for _ in range(count)
    ]


def build_tiny_data(folder: Path, documents: int = 60, validation: int = 6, seed: int = 0) -> Path:
    """Write a DATA folder (tokenizer/, dataset/ with train and validation, manifest.json)."""
    texts = tiny_documents(documents + validation, seed)
    tokenizer = train_tokenizer(texts, vocab_size=120, lowercase=True, min_frequency=1)
    save_tokenizer(tokenizer, folder / "tokenizer")

    def encode(docs: list[list[str]]) -> datasets.Dataset:
        rows = [[tokenizer.encode(s, add_special_tokens=False).ids for s in doc] for doc in docs]
        return datasets.Dataset.from_dict({"input_ids": rows})

    splits = datasets.DatasetDict(train=encode(texts[:documents]), validation=encode(texts[documents:]))
    datasets.disable_progress_bars()
    splits.save_to_disk(str(folder / "dataset"))
    sha256 = hashlib.sha256((folder / "tokenizer" / "tokenizer.json").read_bytes()).hexdigest()
    manifest = {"counts": {"documents": documents + validation}, "tokenizer": {"sha256": sha256}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder
