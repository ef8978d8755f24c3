"""Each corpus format and compression, checksums, streaming, and the errors for bad files."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
from pathlib import Path
from types import SimpleNamespace

import pyarrow
import pyarrow.parquet
import pytest

from data_prep import CorpusError, CorpusStats, readers
from data_prep.readers import read_raw_documents

TEXT = "First line of one.\nSecond line.\n\n\nAnother document.\r\n \t \nThird, last.\n"
DOCUMENTS = [["First line of one.", "Second line."], ["Another document."], ["Third, last."]]
RECORDS = [
    {"id": 1, "text": "First line of one.\nSecond line."},
    {"id": 2, "text": "Another document."},
]
RECORD_DOCUMENTS = [["First line of one.", "Second line."], ["Another document."]]
COMPRESS = {"": lambda data: data, ".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


def read(path: Path, **options) -> list[list[str]]:
    return list(read_raw_documents(path, CorpusStats(), **options))


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(COMPRESS[path.suffix if path.suffix in COMPRESS else ""](data))
    return path


@pytest.mark.parametrize("compression", ["", ".gz", ".bz2", ".xz"])
def test_txt_blank_lines_separate_documents(tmp_path: Path, compression: str) -> None:
    path = write(tmp_path / f"corpus.txt{compression}", TEXT.encode())
    assert read(path) == DOCUMENTS


@pytest.mark.parametrize("compression", ["", ".gz", ".bz2", ".xz"])
def test_jsonl(tmp_path: Path, compression: str) -> None:
    data = "".join(json.dumps(record) + "\n" for record in RECORDS) + "\n"
    path = write(tmp_path / f"corpus.jsonl{compression}", data.encode())
    assert read(path) == RECORD_DOCUMENTS


@pytest.mark.parametrize("compression", ["", ".gz", ".xz"])
def test_json_array(tmp_path: Path, compression: str) -> None:
    path = write(tmp_path / f"corpus.json{compression}", json.dumps(RECORDS, indent=2).encode())
    assert read(path) == RECORD_DOCUMENTS


def test_json_stream_of_records_and_plain_strings(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('\ufeff{"text": "a"}\n{"text": ["b", "c"]}  {"text": null} "d"\n')
    assert read(path) == [["a"], ["b", "c"], [], ["d"]]
    path.write_text('[ "x" , {"body": "y"} ]')
    assert read(path, text_field="body") == [["x"], ["y"]]
    path.write_text("[]")
    assert read(path) == []


def test_json_array_larger_than_the_read_buffer(tmp_path: Path) -> None:
    records = [{"text": f"record {i} " + "é" * 997 + "\ufffd", "n": 1.5 * i} for i in range(300)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(records, ensure_ascii=False))
    assert path.stat().st_size > 4 * readers._BUFFER_BYTES
    stats = CorpusStats()
    documents = list(read_raw_documents(path, stats))
    assert documents == [[record["text"]] for record in records]
    assert stats.invalid_utf8_replacements == 0  # the written U+FFFD are not replacements


def test_json_number_split_across_buffers(tmp_path: Path) -> None:
    path = tmp_path / "numbers.json"
    padding = " " * (readers._BUFFER_BYTES - 3)
    path.write_text(padding + '"a" 12345 ')  # a bare number is not a record with text
    with pytest.raises(CorpusError, match=r"record 2: expected a JSON object with a 'text' field"):
        read(path)


@pytest.mark.parametrize("compression", ["", ".gz"])
def test_parquet_column(tmp_path: Path, compression: str) -> None:
    table = pyarrow.table({"id": [1, 2, 3], "content": ["One.\nTwo.", None, "Three."]})
    plain = tmp_path / "corpus.parquet"
    pyarrow.parquet.write_table(table, plain, row_group_size=2)
    path = write(tmp_path / f"corpus.parquet{compression}", plain.read_bytes())
    stats = CorpusStats()
    assert list(read_raw_documents(path, stats, text_field="content")) == [
        ["One.", "Two."],
        [],
        ["Three."],
    ]
    assert stats.files[0].sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_parquet_binary_column_counts_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "b.parquet"
    pyarrow.parquet.write_table(pyarrow.table({"text": [b"ok \xff"]}), path)
    stats = CorpusStats()
    assert list(read_raw_documents(path, stats)) == [["ok \ufffd"]]
    assert stats.invalid_utf8_replacements == 1


@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz", "a.jsonl.bz2", "a.json.xz"])
def test_stats_record_size_and_sha256_of_the_file_on_disk(tmp_path: Path, name: str) -> None:
    data = json.dumps({"text": "Hello."}).encode() if "json" in name else b"Hello.\n"
    path = write(tmp_path / name, data)
    stats = CorpusStats()
    assert list(read_raw_documents(path, stats)) == [["Hello."]]
    assert stats.as_dict()["files"] == [
        {
            "path": str(path),
            "bytes": path.stat().st_size,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
    ]


def test_invalid_utf8_is_replaced_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_bytes(b"caf\xe9 ok\n\xff\xfe\xfd end \xef\xbf\xbd\n")
    stats = CorpusStats()
    assert list(read_raw_documents(path, stats)) == [
        ["caf\ufffd ok", "\ufffd\ufffd\ufffd end \ufffd"]
    ]
    assert stats.invalid_utf8_replacements == 4


def test_invalid_utf8_in_json_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b'[{"text": "caf\xe9"}]')
    stats = CorpusStats()
    assert list(read_raw_documents(path, stats)) == [["caf\ufffd"]]
    assert stats.invalid_utf8_replacements == 1


@pytest.mark.parametrize("name", ["image.txt", "image.jsonl", "image.json", "image.txt.gz"])
def test_binary_file(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(CorpusError, match=rf"{name}: looks binary \(NUL bytes\)"):
        read(path)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_file(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "wide.txt"
    path.write_bytes("\ufeffHi.\n".encode(encoding))
    with pytest.raises(CorpusError) as caught:
        read(path)
    assert (
        str(caught.value)
        == f"{path}: is UTF-16 text; convert it to UTF-8 (iconv -f UTF-16 -t UTF-8)"
    )


def test_line_over_the_default_limit(tmp_path: Path) -> None:
    path = tmp_path / "one-line.txt"
    path.write_bytes(b"ok\n" + b"x" * (readers.MAX_LINE_BYTES + 1))
    with pytest.raises(CorpusError) as caught:
        read(path)
    assert str(caught.value) == (
        f"{path}: line 2 is over 1 MiB: is it a text corpus with newlines?"
    )


def test_line_limit_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"a" * 10 + b"\n" + b"b" * 10)
    assert read(path, max_line_bytes=10) == [["a" * 10, "b" * 10]]
    path.write_bytes(b"a" * 10 + b"\n" + b"b" * 11 + b"\n")
    with pytest.raises(CorpusError, match=r"line 2 is over 10 bytes"):
        read(path, max_line_bytes=10)


def test_json_record_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    path.write_text(json.dumps([{"text": "x" * 300_000}]))
    with pytest.raises(CorpusError, match=r"huge\.json: JSON record 1 is over 100,000 bytes"):
        read(path, max_line_bytes=100_000)


def test_jsonl_missing_text_field(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine"}\n{"title": "T", "body": "B"}\n')
    with pytest.raises(CorpusError) as caught:
        read(path)
    assert str(caught.value) == (
        f"{path}: line 2: no 'text' field (fields: 'title', 'body'); choose one with --text-field"
    )


def test_json_missing_text_field(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('[{"body": "B"}]')
    with pytest.raises(CorpusError, match=r"record 1: no 'text' field \(fields: 'body'\); choose"):
        read(path)


def test_parquet_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pyarrow.parquet.write_table(pyarrow.table({"body": ["x"], "id": [1]}), path)
    with pytest.raises(
        CorpusError,
        match=r"no 'text' column \(columns: 'body', 'id'\); choose one with --text-field",
    ):
        read(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text": "a"}\n{"text": ', r"line 2 is not valid JSON"),
        ('{"text": 5}\n', r"line 1: field 'text' holds int, not text"),
        ("[1, 2]\n", r"line 1: expected a JSON object with a 'text' field"),
    ],
)
def test_bad_jsonl(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(content)
    with pytest.raises(CorpusError, match=message):
        read(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"text": "a"}, {"text": ', r"record 2 is not valid JSON"),
        ('[{"text": "a"} {"text": "b"}]', r"expected ',' or '\]' after JSON record 1"),
        ('[{"text": "a"},', r"the JSON array is not closed"),
        ("{'text': 'a'}", r"record 1 is not valid JSON"),
    ],
)
def test_bad_json(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(CorpusError, match=message):
        read(path)


@pytest.mark.parametrize("name", ["c.txt.gz", "c.txt.bz2", "c.jsonl.xz", "c.parquet.gz"])
def test_corrupt_compressed_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"this is not compressed at all\n")
    with pytest.raises(CorpusError, match=rf"{name}: cannot read \.(gz|bz2|xz)"):
        read(path)


def test_not_a_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    path.write_text("plain text\n")
    with pytest.raises(CorpusError, match=r"c\.parquet: not a readable Parquet file"):
        read(path)


def count_bytes_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch the hashing reader to count the bytes read from disk."""
    total = [0]
    original = readers._HashingReader.readinto

    def readinto(self, buffer) -> int:  # noqa: ANN001
        count = original(self, buffer)
        total[0] += count
        return count

    monkeypatch.setattr(readers._HashingReader, "readinto", readinto)
    return total


@pytest.mark.parametrize("name", ["big.txt", "big.txt.gz", "big.jsonl", "big.json"])
def test_first_document_does_not_read_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    sentence = "Streaming keeps memory bounded for corpora larger than RAM."
    if name.startswith("big.txt"):
        data = "".join(f"{sentence} {i}\n\n" for i in range(40_000))
    elif name == "big.jsonl":
        data = "".join(json.dumps({"text": f"{sentence} {i}"}) + "\n" for i in range(40_000))
    else:
        data = json.dumps([{"text": f"{sentence} {i}"} for i in range(40_000)])
    path = write(tmp_path / name, data.encode())
    bytes_read = count_bytes_read(monkeypatch)
    stats = CorpusStats()
    documents = read_raw_documents(path, stats)
    assert next(documents) == [f"{sentence} 0"]
    assert path.stat().st_size > 20 * readers._BUFFER_BYTES or name.endswith(".gz")
    assert bytes_read[0] <= 2 * readers._BUFFER_BYTES
    assert stats.files[0].sha256 is None  # not read to the end yet
    assert sum(1 for _ in documents) == 39_999
    assert bytes_read[0] == path.stat().st_size


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.txt"
    path.write_text("text\n")

    def refuse(*args: object) -> None:
        raise PermissionError(13, "Permission denied")

    # root may read any file, so refuse the open itself
    monkeypatch.setattr(readers, "io", SimpleNamespace(FileIO=refuse))
    with pytest.raises(CorpusError) as caught:
        read(path)
    assert str(caught.value) == f"{path}: cannot open: Permission denied"


@pytest.mark.parametrize("where", [10, -8])  # in the deflate stream (zlib.error), the CRC (OSError)
def test_corrupt_data_inside_a_gzip_file(tmp_path: Path, where: int) -> None:
    data = bytearray(gzip.compress(b"Some text that compresses.\n" * 1000))
    data[where : where + 8 or None] = b"\xff" * 8
    path = tmp_path / "broken.txt.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=r"broken\.txt\.gz: cannot read \.gz: "):
        read(path)
