"""Hugging Face model folders as `(BertConfig, state_dict)`: read BERT folders, write BERT, ALBERT
or remote-code ones.

Nothing here builds a model or touches the network: `BertForPreTraining.from_pretrained` and
`save_pretrained` are built on these functions.
"""
from __future__ import annotations

import json
import pickle
import re
import shutil
import warnings
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

import bertpre
from bertpre.errors import UserError
from bertpre.model.bert_config import REMOTE_AUTO_MAP
from bertpre.model.config import ARCHITECTURE_KEY, BertConfig
from bertpre.tokenizer.wordpiece import TOKENIZER_CONFIG_FILE, TOKENIZER_FILES

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX_NAME = "model.safetensors.index.json"
PYTORCH_NAME = "pytorch_model.bin"

# Keys that name a tensor already stored under another key (tied), or a non-persistent buffer.
TIED_KEYS = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
BUFFER_SUFFIXES = ("position_ids", "token_type_ids")
# Parts a BertModel-only (or BertForMaskedLM) folder may lack; they keep their fresh init.
HEAD_PREFIXES = ("cls.", "bert.pooler.")
# The files config.json's auto_map names (configuration_bertpre.py, modeling_bertpre.py): package
# data in bertpre/model/remote_code/, never imported by bertpre (they import transformers).
REMOTE_CODE_FILES = tuple(sorted({reference.split(".")[0] + ".py" for reference in REMOTE_AUTO_MAP.values()}))
# The task classes among them (a fine-tuned model's config.json names them as an export's does).
REMOTE_TASK_AUTO_MAP = {name: reference for name, reference in REMOTE_AUTO_MAP.items() if "For" in name
                        and name not in ("AutoModelForMaskedLM", "AutoModelForPreTraining")}


# --- reading -------------------------------------------------------------------------------


def read_folder(folder: str | Path) -> tuple[BertConfig, dict[str, torch.Tensor]]:
    """The config and the tensors (under bertpre's names) of a Hugging Face BERT folder.

    Reads `config.json` and `model.safetensors` (sharded too) or `pytorch_model.bin` (loaded
    with `weights_only=True`). Never downloads anything.
    """
    folder = check_folder(folder)
    return read_config(folder), normalize_keys(read_weights(folder))


def match_state_dict(expected: dict[str, torch.Size], state_dict: dict[str, torch.Tensor], folder: Path, *,
                     layout: str = "BERT", optional: tuple[str, ...] = HEAD_PREFIXES,
                     strict: bool = False) -> tuple[list[str], list[str]]:
    """The one check of a folder's tensors against the shapes a model of `layout` expects.

    No shape may differ and no weight may be missing, but those whose names start with one of
    `optional` (the pooler and heads a BertModel-only folder lacks), unless `strict`.

    Returns:
        (missing names, unexpected names).
    """
    wrong = [name for name, tensor in state_dict.items() if name in expected and expected[name] != tensor.shape]
    missing = [name for name in expected if name not in state_dict and name not in TIED_KEYS]
    essential = [name for name in missing if strict or not name.startswith(optional)]
    if wrong or essential:
        shown = ", ".join(
            [f"{name} {tuple(state_dict[name].shape)} for {tuple(expected[name])}" for name in wrong[:3]]
            + essential[:3 - min(3, len(wrong))])
        more = " ..." if len(wrong) + len(essential) > 3 else ""
        raise UserError(f"{folder}: the weights do not fit {layout}'s layout of config.json ({len(essential)} "
                        f"missing, {len(wrong)} of another shape: {shown}{more}); config.json and the "
                        "weights do not belong together")
    unexpected = sorted(name for name in state_dict if name not in expected)
    return missing, unexpected


class LoadingWarning(UserWarning):
    """What `from_pretrained` warns of: the parts a folder lacks (newly initialized) and the tensors
    it holds that the model has no place for. A library user sees a warning; a command catches it
    and says the names in its own one-line note (`bertpre.tools.inference.load_pretraining_quietly`).
    """

    def __init__(self, message: str, folder: str | Path, missing: list[str] | None = None,
                 unexpected: list[str] | None = None) -> None:
        super().__init__(message)
        self.folder = folder
        self.missing = missing or []
        self.unexpected = unexpected or []


def warn_loading(folder: str | Path, missing: list[str], unexpected: list[str]) -> None:
    """Warn, as a `LoadingWarning` pointing at the caller of `from_pretrained`, of what loading
    `folder` left fresh (`missing`) or ignored (`unexpected`)."""
    if missing:
        warnings.warn(LoadingWarning(f"{folder} has no weights for {', '.join(missing)}; they are newly "
                                     "initialized", folder, missing=missing), stacklevel=3)
    if unexpected:
        warnings.warn(LoadingWarning(f"{folder}: ignored weights {', '.join(unexpected)}", folder,
                                     unexpected=unexpected), stacklevel=3)


def check_folder(folder: str | Path) -> Path:
    """The folder as a Path, or a UserError saying why it cannot be read."""
    path = Path(folder)
    if path.is_dir():
        return path
    refuse_hub_name(folder)
    raise UserError(f"{folder}: not a model folder (expected a folder with {CONFIG_NAME})")


def refuse_hub_name(folder: str | Path) -> None:
    """A name like `bert-base-uncased` that is no folder here: say that bertpre never downloads."""
    path = Path(folder)
    if not path.exists() and not path.is_absolute() and re.fullmatch(r"[\w.-]+(/[\w.-]+)?", str(folder)):
        raise UserError(
            f"{str(folder)!r} is not a local folder; bertpre never downloads models. Download it "
            "yourself (e.g. `huggingface-cli download NAME --local-dir DIR`) and pass DIR"
        )


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


def record_architecture(folder: Path, architecture: str) -> None:
    """Name bertpre's `architecture` in `folder/config.json` (`ARCHITECTURE_KEY`, which
    `read_config` reads before the model_type), as a checkpoint's does."""
    path = folder / CONFIG_NAME
    write_json(path, {**json.loads(path.read_text(encoding="utf-8")), ARCHITECTURE_KEY: architecture})


def source_architecture(path: str | Path) -> str | None:
    """The architecture of the model at `path`, as its config.json says: a model folder's or a
    checkpoint's own, or a RUN's latest checkpoint's. None where there is none to read: whoever
    loads the folder refuses it with the reason (`train.checkpoint.latest_checkpoint` is the
    pointer's reader that checks it; here it is only followed)."""
    folder = Path(path)
    pointer = folder / "checkpoints" / "latest"
    try:
        if not (folder / CONFIG_NAME).is_file() and pointer.is_file():
            folder = folder / "checkpoints" / pointer.read_text(encoding="utf-8").strip()
        return read_config(folder).architecture
    except (UserError, OSError, UnicodeDecodeError, ValueError):
        return None


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


def write_folder(folder: str | Path, config: BertConfig, state_dict: dict[str, torch.Tensor]) -> None:
    """Write `config.json` and `model.safetensors` so that Hugging Face loads them as they are.

    Tied decoder copies are left out, as `transformers` does; a config with ALBERT options keeps
    its extra keys (bertpre reads them back; `write_albert_folder` writes Hugging Face's ALBERT).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {name: tensor.detach().contiguous().cpu()
               for name, tensor in state_dict.items() if name not in TIED_KEYS}
    write_json(folder / CONFIG_NAME, {**config.to_hf_dict(), "bertpre_version": bertpre.__version__})
    save_file(tensors, folder / SAFETENSORS_NAME, metadata={"format": "pt"})


def write_remote_code_folder(folder: str | Path, config: BertConfig,
                             state_dict: dict[str, torch.Tensor]) -> None:
    """Write the remote-code layout: `write_folder`'s files (config.json with `auto_map`, bertpre's
    tensor names) and the two Python files transformers loads with `trust_remote_code=True`."""
    write_folder(folder, config, state_dict)
    source = resources.files("bertpre.model").joinpath("remote_code")
    for name in REMOTE_CODE_FILES:
        (Path(folder) / name).write_bytes(source.joinpath(name).read_bytes())


def write_albert_folder(folder: str | Path, config: BertConfig,
                        state_dict: dict[str, torch.Tensor]) -> None:
    """Write the Hugging Face `AlbertForPreTraining` layout (exact, parity-tested), or a
    fine-tuned model's `AlbertFor*` task layout.

    Without `embedding_size`, the embeddings are `hidden_size` wide and ALBERT's projection
    is written as the identity.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {albert_name(name): tensor.detach().contiguous().cpu()
               for name, tensor in state_dict.items() if name not in TIED_KEYS}
    if config.embedding_size is None:
        hidden = config.hidden_size
        tensors["albert.encoder.embedding_hidden_mapping_in.weight"] = torch.eye(hidden)
        tensors["albert.encoder.embedding_hidden_mapping_in.bias"] = torch.zeros(hidden)
    write_json(folder / CONFIG_NAME, {**albert_config(config), "bertpre_version": bertpre.__version__})
    save_file(tensors, folder / SAFETENSORS_NAME, metadata={"format": "pt"})


def albert_config(config: BertConfig) -> dict:
    """The `config.json` of Hugging Face's `AlbertForPreTraining` for a model with ALBERT options."""
    return {
        "architectures": ["AlbertForPreTraining"],
        "model_type": "albert",
        "vocab_size": config.vocab_size,
        "embedding_size": config.embedding_size or config.hidden_size,
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
    # a fine-tuned model's heads: transformers' ALBERT task classes name them as bertpre does
    "classifier": "classifier",
    "qa_outputs": "qa_outputs",
}


def albert_name(name: str) -> str:
    """bertpre's parameter name -> Hugging Face `AlbertForPreTraining`'s (or, for a fine-tuned
    model's head, its `AlbertFor*` task class's)."""
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


# --- exporting a run's BERT ----------------------------------------------------------------

ExportWriter = Callable[[Path], list[str]]  # writes the export into a folder; returns the tokenizer files


def export_layout(config: BertConfig) -> tuple[str, Callable[[Path, BertConfig, dict], None]]:
    """The architecture a BERT-layout export names and the function that writes it."""
    if config.relative_positions:  # ALBERT options or not: transformers' ALBERT has no such positions
        return "BertpreForPreTraining (remote code: trust_remote_code=True)", write_remote_code_folder
    if config.is_albert:
        return "AlbertForPreTraining", write_albert_folder
    return "BertForPreTraining", write_folder


def bert_export_writer(model: torch.nn.Module, tokenizer_folder: Path) -> tuple[str, ExportWriter]:
    """The architecture a BERT-layout model exports as, and its writer (the tokenizer copied)."""
    architecture, write_model = export_layout(model.config)

    def write(staging: Path) -> list[str]:
        write_model(staging, model.config, model.state_dict())
        copied = []
        for name in TOKENIZER_FILES:
            if (tokenizer_folder / name).is_file():
                shutil.copyfile(tokenizer_folder / name, staging / name)
                copied.append(name)
        limit_model_max_length(staging, model.config.max_position_embeddings)
        return copied

    return architecture, write


def limit_model_max_length(folder: Path, positions: int) -> None:
    """Write the model's position count as the tokenizer's `model_max_length`, so that
    `transformers` truncates to what the model can read."""
    path = folder / TOKENIZER_CONFIG_FILE
    if not path.is_file():  # a bare vocab.txt: transformers takes the length from config.json
        return
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        config = None
    if not isinstance(config, dict):
        raise UserError(f"the run's {path.name} is not a JSON object (damaged); restore it from the "
                        "DATA folder's tokenizer/ and export again")
    config["model_max_length"] = positions
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def bert_task_prefix(config: BertConfig) -> str:
    """The prefix of transformers' task classes a fine-tuned BERT-layout model saves as, the
    layout `export_layout` picks: BertFor*, AlbertFor* (ALBERT options) or remote code's
    BertpreFor* (relative positions, with or without ALBERT options)."""
    if config.relative_positions:
        return "Bertpre"
    return "Albert" if config.is_albert else "Bert"


def write_bert_task_folder(folder: Path, state: dict[str, torch.Tensor], config: BertConfig,
                           tokenizer_folder: Path, *, pooler: bool) -> dict:
    """A fine-tuned BERT-layout model's weights in the layout its export has (`export_layout`:
    BERT's, ALBERT's names, or remote code with its Python files), without the pooler unless
    `pooler` (transformers' token-classification and question-answering classes lack it), and
    its tokenizer files; returns config.json's content (remote code's `auto_map` names the task
    classes too)."""
    if not pooler:
        state = {name: tensor for name, tensor in state.items() if not name.startswith("bert.pooler.")}
    _, write_model = export_layout(config)
    write_model(folder, config, state)
    for name in TOKENIZER_FILES:
        if (tokenizer_folder / name).is_file():
            shutil.copyfile(tokenizer_folder / name, folder / name)
    hf = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))  # the layout's own
    if "auto_map" in hf:  # remote code: its task classes too
        hf["auto_map"].update(REMOTE_TASK_AUTO_MAP)
    return hf
