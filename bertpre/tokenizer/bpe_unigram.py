"""Byte-level BPE (RoBERTa's) and Unigram (XLM-R's) tokenizers: train one, save one, or keep a
released one's files as they are.

Trained ones take their family's special tokens and layout: `<s>=0 <pad>=1 </s>=2 <unk>=3
<mask>=4` (as Hugging Face's own RoBERTa-from-scratch recipe numbers them), `<s> A </s>` for one
segment and `<s> A </s></s> B </s>` for two; `<mask>` takes the space before it, as theirs does
("The <mask> is" gives `The <mask> Ġis`, the shape of a masked word in training). Byte-level BPE
reads every byte, so it has no unknown text; Unigram normalizes with NFKC and marks word starts
with `▁`, as SentencePiece does.

Determinism: both give the same vocab, byte for byte, for the same text and options in every
process on every machine. BPE with `tokenizers`' BpeTrainer; Unigram with SentencePiece's trainer
(`bertpre.tokenizer.unigram_training`), since `tokenizers`' UnigramTrainer (0.23) sums and breaks
ties in hash-map order and keeps other rare pieces from run to run.
"""
from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from bertpre.errors import UserError, interruptible
from bertpre.tokenizer.roles import (
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TokenRoles,
    token_roles,
)
from bertpre.tokenizer.unigram_training import train_sentencepiece, unigram_from_sentencepiece

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_TYPES = ("wordpiece", "bpe", "unigram")
# Order fixes the ids of a trained vocab.
ROBERTA_SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
# A released tokenizer's files that `bertpre tokenize --tokenizer` keeps in DATA/tokenizer as they are.
SOURCE_TOKENIZER_FILES = (TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE, "vocab.json",
                          "merges.txt", "sentencepiece.bpe.model", "spiece.model", "added_tokens.json")
MODEL_MAX_LENGTH = 512
MAX_PIECE_LENGTH = 16  # Unigram's longest piece (SentencePiece's and tokenizers' default)


def build_bpe_or_unigram(kind: str, lowercase: bool) -> Tokenizer:
    """An untrained pipeline of `kind` ("bpe" or "unigram"): normalizer, pre-tokenizer, decoder."""
    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE())
        if lowercase:
            tokenizer.normalizer = normalizers.Lowercase()
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        return tokenizer
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.NFKC(), *([normalizers.Lowercase()] if lowercase else [])])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tokenizer


def train_bpe_or_unigram(
    texts: Iterable[list[str]],
    kind: str,
    vocab_size: int,
    lowercase: bool = False,
    min_frequency: int = 2,
    show_progress: bool = False,
    length: int | None = None,
) -> Tokenizer:
    """Train a byte-level BPE or a Unigram vocab of `vocab_size` on batches of texts (re-iterable).

    Raises:
        UserError: `vocab_size` cannot hold the special tokens (and, for BPE, the 256 bytes; for
            Unigram, every character of the text), or there is no text.
    """
    floor = len(ROBERTA_SPECIAL_TOKENS) + (256 if kind == "bpe" else 1)
    if vocab_size < floor:
        raise UserError(f"--vocab-size {vocab_size} is too small for a {kind} vocab: its special tokens"
                        f"{' and the 256 bytes' if kind == 'bpe' else ''} take {floor - 1}; use at least "
                        f"{floor} (RoBERTa uses 50,265, XLM-R 250,002)")
    tokenizer = build_bpe_or_unigram(kind, lowercase)
    stopping = threading.Event()
    if kind == "bpe":
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=ROBERTA_SPECIAL_TOKENS,
                                      min_frequency=min_frequency, show_progress=show_progress,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())

        def until_stopped() -> Iterator[list[str]]:
            for batch in texts:
                if stopping.is_set():
                    return
                yield batch

        def train() -> None:
            tokenizer.train_from_iterator(until_stopped(), trainer, length=length)
    else:
        def train() -> None:
            proto = train_sentencepiece(texts, tokenizer, vocab_size, MAX_PIECE_LENGTH, stopping)
            if proto is None:
                return  # stopped: `interruptible` raises the signal's exception
            tokenizer.model = unigram_from_sentencepiece(proto)
            tokenizer.add_special_tokens(ROBERTA_SPECIAL_TOKENS)

    # As for WordPiece: wait in Python, so that SIGINT/SIGTERM stop reading the text at once.
    interruptible(train, stopping.set)
    if tokenizer.get_vocab_size() <= len(ROBERTA_SPECIAL_TOKENS):
        raise UserError("the corpus has no text to train a vocab on; check the corpus files")
    # In training a masked word (`Ġcat`, `▁cat`) becomes `<mask>` whole; typed text must give the
    # same, not a lone `Ġ` or `▁` before it (RoBERTa's and XLM-R's `<mask>` strip it likewise).
    tokenizer.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    add_roberta_layout(tokenizer)
    return tokenizer


def add_roberta_layout(tokenizer: Tokenizer) -> None:
    """`<s> A </s>` and `<s> A </s></s> B </s>`, every type id 0 (RoBERTa and XLM-R have one type)."""
    cls_id, sep_id = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    if tokenizer.pre_tokenizer is not None and "ByteLevel" in tokenizer.pre_tokenizer.__getstate__().decode():
        tokenizer.post_processor = processors.RobertaProcessing(("</s>", sep_id), ("<s>", cls_id),
                                                                trim_offsets=True, add_prefix_space=False)
    else:
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", cls_id), ("</s>", sep_id)])


def tokenizer_config(roles: TokenRoles) -> tuple[dict, dict]:
    """tokenizer_config.json and special_tokens_map.json for a trained BPE or Unigram tokenizer,
    so that `AutoTokenizer.from_pretrained` reads its roles and gives the same ids."""
    special_tokens_map = {"bos_token": roles.cls_token, "eos_token": roles.sep_token,
                          "unk_token": roles.unk_token, "sep_token": roles.sep_token,
                          "pad_token": roles.pad_token, "cls_token": roles.cls_token,
                          "mask_token": roles.mask_token}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MODEL_MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
        **special_tokens_map,
    }
    return config, special_tokens_map


def save_bpe_or_unigram(tokenizer: Tokenizer, folder: Path) -> Path:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / TOKENIZER_FILE))
    config, special_tokens_map = tokenizer_config(token_roles(tokenizer))
    for name, payload in ((TOKENIZER_CONFIG_FILE, config), (SPECIAL_TOKENS_MAP_FILE, special_tokens_map)):
        (folder / name).write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return folder


def copy_source_tokenizer(source: Path, tokenizer: Tokenizer, folder: Path) -> Path:
    """Keep a released tokenizer's files in `folder` byte for byte (an export copies them on);
    where the source is a bare tokenizer.json, the config files that name its roles are written."""
    source_folder = source if source.is_dir() else source.parent
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source if source.is_file() else source / TOKENIZER_FILE, folder / TOKENIZER_FILE)
    if source.is_dir() or source.name == TOKENIZER_FILE:
        for name in SOURCE_TOKENIZER_FILES[1:]:
            if (source_folder / name).is_file():
                shutil.copyfile(source_folder / name, folder / name)
    if not (folder / TOKENIZER_CONFIG_FILE).is_file():
        config, special_tokens_map = tokenizer_config(token_roles(tokenizer))
        for name, payload in ((TOKENIZER_CONFIG_FILE, config), (SPECIAL_TOKENS_MAP_FILE, special_tokens_map)):
            if not (folder / name).is_file():
                (folder / name).write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n",
                                           encoding="utf-8")
    return folder
