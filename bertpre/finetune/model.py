"""The task model a fine-tuning trains: its family's head on the encoder's pretrained weights."""
from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from bertpre.config.finetune import Hyperparameters
from bertpre.errors import UserError
from bertpre.finetune.kinds import task_kind
from bertpre.model import BertConfig
from bertpre.model.families import Family, encoder_of, family


def build_task_model(config: BertConfig, encoder_state: dict[str, torch.Tensor], num_labels: int,
                     *, tagging: bool = False, question_answering: bool = False, head: str | None = None,
                     head_state: dict[str, torch.Tensor] | None = None) -> nn.Module:
    """A task model on the CPU whose encoder holds a copy of `encoder_state` (the encoder's own
    names: BertModel's without `bert.`, XLNetModel's without `transformer.`); the head is freshly
    drawn from the current torch seed. The head (a task kind's `head`, or the flags) tags tokens
    ("token", `tagging`), gives each token a start and an end logit ("span", `question_answering`,
    `num_labels` 2), or labels the text ("sequence").

    The encoder is never randomly initialized (its weights would be overwritten): the model is
    laid out without values, filled from the state, and the head drawn first thing after the
    seed, so that a seed gives the same initial head (and dropout stream) as transformers'
    `set_seed(seed)` + `from_pretrained` of the same export. `head_state` (the source's parts the
    head shares by name with the pretraining model: ModernBERT's `head.`) then replaces the drawn
    values of those parts, as transformers' from_pretrained loads them; the rest stays drawn."""
    row = family(config)
    head = head or ("span" if question_answering else "token" if tagging else "sequence")
    with torch.device("meta"):
        model = task_head(row, head)(config, num_labels)
    model.to_empty(device="cpu")
    encoder_of(model, config).load_state_dict(encoder_state, strict=True)
    model.reset_head()
    if head_state:
        with torch.no_grad():
            _, unexpected = model.load_state_dict(head_state, strict=False)
        if unexpected:  # a bug, not a user's mistake: the family's row names parts its heads lack
            raise ValueError(f"the task model has no {', '.join(unexpected)}")
    return model


def task_head(row: Family, head: str) -> type[nn.Module]:
    """The family's class for a task kind's head: "sequence", "token" or "span"."""
    return {"sequence": row.sequence_head, "token": row.token_head, "span": row.question_answering_head}[head]


def task_config(config: BertConfig, hp: Hyperparameters, task: str) -> BertConfig:
    """`config` with the fine-tuning's `classifier_pooling` (where set): what a ModernBERT's sequence
    head reads, the first token's output or the mean of the real tokens', recorded in a saved
    model's config.json. Refused where nothing would read it: another family's sequence head (its
    pooling is its own), a probe (its features pool as `pooling` says) and a task that reads every
    token (tagging, qa).

    Raises:
        UserError: naming why the setting would be ignored, and what to do instead.
    """
    if hp.classifier_pooling is None:
        return config
    row = family(config)
    if "classifier_pooling" not in row.config.own_keys:  # a family whose sequence head pools as it says
        raise UserError(f"classifier_pooling is ModernBERT's (transformers' ModernBertForSequenceClassification "
                        f"reads it); a {row.display_name}'s sequence head reads its own classification token, "
                        "so the setting would be ignored: leave it out")
    if hp.mode == "probe":
        raise UserError("classifier_pooling chooses a fully fine-tuned ModernBERT's pooling; a probe's frozen "
                        "features pool as `pooling` says (--set pooling=mean): set that instead")
    if task_kind(task).head != "sequence":
        raise UserError(f"classifier_pooling is the sequence head's; --task {task} reads every token's output, "
                        "so the setting would be ignored: leave it out")
    return replace(config, classifier_pooling=hp.classifier_pooling)
