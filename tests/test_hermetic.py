"""The suite's results do not depend on what a user made in the checkout.

The README has a user run `bertpre tokenize corpus/ --out data/corpus` and `bertpre pretrain ...
--out runs/...` inside the clone, then `make test`. A preset's `data.path` is `data/corpus`,
relative to the working directory, so a test run from the checkout would read the user's
vocabulary. `conftest.py` starts every test in a fresh empty folder; these tests keep it so.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _in_process import run_main

ROOT = Path(__file__).resolve().parents[1]
SEEN: list[Path] = []  # each test's working directory, to show that no two share one


def test_each_test_starts_in_an_empty_folder_outside_the_checkout() -> None:
    cwd = Path.cwd().resolve()
    assert not cwd.is_relative_to(ROOT), cwd
    assert list(cwd.iterdir()) == []
    SEEN.append(cwd)


def test_no_two_tests_share_a_working_directory() -> None:
    (Path.cwd() / "left by a test").write_text("x", encoding="utf-8")
    SEEN.append(Path.cwd().resolve())
    assert len(SEEN) == len(set(SEEN))


def test_info_reads_the_working_directorys_data_not_the_checkouts(tiny_data: Path, monkeypatch, capsys) -> None:
    """Where a user works, `info --config base` reads their data/corpus (that is the preset's
    meaning); in a test's own folder there is none, so the preset's 30,522 stands."""
    code, out, _ = run_main(["info", "--config", "base"], monkeypatch, capsys)
    assert code == 0 and "vocab 30522 (auto: assumed 30522)" in out, out
    shutil.copytree(tiny_data, Path.cwd() / "data" / "corpus")
    code, out, _ = run_main(["info", "--config", "base"], monkeypatch, capsys)
    assert code == 0 and "vocab 30522" not in out, out


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout to copy its tracked files")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True)
    return [name for name in listed.stdout.decode().split("\0") if name]


@pytest.mark.slow
def test_the_config_and_info_tests_pass_in_a_clone_full_of_a_users_folders(tmp_path: Path) -> None:
    """A scratch copy of the tree with the README's folders made by the real commands (a 200-token
    vocabulary in data/corpus, a run in runs/, an export in my-bert/): the tests that resolve
    presets' relative paths pass there as they do in a clean clone."""
    clone = tmp_path / "a user's clone"
    for name in tracked_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, clone / name)
    corpus = clone / "corpus"
    corpus.mkdir()
    (corpus / "notes.txt").write_text("\n\n".join(
        f"the river runs past the old mill number {i} .\nthe miller sells flour at the market ."
        for i in range(40)), encoding="utf-8")
    for args in (["tokenize", "corpus/", "--out", "data/corpus", "--vocab-size", "200"],
                 ["pretrain", "--config", "tiny", "--data", "data/corpus", "--out", "runs/tiny",
                  "--set", "train.max_steps=2"],
                 ["export", "runs/tiny", "--out", "my-bert"]):
        done = subprocess.run([sys.executable, "-m", "bertpre", *args], cwd=clone, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    for folder in ("results", "demo"):
        (clone / folder).mkdir()
    tests = ["tests/test_config.py", "tests/test_cli.py", "tests/model/test_cost.py",
             "tests/tools/test_info_families.py", "tests/test_modernbert_preset.py"]
    env = dict(os.environ, PYTHONPATH=str(clone))  # the copy's bertpre, not the installed checkout's
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider",
                           *tests], cwd=clone, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:]
