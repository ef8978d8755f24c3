"""The fine-tuned model as a Hugging Face folder: `AutoModelForSequenceClassification`,
`AutoModelForTokenClassification` or `AutoModelForQuestionAnswering` loads it (a BERT or an XLNet)
with its `id2label`, no missing or unexpected keys, and `AutoTokenizer` the tokenizer it was
fine-tuned with."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from torch import nn

from bertpre.errors import UserError, signals_held
from bertpre.folders import make_files_readable
from bertpre.inventory import (
    changed_paths,
    collisions,
    foreign_paths,
    read_inventory,
    shown,
    swap_in,
    take_inventory,
)
from bertpre.model import BertConfig
from bertpre.model.families import family
from bertpre.model.hf_format import write_json

MODEL_FOLDER = "model"


def check_can_save(config: BertConfig, mode: str) -> None:
    """Refuse `--save-model` up front where no transformers class holds the model."""
    if mode != "full":
        raise UserError("--save-model keeps a fully fine-tuned model; a probe's head reads frozen "
                        "features that no transformers class computes (use --mode full)")
    if not family(config).native_task_models(config):
        raise UserError("--save-model writes transformers' BertFor*Classification, which has no "
                        "relative positions or ALBERT sharing; this model has them")


def save_task_model(out: Path, model: nn.Module, config: BertConfig, *, task: str, label_names: list[str],
                    tokenizer_folder: Path) -> Path:
    """Write OUT/model (built aside, then renamed over an older one) and return it."""
    target = out / MODEL_FOLDER
    staging = out / f".{MODEL_FOLDER}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        row = family(config)
        hf = row.write_task_folder(staging, model.state_dict(), config, tokenizer_folder,
                                   pooler=task not in ("tagging", "qa"))
        prefix = row.hf_task_prefix
        if task == "qa":  # transformers' default labels: start and end
            hf.update(architectures=[row.question_answering_head.__name__], num_labels=2)
        elif task == "regression":
            hf.update(architectures=[f"{prefix}ForSequenceClassification"], num_labels=1, problem_type="regression",
                      id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
        else:
            hf.update(architectures=[f"{prefix}ForTokenClassification" if task == "tagging"
                                     else f"{prefix}ForSequenceClassification"],
                      id2label={str(number): name for number, name in enumerate(label_names)},
                      label2id={name: number for number, name in enumerate(label_names)})
            if task == "classification":
                hf["problem_type"] = "single_label_classification"
        write_json(staging / "config.json", hf)
        make_files_readable(staging)
        kept: list[str] = []
        if target.exists():  # an earlier --save-model's: only what it wrote is replaced
            old = read_inventory(target, "finetune", {path.name for path in staging.iterdir()})
            kept = foreign_paths(target, old)
            problem = ""
            if changed := changed_paths(target, old):
                problem = f"{shown(changed)} changed since bertpre wrote it"
            elif clashing := collisions(staging, kept):
                problem = f"{shown(clashing)}, which bertpre did not write, stands where the new model writes"
            if problem:
                beside = out / f"{MODEL_FOLDER}.new-{time.strftime('%Y%m%d-%H%M%S')}"
                staging.rename(beside)
                raise UserError(f"{target} was not replaced ({problem}); the new model is at {beside}")
        take_inventory(staging, "finetune")
    except BaseException:  # a stop signal or a full disk: no half-written folder stays
        shutil.rmtree(staging, ignore_errors=True)
        raise
    with signals_held():
        swap_in(target, staging, out / f".{MODEL_FOLDER}.old", kept)
    return target
