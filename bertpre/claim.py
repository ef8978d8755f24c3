"""The claim on an `--out` folder: one marker file, made atomically, naming the command writing it.

Every command that writes a folder (tokenize, export, demo, pretrain) claims it first: it makes
`OUT/.bertpre-claim` holding the command, process id, host and start time. The file is written
whole under a private name and hard-linked into place, so it appears complete or not at all and
two processes can never both hold it. A second command on a claimed folder is refused in one
line naming the holder; a claim whose process is gone (same host, pid not running) is stale and
is taken over, with a note. The claim ends with the command: its file is removed, and a folder
the command created for nothing (it failed before writing there) is removed with it.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bertpre.errors import UserError, signals_held

CLAIM_FILE = ".bertpre-claim"
# Files that say nothing about what a folder holds: the claim, and RUN locks of bertpre < 0.2.
BOOKKEEPING_FILES = frozenset({CLAIM_FILE, ".lock"})


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OverflowError:  # not a pid at all
        return False
    return True


def real_path(path: str | Path) -> Path:
    """`path` with every symbolic link, `.` and `..` resolved, as far as it exists.

    Containment and identity checks compare these, so two names of one folder are one folder.
    """
    return Path(os.path.realpath(os.path.abspath(path)))


def read_holder(path: Path) -> dict[str, Any] | None:
    """The claim file's content; None when there is none, {} when it cannot be read as a claim."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def is_stale(holder: dict[str, Any]) -> bool:
    """A claim whose process is known to be gone: same host, pid not running (or no owner at all).

    Claims are linked into place whole, so a file that is not a claim was never one a live
    process made.
    """
    if not holder:
        return True
    pid = holder.get("pid")
    same_host = holder.get("host") == socket.gethostname()
    return same_host and isinstance(pid, int) and not isinstance(pid, bool) and not process_alive(pid)


def describe_holder(holder: dict[str, Any]) -> str:
    command = f"`bertpre {holder['command']}` " if isinstance(holder.get("command"), str) else ""
    return f"process {holder.get('pid')} on {holder.get('host')} ({command}since {holder.get('started')})"


class Claim:
    """This process's claim on `folder` (a real path): take it, check it still holds, release it."""

    def __init__(self, folder: Path, command: str, *, label: str = "--out") -> None:
        self.folder = folder
        self.command = command
        self.label = label  # how messages name the folder: "--out" or "run folder"
        self.path = folder / CLAIM_FILE
        self.token = uuid.uuid4().hex
        self.held = False
        self.created: list[Path] = []  # folders this claim made, deepest last

    def check_free(self) -> None:
        """Refuse now, writing nothing, if a live process holds `folder`."""
        holder = read_holder(self.path)
        if holder is not None and not is_stale(holder) and holder.get("token") != self.token:
            raise UserError(
                f"{self.label} {self.folder} is in use by {describe_holder(holder)}; wait for it "
                f"to finish, or choose another --out (if that process is gone, delete {self.path})")

    def take(self) -> None:
        """Create `folder` if needed and claim it; a stale claim is taken over with a note."""
        self._make_folder()
        try:
            for _ in range(3):
                with signals_held():  # linked is held: a stop between the two would leave the claim
                    if self._link():
                        self.held = True
                        return
                holder = read_holder(self.path)
                if holder is None:
                    continue  # released meanwhile
                if not is_stale(holder):
                    self.check_free()
                    continue
                if self._remove_stale(holder):
                    print(f"note: {self.label} {self.folder} was claimed by "
                          f"{describe_holder(holder) if holder else 'a damaged claim file'}, which "
                          "is gone; taking it over", file=sys.stderr)
            self.check_free()
            raise UserError(f"could not claim {self.label} {self.folder}: other commands keep "
                            "claiming it; run one command on it at a time")
        except BaseException:
            self.release()  # the claim too, when a stop signal came as it was taken
            raise

    def holds(self) -> bool:
        """Whether the claim file is still this process's."""
        holder = read_holder(self.path)
        return bool(holder) and holder.get("token") == self.token

    def release(self) -> None:
        """Remove the claim file if it is still ours, and any folder the claim made and nothing filled."""
        if self.held:
            if self.holds():
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            self.held = False
        self._remove_created()

    def keep_folder(self) -> None:
        """The command has put its result in `folder`: a release no longer removes it."""
        self.created = []

    def _make_folder(self) -> None:
        missing = []
        for folder in [self.folder, *self.folder.parents]:
            if folder.exists() or folder.is_symlink():
                break
            missing.append(folder)
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                continue  # made by another process meanwhile: not ours to remove
            except OSError as error:
                self._remove_created()
                raise UserError(f"cannot write {self.label} {self.folder}: "
                                f"{error.strerror or error}; choose a folder you can write to") from None
            self.created.append(folder)
        if not self.folder.is_dir():
            raise UserError(f"{self.label} {self.folder} exists and is not a folder; choose another --out")

    def _link(self) -> bool:
        """Put a complete claim file in place if there is none; True when this process got it."""
        private = self.folder / f"{CLAIM_FILE}.{self.token}"
        content = {"command": self.command, "pid": os.getpid(), "host": socket.gethostname(),
                   "started": time.strftime("%Y-%m-%d %H:%M:%S"), "token": self.token}
        try:
            private.write_text(json.dumps(content) + "\n", encoding="utf-8")
            try:
                os.link(private, self.path)
            except FileExistsError:
                return False
            except OSError:  # a file system without hard links: an exclusive create instead
                try:
                    descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    return False
                with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                    handle.write(json.dumps(content) + "\n")
            return True
        except FileExistsError:
            return False
        except OSError as error:
            raise UserError(f"cannot write {self.label} {self.folder}: {error.strerror or error}; "
                            "choose a folder you can write to") from None
        finally:
            with contextlib.suppress(OSError):
                private.unlink()

    def _remove_stale(self, holder: dict[str, Any]) -> bool:
        """Move a stale claim aside and delete it; False if it changed meanwhile (someone took it)."""
        aside = self.folder / f"{CLAIM_FILE}.stale-{self.token}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        if read_holder(aside) != holder:  # a fresh claim came between our read and the rename
            with contextlib.suppress(OSError):
                os.link(aside, self.path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return True

    def _remove_created(self) -> None:
        for folder in reversed(self.created):
            try:
                folder.rmdir()  # only when empty: whatever another process put there stays
            except OSError:
                break
        self.created = []


@contextmanager
def claimed(folder: Path, command: str, *, label: str = "--out") -> Iterator[Claim]:
    """Hold a claim on `folder` (a real path) for the block; released on any exit."""
    claim = Claim(folder, command, label=label)
    try:  # take() inside: a stop signal just after it is taken still releases it
        claim.take()
        yield claim
    finally:
        with signals_held():  # a second stop must not cut the clean-up short
            claim.release()
