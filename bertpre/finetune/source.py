"""The model a fine-tuning starts from: an export, a checkpoint, a RUN's latest checkpoint or any
Hugging Face BERT or XLNet folder on disk, with its tokenizer, its pretraining step and its
weights' hash."""
from __future__ import annotations

import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Tokenizer

from bertpre.errors import UserError
from bertpre.model import BertConfig
from bertpre.model.families import family, load_task_start
from bertpre.model.hf_format import read_config
from bertpre.train.checkpoint import MEMORY_FILES
from bertpre.train.model_folders import ModelFolder, resolve_model_folder

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
STEP_FOLDER = re.compile(r"step-(\d+)$")


@dataclass
class Encoder:
    """A pretrained encoder, ready to carry a task head."""

    source: Path  # as the user named it
    model_folder: Path
    tokenizer_folder: Path
    config: BertConfig  # `family(config)` is its row in the family table
    state: dict[str, torch.Tensor]  # the encoder's own names (no `bert.` / `transformer.` prefix)
    tokenizer: Tokenizer  # in the family's layout (XLNet's: `A [SEP] B [SEP] [CLS]`)
    step: int | None  # the pretraining step of a checkpoint; None for an export or a foreign folder
    weights_sha256: str
    # the pretrained parts the family's task heads share by name (ModernBERT's `head.`), where
    # the source has them: fine-tuning starts from them, as transformers' from_pretrained does
    head_state: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def padding_side(self) -> str:
        """Where a batch's padding goes (left where the classification token is last: XLNet)."""
        return family(self.config).padding_side


def load_encoder(source: str | Path) -> Encoder:
    """Read SOURCE's encoder weights (parts the folder may lack, a BERT's pooler, are newly
    initialized, with a note) and its tokenizer in its family's layout, and check that the two
    belong together."""
    found = resolve_model_folder(source)
    config = read_config(found.model_folder)
    state, head_state, fresh = load_task_start(found.model_folder, config)
    if fresh:
        print(f"note: {found.model_folder} has no weights for {', '.join(fresh)}; they are newly initialized",
              file=sys.stderr)
    tokenizer = found.tokenizer()
    check_vocabulary(tokenizer, config, found)
    return Encoder(source=Path(source), model_folder=found.model_folder,
                   tokenizer_folder=found.tokenizer_folder, config=config, state=state,
                   tokenizer=family(config).tokenizer_layout(tokenizer),
                   step=pretraining_step(found.model_folder), weights_sha256=weights_hash(found.model_folder),
                   head_state=head_state)


def check_vocabulary(tokenizer: Tokenizer, config: BertConfig, found: ModelFolder) -> None:
    """Refuse a tokenizer with more tokens than the model has embeddings."""
    vocabulary = tokenizer.get_vocab_size()
    if vocabulary > config.vocab_size:
        raise UserError(f"{found.tokenizer_folder}: the tokenizer has {vocabulary:,} tokens but the "
                        f"model {found.model_folder} has {config.vocab_size:,} embeddings; the "
                        "tokenizer does not belong to this model")


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
    """sha256 over the folder's weight files (sharded ones in name order; an XLNet checkpoint's
    memory is no weights)."""
    digest = hashlib.sha256()
    files = sorted(path for path in folder.iterdir()
                   if (path.name in WEIGHT_FILES or path.name.endswith((".safetensors", ".bin")))
                   and not MEMORY_FILES.fullmatch(path.name))
    for path in files:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
