"""Hugging Face folder I/O: read and write BERT folders, export a run (BERT or ALBERT layout)."""
from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bertpre.errors import UserError
from bertpre.model.bert import BertConfig, BertForPreTraining

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX_NAME = "model.safetensors.index.json"
PYTORCH_NAME = "pytorch_model.bin"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")

# Keys that name a tensor already stored under another key (tied), or a non-persistent buffer.
TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
BUFFER_SUFFIXES = ("position_ids", "token_type_ids")
# Parts a BertModel-only (or BertForMaskedLM) folder may lack; they keep their fresh init.
HEAD_PREFIXES = ("cls.", "bert.pooler.")


# --- reading -------------------------------------------------------------------------------


def load_pretrained(folder: str | Path, strict: bool = False) -> BertForPreTraining:
    """Build a `BertForPreTraining` from a Hugging Face BERT folder.

    Reads `config.json` and `model.safetensors` (sharded too) or `pytorch_model.bin` (loaded
    with `weights_only=True`). Parts a BertModel-only folder lacks (pooler, heads) are
    initialized and listed in a warning, or refused with `strict`. Never downloads anything.
    """
    folder = check_folder(folder)
    config = read_config(folder)
    state_dict = normalize_keys(read_weights(folder))
    model = BertForPreTraining(config)
    expected = model.state_dict()

    for name, tensor in state_dict.items():
        if name in expected and expected[name].shape != tensor.shape:
            raise UserError(
                f"{folder}: weight {name} has shape {tuple(tensor.shape)} but config.json implies "
                f"{tuple(expected[name].shape)}; config.json and the weights do not match"
            )
    missing = [name for name in expected if name not in state_dict and name not in TIED_KEYS]
    unexpected = sorted(name for name in state_dict if name not in expected)
    essential = [name for name in missing if not name.startswith(HEAD_PREFIXES)]
    if essential:
        shown = ", ".join(essential[:3]) + (" ..." if len(essential) > 3 else "")
        raise UserError(
            f"{folder}: {len(essential)} encoder weights are missing ({shown}); "
            "is this a BERT checkpoint?"
        )
    if missing and strict:
        raise UserError(f"{folder}: incomplete checkpoint, no weights for {', '.join(missing)}")
    model.load_state_dict({k: v for k, v in state_dict.items() if k in expected}, strict=False)
    model.tie_weights()
    if missing:
        warnings.warn(
            f"{folder} has no weights for {', '.join(missing)}; they are newly initialized",
            stacklevel=3,
        )
    if unexpected:
        warnings.warn(f"{folder}: ignored weights {', '.join(unexpected)}", stacklevel=3)
    return model


def check_folder(folder: str | Path) -> Path:
    """The folder as a Path, or a UserError saying why it cannot be read."""
    path = Path(folder)
    if path.is_dir():
        return path
    if not path.exists() and not path.is_absolute() and re.fullmatch(r"[\w.-]+(/[\w.-]+)?", str(folder)):
        raise UserError(
            f"{folder!r} is not a local folder; bertpre never downloads models. Download it "
            "yourself (e.g. `huggingface-cli download NAME --local-dir DIR`) and pass DIR"
        )
    raise UserError(f"{folder}: not a model folder (expected a folder with {CONFIG_NAME})")


def read_config(folder: Path) -> BertConfig:
    """The BertConfig written in `folder/config.json`."""
    path = folder / CONFIG_NAME
    if not path.is_file():
        raise UserError(f"{folder}: no {CONFIG_NAME}; a Hugging Face model folder needs one")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected a JSON object")
    try:
        return BertConfig.from_hf_dict(values)
    except TypeError as error:
        raise UserError(f"{path}: {error}") from None


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of the folder: safetensors (single or sharded) first, else pytorch_model.bin."""
    single = folder / SAFETENSORS_NAME
    index = folder / SAFETENSORS_INDEX_NAME
    binary = folder / PYTORCH_NAME
    if single.is_file():
        return read_safetensors(single)
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, AttributeError) as error:
            raise UserError(f"{index}: not a safetensors index ({error})") from None
        state_dict: dict[str, torch.Tensor] = {}
        for shard in shards:
            state_dict.update(read_safetensors(folder / shard))
        return state_dict
    if binary.is_file():
        try:
            state_dict = torch.load(binary, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UserError(
                f"{binary}: refused to load (only plain tensors are accepted): {first_line}"
            ) from None
        if not isinstance(state_dict, dict):
            raise UserError(f"{binary}: expected a dict of tensors")
        return state_dict
    raise UserError(f"{folder}: no weights ({SAFETENSORS_NAME} or {PYTORCH_NAME})")


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors file, or a UserError if it is missing or damaged."""
    if not path.is_file():
        raise UserError(f"{path}: missing weights file")
    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError) as error:
        raise UserError(f"{path}: not a readable safetensors file ({error})") from None


def normalize_keys(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map the key spellings found in Hugging Face BERT files onto bertpre's names.

    Handles BertModel-only files (no `bert.` prefix), TF-era `gamma`/`beta` LayerNorm names,
    buffers, and tied decoder copies.
    """
    bare = not any(key.startswith(("bert.", "cls.")) for key in state_dict)
    normalized: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        if key.endswith(BUFFER_SUFFIXES):
            continue
        if bare:
            key = "bert." + key
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        normalized[key] = tensor
    if "cls.predictions.bias" not in normalized and "cls.predictions.decoder.bias" in normalized:
        normalized["cls.predictions.bias"] = normalized["cls.predictions.decoder.bias"]
    for key in TIED_KEYS:
        normalized.pop(key, None)
    return normalized


# --- writing -------------------------------------------------------------------------------


def save_pretrained(model: BertForPreTraining, folder: str | Path) -> None:
    """Write `config.json` and `model.safetensors` so that Hugging Face loads them as they are.

    Tied decoder copies are left out, as `transformers` does; a model with ALBERT options keeps
    its extra config keys (bertpre reads them back; see `export` for Hugging Face's ALBERT).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state_dict = {
        name: tensor.detach().contiguous().cpu()
        for name, tensor in model.state_dict().items()
        if name not in TIED_KEYS
    }
    write_json(folder / CONFIG_NAME, model.config.to_hf_dict())
    save_file(state_dict, folder / SAFETENSORS_NAME, metadata={"format": "pt"})


def save_albert(model: BertForPreTraining, folder: str | Path) -> None:
    """Write the model in Hugging Face's `AlbertForPreTraining` layout (exact, parity-tested).

    Without `embedding_size`, the embeddings are `hidden_size` wide and ALBERT's projection
    is written as the identity.
    """
    config = model.config
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    embedding_size = config.embedding_size or config.hidden_size
    albert_config = {
        "architectures": ["AlbertForPreTraining"],
        "model_type": "albert",
        "vocab_size": config.vocab_size,
        "embedding_size": embedding_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_hidden_groups": 1 if config.share_layers else config.num_hidden_layers,
        "inner_group_num": 1,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": config.hidden_act,
        "hidden_dropout_prob": config.hidden_dropout_prob,
        "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
        "classifier_dropout_prob": config.hidden_dropout_prob,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id,
        "tie_word_embeddings": True,
    }
    state_dict = {}
    for name, tensor in model.state_dict().items():
        if name in TIED_KEYS:
            continue
        state_dict[albert_name(name)] = tensor.detach().contiguous().cpu()
    if config.embedding_size is None:
        hidden = config.hidden_size
        state_dict["albert.encoder.embedding_hidden_mapping_in.weight"] = torch.eye(hidden)
        state_dict["albert.encoder.embedding_hidden_mapping_in.bias"] = torch.zeros(hidden)
    write_json(folder / CONFIG_NAME, albert_config)
    save_file(state_dict, folder / SAFETENSORS_NAME, metadata={"format": "pt"})


ALBERT_LAYER_NAMES = {
    "attention.self.query": "attention.query",
    "attention.self.key": "attention.key",
    "attention.self.value": "attention.value",
    "attention.output.dense": "attention.dense",
    "attention.output.LayerNorm": "attention.LayerNorm",
    "intermediate.dense": "ffn",
    "output.dense": "ffn_output",
    "output.LayerNorm": "full_layer_layer_norm",
}
ALBERT_OTHER_NAMES = {
    "bert.pooler.dense": "albert.pooler",
    "cls.predictions.transform.dense": "predictions.dense",
    "cls.predictions.transform.LayerNorm": "predictions.LayerNorm",
    "cls.predictions.bias": "predictions.bias",
    "cls.seq_relationship": "sop_classifier.classifier",
}


def albert_name(name: str) -> str:
    """bertpre's parameter name -> Hugging Face `AlbertForPreTraining`'s."""
    layer = re.fullmatch(r"bert\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias)", name)
    if layer:
        index, part, kind = layer.groups()
        return f"albert.encoder.albert_layer_groups.{index}.albert_layers.0.{ALBERT_LAYER_NAMES[part]}.{kind}"
    for ours, theirs in ALBERT_OTHER_NAMES.items():
        if name == ours or name.startswith(ours + "."):
            return theirs + name[len(ours):]
    if name.startswith("bert."):
        return "albert." + name[len("bert."):]
    raise KeyError(name)


def write_json(path: Path, values: dict) -> None:
    """Indented, key-sorted JSON with a trailing newline (stable diffs)."""
    path.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --- export of a run -----------------------------------------------------------------------


@dataclass
class ExportSummary:
    """What `export` wrote."""

    checkpoint: Path
    out: Path
    architecture: str
    parameters: int
    tokenizer_files: list[str]


def find_checkpoint(source: str | Path) -> tuple[Path, Path]:
    """(checkpoint folder, tokenizer folder) for a RUN folder or a `step-N` folder inside one."""
    source = Path(source)
    if not source.is_dir():
        raise UserError(f"{source}: no such folder; pass a RUN folder or one of its checkpoints/step-N")
    latest = source / "checkpoints" / "latest"
    if (source / CONFIG_NAME).is_file():
        checkpoint = source
        run = source.parent.parent if source.parent.name == "checkpoints" else source
    elif latest.is_file():
        name = latest.read_text(encoding="utf-8").strip()
        checkpoint = source / "checkpoints" / name
        if not name or not (checkpoint / CONFIG_NAME).is_file():
            raise UserError(
                f"{latest} names {name!r}, which is not a checkpoint folder with {CONFIG_NAME}; "
                "pass a checkpoints/step-N folder instead"
            )
        run = source
    elif (source / "checkpoints").is_dir():
        raise UserError(f"{source}: no checkpoints/latest; the run has not saved a checkpoint yet")
    else:
        raise UserError(
            f"{source}: neither a RUN folder (with checkpoints/latest) nor a checkpoint (with {CONFIG_NAME})"
        )
    tokenizer = run / "tokenizer"
    if not tokenizer.is_dir() and (checkpoint / "tokenizer.json").is_file():
        tokenizer = checkpoint
    if not any((tokenizer / name).is_file() for name in ("tokenizer.json", "vocab.txt")):
        raise UserError(
            f"{run}: no tokenizer/ folder with tokenizer.json or vocab.txt; the export needs the "
            "run's tokenizer"
        )
    return checkpoint, tokenizer


def export(source: str | Path, out: str | Path, overwrite: bool = False) -> ExportSummary:
    """Write a run's latest (or a given) checkpoint and its tokenizer as a Hugging Face folder.

    Plain BERT goes to the `BertForPreTraining` layout; a model with ALBERT options goes to
    `AlbertForPreTraining`. The folder is written beside `out` and renamed into place, so a
    failed export leaves no half-written folder.
    """
    checkpoint, tokenizer_folder = find_checkpoint(source)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise UserError(f"{out} already exists and is not empty; choose another --out or pass --overwrite")
    model = load_pretrained(checkpoint, strict=True)  # a run's checkpoint lacking heads is damaged
    check_tokenizer(tokenizer_folder, model.config.vocab_size)

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        if model.config.is_albert:
            save_albert(model, staging)
        else:
            save_pretrained(model, staging)
        copied = []
        for name in TOKENIZER_FILES:
            if (tokenizer_folder / name).is_file():
                shutil.copyfile(tokenizer_folder / name, staging / name)
                copied.append(name)
        if out.is_dir():
            shutil.rmtree(out)
        elif out.exists():
            out.unlink()
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportSummary(
        checkpoint=checkpoint,
        out=out,
        architecture="AlbertForPreTraining" if model.config.is_albert else "BertForPreTraining",
        parameters=model.num_parameters(),
        tokenizer_files=copied,
    )


def check_tokenizer(folder: Path, vocab_size: int) -> None:
    """Refuse a tokenizer whose ids do not fit the model's vocabulary."""
    try:
        from bertpre.tokenizer.wordpiece import load_tokenizer
    except ImportError:  # the tokenizer module is optional here; the files are copied as they are
        return
    size = load_tokenizer(folder).get_vocab_size()
    if size > vocab_size:
        raise UserError(
            f"{folder}: tokenizer has {size} tokens but the model's vocab_size is {vocab_size}; "
            "the run's tokenizer does not belong to this checkpoint"
        )
