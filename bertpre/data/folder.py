"""The DATA folder written by `bertpre tokenize`: its layout, and opening it for training."""
from __future__ import annotations

import hashlib
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
    check_manifest(manifest, path / MANIFEST_FILE, make_one)
    tokenizer = load_tokenizer(path / TOKENIZER_DIR)
    check_tokenizer_files(path / TOKENIZER_DIR, tokenizer, manifest, make_one)
    import datasets  # here, not at the top: importing it takes seconds, and the CLI imports us

    try:
        splits = datasets.load_from_disk(str(path / DATASET_DIR))
    except Exception as error:  # noqa: BLE001 - any failure to read these files is damage
        detail = " ".join(str(error).split())[:160]
        raise UserError(f"{path / DATASET_DIR} cannot be opened, a file in it is damaged "
                        f"({type(error).__name__}: {detail}); {make_one} again") from None
    if not isinstance(splits, datasets.DatasetDict) or {TRAIN_SPLIT, VALIDATION_SPLIT} - set(splits):
        raise UserError(
            f"{path / DATASET_DIR} lacks the train and validation splits; {make_one} again"
        )
    for name in (TRAIN_SPLIT, VALIDATION_SPLIT):
        check_split(splits[name], path / DATASET_DIR / name, manifest["counts"].get(f"{name}_documents"),
                    tokenizer.get_vocab_size(), make_one)
    return DataFolder(
        path=path,
        tokenizer=tokenizer,
        train=splits[TRAIN_SPLIT],
        validation=splits[VALIDATION_SPLIT],
        manifest=manifest,
    )


# The manifest's parts that bertpre reads, and their JSON types.
MANIFEST_PARTS = {"counts": dict, "tokenizer": dict, "options": dict, "sources": list}


def check_manifest(manifest: object, path: Path, make_one: str) -> None:
    """A DATA manifest is a JSON object with its parts of the right types, counts non-negative."""
    if not isinstance(manifest, dict):
        raise UserError(f"{path} is not a DATA manifest (a JSON object; it holds a "
                        f"{type(manifest).__name__}); {make_one} again")
    for part, kind in MANIFEST_PARTS.items():
        if not isinstance(manifest.get(part), kind):
            raise UserError(f"{path} has no {part!r} {'object' if kind is dict else 'list'}; it is "
                            f"damaged, {make_one} again")
    for name, value in manifest["counts"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise UserError(f"{path}: counts.{name} must be a number of at least 0, got {value!r}; "
                            f"it is damaged, {make_one} again")
    digest = manifest["tokenizer"].get("sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64):
        raise UserError(f"{path}: tokenizer.sha256 must be a sha256 hex digest, got {digest!r}")


def check_tokenizer_files(folder: Path, tokenizer: Tokenizer, manifest: dict, make_one: str) -> None:
    """tokenizer.json is the one the dataset was encoded with (the manifest's hash), and vocab.txt,
    which slow tokenizers read, lists the same tokens in the same order."""
    recorded = manifest["tokenizer"].get("sha256")
    tokenizer_file = folder / "tokenizer.json"
    if recorded and tokenizer_file.is_file():
        if hashlib.sha256(tokenizer_file.read_bytes()).hexdigest() != recorded:
            raise UserError(f"{tokenizer_file} is not the tokenizer the dataset was made with (its "
                            f"sha256 differs from the manifest's); {make_one} again")
    vocab_file = folder / "vocab.txt"
    if tokenizer_file.is_file() and vocab_file.is_file():
        try:
            listed = vocab_file.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            listed = None
        expected = [tokenizer.id_to_token(index) for index in range(tokenizer.get_vocab_size())]
        if listed != expected:
            raise UserError(f"{vocab_file} does not list {tokenizer_file}'s {len(expected):,} tokens in "
                            f"order (edited or damaged); {make_one} again")


def check_split(split: datasets.Dataset, where: Path, documents: object, vocab_size: int, make_one: str) -> None:
    """A split's Arrow data: whole (every offset and length valid), `input_ids` a list of lists of
    integers, as many rows as the manifest counts, every id inside the vocabulary."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = split.data.table
    try:
        table.validate(full=True)
        column_type = table.schema.field("input_ids").type
    except (pa.ArrowException, KeyError) as error:
        raise UserError(f"{where}: the Arrow data is damaged ({str(error)[:160]}); {make_one} again") from None
    if not (pa.types.is_list(column_type) and pa.types.is_list(column_type.value_type)
            and pa.types.is_integer(column_type.value_type.value_type)):
        raise UserError(f"{where}: input_ids is {column_type}, not lists of sentences of token ids; "
                        f"{make_one} again")
    if isinstance(documents, int) and table.num_rows != documents:
        raise UserError(f"{where} holds {table.num_rows:,} documents but the manifest counts "
                        f"{documents:,}; {make_one} again")
    extremes = pc.min_max(pc.list_flatten(pc.list_flatten(table.column("input_ids"))))
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    if low is not None and (low < 0 or high >= vocab_size):
        raise UserError(f"{where} holds token id {low if low < 0 else high}, outside the tokenizer's "
                        f"{vocab_size:,} ids (damaged, or made by another tokenizer); {make_one} again")


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
