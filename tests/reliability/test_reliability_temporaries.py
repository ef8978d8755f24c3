"""Temporary folders of `tokenize` and `export`: gone after SIGINT and SIGTERM, and a SIGKILL's
leftover is removed by the next command writing the same --out (issue 18)."""
from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import pytest
from _reliability_harness import ENV, bertpre_command, corpus_text, run_cli, wait_for


def temporaries(folder: Path, out: str) -> list[Path]:
    return sorted(folder.glob(f".{out}.tmp-*"))


def start_tokenize(tmp_path: Path) -> subprocess.Popen:
    # Big enough that encoding takes a few seconds after the temporary folder appears.
    (tmp_path / "corpus.txt").write_text(corpus_text(documents=100_000), encoding="utf-8")
    command = bertpre_command("tokenize", tmp_path / "corpus.txt", "--out", tmp_path / "data",
                              "--vocab-size", "200")
    return subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(("signum", "code", "said"), [(signal.SIGTERM, 143, "terminated"),
                                                      (signal.SIGINT, 130, "interrupted")])
def test_a_signal_during_tokenize_removes_its_temporary_folder(tmp_path, signum, code, said):
    process = start_tokenize(tmp_path)
    assert wait_for(lambda: temporaries(tmp_path, "data"), process, timeout=60)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr[-2000:]
    assert stderr.strip().splitlines()[-1:] == [said] and "Traceback" not in stderr, stderr
    assert temporaries(tmp_path, "data") == [] and not (tmp_path / "data").exists()


def test_a_killed_tokenize_leaves_a_temporary_that_the_next_one_removes(tmp_path):
    process = start_tokenize(tmp_path)
    assert wait_for(lambda: temporaries(tmp_path, "data"), process, timeout=60)
    process.kill()
    process.communicate(timeout=60)
    left = temporaries(tmp_path, "data")
    assert len(left) == 1 and socket.gethostname() in left[0].name
    # another live process's temporary (pid 1 always exists) is not touched
    alive = tmp_path / f".data.tmp-{socket.gethostname()}-1-abcdef"
    alive.mkdir()
    (tmp_path / "small.txt").write_text(corpus_text(documents=30), encoding="utf-8")
    done = run_cli("tokenize", tmp_path / "small.txt", "--out", tmp_path / "data", "--vocab-size", "120")
    assert done.returncode == 0, done.stderr[-2000:]
    assert temporaries(tmp_path, "data") == [alive]
