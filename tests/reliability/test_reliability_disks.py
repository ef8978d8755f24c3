"""A full or read-only disk under every command that writes: exit 2, one line, no traceback,
no temporary folder left (issue 18). Real tmpfs mounts; skipped where mounting is not allowed."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from _reliability_harness import corpus_text, one_line_error, run_cli


@pytest.fixture(params=["full", "read-only"])
def bad_disk(request, tmp_path):
    """A 64 KiB tmpfs (room for little) or a read-only one."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    options = "size=64k" if request.param == "full" else "size=1m,ro"
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def assert_refused_cleanly(result: subprocess.CompletedProcess, disk: Path, *, keep: set[str] = frozenset(),
                           progress: bool = False) -> None:
    """Exit 2 with one `error: cannot write ...` line (after progress lines where a command
    prints them), no traceback, and nothing on the disk but `keep`."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    line = result.stderr.splitlines()[-1] if progress else one_line_error(result)
    assert line.startswith("error: cannot write"), result.stderr[-3000:]
    assert {path.name for path in disk.iterdir()} <= keep  # no temporaries left behind


def test_tokenize(bad_disk, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(corpus_text(documents=3000), encoding="utf-8")  # about 700 KB
    result = run_cli("tokenize", corpus, "--out", bad_disk / "data", "--vocab-size", "150")
    assert_refused_cleanly(result, bad_disk)


def test_export(bad_disk, reference_run):
    result = run_cli("export", reference_run, "--out", bad_disk / "export")
    assert_refused_cleanly(result, bad_disk)


def test_pretrain(bad_disk, tiny_config, data_dir):
    result = run_cli("pretrain", "--config", tiny_config, "--data", data_dir, "--out",
                     bad_disk / "run", "--set", "train.max_steps=4")
    # a full disk keeps the run folder (what fitted, to resume from); a read-only one has nothing
    assert_refused_cleanly(result, bad_disk, keep={"run"}, progress=True)
    assert not (bad_disk / "run" / ".bertpre-claim").exists()


@pytest.mark.slow
def test_demo(bad_disk):
    result = run_cli("demo", "--out", bad_disk / "demo", "--max-steps", "2")
    assert_refused_cleanly(result, bad_disk, keep={"demo"}, progress=True)  # marked as the demo's
