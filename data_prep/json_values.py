"""Streaming JSON: the values of a JSON file, one at a time, without loading the file."""

from __future__ import annotations

import codecs
import io
import json
from collections.abc import Iterator
from pathlib import Path

from data_prep.errors import CorpusError
from data_prep.stats import CorpusStats

_CHUNK_BYTES = 1 << 16
_WHITESPACE = " \t\r\n\ufeff"  # a byte order mark may open the file
_ENCODED_FFFD = "\ufffd".encode()


class JsonValues:
    """The items of a top-level JSON array, or JSON values written one after another.

    Text is decoded and parsed a chunk at a time; one value may be at most `max_value_bytes`
    long, so a huge array never sits in memory at once. Invalid UTF-8 is replaced and counted
    in `stats.invalid_utf8_replacements`.
    """

    def __init__(
        self, stream: io.BufferedReader, path: Path, max_value_bytes: int, stats: CorpusStats
    ) -> None:
        self.stream = stream
        self.path = path
        self.max_value_bytes = max_value_bytes
        self.stats = stats
        self.decoder = json.JSONDecoder()
        self.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self.buffer = ""
        self.position = 0
        self.finished = False
        self.previous_tail = b""

    def _fill(self) -> bool:
        """Append the next chunk of text to the buffer; False at the end of the file."""
        chunk = self.stream.read(_CHUNK_BYTES)
        self.finished = not chunk
        text = self.utf8.decode(chunk, final=self.finished)
        # U+FFFD written in the file is no replacement; its 3 bytes may straddle two chunks.
        window = self.previous_tail + chunk
        self.stats.invalid_utf8_replacements += text.count("\ufffd") - window.count(_ENCODED_FFFD)
        self.previous_tail = window[-2:]
        self.buffer = self.buffer[self.position :] + text
        self.position = 0
        return not self.finished

    def _next_character(self) -> str:
        """Skip whitespace; the next character, or "" at the end of the file."""
        while True:
            while self.position < len(self.buffer) and self.buffer[self.position] in _WHITESPACE:
                self.position += 1
            if self.position < len(self.buffer) or not self._fill():
                return self.buffer[self.position : self.position + 1]

    def _decode_value(self, number: int) -> object:
        """Parse the value at the current position, reading more text until it is complete."""
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buffer, self.position)
            except ValueError as error:
                if self.finished:
                    raise CorpusError(
                        f"{self.path}: JSON record {number} is not valid JSON ({error})"
                    ) from None
                value, end = None, None
            # a value that reaches the end of the buffer may go on ("12" of "123")
            if end is not None and (end < len(self.buffer) or self.finished):
                self.position = end
                return value
            if len(self.buffer) - self.position > self.max_value_bytes:
                raise CorpusError(
                    f"{self.path}: JSON record {number} is over {self.max_value_bytes:,} bytes "
                    "or not valid JSON"
                )
            self._fill()

    def __iter__(self) -> Iterator[object]:
        in_array = self._next_character() == "["
        if in_array:
            self.position += 1
        number = 0
        while True:
            character = self._next_character()
            if in_array and character == "]":
                return
            if not character:
                if in_array:
                    raise CorpusError(f"{self.path}: the JSON array is not closed with ']'")
                return
            number += 1
            yield self._decode_value(number)
            if in_array:
                character = self._next_character()
                if character == ",":
                    self.position += 1
                elif character != "]":
                    raise CorpusError(
                        f"{self.path}: expected ',' or ']' after JSON record {number}"
                    )
