"""A tiny DATA folder made by the real `bertpre tokenize` pipeline (no network) for trainer tests."""
from __future__ import annotations

import random
from pathlib import Path

from bertpre.data.build import tokenize_corpus

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


def build_tiny_data(folder: Path, documents: int = 60, validation: int = 6, seed: int = 0,
                    tokenizer: Path | None = None) -> Path:
    """Tokenize `documents + validation` tiny documents into the DATA folder `folder`.

    A 120-token vocab (or the tokenizer folder `tokenizer`, reused), one sentence a line;
    `validation` documents are held out.
    """
    texts = tiny_documents(documents + validation, seed)
    corpus = folder.parent / f"{folder.name}.corpus.txt"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    corpus.write_text("\n\n".join("\n".join(doc) for doc in texts) + "\n", encoding="utf-8")
    tokenize_corpus([corpus], folder, vocab_size=120, lowercase=True, min_frequency=1, tokenizer_path=tokenizer,
                    validation_share=validation / (documents + validation), split_sentences=False,
                    seed=seed, show_progress=False)
    return folder


CHINESE_WORDS = ["我们", "北京大学", "学习", "自然语言", "处理", "模型", "今天", "天气", "很", "好", "研究",
                 "数据", "中国", "人民", "训练", "预测", "文本", "句子", "图书馆", "的"]


def chinese_documents(count: int, seed: int = 0) -> list[list[str]]:
    """`count` Chinese documents of 3-8 sentences, each 4-12 words of a small word list."""
    rng = random.Random(seed)
    return [["".join(rng.choice(CHINESE_WORDS) for _ in range(rng.randint(4, 12))) + "。"
             for _ in range(rng.randint(3, 8))] for _ in range(count)]


def build_chinese_data(folder: Path, documents: int = 120, seed: int = 0, **options) -> Path:
    """A DATA folder of `chinese_documents` with word starts (`--word-boundaries jieba`)."""
    corpus = folder.parent / f"{folder.name}.zh.txt"
    corpus.parent.mkdir(parents=True, exist_ok=True)
    corpus.write_text("\n\n".join("\n".join(document) for document in chinese_documents(documents, seed)) + "\n",
                      encoding="utf-8")
    tokenize_corpus([corpus], folder, vocab_size=150, min_frequency=1, word_boundaries="jieba",
                    show_progress=False, **options)
    return folder
