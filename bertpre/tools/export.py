"""`bertpre export`: a run's checkpoint and tokenizer as a Hugging Face folder (BERT, ALBERT, remote
code or XLNet)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from safetensors import SafetensorError

from bertpre.errors import UserError
from bertpre.folders import MARKERS, check_out, claimed_out, make_files_readable
from bertpre.model.families import family, load_pretraining_model
from bertpre.model.hf_format import read_config
from bertpre.model.replaced_token_export import export_note
from bertpre.tokenizer import load_tokenizer
from bertpre.train.model_folders import find_checkpoint


@dataclass
class ExportSummary:
    """What `export` wrote."""

    checkpoint: Path
    out: Path
    architecture: str
    parameters: int
    tokenizer_files: list[str]
    note: str | None = None  # one line beside the classes (an rtd run's: where the discriminator's head is)


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
    # A run's checkpoint lacking its heads is damaged, so nothing may be filled in.
    model = load_pretraining_model(checkpoint, strict=True)
    model_config = read_config(checkpoint)
    model_config.check_vocab_fits(load_tokenizer(tokenizer_folder).get_vocab_size(), str(tokenizer_folder))
    architecture, write = family(model_config).export_writer(model, tokenizer_folder)
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
        note=export_note(model),
    )
