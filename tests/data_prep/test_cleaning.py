"""Cleaning rules, one by one, with exact outputs."""

from __future__ import annotations

import pytest

from data_prep.cleaning import clean_text, decode_utf8


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain ascii text.", "plain ascii text."),
        ("  padded\tand   spaced \r", "padded and spaced"),
        ("tab\tseparated\x0bvertical\x0cfeed", "tab separated vertical feed"),
        ("bell\x07 and nul\x00 and delete\x7f", "bell and nul and delete"),
        ("zero\u200bwidth\u200c join\u200der\u2060s\ufeff", "zerowidth joiners"),
        ("soft\u00adhyphen and bidi \u202aembedding\u202c", "softhyphen and bidi embedding"),
        ("no-break\u00a0space and ideographic\u3000space", "no-break space and ideographic space"),
        ("line\u2028separator", "line separator"),
        ("cafe\u0301 and A\u030a", "café and Å"),  # NFC composes
        ("\u212b angstrom sign", "Å angstrom sign"),  # NFC maps the singleton
        ("ｆｕｌｌ width stays", "ｆｕｌｌ width stays"),  # NFC, not NFKC
        ("中文\u200b文本，　保留。", "中文文本， 保留。"),
        ("\u200b\u200d\ufeff \t", ""),
        ("", ""),
        ("e\u200b\u0301", "é"),  # a zero-width character between base and accent goes first
    ],
)
def test_clean_text(raw: str, clean: str) -> None:
    assert clean_text(raw) == clean


def test_decode_utf8_counts_replacements() -> None:
    assert decode_utf8("héllo".encode()) == ("héllo", 0)
    assert decode_utf8(b"a\xffb\xfe\xfdc") == ("a\ufffdb\ufffd\ufffdc", 3)
    # a truncated 3-byte sequence is one replacement
    assert decode_utf8(b"x\xe4\xb8") == ("x\ufffd", 1)


def test_decode_utf8_does_not_count_written_replacement_characters() -> None:
    data = "already \ufffd here".encode() + b" \xff"
    assert decode_utf8(data) == ("already \ufffd here \ufffd", 1)
