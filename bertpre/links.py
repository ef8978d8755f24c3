"""The one rule for symbolic links where bertpre writes: a link standing at a file or folder that
bertpre writes is yours, and is never followed to move, delete or rewrite what it points at.

Every writer names the places it writes under its `--out` (OUT/model, a checkpoint's step-N,
checkpoints/latest, tokenizer/, dataset/, predictions, metrics.jsonl …) and asks
`refuse_links` before any work: a link there is refused in one line (exit 2) naming the link and
its target, both left as they are. The same check just before a folder is swapped into place
(`bertpre.inventory.swap_in`) catches a link made while the command ran; `--save-model` then keeps
its new model beside, as for any other change. Links are followed only on the way to a place: the
`--out` you name may itself be a link (runs/ on a bigger disk), and so may a run's `checkpoints/`
(checkpoints on scratch space), for bertpre adds only its own entries there and removes only
step folders it verifies as its own. A link among the files an output keeps (not at a place bertpre
writes) stays a link, moved as one (`bertpre.inventory.foreign_paths`).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePath

from bertpre.errors import UserError

# Folders below an --out that may be links to elsewhere, by their path under it: bertpre only adds
# its own entries there, so following the link moves, deletes or rewrites nothing of yours.
FOLLOWED = frozenset({"checkpoints"})


def link_on_the_way(root: Path, place: str | PurePath) -> Path | None:
    """The first symbolic link below `root` on the way to `root/place`, that path included; None
    when there is none. `root` itself (the --out) is not looked at: a link there is followed."""
    path, walked = root, PurePath()
    for part in PurePath(place).parts:
        path, walked = path / part, walked / part
        if path.is_symlink():
            if walked.as_posix() not in FOLLOWED:
                return path
        elif not path.is_dir():
            return None  # missing, or a file: nothing below it can be a link
    return None


def link_target(link: Path) -> str:
    """What `link` points at, as it is written in the link."""
    try:
        return os.readlink(link)
    except OSError:
        return "?"


def refusal(link: Path) -> str:
    """The one line refusing a link where bertpre writes."""
    return (f"{link} is a symbolic link (to {link_target(link)}) where bertpre writes its own "
            f"{link.name}, and bertpre does not write through links inside an output, so the link "
            "and what it points at were left as they are: remove the link (what it points at "
            "stays), or choose another --out")


def refuse_links(root: Path, places: Iterable[str | PurePath]) -> None:
    """Refuse in one line when a symbolic link stands at, or on the way to, one of `places` (paths
    relative to `root`, the --out) where the command writes. Writes nothing."""
    for place in places:
        if (link := link_on_the_way(root, place)) is not None:
            raise UserError(refusal(link))


def links_under(root: Path, folder: str) -> list[str]:
    """Every path under `root/folder` (a folder only bertpre writes in) that is a link, relative to
    `root`: each one stands where bertpre may write."""
    base = root / folder
    if base.is_symlink() or not base.is_dir():
        return [folder]
    # rglob lists a link but does not walk into it
    return [path.relative_to(root).as_posix() for path in base.rglob("*") if path.is_symlink()]
