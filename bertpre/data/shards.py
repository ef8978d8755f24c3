"""A corpus tokenized in shards: which shard a task encodes, and the shards read back as one corpus.

`bertpre tokenize CORPUS --tokenizer VOCAB --num-shards N` in N tasks (a Slurm array, torchrun,
a shell loop over hosts) writes N DATA folders, each with its own manifest saying which shard it
holds. A `data.path` that is a glob (`data/wiki/shard-*`) or a folder of such DATA folders is
opened as one DATA folder whose splits are the shards' splits concatenated: every document of the
corpus is equally likely, as in the unsharded DATA. Before that, the shards are checked to be one
set: one count, one corpus, one tokenizer and options, and every index 0…N−1 exactly once.
"""
from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from bertpre.claim import claimed, real_path
from bertpre.data.folder import DATASET_DIR, MANIFEST_FILE, DataFolder, load_data
from bertpre.errors import UserError
from bertpre.folders import staging_folder
from bertpre.links import refuse_links
from data_prep import Shard

# Where a launcher says which task this is, in the order they are looked up.
SHARD_INDEX_VARIABLES = ("SLURM_ARRAY_TASK_ID", "RANK")
SHARD_PLACEHOLDER = "{shard}"  # in --out: replaced by the shard index
COUNT_KEYS = ("documents", "train_documents", "validation_documents", "sentences", "tokens",
              "unk_tokens", "long_words", "characters", "empty_documents_dropped",
              "duplicate_documents_dropped", "documents_without_tokens_dropped",
              "sentences_without_tokens_dropped", "invalid_utf8_replacements")


def resolve_shard(num_shards: int | None, shard_index: int | None, out: str | Path,
                  environ: Mapping[str, str] = os.environ) -> tuple[Shard | None, Path]:
    """The shard this task encodes and the folder it writes.

    `shard_index` defaults to the launcher's task index (`SHARD_INDEX_VARIABLES`), so one
    command line serves every task; its `--out` must then hold `{shard}`, or every task would
    write the same folder.

    Raises:
        UserError: no index to be had, an index outside 0…N−1, or an --out every task shares.
    """
    text = str(out)
    if num_shards is None:
        if shard_index is not None:
            raise UserError("--shard-index needs --num-shards N, the number of shards")
        if SHARD_PLACEHOLDER in text:
            raise UserError(f"--out {text} holds {SHARD_PLACEHOLDER}, which only --num-shards fills in")
        return None, Path(out)
    if num_shards < 1:
        raise UserError(f"--num-shards {num_shards} must be 1 or more")
    source = "--shard-index"
    if shard_index is None:
        found = next(((name, environ[name]) for name in SHARD_INDEX_VARIABLES
                      if environ.get(name, "").strip()), None)
        if found is None:
            raise UserError(f"--num-shards {num_shards} needs --shard-index I (0 to {num_shards - 1}), "
                            f"or a launcher that sets {' or '.join(SHARD_INDEX_VARIABLES)}")
        source, value = found
        if not value.strip().isdigit():
            raise UserError(f"{source}={value!r} is not a shard index; pass --shard-index I")
        shard_index = int(value)
        if SHARD_PLACEHOLDER not in text:
            raise UserError(f"--out {text} would be the same folder for every task; put "
                            f"{SHARD_PLACEHOLDER} in it, e.g. --out {text.rstrip('/')}/shard-{SHARD_PLACEHOLDER}")
    if not 0 <= shard_index < num_shards:
        hint = f"; submit the array as --array=0-{num_shards - 1}" if source == "SLURM_ARRAY_TASK_ID" else ""
        raise UserError(f"{source} {shard_index} is outside --num-shards {num_shards} "
                        f"(shards 0 to {num_shards - 1}){hint}")
    return Shard(shard_index, num_shards), Path(text.replace(SHARD_PLACEHOLDER, str(shard_index)))


def shard_folders(spec: str | Path) -> list[Path] | None:
    """The DATA folders that `spec` names when it is a glob or a folder of DATA folders; None
    when it is a DATA folder itself (or nothing: `load_data` then says what is wrong).

    Raises:
        UserError: a glob that matches no folder.
    """
    text = str(spec)
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / DATASET_DIR).exists():
            return None
        # Hidden folders are skipped: a task still writing its shard stages it as one.
        inside = sorted(child for child in path.iterdir() if not child.name.startswith(".")
                        and child.is_dir() and (child / MANIFEST_FILE).is_file())
        return inside or None
    if not path.exists() and any(character in text for character in "*?["):
        matches = sorted(Path(match) for match in glob.glob(str(path)) if Path(match).is_dir())
        if not matches:
            raise UserError(f"{text} matches no folder; tokenize the shards first (bertpre tokenize "
                            "CORPUS --tokenizer VOCAB --num-shards N --out DATA/shard-{shard})")
        return matches
    return None


def check_shard_set(spec: str | Path, folders: Sequence[DataFolder]) -> list[DataFolder]:
    """The shards of one tokenization in index order, after checking they are exactly one set.

    Raises:
        UserError: a folder is not a shard; the shards disagree on their count, corpus, options
            or tokenizer; an index is missing or held twice.
    """
    for folder in folders:
        shard = folder.manifest.get("shard")
        if isinstance(shard, dict) and not (
                all(isinstance(shard.get(key), int) and not isinstance(shard.get(key), bool)
                    for key in ("index", "count")) and 0 <= shard["index"] < shard["count"]):
            raise UserError(f"{folder.path / MANIFEST_FILE}: shard must hold an index from 0 to count - 1 "
                            f"and a count, got {repr(shard)[:80]}; it is damaged, tokenize that shard again")
        if not isinstance(shard, dict):
            others = ", ".join(str(other.path) for other in folders[:3])
            raise UserError(f"{spec} holds {folder.path}, which is not a shard (tokenized without "
                            f"--num-shards); {spec} must name the shards of one corpus, not "
                            f"DATA folders {others}{'…' if len(folders) > 3 else ''}: list those "
                            "as a mixture in data.path")
    first = folders[0]
    count = first.manifest["shard"]["count"]
    for folder in folders[1:]:
        shard = folder.manifest["shard"]
        if shard["count"] != count:
            raise UserError(f"{first.path} is one of {count} shards but {folder.path} one of "
                            f"{shard['count']}: {spec} mixes two tokenizations; keep one")
        for what, key in (("corpus", "sources"), ("options", "options"), ("tokenizer", "tokenizer")):
            if _comparable(first.manifest, key) != _comparable(folder.manifest, key):
                raise UserError(f"shards {first.path} and {folder.path} differ in their {what}: "
                                "every shard must be tokenized from the same corpus with the "
                                "same command; tokenize the odd one again")
    by_index: dict[int, DataFolder] = {}
    for folder in folders:
        index = folder.manifest["shard"]["index"]
        if index in by_index:
            raise UserError(f"shard {index} of {count} is held twice, by {by_index[index].path} and "
                            f"{folder.path}; remove one")
        by_index[index] = folder
    missing = [index for index in range(count) if index not in by_index]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UserError(f"{spec} lacks shard{'s' if len(missing) > 1 else ''} {shown} of {count} "
                        f"(it holds {len(by_index)}); tokenize {'them' if len(missing) > 1 else 'it'} "
                        f"with --num-shards {count} --shard-index {missing[0]}")
    return [by_index[index] for index in range(count)]


def _comparable(manifest: dict, key: str) -> object:
    """A manifest entry as shards must agree on it; source files by content, not path."""
    value = manifest.get(key)
    if key == "sources":
        return sorted((source.get("bytes"), source.get("sha256")) for source in value or [])
    if key == "tokenizer" and isinstance(value, dict):
        return value.get("sha256")
    return value


def merge_manifests(shards: Sequence[DataFolder], relative_to: Path | None = None) -> dict:
    """One manifest for a checked shard set: the first shard's corpus, options and tokenizer,
    the counts summed, and each shard with its index, path and counts.

    Args:
        relative_to: write the shards' paths relative to this folder (where the manifest goes).
    """
    first = shards[0].manifest
    counts = {key: sum(shard.manifest["counts"].get(key, 0) for shard in shards) for key in COUNT_KEYS}
    counts["unk_share"] = counts["unk_tokens"] / max(counts["tokens"], 1)

    def where(path: Path) -> str:
        if relative_to is not None and path.resolve().parent == relative_to.resolve():
            return path.name
        return str(path)

    return {
        "bertpre_version": first.get("bertpre_version"),
        "sources": first.get("sources"),
        "options": first.get("options"),
        "counts": counts,
        "tokenizer": first.get("tokenizer"),
        "shards": {
            "count": len(shards),
            "folders": [{"index": index, "path": where(shard.path),
                         "documents": shard.manifest["counts"]["documents"],
                         "tokens": shard.manifest["counts"]["tokens"]}
                        for index, shard in enumerate(shards)],
        },
    }


def load_shard_set(spec: str | Path, paths: Sequence[Path]) -> DataFolder:
    """The shards `paths` (found from `spec`) as one DATA folder: splits concatenated in shard
    order, the merged manifest, the first shard's tokenizer."""
    import datasets  # seconds to import; the CLI imports this module

    shards = check_shard_set(spec, [load_data(path) for path in paths])
    return DataFolder(
        path=Path(spec),
        tokenizer=shards[0].tokenizer,
        train=datasets.concatenate_datasets([shard.train for shard in shards]),
        validation=datasets.concatenate_datasets([shard.validation for shard in shards]),
        manifest=merge_manifests(shards),
        shards=[shard.path for shard in shards],
    )


def write_merged_manifest(folder: str | Path) -> tuple[dict, Path]:
    """`bertpre tokenize --merge-manifests DATA`: check the shards in DATA and write
    DATA/manifest.json for the whole set (atomically).

    Returns:
        The manifest and where it was written.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"--merge-manifests {folder} is not a folder; give the folder that holds the shards")
    refuse_links(folder, [MANIFEST_FILE])  # a link of yours there is not replaced (`bertpre.links`)
    paths = shard_folders(folder)
    if paths is None:
        raise UserError(f"--merge-manifests {folder} holds no shard folders (DATA folders written "
                        "with --num-shards); give the folder that holds them")
    manifest = merge_manifests(check_shard_set(folder, [load_data(path) for path in paths]),
                               relative_to=folder)
    target = folder / MANIFEST_FILE
    with claimed(real_path(folder), "tokenize", label="--merge-manifests"), staging_folder(target) as building:
        written = building / MANIFEST_FILE
        written.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        written.replace(target)
    return manifest, target
