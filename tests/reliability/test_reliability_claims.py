"""`--out` is claimed, not checked (issue 29): a second command on a claimed folder is refused,
a folder that changed while a command ran is not replaced (the result is kept beside it), and a
claim whose process is gone is taken over with a note."""
from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from _reliability_harness import (
    ENV,
    bertpre_command,
    corpus_text,
    one_line_error,
    run_cli,
    wait_for,
)

from bertpre.claim import CLAIM_FILE, Claim, claimed
from bertpre.errors import UserError
from bertpre.folders import claimed_out


def start_slow_tokenize(tmp_path: Path, out: Path) -> subprocess.Popen:
    # Big enough that encoding takes seconds after the claim is taken.
    (tmp_path / "big.txt").write_text(corpus_text(documents=100_000), encoding="utf-8")
    return subprocess.Popen(bertpre_command("tokenize", tmp_path / "big.txt", "--out", out, "--vocab-size", "200"),
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_folder_that_changes_while_tokenize_runs_is_kept_and_so_is_the_result(tmp_path):
    out = tmp_path / "data"
    first = start_slow_tokenize(tmp_path, out)
    assert wait_for(lambda: (out / CLAIM_FILE).is_file(), first, timeout=60)
    holder = json.loads((out / CLAIM_FILE).read_text())
    assert (holder["command"], holder["pid"], holder["host"]) == ("tokenize", first.pid, socket.gethostname())

    (tmp_path / "small.txt").write_text(corpus_text(documents=30), encoding="utf-8")
    second = run_cli("tokenize", tmp_path / "small.txt", "--out", out, "--vocab-size", "120", "--overwrite")
    assert second.returncode == 2
    assert f"is in use by process {first.pid} on {socket.gethostname()} (`bertpre tokenize`" in one_line_error(second)

    (out / "notes.txt").write_text("mine")  # the user writes into the folder meanwhile
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 2, stderr[-2000:]
    assert "changed while `bertpre tokenize` ran (notes.txt appeared), so it was not replaced" in stderr
    assert sorted(path.name for path in out.iterdir()) == ["notes.txt"]  # claim gone, notes kept
    kept = [path for path in tmp_path.iterdir() if path.name.startswith("data.new-")]
    assert len(kept) == 1 and str(kept[0]) in stderr
    assert (kept[0] / "manifest.json").is_file() and (kept[0] / "dataset").is_dir()
    assert not list(tmp_path.glob(".data.tmp-*"))


def test_a_stale_claim_is_taken_over_with_a_note(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid now names no process
    out = tmp_path / "data"
    out.mkdir()
    (out / CLAIM_FILE).write_text(json.dumps({"command": "tokenize", "pid": gone.pid,
                                              "host": socket.gethostname(), "started": "then"}))
    (tmp_path / "c.txt").write_text(corpus_text(documents=30), encoding="utf-8")
    done = run_cli("tokenize", tmp_path / "c.txt", "--out", out, "--vocab-size", "120")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"note: --out {out} was claimed by process {gone.pid}" in done.stderr
    assert "which is gone; taking it over" in done.stderr
    assert (out / "manifest.json").is_file() and not (out / CLAIM_FILE).exists()


def test_a_claim_is_exclusive_and_released_whole(tmp_path):
    folder = tmp_path / "a" / "b"
    first = Claim(folder, "export")
    first.take()
    assert first.holds() and folder.is_dir()
    second = Claim(folder, "tokenize")
    with pytest.raises(UserError, match=f"is in use by process {os.getpid()} on"):
        second.take()
    assert first.holds()  # a refused claim leaves the holder's file alone
    first.release()
    # The claim made a/ and a/b/ and nothing was put there: both go with it.
    assert list(tmp_path.iterdir()) == []


def test_a_claimed_folder_that_holds_a_result_stays(tmp_path):
    folder = tmp_path / "demo"
    with claimed(folder, "demo") as claim:
        (folder / "result.txt").write_text("done")
        claim.keep_folder()
    assert sorted(path.name for path in folder.iterdir()) == ["result.txt"]


def test_a_failed_command_leaves_no_folder_and_no_claim(tmp_path):
    out = tmp_path / "new" / "export"
    with pytest.raises(RuntimeError), claimed_out(out, "export") as output:
        (output.staging / "model.safetensors").write_text("half")
        raise RuntimeError("crash before the result was complete")
    assert list(tmp_path.iterdir()) == []


def test_commit_replaces_only_the_folder_it_claimed(tmp_path):
    out = tmp_path / "export"
    with claimed_out(out, "export") as output:
        (output.staging / ".bertpre-export").write_text("")
        (output.staging / "config.json").write_text("{}")
        output.commit()
    assert sorted(path.name for path in out.iterdir()) == [".bertpre-export", ".bertpre-inventory.json", "config.json"]
    # Another process takes the claim over while this one builds: nothing is replaced.
    with pytest.raises(UserError, match="it was claimed by process 4242 on elsewhere"):
        with claimed_out(out, "export", overwrite=True) as output:
            (output.staging / "config.json").write_text('{"new": 1}')
            (out / CLAIM_FILE).write_text(json.dumps({"pid": 4242, "host": "elsewhere"}))
            output.commit()
    assert (out / "config.json").read_text() == "{}"
