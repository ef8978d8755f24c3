"""The model a fine-tuning starts from: an export, a checkpoint, a RUN's latest checkpoint or any
Hugging Face BERT folder on disk, with its tokenizer, its pretraining step and its weights' hash."""
from __future__ import annotations

import hashlib
import json
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from bertpre.errors import UserError
from bertpre.model import BertConfig, BertForPreTraining
from bertpre.model.hf_format import read_folder
from bertpre.train.init_from import InitSource

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
STEP_FOLDER = re.compile(r"step-(\d+)$")


@dataclass
class Encoder:
    """A pretrained encoder, ready to carry a task head."""

    source: Path  # as the user named it
    model_folder: Path
    tokenizer_folder: Path
    config: BertConfig
    state: dict[str, torch.Tensor]  # BertModel's names (no `bert.` prefix)
    tokenizer: Tokenizer
    step: int | None  # the pretraining step of a checkpoint; None for an export or a foreign folder
    weights_sha256: str


def load_encoder(source: str | Path) -> Encoder:
    """Read SOURCE's encoder weights (a pooler the folder lacks is newly initialized, with a note)
    and its tokenizer, and check that the two belong together."""
    found = InitSource.find(source)
    config, state_dict = read_folder(found.model_folder)
    full = BertForPreTraining(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        missing, _ = full.load_weights(state_dict, found.model_folder)
    if any(name.startswith("bert.pooler.") for name in missing):
        print(f"note: {found.model_folder} has no pooler weights; they are newly initialized",
              file=sys.stderr)
    tokenizer = found.tokenizer()
    vocabulary = tokenizer.get_vocab_size()
    if vocabulary > config.vocab_size:
        raise UserError(f"{found.tokenizer_folder}: the tokenizer has {vocabulary:,} tokens but the "
                        f"model {found.model_folder} has {config.vocab_size:,} embeddings; the "
                        "tokenizer does not belong to this model")
    return Encoder(source=Path(source), model_folder=found.model_folder,
                   tokenizer_folder=found.tokenizer_folder, config=config,
                   state=full.bert.state_dict(), tokenizer=tokenizer,
                   step=pretraining_step(found.model_folder), weights_sha256=weights_hash(found.model_folder))


def pretraining_step(folder: Path) -> int | None:
    """The step of a `checkpoints/step-N` folder (its trainer_state.json, else its name)."""
    state = folder / "trainer_state.json"
    if state.is_file():
        try:
            step = json.loads(state.read_text(encoding="utf-8")).get("step")
        except (OSError, ValueError, AttributeError):
            step = None
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            return step
    match = STEP_FOLDER.search(folder.name)
    return int(match.group(1)) if match else None


def weights_hash(folder: Path) -> str:
    """sha256 over the folder's weight files (sharded ones in name order)."""
    digest = hashlib.sha256()
    files = sorted(path for path in folder.iterdir()
                   if path.name in WEIGHT_FILES or path.name.endswith((".safetensors", ".bin")))
    for path in files:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
