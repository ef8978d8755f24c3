"""Pipes and devices as corpus: a pipe with a writer is read once, like the file it streams; a
pipe with none, a device or a pipe read twice is refused in one line, never waited on forever."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _tiny_data import tiny_documents  # tests/ is on sys.path

from bertpre.data import load_data
from bertpre.data.build import tokenize_corpus
from bertpre.errors import UserError
from data_prep import CorpusError, CorpusStats, resolve_paths
from data_prep.readers import PIPE_WRITER_WAIT_SECONDS, read_raw_documents

ROOT = Path(__file__).parents[2]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
CORPUS = ("\n\n".join("\n".join(document) for document in tiny_documents(40)) + "\n").encode()
OPTIONS = ["--vocab-size", "120", "--min-frequency", "1", "--validation-share", "0.1"]


def tokenize(*args: str, cwd: Path, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bertpre", "tokenize", *args, *OPTIONS],
                            cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, pass_fds=pass_fds)


def finish(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def write_later(path_or_descriptor: str | int, data: bytes, delay: float = 0.5) -> threading.Thread:
    """A writer that starts after the reader: the reader must wait for it, then read it all."""
    def run() -> None:
        time.sleep(delay)
        with open(path_or_descriptor, "wb") as pipe:  # a FIFO's open waits for its reader
            pipe.write(data)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def assert_same_data(made: Path, reference: Path) -> None:
    data, expected = load_data(made), load_data(reference)
    assert data.train["input_ids"] == expected.train["input_ids"]
    assert data.validation["input_ids"] == expected.validation["input_ids"]
    assert (made / "tokenizer/tokenizer.json").read_bytes() == (reference / "tokenizer/tokenizer.json").read_bytes()
    [source], [expected_source] = data.manifest["sources"], expected.manifest["sources"]
    assert (source["bytes"], source["sha256"]) == (expected_source["bytes"], expected_source["sha256"])


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """DATA from the corpus as a regular file."""
    folder = tmp_path_factory.mktemp("reference")
    (folder / "corpus.txt").write_bytes(CORPUS)
    code, stderr = finish(tokenize("corpus.txt", "--out", "data", cwd=folder))
    assert code == 0, stderr
    return folder / "data"


def test_a_named_fifo_with_a_writer_gives_the_same_data_as_the_file(tmp_path, reference):
    fifo = tmp_path / "corpus.txt.gz"
    os.mkfifo(fifo)
    process = tokenize(fifo.name, "--out", "data", cwd=tmp_path)
    write_later(str(fifo), gzip.compress(CORPUS))
    code, stderr = finish(process)
    assert code == 0, stderr
    data = load_data(tmp_path / "data")
    assert data.train["input_ids"] == load_data(reference).train["input_ids"]
    assert data.manifest["sources"][0]["bytes"] == len(gzip.compress(CORPUS))  # counted as read


def test_process_substitution_is_read_once_as_plain_text(tmp_path, reference):
    """`bertpre tokenize <(zcat corpus.txt.gz)`: the path is /dev/fd/N, a pipe with no extension."""
    read_end, write_end = os.pipe()
    process = tokenize(f"/dev/fd/{read_end}", "--out", "data", cwd=tmp_path, pass_fds=(read_end,))
    os.close(read_end)
    write_later(write_end, CORPUS).join()
    code, stderr = finish(process)
    assert code == 0, stderr
    assert_same_data(tmp_path / "data", reference)


def test_a_fifo_nobody_writes_to_is_refused_in_seconds(tmp_path):
    os.mkfifo(tmp_path / "corpus.txt")
    started = time.monotonic()
    code, stderr = finish(tokenize("corpus.txt", "--out", "data", cwd=tmp_path))
    assert code == 2
    assert stderr == (f"error: corpus.txt: is a pipe that no process writes to (none in "
                      f"{PIPE_WRITER_WAIT_SECONDS:g} s); start its writer first, e.g. "
                      "bertpre tokenize <(zcat corpus.txt.gz) --out DATA\n")
    assert time.monotonic() - started < PIPE_WRITER_WAIT_SECONDS + 20  # start-up included
    assert not (tmp_path / "data").exists()


def test_a_device_is_refused_in_one_line(tmp_path):
    code, stderr = finish(tokenize("/dev/zero", "--out", "data", cwd=tmp_path))
    assert code == 2
    assert stderr == ("error: /dev/zero: is a character device, not a corpus; give files, folders, "
                      "globs or a pipe (e.g. <(zcat corpus.txt.gz))\n")
    with pytest.raises(CorpusError, match="^/dev/urandom: is a character device, not a corpus"):
        resolve_paths(["/dev/urandom"])


def test_a_pipe_is_never_read_twice(tmp_path):
    os.mkfifo(tmp_path / "corpus.txt")
    with pytest.raises(UserError, match="--vocab-sample-bytes reads the corpus twice"):
        tokenize_corpus([tmp_path / "corpus.txt"], tmp_path / "data", vocab_sample_bytes=1000)


def test_a_pipe_is_read_whole_with_its_first_bytes_once(tmp_path):
    """The reader's first, non-blocking read is served back before the rest: nothing lost or doubled."""
    read_end, write_end = os.pipe()
    corpus = CORPUS * 20  # past the pipe's buffer: the writer blocks until the reader reads
    write_later(write_end, corpus, delay=0.2)
    stats = CorpusStats()
    documents = list(read_raw_documents(Path(f"/dev/fd/{read_end}"), stats))
    os.close(read_end)
    assert sum(map(len, documents)) == CORPUS.count(b".\n") * 20
    assert stats.files[0].bytes == len(corpus)
