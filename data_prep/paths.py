"""Corpus path resolution: files, folders (recursive) and globs to a sorted list of files."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable, Iterable
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


def is_corpus_file(path: Path) -> bool:
    """Whether the file's name ends in a corpus extension (a pipe always counts: it is text)."""
    try:
        split_extension(path)
    except CorpusError:
        return False
    return True


# A folder found inside a corpus folder -> why it is no part of the corpus (None: it is).
FolderCheck = Callable[[Path], "str | None"]


def _files_in_folder(folder: Path, skip_folder: FolderCheck | None = None,
                     skipped_folders: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Every file under `folder`, sorted, hidden files and folders left out. Links are followed,
    to folders too (a corpus folder often links to a larger disk), each real folder read once,
    so a link loop ends. A subfolder `skip_folder` gives a reason for goes, with it, to
    `skipped_folders`."""
    files: list[Path] = []
    seen: set[str] = set()
    for root, folders, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            folders[:] = []
            continue
        seen.add(real)
        here = Path(root)
        kept = []
        for name in sorted(folders):
            if name.startswith("."):
                continue
            reason = skip_folder(here / name) if skip_folder is not None else None
            if reason is not None:
                if skipped_folders is not None:
                    skipped_folders.append((here / name, reason))
                continue
            kept.append(name)
        folders[:] = kept
        files.extend(here / name for name in names if not name.startswith(".") and (here / name).is_file())
    if not files:
        raise CorpusError(f"{folder}: folder holds no corpus files")
    return sorted(files)


def _keep_corpus_files(found: list[Path], where: str, skipped: list[Path]) -> list[Path]:
    """The corpus files of a folder's or a pattern's files; the others (LICENSE, README.md,
    ChangeLog, which sit beside corpora) go to `skipped`. A user who names a file means it, so
    only what a folder or a pattern brought in is skipped; none left is still an error."""
    kept = [path for path in found if is_corpus_file(path)]
    if not kept:
        others = ", ".join(path.name for path in found[:3]) + (", ..." if len(found) > 3 else "")
        raise CorpusError(
            f"{where} no corpus files (only {others}); supported: {', '.join(FORMATS)}, "
            f"each optionally compressed as {', '.join(COMPRESSIONS)}"
        )
    skipped.extend(path for path in found if path not in kept)
    return kept


def skipped_note(skipped: list[Path], shown: int = 5) -> str | None:
    """One line naming the files `resolve_paths` skipped, or None when it skipped none."""
    if not skipped:
        return None
    names = ", ".join(str(path) for path in skipped[:shown])
    more = f" and {len(skipped) - shown} more" if len(skipped) > shown else ""
    count = f"{len(skipped)} file{'s' if len(skipped) != 1 else ''}"
    return (f"note: skipped {count} that {'is' if len(skipped) == 1 else 'are'} not a corpus "
            f"type ({', '.join(FORMATS)}, also compressed): {names}{more}")


def skipped_folders_note(skipped_folders: list[tuple[Path, str]], shown: int = 5) -> str | None:
    """One line naming the folders `resolve_paths` left out, and why, or None when it left none."""
    if not skipped_folders:
        return None
    names = ", ".join(f"{path} ({reason})" for path, reason in skipped_folders[:shown])
    more = f" and {len(skipped_folders) - shown} more" if len(skipped_folders) > shown else ""
    count = f"{len(skipped_folders)} folder{'s' if len(skipped_folders) != 1 else ''}"
    return f"note: skipped {count} inside the corpus that {'is' if len(skipped_folders) == 1 else 'are'} no corpus: {names}{more}"


def resolve_paths(inputs: Iterable[str | Path], skipped: list[Path] | None = None, *,
                  skip_folder: FolderCheck | None = None,
                  skipped_folders: list[tuple[Path, str]] | None = None) -> list[Path]:
    """Expand corpus inputs to the files to read, in the order given.

    Folders are read recursively (hidden files and folders skipped, links followed) and globs
    expanded (`**` included), each in sorted order; a file named twice is read once. Files a
    folder or a glob brings in whose names are no corpus type (LICENSE, README.md) are left out
    and added to `skipped` (see `skipped_note`); so are the folders inside them, or a glob
    matches, that `skip_folder` gives a reason for, added to `skipped_folders`.

    Raises:
        CorpusError: a path does not exist, a glob matches nothing, a folder holds no corpus
            files, or a file named as such has an extension that is not a corpus format.
    """
    if isinstance(inputs, (str, Path)):
        inputs = [inputs]
    skipped = skipped if skipped is not None else []
    files: list[Path] = []
    for item in inputs:
        text = str(item)
        path = Path(text).expanduser()
        if path.exists() and not path.is_dir():
            _check_readable_kind(path)  # first: /dev/zero is a device, whatever its name says
            split_extension(path)
            found = [path]
        elif path.exists():
            found = _keep_corpus_files(_files_in_folder(path, skip_folder, skipped_folders),
                                       f"{path}: folder holds", skipped)
        elif any(character in text for character in "*?["):
            matches = sorted(glob.glob(str(path), recursive=True))
            found = []
            for match in map(Path, matches):
                if not match.is_dir():
                    found.append(match)
                elif skip_folder is not None and (reason := skip_folder(match)) is not None:
                    if skipped_folders is not None:
                        skipped_folders.append((match, reason))
                else:
                    found.extend(_files_in_folder(match, skip_folder, skipped_folders))
            if not found:
                raise CorpusError(f"{text}: no files match this pattern")
            found = _keep_corpus_files(found, f"{text}: pattern matches", skipped)
        else:
            raise CorpusError(f"{text}: no such file or folder")
        for file in found:
            _check_readable_kind(file)
        files.extend(found)
    if not files:
        raise CorpusError("no corpus paths given")
    unique: dict[Path, Path] = {}
    for file in files:
        unique.setdefault(file.resolve(), file)
    return list(unique.values())
