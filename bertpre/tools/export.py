"""`bertpre export`: a run's checkpoint and tokenizer as a Hugging Face folder (BERT or ALBERT)."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from bertpre.errors import UserError
from bertpre.model import BertForPreTraining
from bertpre.model.hf_format import write_albert_folder, write_folder
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.wordpiece import TOKENIZER_FILES
from bertpre.train.checkpoint import find_checkpoint


@dataclass
class ExportSummary:
    """What `export` wrote."""

    checkpoint: Path
    out: Path
    architecture: str
    parameters: int
    tokenizer_files: list[str]


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
    # A run's checkpoint lacking its heads is damaged, so nothing may be filled in.
    model = BertForPreTraining.from_pretrained(checkpoint, strict=True)
    model.config.check_vocab_fits(load_tokenizer(tokenizer_folder).get_vocab_size(), str(tokenizer_folder))

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    write = write_albert_folder if model.config.is_albert else write_folder
    try:
        write(staging, model.config, model.state_dict())
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
