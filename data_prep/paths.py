"""Corpus path resolution: files, folders (recursive) and globs to a sorted list of files."""

from __future__ import annotations

import glob
import stat
from collections.abc import Iterable
from pathlib import Path

from data_prep.errors import CorpusError

FORMATS = (".txt", ".jsonl", ".json", ".parquet")
COMPRESSIONS = (".gz", ".bz2", ".xz")
SUPPORTED_EXTENSIONS = tuple(
    [*FORMATS] + [f"{fmt}{compression}" for fmt in FORMATS for compression in COMPRESSIONS]
)


def is_stream(path: Path) -> bool:
    """A pipe: a FIFO, or process substitution's `/dev/fd/N` (`<(zcat corpus.txt.gz)`), which can
    be read once, from its start."""
    try:
        return stat.S_ISFIFO(path.stat().st_mode)
    except OSError:
        return False


def split_extension(path: Path) -> tuple[str, str | None]:
    """The corpus format (".txt", ".jsonl", ...) and compression (".gz", ... or None) of a file.

    A pipe whose name has no corpus extension (`/dev/fd/63`) is plain text.

    Raises:
        CorpusError: the name ends in no supported extension.
    """
    suffixes = [suffix.lower() for suffix in path.suffixes[-2:]]
    compression = suffixes[-1] if suffixes and suffixes[-1] in COMPRESSIONS else None
    if compression:
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] in FORMATS:
        return suffixes[-1], compression
    if is_stream(path):
        return ".txt", None
    raise CorpusError(
        f"{path}: unknown corpus file type; supported: {', '.join(FORMATS)}, "
        f"each optionally compressed as {', '.join(COMPRESSIONS)}"
    )


def _check_readable_kind(path: Path) -> None:
    """Refuse what is neither a file nor a pipe: a device never ends (/dev/zero), a socket is
    no corpus."""
    mode = path.stat().st_mode
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return
    kind = ("a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise CorpusError(f"{path}: is {kind}, not a corpus; give files, folders, globs or a pipe "
                      "(e.g. <(zcat corpus.txt.gz))")


def _is_hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _files_in_folder(folder: Path) -> list[Path]:
    files = sorted(
        path for path in folder.rglob("*") if path.is_file() and not _is_hidden(path, folder)
    )
    if not files:
        raise CorpusError(f"{folder}: folder holds no corpus files")
    return files


def resolve_paths(inputs: Iterable[str | Path]) -> list[Path]:
    """Expand corpus inputs to the files to read, in the order given.

    Folders are read recursively (hidden files and folders skipped) and globs expanded
    (`**` included), each in sorted order; a file named twice is read once.

    Raises:
        CorpusError: a path does not exist, a glob matches nothing, a folder holds no files,
            or a file has an extension that is not a corpus format.
    """
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    files: list[Path] = []
    for item in inputs:
        text = str(item)
        path = Path(text).expanduser()
        if path.exists():
            found = _files_in_folder(path) if path.is_dir() else [path]
        elif any(character in text for character in "*?["):
            matches = sorted(glob.glob(str(path), recursive=True))
            found = []
            for match in map(Path, matches):
                found.extend(_files_in_folder(match) if match.is_dir() else [match])
            if not found:
                raise CorpusError(f"{text}: no files match this pattern")
        else:
            raise CorpusError(f"{text}: no such file or folder")
        for file in found:
            _check_readable_kind(file)
            split_extension(file)
        files.extend(found)
    if not files:
        raise CorpusError("no corpus paths given")
    unique: dict[Path, Path] = {}
    for file in files:
        unique.setdefault(file.resolve(), file)
    return list(unique.values())
