"""Text cleaning: bytes to str with counted replacements, then NFC, no invisible characters."""

from __future__ import annotations

import re
import unicodedata

# U+FFFD written on purpose in the source: decoding it is not a replacement we made.
_ENCODED_REPLACEMENT_CHARACTER = "\ufffd".encode()


def _invisible_character_pattern() -> re.Pattern[str]:
    """Control (Cc) and format (Cf) characters, zero-width ones included, except whitespace.

    Whitespace controls (tab, CR, form feed, ...) are kept here so that whitespace collapsing
    turns them into a space instead of gluing the words around them together.
    """
    # Cf characters live in the BMP, the SMP and plane 14 (tags); scanning only those keeps
    # import fast while covering every assigned code point of the two categories.
    planes = [range(0x20000), range(0xE0000, 0xE1000)]
    ranges: list[tuple[int, int]] = []
    for plane in planes:
        for code_point in plane:
            character = chr(code_point)
            if unicodedata.category(character) in ("Cc", "Cf") and not character.isspace():
                if ranges and ranges[-1][1] == code_point - 1:
                    ranges[-1] = (ranges[-1][0], code_point)
                else:
                    ranges.append((code_point, code_point))
    character_class = "".join(
        re.escape(chr(first))
        if first == last
        else f"{re.escape(chr(first))}-{re.escape(chr(last))}"
        for first, last in ranges
    )
    return re.compile(f"[{character_class}]+")


_INVISIBLE = _invisible_character_pattern()


def decode_utf8(data: bytes) -> tuple[str, int]:
    """Decode UTF-8, replacing invalid bytes with U+FFFD.

    Returns:
        The text and how many replacement characters decoding inserted.
    """
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        replacements = text.count("\ufffd") - data.count(_ENCODED_REPLACEMENT_CHARACTER)
        return text, replacements


def clean_text(text: str) -> str:
    """Drop control and zero-width characters, collapse whitespace to single spaces, apply NFC.

    Returns "" for text that holds nothing visible.
    """
    if not text.isascii():
        text = _INVISIBLE.sub("", text)
        text = " ".join(text.split())
        return unicodedata.normalize("NFC", text)
    if text.isprintable() and "  " not in text:
        return text.strip(" ")  # the common case: one clean line of ASCII prose
    return " ".join(_INVISIBLE.sub("", text).split())
