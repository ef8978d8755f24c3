"""The folders bertpre writes: what marks one as bertpre's, guarded replacement, temporaries.

A command with `--overwrite` replaces only a folder that bertpre made for that same command,
never a folder the command reads from, and never in a way that loses the old folder before the
new one is complete: the new folder is built beside `out` under a temporary name and swapped in.
Temporaries carry the host and process id, so one left by a killed process is recognised and
removed by the next command writing the same `out`.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from bertpre.errors import UserError, raise_if_stopped

# The file that marks a folder as made by one command, and what the folder is called in messages.
MARKERS = {
    "tokenize": ("manifest.json", "DATA folder"),
    "export": (".bertpre-export", "export"),
    "demo": (".bertpre-demo", "demo folder"),
}
RUN_MARKER = "config.yaml"  # with checkpoints/: a RUN folder, which no --overwrite replaces


def check_out(out: Path, command: str, *, overwrite: bool, sources: Sequence[Path] = ()) -> None:
    """Refuse an `--out` that the command may not write, before any work starts.

    Allowed: a path that does not exist (under a folder, not a file), an empty folder, or, with
    `overwrite`, a folder this same command made (it holds the command's marker file). Never a
    folder that is, or holds, one of the command's `sources`.
    """
    marker, _ = MARKERS[command]
    target = out.absolute()
    for source in sources:
        source = Path(source).absolute()
        if target == source or target in source.parents:
            raise UserError(f"--out {out} holds {source}, which this command reads, so it will "
                            "not be replaced; choose another --out")
    if not out.exists() and not out.is_symlink():
        ancestor = next(parent for parent in target.parents if parent.exists())
        if not ancestor.is_dir():
            raise UserError(f"cannot write --out {out}: {ancestor} is a file, not a folder")
        return
    if not out.is_dir() or out.is_symlink():
        raise UserError(f"--out {out} exists and is not a folder; choose another --out")
    if not any(out.iterdir()):
        return
    if not overwrite:
        raise UserError(f"--out {out} already exists; pass --overwrite to replace it, or choose another --out")
    if not (out / marker).is_file():
        what = describe(out)
        raise UserError(f"--out {out} is {what}, which `bertpre {command}` did not make, so "
                        "--overwrite will not replace it; choose another --out")


def describe(folder: Path) -> str:
    """What a folder is, for a refusal: a RUN, DATA, export or demo folder, or other files."""
    if (folder / RUN_MARKER).is_file() and (folder / "checkpoints").is_dir():
        return "a RUN folder"
    for command, (marker, kind) in MARKERS.items():
        if (folder / marker).is_file():
            article = "an" if kind[0] in "aeiou" else "a"
            return f"{article} {kind} (made by `bertpre {command}`)"
    return "a folder of other files"


def temporary_prefix(out: Path) -> str:
    """The name prefix of this process's temporaries for `out`: `.NAME.tmp-HOST-PID-`."""
    return f".{out.name}.tmp-{socket.gethostname()}-{os.getpid()}-"


def remove_stale_temporaries(out: Path) -> list[Path]:
    """Delete temporaries for `out` that a killed process on this host left behind."""
    removed = []
    host = socket.gethostname()
    for path in out.parent.glob(f".{out.name}.tmp-*") if out.parent.is_dir() else []:
        owner = path.name[len(f".{out.name}.tmp-"):].rsplit("-", 2)
        if len(owner) != 3 or owner[0] != host or not owner[1].isdigit():
            continue
        if not process_alive(int(owner[1])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


@contextmanager
def staging_folder(out: Path) -> Iterator[Path]:
    """A fresh temporary folder beside `out`, removed on any exit unless moved into place.

    SIGINT and SIGTERM reach here as exceptions (see `bertpre.cli.main`), so they remove it too.
    """
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(out)
        staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(out), dir=out.parent))
        staging.chmod(0o777 & ~current_umask())  # mkdtemp's 0700 would stay on the result
    except OSError as error:
        raise UserError(f"cannot write --out {out}: {error.strerror or error}; choose a folder "
                        "you can write to") from None
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def replace_folder(staging: Path, out: Path) -> None:
    """Put the finished `staging` at `out`; an old `out` is moved aside first and deleted last.

    At every moment either the old folder or the new one is at `out` (or, for an instant
    between two renames, the old one sits aside under a temporary name).
    """
    raise_if_stopped()  # nothing interrupted is put in place
    aside = None
    if out.exists():
        aside = out.parent / f"{temporary_prefix(out)}old"
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(aside)
        out.rename(aside)
    staging.rename(out)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def current_umask() -> int:
    """This process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def make_files_readable(folder: Path) -> None:
    """Give every file in `folder` the mode a new file gets here (some writers use 0600)."""
    mode = 0o666 & ~current_umask()
    for path in folder.iterdir():
        if path.is_file():
            path.chmod(mode)
