"""`bertpre export`: a run's checkpoint and tokenizer as a Hugging Face folder (BERT, ALBERT, remote
code or XLNet)."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from safetensors import SafetensorError

from bertpre.errors import UserError
from bertpre.folders import MARKERS, check_out, claimed_out, make_files_readable
from bertpre.model import BertConfig, BertForPreTraining
from bertpre.model.hf_format import (
    read_config,
    write_albert_folder,
    write_folder,
    write_remote_code_folder,
)
from bertpre.model.xlnet import XLNetLMHeadModel
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.wordpiece import (
    CLS_TOKEN,
    PAD_TOKEN,
    SEP_TOKEN,
    SPECIAL_TOKENS_MAP_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    TOKENIZER_FILES,
)
from bertpre.tokenizer.xlnet_layout import save_xlnet_tokenizer
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
    `AlbertForPreTraining`; one with relative positions (which transformers' BERT lacks) to the
    remote-code layout, its own `modeling_bertpre.py` beside the weights; an XLNet to
    `XLNetLMHeadModel`, its tokenizer in XLNet's layout ([CLS] last, padding on the left). The
    folder is written beside `out` and renamed into place, so a failed export leaves no
    half-written folder.
    """
    checkpoint, tokenizer_folder = find_checkpoint(source)
    out = Path(out)
    # An --out that is the run holds its checkpoint, so the run is covered too.
    check_out(out, "export", overwrite=overwrite, sources=[checkpoint, tokenizer_folder])
    config = read_config(checkpoint)
    if config.is_xlnet:
        model, architecture, write = xlnet_export(checkpoint, tokenizer_folder, config)
    else:
        model, architecture, write = bert_export(checkpoint, tokenizer_folder)
    with claimed_out(out, "export", overwrite=overwrite,
                     sources=[checkpoint, tokenizer_folder]) as output:
        staging = output.staging
        try:
            tokenizer_files = write(staging)
        except SafetensorError as error:  # safetensors reports a full disk as its own error
            raise UserError(f"cannot write --out {out}: {error}; free disk space or choose "
                            "another --out (temporary files were removed)") from None
        marker, _ = MARKERS["export"]
        (staging / marker).write_text("made by `bertpre export`; `bertpre export --overwrite` "
                                      "may replace this folder\n", encoding="utf-8")
        make_files_readable(staging)  # safetensors writes 0600; the export is for sharing
        output.commit()
    return ExportSummary(
        checkpoint=checkpoint,
        out=out,
        architecture=architecture,
        parameters=model.num_parameters(),
        tokenizer_files=tokenizer_files,
    )


Writer = Callable[[Path], list[str]]  # writes the export into a folder; returns the tokenizer files


def bert_export(checkpoint: Path, tokenizer_folder: Path) -> tuple[BertForPreTraining, str, Writer]:
    """The BERT-layout model, the architecture it exports as and its writer (tokenizer copied)."""
    # A run's checkpoint lacking its heads is damaged, so nothing may be filled in.
    model = BertForPreTraining.from_pretrained(checkpoint, strict=True)
    tokenizer = load_tokenizer(tokenizer_folder)
    model.config.check_vocab_fits(tokenizer.get_vocab_size(), str(tokenizer_folder))
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

    return model, architecture, write


def xlnet_export(checkpoint: Path, tokenizer_folder: Path,
                 config: BertConfig) -> tuple[XLNetLMHeadModel, str, Writer]:
    """The XLNet, the architecture it exports as and its writer: Hugging Face's native
    `XLNetLMHeadModel` folder, and the run's (BERT-layout) tokenizer in XLNet's layout."""
    model = XLNetLMHeadModel.from_pretrained(checkpoint)
    tokenizer = load_tokenizer(tokenizer_folder)
    config.check_vocab_fits(tokenizer.get_vocab_size(), str(tokenizer_folder))
    # config.json names the tokenizer's own special ids (a reused vocabulary keeps its own).
    ids = {field: tokenizer.token_to_id(token) for field, token in
           (("pad_token_id", PAD_TOKEN), ("cls_token_id", CLS_TOKEN), ("sep_token_id", SEP_TOKEN))}
    model.config = replace(model.config, **{field: value for field, value in ids.items() if value is not None})

    def write(staging: Path) -> list[str]:
        model.save_pretrained(staging)
        save_xlnet_tokenizer(tokenizer, staging, model_max_length=config.max_position_embeddings)
        return [TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, SPECIAL_TOKENS_MAP_FILE]

    return model, "XLNetLMHeadModel", write


def export_layout(config: BertConfig) -> tuple[str, Callable[[Path, BertConfig, dict], None]]:
    """The architecture an export names and the function that writes it, for this model."""
    if config.relative_positions:  # ALBERT options or not: transformers' ALBERT has no such positions
        return "BertpreForPreTraining (remote code: trust_remote_code=True)", write_remote_code_folder
    if config.is_albert:
        return "AlbertForPreTraining", write_albert_folder
    return "BertForPreTraining", write_folder


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
