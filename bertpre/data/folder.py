"""The DATA folder written by `bertpre tokenize`: its layout, and opening it for training."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from bertpre.errors import UserError
from bertpre.inventory import file_digest
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
    fix = f"{make_one} again"
    check_manifest(manifest, path / MANIFEST_FILE, fix)
    check_recorded_files(path, manifest, fix)
    tokenizer = load_tokenizer(path / TOKENIZER_DIR)
    check_tokenizer_files(path / TOKENIZER_DIR, tokenizer, manifest, fix)
    arrow_files = check_dataset_files(path / DATASET_DIR, fix)
    import datasets  # here, not at the top: importing it takes seconds, and the CLI imports us

    try:
        splits = datasets.load_from_disk(str(path / DATASET_DIR))
    except Exception as error:  # noqa: BLE001 - the files were checked; anything left is damage too
        detail = " ".join(str(error).split())[:160]
        raise UserError(f"{path / DATASET_DIR} cannot be opened, a file in it is damaged "
                        f"({type(error).__name__}: {detail}); {fix}") from None
    if not isinstance(splits, datasets.DatasetDict) or {TRAIN_SPLIT, VALIDATION_SPLIT} - set(splits):
        raise UserError(
            f"{path / DATASET_DIR} lacks the train and validation splits; {fix}"
        )
    for name in (TRAIN_SPLIT, VALIDATION_SPLIT):
        files = arrow_files[name]  # a split's one Arrow file is named; several, by their folder
        check_split(splits[name], files[0] if len(files) == 1 else files[0].parent,
                    manifest["counts"].get(f"{name}_documents"), tokenizer.get_vocab_size(), fix)
    return DataFolder(
        path=path,
        tokenizer=tokenizer,
        train=splits[TRAIN_SPLIT],
        validation=splits[VALIDATION_SPLIT],
        manifest=manifest,
    )


# The manifest's parts that bertpre reads, and their JSON types.
MANIFEST_PARTS = {"counts": dict, "tokenizer": dict, "options": dict, "sources": list}
FILES = "files"  # manifest key: every file of DATA but the manifest, with its size and sha256
SELF_DIGEST = "manifest_sha256"  # manifest key: the sha256 of the rest of the manifest (`manifest_digest`)


def manifest_digest(manifest: dict) -> str:
    """The sha256 of a manifest's content but its own digest, as canonical JSON: any change to a
    value or key is seen; a change of layout (spaces, key order) is not a change."""
    rest = {key: value for key, value in manifest.items() if key != SELF_DIGEST}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def check_manifest(manifest: object, path: Path, fix: str) -> None:
    """A DATA manifest is a JSON object with its parts of the right types, counts non-negative."""
    if not isinstance(manifest, dict):
        raise UserError(f"{path} is not a DATA manifest (a JSON object; it holds a "
                        f"{type(manifest).__name__}); {fix}")
    recorded = manifest.get(SELF_DIGEST)
    if (recorded is not None or FILES in manifest) and recorded != manifest_digest(manifest):
        raise UserError(f"{path} is damaged (its content does not match its {SELF_DIGEST}); {fix}")
    for part, kind in MANIFEST_PARTS.items():
        if not isinstance(manifest.get(part), kind):
            raise UserError(f"{path} has no {part!r} {'object' if kind is dict else 'list'}; it is "
                            f"damaged, {fix}")
    for name, value in manifest["counts"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise UserError(f"{path}: counts.{name} must be a number of at least 0, got {value!r}; "
                            f"it is damaged, {fix}")
    digest = manifest["tokenizer"].get("sha256")
    if digest is not None and not is_sha256(digest):
        raise UserError(f"{path}: tokenizer.sha256 must be a sha256 hex digest, got {digest!r}; it is "
                        f"damaged, {fix}")
    files = manifest.get(FILES)
    if files is not None and not (isinstance(files, dict) and all(
            isinstance(entry, dict) and is_sha256(entry.get("sha256")) and isinstance(entry.get("bytes"), int)
            and not isinstance(entry.get("bytes"), bool) and ".." not in Path(name).parts
            and not Path(name).is_absolute() for name, entry in files.items())):
        raise UserError(f"{path}: {FILES} must map each file to its bytes and sha256; it is damaged, "
                        f"{fix}")


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def record_files(folder: Path) -> dict[str, dict[str, int | str]]:
    """The manifest's `files`: every file of `folder`'s tokenizer/ and dataset/, by relative path."""
    return {path.relative_to(folder).as_posix(): file_digest(path)
            for part in (TOKENIZER_DIR, DATASET_DIR) for path in sorted((folder / part).rglob("*"))
            if path.is_file()}


def check_recorded_files(folder: Path, manifest: dict, fix: str) -> None:
    """Every file the manifest lists (DATA written with `files`) is there, with its recorded size
    and sha256: a truncated, replaced or bit-flipped file is named before it is read. Sizes are
    compared first; the hashing (about 2 GB/s a core) runs on several threads, hashlib releasing
    the GIL, as a large corpus is saved in many Arrow files."""
    from concurrent.futures import ThreadPoolExecutor

    listed = [(folder / name, entry) for name, entry in (manifest.get(FILES) or {}).items()
              # tokenizer.json is checked against tokenizer.sha256 once loaded, said as another tokenizer
              if not (name == f"{TOKENIZER_DIR}/tokenizer.json" and manifest["tokenizer"].get("sha256"))]
    for path, entry in listed:
        if not path.is_file():
            raise UserError(f"{path} is missing ({folder / MANIFEST_FILE} lists it); {fix}")
        if path.stat().st_size != entry["bytes"]:
            raise UserError(f"{path} is damaged ({path.stat().st_size:,} bytes, not {entry['bytes']:,}, as "
                            f"{folder / MANIFEST_FILE} recorded); {fix}")
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        digests = list(pool.map(lambda item: file_digest(item[0])["sha256"], listed))
    for (path, entry), digest in zip(listed, digests, strict=True):
        if digest != entry["sha256"]:
            raise UserError(f"{path} is damaged (its sha256 differs, as {folder / MANIFEST_FILE} recorded); "
                            f"{fix}")


def check_tokenizer_files(folder: Path, tokenizer: Tokenizer, manifest: dict | None, fix: str) -> None:
    """tokenizer.json is the one the dataset was encoded with (the manifest's hash), and vocab.txt,
    which slow tokenizers and `transformers` read, lists the same tokens in the same order."""
    recorded = (manifest or {}).get("tokenizer", {}).get("sha256")
    tokenizer_file = folder / "tokenizer.json"
    if recorded and tokenizer_file.is_file():
        if file_digest(tokenizer_file)["sha256"] != recorded:
            raise UserError(f"{tokenizer_file} is not the tokenizer the dataset was made with (its "
                            f"sha256 differs from the manifest's); {fix}")
    vocab_file = folder / "vocab.txt"
    if tokenizer_file.is_file() and vocab_file.is_file():
        try:
            listed = vocab_file.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            listed = None
        expected = [tokenizer.id_to_token(index) for index in range(tokenizer.get_vocab_size())]
        if listed != expected:
            raise UserError(f"{vocab_file} does not list {tokenizer_file}'s {len(expected):,} tokens in "
                            f"order (edited or damaged); {fix}")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):  # transformers reads these
        if (folder / name).is_file():
            read_json_object(folder / name, fix)


def read_json_object(path: Path, fix: str) -> dict:
    """A JSON file that must hold an object, or a UserError naming it."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        value = None
    except FileNotFoundError:
        raise UserError(f"{path} is missing; {fix}") from None
    if not isinstance(value, dict):
        raise UserError(f"{path} is damaged (not a JSON object); {fix}")
    return value


def check_dataset_files(dataset: Path, fix: str) -> dict[str, list[Path]]:
    """The `datasets.save_to_disk` files of both splits, each read and checked by name: the split
    list, each split's state.json and dataset_info.json, and every Arrow file (whole, and with
    `input_ids` lists of sentences of integer ids).

    Returns:
        Each split's Arrow files.
    """
    listed = read_json_object(dataset / "dataset_dict.json", fix).get("splits")
    if not isinstance(listed, list) or {TRAIN_SPLIT, VALIDATION_SPLIT} - set(map(str, listed)):
        raise UserError(f"{dataset} lacks the train and validation splits ({dataset / 'dataset_dict.json'} "
                        f"does not list both); {fix}")
    arrow_files = {}
    for split in (TRAIN_SPLIT, VALIDATION_SPLIT):
        state = read_json_object(dataset / split / "state.json", fix)
        read_json_object(dataset / split / "dataset_info.json", fix)
        files = state.get("_data_files")
        names = [entry.get("filename") for entry in files if isinstance(entry, dict)] if isinstance(files, list) else []
        if not names or not all(isinstance(name, str) and Path(name).name == name for name in names):
            raise UserError(f"{dataset / split / 'state.json'} does not list its Arrow files (damaged); "
                            f"{fix}")
        arrow_files[split] = [dataset / split / name for name in names]
        for path in arrow_files[split]:
            check_arrow_file(path, fix)
    return arrow_files


def check_arrow_file(path: Path, fix: str) -> None:
    """One Arrow stream of a split: readable to its end, every offset valid, the right columns."""
    import pyarrow as pa

    if not path.is_file():
        raise UserError(f"{path} is missing; {fix}")
    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_stream(source).read_all()
            table.validate(full=True)
    except (pa.ArrowException, OSError, ValueError) as error:
        detail = " ".join(str(error).split())[:120]
        raise UserError(f"{path} is damaged, not a whole Arrow file ({detail}); {fix}") from None
    for column, required in (("input_ids", True), ("word_starts", False)):
        flags = column == "word_starts"  # word-start flags may be booleans, token ids may not
        if column not in table.column_names:
            if required:
                raise UserError(f"{path} has no input_ids column (damaged, or not made by bertpre "
                                f"tokenize); {fix}")
            continue
        kind = table.schema.field(column).type
        if not (pa.types.is_list(kind) and pa.types.is_list(kind.value_type)
                and (pa.types.is_integer(kind.value_type.value_type)
                     or (flags and pa.types.is_boolean(kind.value_type.value_type)))):
            raise UserError(f"{path}: {column} is {kind}, not lists of sentences of integers (damaged); "
                            f"{fix}")


def check_split(split: datasets.Dataset, where: Path, documents: object, vocab_size: int, fix: str) -> None:
    """A split as opened: as many rows as the manifest counts, every id inside the vocabulary."""
    import pyarrow.compute as pc

    table = split.data.table
    if isinstance(documents, int) and table.num_rows != documents:
        raise UserError(f"{where} holds {table.num_rows:,} documents but the manifest counts "
                        f"{documents:,}; {fix}")
    extremes = pc.min_max(pc.list_flatten(pc.list_flatten(table.column("input_ids"))))
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    if low is not None and (low < 0 or high >= vocab_size):
        raise UserError(f"{where} holds token id {low if low < 0 else high}, outside the tokenizer's "
                        f"{vocab_size:,} ids (damaged, or made by another tokenizer); {fix}")


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
