"""What bertpre wrote in a folder, so that replacing the folder keeps everything else.

A folder a command makes ends with its inventory, `.bertpre-inventory.json`: every file the
command wrote, by relative path, with its size and sha256 (nothing that differs between two equal
runs, so equal folders stay byte-identical). The inventory is written last, so a file older than
it is as bertpre left it unless its size changed. Replacing the folder
(`--overwrite`, a repeated demo) replaces those files and nothing else: a file or folder found
inside that the inventory does not list (your notes, a model card, another command's output) is
kept where it is, byte for byte. A listed file that changed since it was written (an edit of
yours) is not discarded either: the command refuses before any work, naming it. bertpre writes no
symbolic links, so a link found inside is yours wherever it stands: it is kept as a link, and
never followed (`bertpre.links`).

A folder an older bertpre made has no inventory; there, the names the command itself writes at
the top of the folder are its own, and every other name is kept.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertpre.claim import BOOKKEEPING_FILES
from bertpre.errors import UserError
from bertpre.links import link_on_the_way, refusal

INVENTORY_FILE = ".bertpre-inventory.json"
# Written into a folder just before it is swapped aside: the entries to move into its successor,
# so that a process killed between the swap and the move loses nothing (see `restore_kept`).
KEEP_FILE = ".bertpre-keep.json"
OWN_FILES = frozenset({INVENTORY_FILE, KEEP_FILE}) | BOOKKEEPING_FILES
SHOWN = 3  # paths named in a message


@dataclass(frozen=True)
class Inventory:
    """The files a command wrote in a folder; or, for an older folder, the names it writes."""

    command: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # relative path → bytes, sha256
    legacy_names: frozenset[str] | None = None  # no inventory: these top-level names are bertpre's

    def owns(self, relative: str) -> bool:
        """Whether bertpre wrote the file at `relative` (a path with `/`)."""
        if self.legacy_names is not None:
            return relative.split("/", 1)[0] in self.legacy_names
        return relative in self.files

    def holds_under(self, relative: str) -> bool:
        """Whether bertpre wrote anything inside the folder at `relative`."""
        if self.legacy_names is not None:
            return relative.split("/", 1)[0] in self.legacy_names
        prefix = relative + "/"
        return any(path.startswith(prefix) for path in self.files)


def file_digest(path: Path) -> dict[str, int | str]:
    """A file's size and sha256, read in 1 MiB blocks (an Arrow file may be gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def take_inventory(folder: Path, command: str, *, known: dict[str, dict[str, Any]] | None = None,
                   skip: Iterable[str] = ()) -> Inventory:
    """Record every file in `folder` (but those under `skip`, and bookkeeping) and write the
    inventory there. `known` digests (a manifest's `files`) are reused where the size agrees."""
    skipped = tuple(skip)
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if relative in OWN_FILES or path.is_symlink() or not path.is_file():
            continue
        if any(relative == kept or relative.startswith(kept + "/") for kept in skipped):
            continue
        stat = path.stat()
        entry = dict((known or {}).get(relative) or {})
        if entry.get("bytes") != stat.st_size or "sha256" not in entry:
            entry = file_digest(path)
        files[relative] = {"bytes": stat.st_size, "sha256": entry["sha256"]}
    inventory = Inventory(command, files)
    staging = folder / f"{INVENTORY_FILE}.tmp"
    staging.write_text(json.dumps({"command": command, "files": files}, indent=1) + "\n", encoding="utf-8")
    staging.replace(folder / INVENTORY_FILE)
    return inventory


def read_inventory(folder: Path, command: str, legacy_names: Iterable[str]) -> Inventory:
    """The folder's inventory; a missing or damaged one reads as an older bertpre's folder, whose
    own files are those under `legacy_names`."""
    try:
        record = json.loads((folder / INVENTORY_FILE).read_text(encoding="utf-8"))
        files = record["files"]
        if isinstance(files, dict) and all(
                isinstance(name, str) and isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                and isinstance(entry.get("sha256"), str) for name, entry in files.items()):
            return Inventory(str(record.get("command", command)), files)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return Inventory(command, legacy_names=frozenset(legacy_names))


def foreign_paths(folder: Path, inventory: Inventory) -> list[str]:
    """The entries of `folder` bertpre did not write, each named once at its top: a folder
    holding nothing of bertpre's is one entry, not its files."""
    found: list[str] = []

    def visit(directory: Path, prefix: str) -> None:
        for entry in sorted(os.scandir(directory), key=lambda entry: entry.name):
            relative = prefix + entry.name
            if not prefix and entry.name in OWN_FILES:
                continue
            if entry.is_symlink():  # never bertpre's, even at a name it writes: kept as a link
                found.append(relative)
            elif entry.is_dir(follow_symlinks=False):
                if inventory.owns(relative) and inventory.legacy_names is not None:
                    continue
                if inventory.holds_under(relative):
                    visit(Path(entry.path), relative + "/")
                else:
                    found.append(relative)
            elif not inventory.owns(relative):
                found.append(relative)

    if folder.is_dir():
        visit(folder, "")
    return found


def changed_paths(folder: Path, inventory: Inventory) -> list[str]:
    """Listed files whose content is no longer what bertpre wrote (a missing file lost nothing).

    The size, and a modification time older than the inventory's, decide at once; a file
    touched since (edited, or copied with new times) is hashed, so only a real change counts."""
    changed = []
    try:
        written = (folder / INVENTORY_FILE).stat().st_mtime_ns
    except OSError:
        written = -1
    for relative, entry in inventory.files.items():
        path = folder / relative
        try:
            stat = path.lstat()
        except OSError:
            continue
        if not path.is_file() or path.is_symlink() or stat.st_size != entry["bytes"]:
            changed.append(relative)
        elif stat.st_mtime_ns >= written and file_digest(path)["sha256"] != entry["sha256"]:
            changed.append(relative)
    return changed


def shown(paths: list[str]) -> str:
    """Up to three paths for a message, and how many more."""
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return ", ".join(paths[:SHOWN]) + more


def collisions(new: Path, kept: list[str]) -> list[str]:
    """Kept entries whose place the new folder takes (the same path, or a file on the way)."""
    clashing = []
    for relative in kept:
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            place = new.joinpath(*parts[:depth])
            if os.path.lexists(place) and (depth == len(parts) or not place.is_dir() or place.is_symlink()):
                clashing.append(relative)
                break
    return clashing


def write_keep_list(folder: Path, kept: list[str]) -> None:
    """Record in `folder` the entries to carry into its successor (read by `restore_kept`)."""
    (folder / KEEP_FILE).write_text(json.dumps(kept) + "\n", encoding="utf-8")


def swap_in(target: Path, new: Path, aside: Path, kept: list[str]) -> None:
    """Put the folder `new` at `target`, the old one going to `aside` and then away, but for the
    `kept` entries, moved into the new folder. Hold signals around it (`signals_held`): the
    renames belong together. A process killed between them leaves `aside` with its keep list.
    A link at `target` is refused (`bertpre.links`): its folder's files would be moved out of it."""
    if (link := link_on_the_way(target.parent, target.name)) is not None:
        raise UserError(refusal(link))
    if target.exists():
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(aside)
        if kept:  # written before the swap: a kill after it still gives them back
            write_keep_list(target, kept)
        target.rename(aside)
        new.rename(target)
        move_kept(aside, target, kept)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        new.rename(target)


def move_kept(old: Path, new: Path, kept: Iterable[str]) -> None:
    """Move each kept entry from `old` to the same place in `new` (renames: nothing is copied)."""
    for relative in kept:
        source, destination = old / relative, new / relative
        if not os.path.lexists(source) or os.path.lexists(destination):
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        source.rename(destination)


def restore_kept(aside: Path, out: Path) -> None:
    """A folder swapped aside by a process that died before it moved the kept entries back:
    put the whole folder back if nothing took its place, else move the kept entries into `out`.
    Called before such a temporary is deleted. A link of that name is not bertpre's: never read."""
    if aside.is_symlink():
        return
    try:
        kept = json.loads((aside / KEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not os.path.lexists(out):
        (aside / KEEP_FILE).unlink(missing_ok=True)
        aside.rename(out)
        return
    if out.is_dir() and isinstance(kept, list):
        move_kept(aside, out, [relative for relative in kept if isinstance(relative, str)
                               and ".." not in relative.split("/") and not relative.startswith("/")])


def remove_listed(folder: Path, inventory: Inventory) -> None:
    """Delete what bertpre wrote in `folder` (the inventory's files, or an older folder's names)
    and the folders that leaves empty; everything else stays."""
    if inventory.legacy_names is not None:
        for name in inventory.legacy_names:
            path = folder / name
            if path.is_symlink():
                continue  # yours (`bertpre.links`): kept
            if path.is_dir():
                shutil.rmtree(path)
            elif os.path.lexists(path):
                path.unlink()
    else:
        for relative in inventory.files:
            if link_on_the_way(folder, relative) is None:  # never through a link of yours
                (folder / relative).unlink(missing_ok=True)
        parents = {parent for relative in inventory.files
                   for parent in (folder / relative).parents if folder in parent.parents}
        for parent in sorted(parents, key=lambda path: len(path.parts), reverse=True):
            try:
                parent.rmdir()  # only an empty folder goes
            except OSError:
                pass
    (folder / INVENTORY_FILE).unlink(missing_ok=True)
