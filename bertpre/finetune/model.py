"""The task model a fine-tuning trains: a family's head on the encoder's pretrained weights."""
from __future__ import annotations

import torch
from torch import nn

from bertpre.model import BertConfig
from bertpre.model.heads import (
    BertForSequenceClassification,
    BertForTokenClassification,
    XLNetForSequenceClassification,
    XLNetForTokenClassification,
)


def build_task_model(config: BertConfig, encoder_state: dict[str, torch.Tensor], num_labels: int,
                     *, tagging: bool) -> nn.Module:
    """A task model on the CPU whose encoder holds a copy of `encoder_state` (BertModel's names,
    no `bert.` prefix; for XLNet XLNetModel's, no `transformer.` prefix); the head is freshly
    drawn from the current torch seed.

    The encoder is never randomly initialized (its weights would be overwritten): the model is
    laid out without values, filled from the state, and the head drawn first thing after the
    seed, so that a seed gives the same initial head (and dropout stream) as transformers'
    `set_seed(seed)` + `from_pretrained` of the same export."""
    if config.is_xlnet:
        model_class = XLNetForTokenClassification if tagging else XLNetForSequenceClassification
    else:
        model_class = BertForTokenClassification if tagging else BertForSequenceClassification
    with torch.device("meta"):
        model = model_class(config, num_labels)
    model.to_empty(device="cpu")
    encoder = model.transformer if config.is_xlnet else model.bert
    encoder.load_state_dict(encoder_state, strict=True)
    model.reset_head()
    return model
