"""Session fixtures for the reliability suite: one tiny DATA folder made by `bertpre tokenize`,
one tiny config and one uninterrupted reference run that the fault runs are compared with."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _reliability_harness import (  # noqa: E402
    TINY_CONFIG,
    corpus_text,
    pretrain_args,
    run_cli,
)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("reliability")


@pytest.fixture(scope="session")
def corpus(workspace) -> Path:
    path = workspace / "corpus.txt"
    path.write_text(corpus_text(), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def data_dir(workspace, corpus) -> Path:
    out = workspace / "data"
    result = run_cli("tokenize", corpus, "--out", out, "--vocab-size", "150", "--min-frequency", "1",
                     "--validation-share", "0.1")
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def tiny_config(workspace) -> Path:
    path = workspace / "tiny.yaml"
    path.write_text(TINY_CONFIG, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def reference_run(workspace, tiny_config, data_dir) -> Path:
    """An uninterrupted 36-step run (seed 42); never modified by the tests (copy it first)."""
    out = workspace / "reference"
    result = run_cli(*pretrain_args(tiny_config, data_dir, out))
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture
def copy_run(tmp_path):
    """Copy a run folder into this test's tmp_path (so a test may damage it)."""
    def copy(run_dir: Path, name: str = "run") -> Path:
        target = tmp_path / name
        shutil.copytree(run_dir, target)
        return target
    return copy
