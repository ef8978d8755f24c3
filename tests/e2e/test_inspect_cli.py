"""`bertpre inspect` as a user runs it: a table on stdout, or one error line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from _tiny_data import build_tiny_data  # noqa: E402


def run_inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bertpre", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
def test_inspect_prints_the_audit_table(tmp_path):
    data = build_tiny_data(tmp_path / "data")
    result = run_inspect(str(data), "--batches", "2")
    assert result.returncode == 0, result.stderr
    assert "mask rate (predicted / eligible)" in result.stdout
    assert "label 1 (random next)" in result.stdout


def test_inspect_of_a_missing_folder_is_one_line_and_exit_2(tmp_path):
    result = run_inspect(str(tmp_path / "nothing"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr
