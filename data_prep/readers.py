"""Format readers: one corpus file to its raw documents (lists of text lines), streamed."""

from __future__ import annotations

import bz2
import codecs
import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from data_prep.cleaning import decode_utf8
from data_prep.errors import CorpusError
from data_prep.json_values import JsonValues
from data_prep.paths import is_stream, split_extension
from data_prep.stats import CorpusStats, SourceFile

MAX_LINE_BYTES = 1 << 20
_BINARY_PROBE_BYTES = 8192
_BUFFER_BYTES = 1 << 16
PIPE_WRITER_WAIT_SECONDS = 3.0  # how long a pipe may stay without a writer before it is refused
_DECOMPRESSORS = {
    ".gz": lambda file: gzip.GzipFile(fileobj=file, mode="rb"),
    ".bz2": lambda file: bz2.BZ2File(file, "rb"),
    ".xz": lambda file: lzma.LZMAFile(file, "rb"),
}
_DECOMPRESSION_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error)


class _HashingReader(io.RawIOBase):
    """A raw file that feeds every byte it reads into a sha256, so a file is read only once.

    `head`: bytes already taken from the file (a pipe's first read), served first.
    """

    def __init__(self, file: io.FileIO, head: bytes = b"") -> None:
        self.file = file
        self.head = head
        self.sha256 = hashlib.sha256()
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:
        if self.head:
            count = min(len(buffer), len(self.head))
            buffer[:count] = self.head[:count]
            self.head = self.head[count:]
        else:
            count = self.file.readinto(buffer)
        self.sha256.update(memoryview(buffer)[:count])
        self.bytes_read += count
        return count

    def close(self) -> None:
        self.file.close()
        super().close()

    def hexdigest_to_end(self) -> str:
        """Read what is left (trailing bytes a decompressor ignored) and return the sha256."""
        while self.read(_BUFFER_BYTES):
            pass
        return self.sha256.hexdigest()


def _format_size(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


def _open_pipe(path: Path) -> tuple[io.FileIO, bytes]:
    """Open a pipe without blocking, and its first bytes once a writer has given some.

    A plain open() of a FIFO no process writes to would wait forever; opened non-blocking,
    a read says at once whether a writer holds the other end (it would block) or none does
    (end of file). No writer within PIPE_WRITER_WAIT_SECONDS is an error.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    deadline = time.monotonic() + PIPE_WRITER_WAIT_SECONDS
    try:
        while True:
            try:
                head = os.read(descriptor, _BUFFER_BYTES)
            except BlockingIOError:  # a writer is there and has not written yet
                head = b""
                break
            if head:
                break
            if time.monotonic() >= deadline:
                raise CorpusError(
                    f"{path}: is a pipe that no process writes to (none in "
                    f"{PIPE_WRITER_WAIT_SECONDS:g} s); start its writer first, e.g. "
                    "bertpre tokenize <(zcat corpus.txt.gz) --out DATA"
                )
            time.sleep(0.05)
        os.set_blocking(descriptor, True)
    except BaseException:
        os.close(descriptor)
        raise
    return io.FileIO(descriptor, "rb", closefd=True), head


@contextmanager
def _open_decompressed(path: Path, source: SourceFile) -> Iterator[io.BufferedReader]:
    """Open a file (or a pipe, read once) for reading its decompressed bytes, hashing its bytes
    on disk on the way."""
    _, compression = split_extension(path)
    pipe = is_stream(path)
    try:
        file, head = _open_pipe(path) if pipe else (io.FileIO(path, "rb"), b"")
    except OSError as error:
        raise CorpusError(f"{path}: cannot open: {error.strerror or error}") from None
    with _HashingReader(file, head) as hashing:
        stream: BinaryIO = _DECOMPRESSORS[compression](hashing) if compression else hashing
        try:
            yield io.BufferedReader(stream, _BUFFER_BYTES)  # type: ignore[arg-type]
            source.sha256 = hashing.hexdigest_to_end()
            if pipe:  # its size is known only now
                source.bytes = hashing.bytes_read
        except _DECOMPRESSION_ERRORS as error:
            raise CorpusError(f"{path}: cannot read {compression or 'file'}: {error}") from None


def _check_not_binary(stream: io.BufferedReader, path: Path) -> None:
    head = stream.peek(_BINARY_PROBE_BYTES)[:_BINARY_PROBE_BYTES]
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise CorpusError(f"{path}: is UTF-16 text; convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)")
    if b"\x00" in head:
        raise CorpusError(
            f"{path}: looks binary (NUL bytes), not UTF-8 text; is it the right file?"
        )


def _read_lines(
    stream: io.BufferedReader, path: Path, max_line_bytes: int, stats: CorpusStats
) -> Iterator[str]:
    """Decoded lines without their line ends; a line longer than the limit is an error.

    Reads blocks of whole lines and decodes each block at once: per-line reads cost more
    than everything else in the pipeline.
    """
    _check_not_binary(stream, path)
    line_number = 0
    pending = b""
    while True:
        chunk = stream.read(_BUFFER_BYTES)
        block = pending + chunk
        end = block.rfind(b"\n") + 1 if chunk else len(block)
        pending = block[end:]
        if end:
            raw_lines = block[:end].split(b"\n")
            if chunk or block.endswith(b"\n"):
                raw_lines.pop()  # the empty piece after the last line end
            if max(map(len, raw_lines), default=0) > max_line_bytes:
                index = next(i for i, line in enumerate(raw_lines) if len(line) > max_line_bytes)
                raise _line_too_long(path, line_number + index + 1, max_line_bytes)
            # invalid UTF-8 never swallows a newline byte, so lines stay aligned with raw_lines
            text, replacements = decode_utf8(block[:end])
            stats.invalid_utf8_replacements += replacements
            if line_number == 0:
                text = text.removeprefix("\ufeff")
            lines = text.replace("\r\n", "\n").split("\n")
            del lines[len(raw_lines) :]
            line_number += len(lines)
            yield from lines
        if len(pending) > max_line_bytes:
            raise _line_too_long(path, line_number + 1, max_line_bytes)
        if not chunk:
            return


def _line_too_long(path: Path, line_number: int, max_line_bytes: int) -> CorpusError:
    return CorpusError(
        f"{path}: line {line_number} is over {_format_size(max_line_bytes)}: "
        "is it a text corpus with newlines?"
    )


def _read_txt(
    stream: io.BufferedReader, path: Path, max_line_bytes: int, stats: CorpusStats
) -> Iterator[list[str]]:
    """Documents of a plain-text file: blank lines separate them."""
    document: list[str] = []
    for line in _read_lines(stream, path, max_line_bytes, stats):
        if line.strip():
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def _text_of_record(record: object, text_field: str, where: str) -> str:
    """The text of a JSON record (a plain string is its own text; a list of strings, lines)."""
    if isinstance(record, str):
        return record
    if not isinstance(record, dict):
        raise CorpusError(f"{where}: expected a JSON object with a {text_field!r} field")
    if text_field not in record:
        fields = ", ".join(repr(name) for name in list(record)[:20]) or "none"
        raise CorpusError(
            f"{where}: no {text_field!r} field (fields: {fields}); choose one with --text-field"
        )
    value = record[text_field]
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise CorpusError(f"{where}: field {text_field!r} holds {type(value).__name__}, not text")
    return value


def _read_jsonl(
    stream: io.BufferedReader, path: Path, text_field: str, max_line_bytes: int, stats: CorpusStats
) -> Iterator[list[str]]:
    """Documents of a JSON-lines file: one JSON record a line."""
    for line_number, line in enumerate(_read_lines(stream, path, max_line_bytes, stats), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise CorpusError(f"{path}: line {line_number} is not valid JSON ({error})") from None
        text = _text_of_record(record, text_field, f"{path}: line {line_number}")
        yield text.splitlines()


def _read_json(
    stream: io.BufferedReader, path: Path, text_field: str, max_line_bytes: int, stats: CorpusStats
) -> Iterator[list[str]]:
    """Documents of a JSON file: a top-level array of records, or records one after another."""
    _check_not_binary(stream, path)
    for index, record in enumerate(JsonValues(stream, path, max_line_bytes, stats), 1):
        yield _text_of_record(record, text_field, f"{path}: record {index}").splitlines()


def _read_parquet(
    source: Path | BinaryIO, path: Path, text_field: str, max_line_bytes: int, stats: CorpusStats
) -> Iterator[list[str]]:
    """Documents of a Parquet file: one a row, text in a column, read in record batches."""
    import pyarrow
    import pyarrow.parquet

    try:
        parquet = pyarrow.parquet.ParquetFile(source)
    except (pyarrow.ArrowException, OSError) as error:
        raise CorpusError(f"{path}: not a readable Parquet file ({error})") from None
    columns = parquet.schema_arrow.names
    if text_field not in columns:
        names = ", ".join(repr(name) for name in columns[:20]) or "none"
        raise CorpusError(
            f"{path}: no {text_field!r} column (columns: {names}); choose one with --text-field"
        )
    row = 0
    for batch in parquet.iter_batches(batch_size=1024, columns=[text_field]):
        for value in batch.column(0).to_pylist():
            row += 1
            if isinstance(value, bytes):
                value, replacements = decode_utf8(value)
                stats.invalid_utf8_replacements += replacements
            text = _text_of_record({text_field: value}, text_field, f"{path}: row {row}")
            lines = text.splitlines()
            for line in lines:
                if len(line) > max_line_bytes // 4 and len(line.encode()) > max_line_bytes:
                    raise CorpusError(
                        f"{path}: row {row} has a line over {_format_size(max_line_bytes)}: "
                        "is it text with newlines?"
                    )
            yield lines


def read_raw_documents(
    path: Path, stats: CorpusStats, text_field: str = "text", max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[list[str]]:
    """The documents of one corpus file as lists of decoded, not yet cleaned, lines.

    The file is recorded in `stats` (path, size, and its sha256 once read to the end).

    Raises:
        CorpusError: the file cannot be read as its extension says.
    """
    corpus_format, compression = split_extension(path)
    source = stats.add_file(path)
    if corpus_format == ".parquet":
        yield from _read_parquet_file(path, source, compression, text_field, max_line_bytes, stats)
        return
    with _open_decompressed(path, source) as stream:
        if corpus_format == ".txt":
            yield from _read_txt(stream, path, max_line_bytes, stats)
        elif corpus_format == ".jsonl":
            yield from _read_jsonl(stream, path, text_field, max_line_bytes, stats)
        else:
            yield from _read_json(stream, path, text_field, max_line_bytes, stats)


def _read_parquet_file(
    path: Path,
    source: SourceFile,
    compression: str | None,
    text_field: str,
    max_line_bytes: int,
    stats: CorpusStats,
) -> Iterator[list[str]]:
    """Parquet needs random access: compressed files and pipes are unpacked to a temporary file
    first."""
    if compression is None and not is_stream(path):
        source.sha256 = _sha256_of_file(path)
        yield from _read_parquet(path, path, text_field, max_line_bytes, stats)
        return
    with tempfile.TemporaryFile() as unpacked:
        with _open_decompressed(path, source) as stream:
            shutil.copyfileobj(stream, unpacked, _BUFFER_BYTES)
        unpacked.seek(0)
        yield from _read_parquet(unpacked, path, text_field, max_line_bytes, stats)


def _sha256_of_file(path: Path) -> str:
    sha256 = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_BUFFER_BYTES):
            sha256.update(chunk)
    return sha256.hexdigest()
