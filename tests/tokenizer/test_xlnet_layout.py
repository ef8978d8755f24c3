"""bertpre's vocabulary in XLNet's layout: `A [SEP] B [SEP] [CLS]` with token types 0/1/2 and left
padding, read by transformers' AutoTokenizer exactly as bertpre encodes."""
from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from bertpre.tokenizer.xlnet_layout import xlnet_layout

transformers = pytest.importorskip("transformers")

PAIRS = [("the cat sees the river .", "a dog follows my sister ."), ("the farmer", "an open door"),
         ("Über naïve café", "x")]


@pytest.fixture(scope="module")
def tokenizer(tiny_data) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_data / "tokenizer" / "tokenizer.json"))


def test_the_template_puts_cls_last_with_xlnet_token_types(tokenizer):
    layout = xlnet_layout(tokenizer)
    sep, cls = tokenizer.token_to_id("[SEP]"), tokenizer.token_to_id("[CLS]")
    for a, b in PAIRS:
        pieces_a = tokenizer.encode(a, add_special_tokens=False).ids
        pieces_b = tokenizer.encode(b, add_special_tokens=False).ids
        pair = layout.encode(a, b)
        assert pair.ids == [*pieces_a, sep, *pieces_b, sep, cls]
        assert pair.type_ids == [0] * (len(pieces_a) + 1) + [1] * (len(pieces_b) + 1) + [2]
        assert layout.encode(a).ids == [*pieces_a, sep, cls]


def test_auto_tokenizer_reads_the_export_as_bertpre_encodes(tokenizer, tmp_path):
    from bertpre.tokenizer.xlnet_layout import save_xlnet_tokenizer

    folder = save_xlnet_tokenizer(tokenizer, tmp_path / "xlnet", model_max_length=64)
    loaded = transformers.AutoTokenizer.from_pretrained(str(folder))
    layout = xlnet_layout(tokenizer)
    for a, b in PAIRS:
        encoded = loaded(a, b)
        assert encoded["input_ids"] == layout.encode(a, b).ids
        assert encoded["token_type_ids"] == layout.encode(a, b).type_ids
    batch = loaded([a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True)
    pad = tokenizer.token_to_id("[PAD]")
    for ids, types, mask, (a, b) in zip(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                                        PAIRS, strict=True):
        real = layout.encode(a, b).ids
        padding = len(ids) - len(real)
        assert ids == [pad] * padding + real and mask == [0] * padding + [1] * len(real)  # left padding
        assert types[padding:] == layout.encode(a, b).type_ids and ids[-1] == tokenizer.token_to_id("[CLS]")
