"""The fine-tuned model as a Hugging Face folder: `AutoModelForSequenceClassification`,
`AutoModelForTokenClassification` or `AutoModelForQuestionAnswering` loads it with its `id2label`,
no missing or unexpected keys, and `AutoTokenizer` the tokenizer it was fine-tuned with. The class
is the family's, in its export's layout: `BertFor*`, `AlbertFor*` (ALBERT options), `BertpreFor*`
(relative positions: remote code, `trust_remote_code=True`) or `XLNetFor*`."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from torch import nn

from bertpre.errors import UserError, signals_held
from bertpre.finetune.kinds import task_kind
from bertpre.finetune.model import task_head
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
from bertpre.links import link_on_the_way, link_target
from bertpre.model import BertConfig
from bertpre.model.families import family
from bertpre.model.hf_format import write_json

MODEL_FOLDER = "model"


def check_can_save(config: BertConfig, mode: str) -> None:
    """Refuse `--save-model` up front where no transformers class holds the model."""
    if mode != "full":
        raise UserError("--save-model keeps a fully fine-tuned model; a probe's head reads frozen "
                        "features that no transformers class computes (use --mode full)")
    row = family(config)
    if not row.native_task_models(config):
        raise UserError(f"--save-model: no transformers class holds a fine-tuned {row.display_name} of this "
                        f"shape ({row.shape_words(config)}), so none would load it; fine-tune without "
                        "--save-model (the scores are reported all the same)")


def task_class_name(config: BertConfig, task: str) -> str:
    """The transformers class a saved model of `task` is: the family's prefix for this config and
    its head's name from "For" on ("Albert" + "ForQuestionAnswering")."""
    row = family(config)
    head = task_head(row, task_kind(task).head)
    return row.hf_task_prefix(config) + "For" + head.__name__.split("For", 1)[1]


def keep_beside(out: Path, staging: Path, target: Path, problem: str) -> None:
    """Keep the new model beside `target`, which is not replaced, and say why and where."""
    beside = out / f"{MODEL_FOLDER}.new-{time.strftime('%Y%m%d-%H%M%S')}"
    staging.rename(beside)
    raise UserError(f"{target} was not replaced ({problem}); the new model is at {beside}")


def save_task_model(out: Path, model: nn.Module, config: BertConfig, *, task: str, label_names: list[str],
                    tokenizer_folder: Path) -> Path:
    """Write OUT/model (built aside, then renamed over an older one) and return it."""
    target = out / MODEL_FOLDER
    staging = out / f".{MODEL_FOLDER}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        row, kind = family(config), task_kind(task)
        hf = row.write_task_folder(staging, model.state_dict(), config, tokenizer_folder, pooler=kind.pooler)
        hf["architectures"] = [task_class_name(config, task)]
        hf.update(kind.saved_labels(label_names))  # question answering: transformers' default, start and end
        write_json(staging / "config.json", hf)
        kind.saved_tokenizer(staging)
        make_files_readable(staging)
        kept: list[str] = []
        if (link := link_on_the_way(out, MODEL_FOLDER)) is not None:  # made while it trained
            keep_beside(out, staging, target, f"it is a symbolic link to {link_target(link)}, which bertpre "
                                              "does not write through")
        if target.exists():  # an earlier --save-model's: only what it wrote is replaced
            old = read_inventory(target, "finetune", {path.name for path in staging.iterdir()})
            kept = foreign_paths(target, old)
            problem = ""
            if changed := changed_paths(target, old):
                problem = f"{shown(changed)} changed since bertpre wrote it"
            elif clashing := collisions(staging, kept):
                problem = f"{shown(clashing)}, which bertpre did not write, stands where the new model writes"
            if problem:
                keep_beside(out, staging, target, problem)
        take_inventory(staging, "finetune")
    except BaseException:  # a stop signal or a full disk: no half-written folder stays
        shutil.rmtree(staging, ignore_errors=True)
        raise
    with signals_held():
        swap_in(target, staging, out / f".{MODEL_FOLDER}.old", kept)
    return target
