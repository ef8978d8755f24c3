"""Streaming JSON values: arrays and value streams, chunk boundaries, limits."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from data_prep import CorpusError, CorpusStats
from data_prep.json_values import _CHUNK_BYTES, JsonValues


def values(data: bytes, max_value_bytes: int = 1 << 20) -> tuple[list[object], int]:
    stats = CorpusStats()
    stream = io.BufferedReader(io.BytesIO(data))
    found = list(JsonValues(stream, Path("x.json"), max_value_bytes, stats))
    return found, stats.invalid_utf8_replacements


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"[]", []),
        (b'  [ 1 , "a" , {"b": [2]} ]  ', [1, "a", {"b": [2]}]),
        (b'{"a": 1}\n{"a": 2}\n\n', [{"a": 1}, {"a": 2}]),
        (b'\xef\xbb\xbf{"a": 1} 2 "three" null', [{"a": 1}, 2, "three", None]),
        (b"", []),
        (b"  \n ", []),
    ],
)
def test_values(data: bytes, expected: list[object]) -> None:
    assert values(data) == (expected, 0)


@pytest.mark.parametrize("shift", range(-4, 5))
def test_values_split_across_chunks(shift: int) -> None:
    # place a number, a written U+FFFD and an invalid byte right at a chunk boundary
    head = b'"' + b"p" * (_CHUNK_BYTES - 4 + shift) + b'"'
    data = head + b" 123456 " + '"\ufffd"'.encode() + b' "\xff" ' + head
    found, replacements = values(data)
    assert found == [head.decode()[1:-1], 123456, "\ufffd", "\ufffd", head.decode()[1:-1]]
    assert replacements == 1


def test_value_over_the_limit() -> None:
    data = json.dumps(["x" * 10, "y" * (3 * _CHUNK_BYTES)]).encode()
    with pytest.raises(CorpusError) as caught:
        values(data, max_value_bytes=_CHUNK_BYTES)
    assert str(caught.value) == "x.json: JSON record 2 is over 65,536 bytes or not valid JSON"
