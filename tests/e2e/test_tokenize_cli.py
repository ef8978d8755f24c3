"""`bertpre tokenize` as a user runs it: a subprocess, its exit code, stdout and stderr.

Every bad input must give exit code 2, one line on stderr naming the problem, no traceback,
and no DATA folder (finished or half-written) left behind.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _long_tail import long_tailed_counts, long_tailed_documents  # tests/ is on sys.path
from typer.testing import CliRunner

from bertpre.cli import app

SENTENCES = [
    "The lighthouse keeper counted ships every evening.",
    "Storms came from the west in late autumn.",
    "A small boat carried letters to the island.",
    "Children on the island learned to read the tides.",
]


def tokenize(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "bertpre", "tokenize", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )


def write_text_corpus(path: Path, documents: int = 6) -> Path:
    blocks = [
        "\n".join(f"Page {index}: {sentence}" for sentence in SENTENCES) for index in range(documents)
    ]
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def assert_bad_input(result: subprocess.CompletedProcess, cwd: Path, *, mentions: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and mentions in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    leftovers = [path.name for path in cwd.iterdir() if path.name.startswith("data")]
    assert leftovers == [], leftovers


def test_tokenize_writes_data_and_prints_a_summary(tmp_path):
    write_text_corpus(tmp_path / "corpus.txt")
    result = tokenize("corpus.txt", "--out", "data", "--vocab-size", "120", "--min-frequency", "1",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "documents               6 (5 train, 1 validation)" in result.stdout
    assert "vocab                   120 tokens, lowercase, trained" in result.stdout
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["counts"]["sentences"] == 24
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt", "data"]


def test_a_folder_of_text_with_a_license_tokenizes_the_text_and_names_the_skipped_file(
        tmp_path, monkeypatch, capsys):
    from _in_process import run_main

    (tmp_path / "corpus").mkdir()
    write_text_corpus(tmp_path / "corpus" / "pages.txt")
    (tmp_path / "corpus" / "LICENSE").write_text("Permission is hereby granted\n", encoding="utf-8")
    code, out, err = run_main(["tokenize", tmp_path / "corpus", "--out", tmp_path / "data",
                               "--vocab-size", "120", "--min-frequency", "1"], monkeypatch, capsys)
    assert code == 0, err
    assert err.strip().splitlines() == [
        "note: skipped 1 file that is not a corpus type (.txt, .jsonl, .json, .parquet, also "
        f"compressed): {tmp_path / 'corpus' / 'LICENSE'}"]
    assert "documents               6 (5 train, 1 validation)" in out
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert [source["path"] for source in manifest["sources"]] == [str(tmp_path / "corpus" / "pages.txt")]

def test_a_small_limit_alphabet_is_named_in_a_warning_and_the_summary_ends_with_the_unk_share(tmp_path):
    # 1,500 CJK characters and 。, the rarest seen twice (tests/_long_tail.py).
    documents = long_tailed_documents(long_tailed_counts())
    (tmp_path / "zh.txt").write_text("\n\n".join("\n".join(document) for document in documents) + "\n",
                                     encoding="utf-8")
    # In-process (a subprocess costs a second more): the same command, stdout and stderr apart.
    result = CliRunner().invoke(app, ["tokenize", str(tmp_path / "zh.txt"), "--out", str(tmp_path / "data"),
                                      "--vocab-size", "2000", "--limit-alphabet", "500"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    share = manifest["counts"]["unk_share"]
    assert share > 0.005
    assert result.stderr.strip().splitlines()[-1] == (
        f"warning: {share:.2%} of the tokens are [UNK] (above 0.5%): --limit-alphabet 500 kept the "
        "500 most frequent of the corpus's 1,501 characters, so the other 1,001 "
        f"({manifest['tokenizer']['alphabet']['occurrences_outside'] / manifest['tokenizer']['alphabet']['occurrences']:.2%} "
        "of the text) are [UNK]; keep them all with --limit-alphabet 1501")
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith(f"[UNK] share             {share:.4%} (")
    assert "; 1,001 of the corpus's 1,501 characters are not in the vocab" in lines[-1]
    assert "vocab                   505 tokens (asked 2,000: --limit-alphabet 500 left out 1,001 characters)" \
        in result.stdout


def test_help_shows_an_example(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bertpre", "tokenize", "--help"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0
    assert "Example: bertpre tokenize" in result.stdout


def test_invalid_utf8_is_replaced_counted_and_warned_about_naming_its_file(tmp_path):
    corpus = write_text_corpus(tmp_path / "corpus.txt")
    clean = tmp_path / "clean.txt"
    clean.write_bytes(corpus.read_bytes())
    corpus.write_bytes(corpus.read_bytes() + b"Broken \xff\xfe bytes here.\n")
    result = tokenize("clean.txt", "corpus.txt", "--out", "data", "--vocab-size", "150", "--min-frequency", "1",
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("warning: 2 invalid UTF-8 byte sequence(s) were replaced with U+FFFD (counted "
                                    "in the manifest), in 1 file: corpus.txt; convert")
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["counts"]["invalid_utf8_replacements"] == 2


def test_add_vocab_appends_domain_words_to_a_reused_vocab(tmp_path):
    write_text_corpus(tmp_path / "general.txt")
    assert tokenize("general.txt", "--out", "source", "--vocab-size", "120", "--min-frequency", "1",
                    cwd=tmp_path).returncode == 0
    words = ["immunohistochemistry", "cardiomyopathy"]
    (tmp_path / "domain.txt").write_text(
        "\n\n".join(f"Slide {index} showed {words[index % 2]}.\nThe {words[index % 2]} was clear."
                    for index in range(8)) + "\n", encoding="utf-8")
    result = tokenize("domain.txt", "--out", "grown", "--tokenizer", "source/tokenizer",
                      "--add-vocab", "20", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "grown" / "manifest.json").read_text())
    added = manifest["tokenizer"]["added_pieces"]
    assert 2 <= added <= 20
    assert f"vocab                   {120 + added} tokens, lowercase, extended" in result.stdout
    assert f"added to vocab          {added} tokens after the 120 of the --tokenizer" in result.stdout
    old = (tmp_path / "source" / "tokenizer" / "vocab.txt").read_text().splitlines()
    new = (tmp_path / "grown" / "tokenizer" / "vocab.txt").read_text().splitlines()
    assert new[:120] == old and set(words) <= set(new[120:])


def _missing(tmp_path: Path) -> list[str]:
    return ["missing.txt", "--out", "data"]


def _empty(tmp_path: Path) -> list[str]:
    (tmp_path / "empty.txt").write_bytes(b"")
    return ["empty.txt", "--out", "data"]


def _blank(tmp_path: Path) -> list[str]:
    (tmp_path / "blank.txt").write_text("\n   \n\t\n\u200b\n\n", encoding="utf-8")
    return ["blank.txt", "--out", "data"]


def _binary(tmp_path: Path) -> list[str]:
    (tmp_path / "model.txt").write_bytes(bytes(range(256)) * 64)
    return ["model.txt", "--out", "data"]


def _huge_line(tmp_path: Path) -> list[str]:
    (tmp_path / "huge.txt").write_bytes(b"word " * (4 * 1024 * 1024))  # 20 MiB, no newline
    return ["huge.txt", "--out", "data"]


def _unknown_extension(tmp_path: Path) -> list[str]:
    (tmp_path / "report.docx").write_bytes(b"PK\x03\x04")
    return ["report.docx", "--out", "data"]


def _json_without_field(tmp_path: Path) -> list[str]:
    (tmp_path / "corpus.jsonl").write_text('{"body": "Some text."}\n{"body": "More."}\n')
    return ["corpus.jsonl", "--out", "data"]


def _unwritable_out(tmp_path: Path) -> list[str]:
    write_text_corpus(tmp_path / "corpus.txt")
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        return ["corpus.txt", "--out", str(locked / "data")]
    # root may write anywhere permissions allow; sysfs refuses new folders even to root.
    return ["corpus.txt", "--out", "/sys/bertpre-test/data"]


def _out_exists(tmp_path: Path) -> list[str]:
    write_text_corpus(tmp_path / "corpus.txt")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "manifest.json").write_text("{}")
    return ["corpus.txt", "--out", "data"]


def _vocab_too_small(tmp_path: Path) -> list[str]:
    write_text_corpus(tmp_path / "corpus.txt")
    return ["corpus.txt", "--out", "data", "--vocab-size", "30"]


def _add_vocab_alone(tmp_path: Path) -> list[str]:
    write_text_corpus(tmp_path / "corpus.txt")
    return ["corpus.txt", "--out", "data", "--add-vocab", "20"]


def _add_vocab_zero(tmp_path: Path) -> list[str]:
    write_text_corpus(tmp_path / "corpus.txt")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n", encoding="utf-8")
    return ["corpus.txt", "--out", "data", "--tokenizer", "vocab.txt", "--add-vocab", "0"]


@pytest.mark.parametrize(
    ("make_args", "mentions"),
    [
        (_missing, "missing.txt: no such file"),
        (_empty, "empty.txt"),
        (_blank, "blank.txt"),
        (_binary, "model.txt: looks binary"),
        (_huge_line, "huge.txt: line 1 is over 1 MiB"),
        (_unknown_extension, "report.docx: unknown corpus file type"),
        (_json_without_field, "no 'text' field"),
        (_unwritable_out, "cannot write --out"),
        (_out_exists, "already exists; pass --overwrite"),
        (_vocab_too_small, "vocab size 30 is too small"),
        (_add_vocab_alone, "--add-vocab needs --tokenizer"),
        (_add_vocab_zero, "--add-vocab 0 must be 1 or more"),
    ],
    ids=["missing", "empty", "blank", "binary", "huge-line", "extension", "json-field",
         "unwritable", "exists", "vocab-small", "add-vocab-alone", "add-vocab-zero"],
)
def test_bad_input_gives_one_line_exit_2_and_no_data(tmp_path, make_args, mentions):
    args = make_args(tmp_path)
    result = tokenize(*args, cwd=tmp_path)
    if make_args is _out_exists:
        # the existing folder is the user's and stays as it was
        assert (tmp_path / "data" / "manifest.json").read_text() == "{}"
        assert result.returncode == 2 and mentions in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "Traceback" not in result.stderr
        return
    assert_bad_input(result, tmp_path, mentions=mentions)
