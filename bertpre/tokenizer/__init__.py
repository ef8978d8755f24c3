"""The WordPiece vocabulary: build, train, load, save and extend it; its alphabet; fast sentence encoding."""
from bertpre.tokenizer.vocab_extension import (
    VocabMismatch,
    extend_vocab,
    vocab_extension,
    vocab_sha256,
)
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
           "VocabMismatch", "build_tokenizer", "extend_vocab", "load_tokenizer", "save_tokenizer",
           "train_tokenizer", "vocab_extension", "vocab_sha256"]
