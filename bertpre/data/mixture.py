"""Several DATA folders opened as one weighted mixture that shares one tokenizer."""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from bertpre.data.folder import DataFolder, load_data
from bertpre.data.shards import load_shard_set, shard_folders
from bertpre.errors import UserError


@dataclass
class DataMixture:
    """DATA folders with their shares of the training instances (summing to 1) and unique names.

    A plain `data.path` is a mixture of one folder with share 1.
    """

    folders: list[DataFolder]
    weights: list[float]
    names: list[str]  # each folder's basename, made unique: metric names like eval/<name>/mlm_loss

    @property
    def tokenizer(self) -> Tokenizer:
        """The one tokenizer every folder was made with (the first folder's copy)."""
        return self.folders[0].tokenizer

    @property
    def path(self) -> Path:
        """The first folder: the one whose tokenizer a run copies."""
        return self.folders[0].path

    @property
    def is_mixture(self) -> bool:
        return len(self.folders) > 1


def load_mixture(sources: str | Path | Sequence[tuple[str | Path, float]]) -> DataMixture:
    """Open every DATA folder of `sources` (a folder, or (folder, weight) pairs; weights are
    normalised) and check that they share one vocabulary. A source may be a set of shards (a
    glob or a folder of shards), read as one corpus.

    Raises:
        UserError: a folder is missing or not a DATA folder; a weight is not positive; two
            folders were made by different tokenizers.
    """
    if isinstance(sources, (str, Path)):
        sources = [(sources, 1.0)]
    if not sources:
        raise UserError("a data mixture needs at least one DATA folder")
    for path, weight in sources:
        if not weight > 0:
            raise UserError(f"the weight of DATA folder {path} must be positive, got {weight!r}")
    folders = [open_data(path) for path, _ in sources]
    first = folders[0]
    for folder in folders[1:]:
        if folder.tokenizer.get_vocab() != first.tokenizer.get_vocab():
            raise UserError(
                f"DATA folders {first.path} and {folder.path} were made by different tokenizers "
                "(other vocabularies); a mixture needs one: tokenize the corpus of "
                f"{folder.path} again with --tokenizer {shlex.quote(str(first.tokenizer_dir))}")
    total = sum(weight for _, weight in sources)
    return DataMixture(folders=folders, weights=[weight / total for _, weight in sources],
                       names=unique_names([folder.path for folder in folders]))


def open_data(path: str | Path) -> DataFolder:
    """A DATA folder, or a set of shards (a glob or a folder of them) opened as one."""
    shards = shard_folders(path)
    return load_data(path) if shards is None else load_shard_set(path, shards)


def unique_names(paths: Sequence[Path]) -> list[str]:
    """Each path's basename (a glob's folder's: `wiki` for wiki/shard-*); a repeated one gets
    -2, -3, ... in order (`wiki`, `wiki-2`)."""
    names: list[str] = []
    for path in paths:
        path = Path(path)
        if any(character in path.name for character in "*?["):
            path = path.parent
        base = path.resolve().name or "data"
        name, number = base, 1
        while name in names:
            number += 1
            name = f"{base}-{number}"
        names.append(name)
    return names
