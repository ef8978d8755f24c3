"""bertpre's WordPiece vocabulary in XLNet's layout of special tokens, for an XLNet export.

XLNet ends a sequence with its classification token: `A [SEP] [CLS]`, or `A [SEP] B [SEP] [CLS]`,
with token types 0 for A and its [SEP], 1 for B and its [SEP], 2 for [CLS], and pads on the
left, so that the token its sequence head reads, the last, is always [CLS]. (XLNet's own
tokenizer gives padding type 3; transformers' generic fast tokenizer gives 0. Padding is masked
out of every real token's attention, so the type of a pad changes no real token's output.) The
vocabulary, the normalizer and the word pieces stay bertpre's: only the template, the padding
side and the files transformers reads change. `AutoTokenizer.from_pretrained(folder)` gives a
fast tokenizer that encodes the way the model was trained.
"""
from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.processors import TemplateProcessing

from bertpre.errors import UserError
from bertpre.tokenizer.wordpiece import (
    CLS_TOKEN,
    MASK_TOKEN,
    PAD_TOKEN,
    SEP_TOKEN,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    UNK_TOKEN,
    tokenizer_lowercases,
)

CLS_TYPE = 2  # XLNet's segment id of the final [CLS]


def xlnet_layout(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of `tokenizer` whose template is XLNet's and which pads on the left."""
    ids = {name: tokenizer.token_to_id(name) for name in (PAD_TOKEN, CLS_TOKEN, SEP_TOKEN)}
    missing = [name for name, token_id in ids.items() if token_id is None]
    if missing:
        raise UserError(f"the tokenizer has no {', '.join(missing)} token; use a bertpre WordPiece vocabulary")
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.post_processor = TemplateProcessing(
        single=f"$A:0 {SEP_TOKEN}:0 {CLS_TOKEN}:{CLS_TYPE}",
        pair=f"$A:0 {SEP_TOKEN}:0 $B:1 {SEP_TOKEN}:1 {CLS_TOKEN}:{CLS_TYPE}",
        special_tokens=[(SEP_TOKEN, ids[SEP_TOKEN]), (CLS_TOKEN, ids[CLS_TOKEN])],
    )
    copy.no_padding()
    copy.no_truncation()
    return copy


def save_xlnet_tokenizer(tokenizer: Tokenizer, folder: str | Path, *, model_max_length: int) -> Path:
    """Write tokenizer.json (XLNet's template), tokenizer_config.json (left padding, the special
    tokens) and special_tokens_map.json into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    xlnet_layout(tokenizer).save(str(folder / TOKENIZER_FILE))
    special_tokens_map = {"unk_token": UNK_TOKEN, "sep_token": SEP_TOKEN, "pad_token": PAD_TOKEN,
                          "cls_token": CLS_TOKEN, "mask_token": MASK_TOKEN}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "do_lower_case": tokenizer_lowercases(tokenizer),
        "padding_side": "left",
        "model_max_length": model_max_length,
        "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
        "clean_up_tokenization_spaces": False,
        **special_tokens_map,
    }
    for name, payload in ((TOKENIZER_CONFIG_FILE, config), (SPECIAL_TOKENS_MAP_FILE, special_tokens_map)):
        (folder / name).write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return folder
