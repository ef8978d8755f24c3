"""Tokenizer folders shaped like released RoBERTa and XLM-R ones, built here (no hub): a byte-level
BPE with `<s> <pad> </s> <unk>` first, `<mask>` last and RobertaProcessing; a Unigram with
NFKC, Metaspace and XLM-R's template; each saved by transformers' `save_pretrained`, as a
released folder holds them (tokenizer.json, tokenizer_config.json, special_tokens_map.json)."""
from __future__ import annotations

import random
from pathlib import Path

from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from tests._tiny_data import chinese_documents, tiny_documents

FIRST_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def fuzzed_lines(count: int, seed: int = 0) -> list[str]:
    """Lines of random code points (seeded): every plane, no surrogates or line breaks."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        characters = []
        for _ in range(rng.randint(1, 40)):
            code = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF), rng.randint(0x3000, 0xD7FF),
                               rng.randint(0xE000, 0xFFFD), rng.randint(0x10000, 0x10FFFF), 0x20])
            characters.append(chr(code))
        line = "".join(characters).replace("\u2028", " ").replace("\u2029", " ").replace("\x85", " ")
        lines.append(" ".join(line.split()) or "x")
    return lines


def sample_lines(fuzzed: int = 60) -> list[str]:
    """English, Chinese, text without spaces, and `fuzzed` lines of fuzzed Unicode."""
    english = [sentence for document in tiny_documents(30, seed=1) for sentence in document]
    english += ["Don't stop pretraining: RoBERTa's 50,265 tokens cost $1,200.", "Ünïcödé café — naïve, 1990s.",
                "A literal <mask>, <s> and <unk> in text stay text."]
    chinese = [sentence for document in chinese_documents(10, seed=2) for sentence in document]
    no_spaces = ["ThisTextHasNoSpacesAtAll,NotEvenOne.", "https://example.com/a_b-c?d=e&f=g", "東京タワーは333メートルです。"]
    return english + chinese + no_spaces + fuzzed_lines(fuzzed, seed=3)


def _save(tokenizer: Tokenizer, folder: Path, tokenizer_class: str | None = None) -> Path:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", sep_token="</s>", cls_token="<s>", pad_token="<pad>",
                                   mask_token="<mask>")
    fast.save_pretrained(str(folder))
    if tokenizer_class is not None:
        import json

        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        config["tokenizer_class"] = tokenizer_class
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder


def _add_mask_last(tokenizer: Tokenizer) -> None:
    tokenizer.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])


def roberta_like(folder: Path, vocab_size: int = 400, tokenizer_class: str | None = None,
                 lines: list[str] | None = None) -> Path:
    """A byte-level BPE tokenizer folder laid out as roberta-base's, trained on `lines`
    (default `sample_lines()`)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=FIRST_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(sample_lines() if lines is None else lines, trainer)
    _add_mask_last(tokenizer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                            add_prefix_space=False)
    return _save(tokenizer, folder, tokenizer_class)


def xlmr_like(folder: Path, vocab_size: int = 300, tokenizer_class: str | None = None,
              lines: list[str] | None = None) -> Path:
    """A Unigram (SentencePiece) tokenizer folder laid out as xlm-roberta-base's.

    transformers 5's XLMRobertaTokenizer rebuilds the pipeline from the vocab (it keeps only a
    Precompiled normalizer, which `tokenizers` cannot train): with that class named, the folder
    gets the pipeline the class builds, no normalizer, so that tokenizer.json says what it does.
    """
    tokenizer = Tokenizer(models.Unigram())
    if tokenizer_class != "XLMRobertaTokenizer":
        tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=FIRST_SPECIALS, unk_token="<unk>",
                                      show_progress=False)
    # Trained without the fuzzed lines: their rare characters are <unk> to it, as to XLM-R.
    tokenizer.train_from_iterator(sample_lines(fuzzed=0) if lines is None else lines, trainer)
    _add_mask_last(tokenizer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return _save(tokenizer, folder, tokenizer_class)


def mpnet_like(folder: Path, vocab_size: int = 300) -> Path:
    """A WordPiece tokenizer folder with RoBERTa's special names, as MPNet's: `<s> </s> <pad> <mask>`
    and `[UNK]`, BERT's normalizer and pre-tokenizer."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                        special_tokens=["<s>", "<pad>", "</s>", "[UNK]", "<mask>"])
    tokenizer.train_from_iterator(sample_lines(fuzzed=0), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="[UNK]",
                            sep_token="</s>", cls_token="<s>", pad_token="<pad>",
                            mask_token="<mask>").save_pretrained(str(folder))
    return folder


def roberta_data(root: Path) -> Path:
    """ROOT/data: the sample lines, in documents of six, tokenized with a RoBERTa-like source
    folder (ROOT/source), a tenth held out."""
    from _tokenize_helpers import run

    source = roberta_like(root / "source")
    lines = sample_lines(fuzzed=0)
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(lines[start:start + 6]) for start in range(0, len(lines), 6)) + "\n",
                      encoding="utf-8")
    run(corpus, root / "data", tokenizer_path=source, split_sentences=False, validation_share=0.1)
    return root / "data"
