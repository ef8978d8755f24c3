"""The WordPiece vocabulary: build, train, load and save it; its alphabet; fast sentence encoding."""
from bertpre.tokenizer.wordpiece import (
    CLS_TOKEN,
    MASK_TOKEN,
    PAD_TOKEN,
    SEP_TOKEN,
    SPECIAL_TOKENS,
    UNK_TOKEN,
    build_tokenizer,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

__all__ = ["CLS_TOKEN", "MASK_TOKEN", "PAD_TOKEN", "SEP_TOKEN", "SPECIAL_TOKENS", "UNK_TOKEN",
           "build_tokenizer", "load_tokenizer", "save_tokenizer", "train_tokenizer"]
