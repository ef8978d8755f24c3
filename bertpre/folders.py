"""The folders bertpre writes: what marks one as bertpre's, guarded replacement, temporaries.

A command claims its `--out` before it writes (`bertpre.claim`), and at the end replaces only a
folder that still holds its claim and the files it held when claimed. A command with
`--overwrite` replaces only a folder that bertpre made for that same command, never a folder the
command reads from, and never in a way that loses the old folder before the new one is complete:
the new folder is built beside `out` under a temporary name and swapped in. Of the old folder,
only what the command wrote there goes (its inventory, `bertpre.inventory`): anything else inside
is moved into the new folder at the same place. Temporaries carry the host and process id, so one
left by a killed process is recognised and cleared by the next command writing the same `out`
(an old folder swapped aside first gives back what it kept).
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bertpre.claim import (
    BOOKKEEPING_FILES,
    Claim,
    describe_holder,
    process_alive,
    read_holder,
    real_path,
)
from bertpre.errors import UserError, raise_if_stopped, signals_held
from bertpre.inventory import (
    changed_paths,
    collisions,
    foreign_paths,
    read_inventory,
    restore_kept,
    shown,
    swap_in,
    take_inventory,
)
from bertpre.links import refuse_links

# The file that marks a folder as made by one command, and what the folder is called in messages.
MARKERS = {
    "tokenize": ("manifest.json", "DATA folder"),
    "export": (".bertpre-export", "export"),
    "demo": (".bertpre-demo", "demo folder"),
    "finetune": (".bertpre-finetune", "finetune folder"),  # kept and added to, never replaced
}
RUN_MARKER = "config.yaml"  # with checkpoints/: a RUN folder, which no --overwrite replaces
RUN_CONFIG_HEADER = b"# written by bertpre"  # how RUN/config.yaml begins (Config.save)


def check_out(out: Path, command: str, *, overwrite: bool, sources: Sequence[Path] = (),
              claim: Claim | None = None) -> Path:
    """Refuse an `--out` that the command may not write, before any work starts; writes nothing.

    Allowed: a path that does not exist (under a folder, not a file), an empty folder, or, with
    `overwrite`, a folder this same command made (it holds the command's marker file). Never a
    folder that is, or holds, one of the command's `sources`, nor one another command has
    claimed, nor one with a symbolic link where the command writes (`bertpre.links`). Every comparison is between real paths: a symbolic link, `..` or a second name of
    the same folder changes nothing.

    Returns:
        The real path of `out`, the folder the command then claims and writes.
    """
    marker, _ = MARKERS[command]
    target = real_out(out)
    for source in sources:
        source = real_path(source)
        if target == source or target in source.parents:
            raise UserError(f"--out {out} holds {source}, which this command reads, so it will "
                            "not be replaced; choose another --out")
    if not target.exists():
        ancestor = next(parent for parent in target.parents if parent.exists())
        if not ancestor.is_dir():
            raise UserError(f"cannot write --out {out}: {ancestor} is a file, not a folder")
        return target
    if not target.is_dir():
        raise UserError(f"--out {out} exists and is not a folder; choose another --out")
    (claim or Claim(target, command)).check_free()
    if not content_names(target):
        return target
    if not overwrite:
        raise UserError(f"--out {out} already exists; pass --overwrite to replace it, or choose another --out")
    if not (target / marker).is_file():
        what = describe(target)
        raise UserError(f"--out {out} is {what}, which `bertpre {command}` did not make, so "
                        "--overwrite will not replace it; choose another --out")
    # Where the new folder writes what the old one wrote: a link of yours there is not replaced.
    refuse_links(target, [marker, *read_inventory(target, command, ()).files])
    refuse_edits(out, target, command)
    return target


def refuse_edits(out: Path, target: Path, command: str) -> None:
    """Refuse to replace files bertpre wrote in `target` that were changed since (edits of yours)."""
    changed = changed_paths(target, read_inventory(target, command, ()))
    if changed:
        them = "it" if len(changed) == 1 else "them"
        raise UserError(f"--out {out}: {shown(changed)} changed since `bertpre {command}` wrote {them}, "
                        f"and --overwrite replaces only what bertpre wrote: move {them} out of "
                        f"{out} to keep {them} (or delete {them}), then run again")


def real_out(out: Path) -> Path:
    """The real path of `--out`; a symbolic link that leads nowhere (dangling, a loop) is refused."""
    if os.path.islink(out) and not os.path.exists(out):
        raise UserError(f"--out {out} is a symbolic link that leads nowhere (its target is "
                        "missing, or it loops); fix the link or choose another --out")
    try:
        target = real_path(out)
        target.exists()
    except (OSError, RuntimeError) as error:  # a loop further up the path
        raise UserError(f"cannot write --out {out}: {getattr(error, 'strerror', None) or error}; "
                        "choose another --out") from None
    if target.is_symlink():
        raise UserError(f"--out {out} is a symbolic link that leads nowhere (its target is "
                        "missing, or it loops); fix the link or choose another --out")
    return target


def content_names(folder: Path) -> set[str]:
    """The names in `folder` that are content, not bookkeeping (a claim, an old RUN lock)."""
    return {path.name for path in folder.iterdir()} - BOOKKEEPING_FILES


def describe(folder: Path) -> str:
    """What a folder is, for a refusal: a RUN, DATA, export or demo folder, or other files."""
    if is_run_folder(folder):
        return "a RUN folder"
    if is_run_without_config(folder):
        return f"a RUN folder without its {RUN_MARKER}"
    for command, (marker, kind) in MARKERS.items():
        if (folder / marker).is_file():
            article = "an" if kind[0] in "aeiou" else "a"
            return f"{article} {kind} (made by `bertpre {command}`)"
    return "a folder of other files"


def is_run_folder(folder: Path) -> bool:
    """A folder `bertpre pretrain` made: its config.yaml is headed by bertpre, or it has a
    checkpoints/latest pointer (runs of bertpre before the header)."""
    config = folder / RUN_MARKER
    if not config.is_file():
        return False
    if (folder / "checkpoints" / "latest").is_file():
        return True
    try:
        with config.open("rb") as handle:
            return handle.read(len(RUN_CONFIG_HEADER)) == RUN_CONFIG_HEADER
    except OSError:
        return False


def is_run_without_config(folder: Path) -> bool:
    """A RUN folder whose config.yaml is gone: it has checkpoints/ but no config.yaml."""
    return (folder / "checkpoints").is_dir() and not (folder / RUN_MARKER).exists()


def enclosing_output(target: Path) -> Path | None:
    """The nearest folder above `target` that is a RUN, a DATA or an export: where no RUN may be
    made (its checkpoints and the outer folder's would be taken for each other)."""
    for folder in target.parents:
        if is_run_folder(folder) or is_data_folder(folder) or (folder / MARKERS["export"][0]).is_file():
            return folder
    return None


def is_data_folder(folder: Path) -> bool:
    """A folder `bertpre tokenize` made: its manifest beside a dataset or a tokenizer."""
    return (folder / MARKERS["tokenize"][0]).is_file() and any(
        (folder / name).exists() for name in ("dataset", "tokenizer", "tokenizer.json"))


@dataclass
class Output:
    """A claimed `--out` and the temporary folder its new content is built in."""

    out: Path  # as the user gave it, for messages
    target: Path  # its real path
    staging: Path
    claim: Claim
    command: str
    names: set[str]  # the content names `target` held when it was claimed

    def commit(self, *, known: dict | None = None) -> None:
        """Put the finished staging folder at `target`, if `target` is still as it was claimed.

        At every moment either the old folder or the new one is at `target` (or, for an instant
        between two renames, the old one sits aside under a temporary name). Whatever the old
        folder holds that the command did not write is moved into the new one at the same place.
        A folder that lost the claim, gained or lost files meanwhile, or holds something of
        yours where the new folder puts its own, is not replaced: the new result is kept beside
        it under another name, and the command says where. `known`: digests already taken of
        the new files (a manifest's), so the inventory does not read them again.
        """
        raise_if_stopped()  # nothing interrupted is put in place
        change = self.change()
        kept: list[str] = []
        if not change and self.target.exists():
            legacy = {path.name for path in self.staging.iterdir()} | {MARKERS[self.command][0]}
            old = read_inventory(self.target, self.command, legacy)
            kept = foreign_paths(self.target, old)
            if changed := changed_paths(self.target, old):
                change = f"{shown(changed)} changed since bertpre wrote them"
            elif clashing := collisions(self.staging, kept):
                change = f"{shown(clashing)}, which bertpre did not write, stands where the new one writes"
        if change:
            self.keep_beside(change)
        take_inventory(self.staging, self.command, known=known)
        with signals_held():  # the renames finish together; a signal is taken after them
            swap_in(self.target, self.staging, self.target.parent / f"{temporary_prefix(self.target)}old", kept)
        self.claim.keep_folder()
        if kept:
            print(f"note: kept in --out {self.out} what bertpre did not write there: {shown(kept)}",
                  file=sys.stderr)

    def keep_beside(self, change: str) -> None:
        """Keep the new result beside `target` (which is not replaced) and say why and where."""
        kept = self.target.parent / f"{self.target.name}.new-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        self.staging.rename(kept)
        _, kind = MARKERS[self.command]
        raise UserError(f"--out {self.out} changed while `bertpre {self.command}` ran ({change}), "
                        f"so it was not replaced; the new {kind} is at {kept}: move it where "
                        "you want it")

    def change(self) -> str:
        """How `target` differs from when it was claimed ("" when it does not)."""
        if not self.claim.holds():
            holder = read_holder(self.claim.path)
            return "its claim is gone" if not holder else f"it was claimed by {describe_holder(holder)}"
        names = content_names(self.target)
        if names != self.names:
            appeared, gone = sorted(names - self.names), sorted(self.names - names)
            return "; ".join(filter(None, [appeared and f"{', '.join(appeared[:3])} appeared",
                                           gone and f"{', '.join(gone[:3])} went away"]))
        return ""


@contextmanager
def claimed_out(out: str | Path, command: str, *, overwrite: bool = False,
                sources: Sequence[Path] = ()) -> Iterator[Output]:
    """Check `--out`, claim it, and give a staging folder beside it; `Output.commit()` puts the
    result in place. On any exit the staging folder and the claim go (and a folder the claim
    made, when nothing was put there)."""
    out = Path(out)
    target = check_out(out, command, overwrite=overwrite, sources=sources)
    claim = Claim(target, command)
    try:  # take() inside: a stop signal just after it is taken still releases it
        claim.take()
        # Again, now that no other bertpre command can: the folder may have filled meanwhile.
        check_out(out, command, overwrite=overwrite, sources=sources, claim=claim)
        remove_stale_temporaries(target)  # first: an old folder left aside gives back what it kept
        names = content_names(target)
        with staging_folder(target) as staging:
            yield Output(out, target, staging, claim, command, names)
    finally:
        with signals_held():  # a second stop must not cut the clean-up short
            claim.release()


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
            restore_kept(path, out)  # an old folder swapped aside gives back what it kept
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


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
        with signals_held():  # a second stop (or a stop sent again) must not cut it short
            shutil.rmtree(staging, ignore_errors=True)


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
