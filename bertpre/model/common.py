"""What every model family shares: the activations by Hugging Face name, the summed
cross-entropy every loss is built from, and the tokenizer files an export copies. Each family's
module imports these from here, not from another family's module."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX
from bertpre.model.config import HIDDEN_ACTS

# The files a Hugging Face tokenizer folder may hold, copied into an export as they are.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "vocab.txt", "sentencepiece.bpe.model", "spiece.model")


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation function for a Hugging Face `hidden_act` name."""
    if name == "gelu":
        return F.gelu  # BERT's exact erf form
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return partial(F.gelu, approximate="tanh")
    if name == "relu":
        return F.relu
    if name in ("silu", "swish"):
        return F.silu
    raise UserError(f"model.hidden_act {name!r} is not supported; use one of " + ", ".join(HIDDEN_ACTS))


def summed_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy summed over the rows whose target is not -100 (0, still in the graph,
    when there are none), in float32 whatever the autocast dtype."""
    return F.cross_entropy(logits.float().flatten(0, -2), targets.flatten(), ignore_index=IGNORE_INDEX,
                           reduction="sum", label_smoothing=label_smoothing)


def copy_tokenizer_files(tokenizer_folder: Path, folder: Path) -> list[str]:
    """The tokenizer folder's files (whichever of `TOKENIZER_FILES` it holds), copied as they are.

    Returns:
        The names copied.
    """
    copied = []
    for name in TOKENIZER_FILES:
        if (tokenizer_folder / name).is_file():
            shutil.copyfile(tokenizer_folder / name, folder / name)
            copied.append(name)
    return copied
