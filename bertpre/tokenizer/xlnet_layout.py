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

from bertpre.tokenizer.roles import token_roles
from bertpre.tokenizer.wordpiece import (
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    tokenizer_lowercases,
)

CLS_TYPE = 2  # XLNet's segment id of the final [CLS]


def xlnet_layout(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of `tokenizer` whose template is XLNet's and which pads on the left."""
    roles = token_roles(tokenizer)  # its separator and classification token, by role
    sep, cls = roles.sep_token, roles.cls_token
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.post_processor = TemplateProcessing(
        single=f"$A:0 {sep}:0 {cls}:{CLS_TYPE}",
        pair=f"$A:0 {sep}:0 $B:1 {sep}:1 {cls}:{CLS_TYPE}",
        special_tokens=[(sep, roles.sep_token_id), (cls, roles.cls_token_id)],
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
    roles = token_roles(tokenizer)
    special_tokens_map = {"unk_token": roles.unk_token, "sep_token": roles.sep_token, "pad_token": roles.pad_token,
                          "cls_token": roles.cls_token, "mask_token": roles.mask_token}
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
