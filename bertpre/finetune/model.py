"""The task model a fine-tuning trains: its family's head on the encoder's pretrained weights."""
from __future__ import annotations

import torch
from torch import nn

from bertpre.model import BertConfig
from bertpre.model.families import encoder_of, family


def build_task_model(config: BertConfig, encoder_state: dict[str, torch.Tensor], num_labels: int,
                     *, tagging: bool, question_answering: bool = False) -> nn.Module:
    """A task model on the CPU whose encoder holds a copy of `encoder_state` (the encoder's own
    names: BertModel's without `bert.`, XLNetModel's without `transformer.`); the head is freshly
    drawn from the current torch seed. The head tags tokens (`tagging`), gives each token a start
    and an end logit (`question_answering`, `num_labels` 2), or labels the text.

    The encoder is never randomly initialized (its weights would be overwritten): the model is
    laid out without values, filled from the state, and the head drawn first thing after the
    seed, so that a seed gives the same initial head (and dropout stream) as transformers'
    `set_seed(seed)` + `from_pretrained` of the same export."""
    row = family(config)
    with torch.device("meta"):
        head = row.question_answering_head if question_answering else row.token_head if tagging else row.sequence_head
        model = head(config, num_labels)
    model.to_empty(device="cpu")
    encoder_of(model, config).load_state_dict(encoder_state, strict=True)
    model.reset_head()
    return model
