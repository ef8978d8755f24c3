"""The DATA folder written by `bertpre tokenize`: its layout, and opening it for training."""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from bertpre.errors import UserError
from bertpre.tokenizer.wordpiece import load_tokenizer

if TYPE_CHECKING:
    import datasets

DATASET_DIR = "dataset"
TOKENIZER_DIR = "tokenizer"
MANIFEST_FILE = "manifest.json"
TRAIN_SPLIT, VALIDATION_SPLIT = "train", "validation"
VOCAB_KIND = "vocab"  # a manifest's "kind" in a VOCAB folder (`bertpre tokenize --vocab-only`)


@dataclass
class DataFolder:
    """An opened DATA folder. Each dataset row is one document: {"input_ids": list[list[int]]},
    its sentences as token ids without special tokens.

    A set of shards opened as one (`bertpre.data.shards`) has `path` as given (a glob or the
    folder of the shards), the shards' folders in `shards`, and their merged manifest.
    """

    path: Path
    tokenizer: Tokenizer
    train: datasets.Dataset
    validation: datasets.Dataset
    manifest: dict
    shards: list[Path] = field(default_factory=list)

    @property
    def tokenizer_dir(self) -> Path:
        """The folder of the tokenizer files (a shard set's first shard's)."""
        return (self.shards[0] if self.shards else self.path) / TOKENIZER_DIR


def load_data(path: str | Path) -> DataFolder:
    """Open a DATA folder; the datasets are memory-mapped, so this costs no RAM.

    Raises:
        UserError: the folder is missing or is not a DATA folder.
    """
    path = Path(path)
    make_one = f"create it with `bertpre tokenize CORPUS --out {shlex.quote(str(path))}`"
    if not path.exists():
        raise UserError(f"DATA folder {path} does not exist; {make_one}")
    _refuse_vocab_folder(path)
    missing = [
        name
        for name in (MANIFEST_FILE, DATASET_DIR, TOKENIZER_DIR)
        if not (path / name).exists()
    ]
    if not path.is_dir() or missing:
        what = "is a file" if not path.is_dir() else f"has no {', '.join(missing)}"
        raise UserError(f"{path} is not a DATA folder ({what}); {make_one}")
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{path / MANIFEST_FILE} is not valid JSON; {make_one} again") from None
    import datasets  # here, not at the top: importing it takes seconds, and the CLI imports us

    try:
        splits = datasets.load_from_disk(str(path / DATASET_DIR))
    except (FileNotFoundError, ValueError) as error:
        raise UserError(f"{path / DATASET_DIR} cannot be opened ({error}); {make_one} again") from None
    if not isinstance(splits, datasets.DatasetDict) or {TRAIN_SPLIT, VALIDATION_SPLIT} - set(splits):
        raise UserError(
            f"{path / DATASET_DIR} lacks the train and validation splits; {make_one} again"
        )
    return DataFolder(
        path=path,
        tokenizer=load_tokenizer(path / TOKENIZER_DIR),
        train=splits[TRAIN_SPLIT],
        validation=splits[VALIDATION_SPLIT],
        manifest=manifest,
    )


def _refuse_vocab_folder(path: Path) -> None:
    """A VOCAB folder where a DATA folder belongs: say what it is for."""
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return
    if isinstance(manifest, dict) and manifest.get("kind") == VOCAB_KIND:
        raise UserError(f"{path} is a VOCAB folder (bertpre tokenize --vocab-only), not a DATA "
                        f"folder; encode a corpus with it: bertpre tokenize CORPUS --tokenizer "
                        f"{shlex.quote(str(path))} --out DATA")
