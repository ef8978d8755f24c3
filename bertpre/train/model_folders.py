"""Which folder holds a model and its tokenizer: an export or a Hugging Face folder, a RUN (its
latest checkpoint) or one of its checkpoints; the one resolution init_from, fill-mask, evaluate,
export and finetune share."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from bertpre.errors import UserError
from bertpre.folders import is_run_folder
from bertpre.model.config import BertConfig
from bertpre.model.hf_format import CONFIG_NAME, read_config, refuse_hub_name
from bertpre.tokenizer.wordpiece import TOKENIZER_FILE, VOCAB_FILE, load_tokenizer
from bertpre.train.checkpoint import (
    TOKENIZER_DIR,
    latest_checkpoint,
    restore_tokenizer,
    verify_checkpoint,
)


def find_checkpoint(source: str | Path) -> tuple[Path, Path]:
    """(checkpoint folder, tokenizer folder) for a RUN folder or a `step-N` folder inside one."""
    source = Path(source)
    if not source.is_dir():
        raise UserError(f"{source}: no such folder; pass a RUN folder or one of its checkpoints/step-N")
    if (source / CONFIG_NAME).is_file():
        checkpoint = source
        run = source.parent.parent if source.parent.name == "checkpoints" else source
    else:
        latest = latest_checkpoint(source)
        if latest is None and ((source / "checkpoints").is_dir() or is_run_folder(source)):
            raise UserError(f"{source}: no checkpoints/latest; the run has not saved a checkpoint yet")
        if latest is None:
            raise UserError(f"{source}: neither a RUN folder (with checkpoints/latest) nor a "
                            f"checkpoint (with {CONFIG_NAME})")
        checkpoint, run = latest, source
    tokenizer = run / TOKENIZER_DIR
    if not tokenizer.is_dir() and (checkpoint / TOKENIZER_FILE).is_file():
        tokenizer = checkpoint
    if not any((tokenizer / name).is_file() for name in (TOKENIZER_FILE, VOCAB_FILE)):
        what = "has no tokenizer.json or vocab.txt" if tokenizer.is_dir() else "is missing"
        raise UserError(f"the run's tokenizer folder {run / TOKENIZER_DIR} {what} (every checkpoint of the "
                        f"run reads it); {restore_tokenizer(run)}")
    # The training state (optimizer, scaler, RNG, memory) is read only by a resume, which checks it.
    verify_checkpoint(checkpoint, weights_only=True,
                      tokenizer=tokenizer if tokenizer != checkpoint else None)
    return checkpoint, tokenizer


@dataclass(frozen=True)
class ModelFolder:
    """Where a model's weights and its tokenizer are: one folder (an export, a Hugging Face
    folder) or a run's checkpoint and the run's tokenizer/."""

    path: Path  # as the user named it
    model_folder: Path  # config.json and the weights
    tokenizer_folder: Path

    def model_config(self) -> BertConfig:
        return read_config(self.model_folder)

    def tokenizer(self) -> Tokenizer:
        return load_tokenizer(self.tokenizer_folder)


def resolve_model_folder(path: str | Path) -> ModelFolder:
    """A model folder holding its tokenizer (an export, a Hugging Face BERT or XLNet folder), a
    RUN folder (its latest checkpoint) or one of its `checkpoints/step-N`.

    Never downloads: a hub name is refused in one line that says to pass a local folder.
    """
    path = Path(path)
    if (path / CONFIG_NAME).is_file() and path.parent.name != "checkpoints":
        if not any((path / name).is_file() for name in (TOKENIZER_FILE, VOCAB_FILE)):
            raise UserError(f"{path} has no {VOCAB_FILE} or {TOKENIZER_FILE}; the vocabulary must match "
                            "the weights, so copy the tokenizer the weights were trained with into that folder")
        return ModelFolder(path, path, path)
    if not path.is_dir():
        refuse_hub_name(path)  # else find_checkpoint says there is no such folder
    model_folder, tokenizer_folder = find_checkpoint(path)
    return ModelFolder(path, model_folder, tokenizer_folder)
