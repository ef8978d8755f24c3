"""Vocabularies by role (WordPiece, byte-level BPE, Unigram): build, train, load, save and extend
them; special tokens by role; the WordPiece alphabet; fast sentence encoding."""
from bertpre.tokenizer.bpe_unigram import train_bpe_or_unigram
from bertpre.tokenizer.roles import TokenRoles, read_roles, token_roles
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
           "TokenRoles", "VocabMismatch", "build_tokenizer", "extend_vocab", "load_tokenizer", "read_roles",
           "save_tokenizer", "token_roles", "train_bpe_or_unigram", "train_tokenizer", "vocab_extension",
           "vocab_sha256"]
