"""The fine-tuned model as a Hugging Face folder: `AutoModelForSequenceClassification` or
`AutoModelForTokenClassification` loads it (a BERT or an XLNet) with its `id2label`, no missing or
unexpected keys, and `AutoTokenizer` the tokenizer it was fine-tuned with."""
from __future__ import annotations

import shutil
from pathlib import Path

from safetensors.torch import save_file
from torch import nn

import bertpre
from bertpre.errors import UserError
from bertpre.folders import make_files_readable
from bertpre.model import BertConfig
from bertpre.model.hf_format import SAFETENSORS_NAME, write_folder, write_json
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.wordpiece import CLS_TOKEN, PAD_TOKEN, SEP_TOKEN, TOKENIZER_FILES
from bertpre.tokenizer.xlnet_layout import save_xlnet_tokenizer

MODEL_FOLDER = "model"


def check_can_save(config: BertConfig, mode: str) -> None:
    """Refuse `--save-model` up front where no transformers class holds the model."""
    if mode != "full":
        raise UserError("--save-model keeps a fully fine-tuned model; a probe's head reads frozen "
                        "features that no transformers class computes (use --mode full)")
    if not config.is_xlnet and (config.relative_positions or config.is_albert):
        raise UserError("--save-model writes transformers' BertFor*Classification, which has no "
                        "relative positions or ALBERT sharing; this model has them")


def save_task_model(out: Path, model: nn.Module, config: BertConfig, *, task: str, label_names: list[str],
                    tokenizer_folder: Path) -> Path:
    """Write OUT/model (built aside, then renamed over an older one) and return it."""
    target = out / MODEL_FOLDER
    staging = out / f".{MODEL_FOLDER}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    family = "XLNet" if config.is_xlnet else "Bert"
    hf = {**config.to_hf_dict(), "bertpre_version": bertpre.__version__}
    if config.is_xlnet:
        staging.mkdir(parents=True)
        save_file({name: tensor.detach().contiguous().cpu() for name, tensor in model.state_dict().items()},
                  staging / SAFETENSORS_NAME, metadata={"format": "pt"})
        # The tokenizer the model was fine-tuned with: XLNet's layout, whatever layout the source kept.
        tokenizer = load_tokenizer(tokenizer_folder)
        save_xlnet_tokenizer(tokenizer, staging, model_max_length=config.max_position_embeddings)
        hf.update({field: tokenizer.token_to_id(token) for field, token in
                   (("pad_token_id", PAD_TOKEN), ("cls_token_id", CLS_TOKEN), ("sep_token_id", SEP_TOKEN))
                   if tokenizer.token_to_id(token) is not None})
    else:
        state = {name: tensor for name, tensor in model.state_dict().items()
                 if not (task == "tagging" and name.startswith("bert.pooler."))}
        write_folder(staging, config, state)
        for name in TOKENIZER_FILES:
            if (tokenizer_folder / name).is_file():
                shutil.copyfile(tokenizer_folder / name, staging / name)
    if task == "regression":
        hf.update(architectures=[f"{family}ForSequenceClassification"], num_labels=1, problem_type="regression",
                  id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    else:
        hf.update(architectures=[f"{family}ForTokenClassification" if task == "tagging"
                                 else f"{family}ForSequenceClassification"],
                  id2label={str(number): name for number, name in enumerate(label_names)},
                  label2id={name: number for number, name in enumerate(label_names)})
        if task == "classification":
            hf["problem_type"] = "single_label_classification"
    write_json(staging / "config.json", hf)
    make_files_readable(staging)
    if target.exists():
        aside = out / f".{MODEL_FOLDER}.old"
        shutil.rmtree(aside, ignore_errors=True)
        target.rename(aside)
        staging.rename(target)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        staging.rename(target)
    return target
