"""Corpus path resolution: files, folders, globs, and the errors for each bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_prep import CorpusError, resolve_paths, skipped_folders_note, skipped_note
from data_prep.paths import SUPPORTED_EXTENSIONS, split_extension


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("text\n")
    return path


def test_files_keep_their_order(tmp_path: Path) -> None:
    b, a = touch(tmp_path / "b.txt"), touch(tmp_path / "a.jsonl")
    assert resolve_paths([b, str(a)]) == [b, a]
    assert resolve_paths(str(b)) == [b]


def test_folder_is_read_recursively_in_sorted_order_without_hidden_files(tmp_path: Path) -> None:
    files = [
        touch(tmp_path / "corpus" / name)
        for name in ["b.txt", "a/z.jsonl.gz", "a/y.parquet", "c/d/e.json.xz"]
    ]
    touch(tmp_path / "corpus" / ".hidden.md")
    touch(tmp_path / "corpus" / ".cache" / "x.bin")
    assert resolve_paths([tmp_path / "corpus"]) == [files[2], files[1], files[0], files[3]]


def test_globs_expand_sorted_and_recursively(tmp_path: Path) -> None:
    files = [touch(tmp_path / name) for name in ["x/2.txt", "x/1.txt", "x/deep/3.txt", "x/4.jsonl"]]
    assert resolve_paths([f"{tmp_path}/x/*.txt"]) == [files[1], files[0]]
    assert resolve_paths([f"{tmp_path}/x/**/*.txt"]) == [files[1], files[0], files[2]]


def test_a_file_named_twice_is_read_once(tmp_path: Path) -> None:
    file = touch(tmp_path / "c" / "a.txt")
    assert resolve_paths([file, tmp_path / "c", f"{tmp_path}/c/*.txt"]) == [file]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.txt", (".txt", None)),
        ("a.TXT", (".txt", None)),
        ("a.b.jsonl", (".jsonl", None)),
        ("a.json.gz", (".json", ".gz")),
        ("a.txt.bz2", (".txt", ".bz2")),
        ("a.parquet.xz", (".parquet", ".xz")),
    ],
)
def test_split_extension(name: str, expected: tuple[str, str | None]) -> None:
    assert split_extension(Path(name)) == expected


def test_supported_extensions() -> None:
    assert len(SUPPORTED_EXTENSIONS) == 16
    assert {".txt", ".jsonl", ".json", ".parquet", ".txt.gz", ".parquet.xz"} <= set(
        SUPPORTED_EXTENSIONS
    )


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"missing\.txt: no such file or folder"):
        resolve_paths([tmp_path / "missing.txt"])


def test_glob_without_matches(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"\*\.txt: no files match this pattern"):
        resolve_paths([f"{tmp_path}/*.txt"])


def test_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"empty: folder holds no corpus files"):
        resolve_paths([tmp_path / "empty"])


@pytest.mark.parametrize("name", ["notes.md", "data.csv", "archive.gz", "noextension", "a.tar.gz"])
def test_unknown_extension_lists_the_supported_ones(tmp_path: Path, name: str) -> None:
    file = touch(tmp_path / name)
    with pytest.raises(CorpusError) as caught:
        resolve_paths([file])
    assert str(caught.value) == (
        f"{file}: unknown corpus file type; supported: .txt, .jsonl, .json, .parquet, "
        "each optionally compressed as .gz, .bz2, .xz"
    )


def test_files_beside_the_corpus_in_a_folder_are_skipped_and_named(tmp_path: Path) -> None:
    corpus = [touch(tmp_path / "c" / "a.txt"), touch(tmp_path / "c" / "sub" / "b.jsonl.gz")]
    beside = [touch(tmp_path / "c" / name) for name in ("ChangeLog", "LICENSE", "README.md")]
    skipped: list[Path] = []
    assert resolve_paths([tmp_path / "c"], skipped) == corpus
    assert skipped == beside
    assert skipped_note(skipped) == (
        "note: skipped 3 files that are not a corpus type (.txt, .jsonl, .json, .parquet, also "
        f"compressed): {beside[0]}, {beside[1]}, {beside[2]}"
    )
    assert skipped_note([]) is None


def test_files_beside_the_corpus_matched_by_a_pattern_are_skipped(tmp_path: Path) -> None:
    corpus = touch(tmp_path / "c" / "a.txt")
    license_file = touch(tmp_path / "c" / "LICENSE")
    skipped: list[Path] = []
    assert resolve_paths([f"{tmp_path}/c/*"], skipped) == [corpus]
    assert skipped == [license_file]


def test_a_folder_with_no_corpus_file_is_refused_naming_what_it_holds(tmp_path: Path) -> None:
    touch(tmp_path / "c" / "LICENSE")
    touch(tmp_path / "c" / "README.md")
    with pytest.raises(CorpusError) as caught:
        resolve_paths([tmp_path / "c"])
    assert str(caught.value).startswith(
        f"{tmp_path / 'c'}: folder holds no corpus files (only LICENSE, README.md); supported: .txt")


def test_a_named_file_that_is_no_corpus_type_is_still_refused(tmp_path: Path) -> None:
    touch(tmp_path / "c" / "a.txt")
    with pytest.raises(CorpusError, match=r"LICENSE: unknown corpus file type"):
        resolve_paths([tmp_path / "c", touch(tmp_path / "LICENSE")])


def test_nothing_given() -> None:
    with pytest.raises(CorpusError, match="no corpus paths given"):
        resolve_paths([])


def test_links_are_followed_into_folders_and_a_loop_ends(tmp_path: Path) -> None:
    """A corpus folder often links to a larger disk: a linked folder is read as a linked file is;
    each real folder once, so a link back up ends."""
    elsewhere = [touch(tmp_path / "disk" / "wiki" / name) for name in ("a.txt", "b.txt")]
    corpus = tmp_path / "corpus"
    own = touch(corpus / "own.txt")
    (corpus / "wiki").symlink_to(elsewhere[0].parent, target_is_directory=True)
    (corpus / "again").symlink_to(elsewhere[0].parent, target_is_directory=True)  # the same folder twice
    (corpus / "wiki-file.txt").symlink_to(elsewhere[1])
    (elsewhere[0].parent / "up").symlink_to(corpus, target_is_directory=True)  # a loop
    found = resolve_paths([corpus])
    assert sorted(path.resolve() for path in found) == sorted([own.resolve(), *(p.resolve() for p in elsewhere)])


def test_folders_a_check_rejects_are_left_out_and_named(tmp_path: Path) -> None:
    corpus = [touch(tmp_path / "c" / "a.txt"), touch(tmp_path / "c" / "deep" / "b.txt")]
    touch(tmp_path / "c" / "data" / "tokenizer" / "vocab.txt")
    touch(tmp_path / "c" / "deep" / "run" / "metrics.jsonl")
    made = {"data": "a DATA folder", "run": "a RUN folder"}
    for inputs in ([tmp_path / "c"], [f"{tmp_path}/c/*"]):
        skipped: list[tuple[Path, str]] = []
        assert resolve_paths(inputs, skip_folder=lambda folder: made.get(folder.name),
                             skipped_folders=skipped) == corpus
        assert skipped == [(tmp_path / "c" / "data", "a DATA folder"), (tmp_path / "c" / "deep" / "run", "a RUN folder")]
    assert skipped_folders_note(skipped) == (
        f"note: skipped 2 folders inside the corpus that are no corpus: {tmp_path / 'c' / 'data'} (a DATA folder), "
        f"{tmp_path / 'c' / 'deep' / 'run'} (a RUN folder)")
