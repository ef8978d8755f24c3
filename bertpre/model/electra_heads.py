"""ELECTRA's fine-tuning task heads, with Hugging Face's names and math: `electra` (no pooler) and,
to classify (or regress), ELECTRA's own head on [CLS] (dense, gelu, out_proj); a linear layer on
every token's output tags it, or gives it a start and an end logit (extractive question answering)."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from bertpre.model.config import BertConfig
from bertpre.model.electra import copy_tokenizer, electra_encoder, write_electra_folder
from bertpre.model.roberta_heads import (
    RobertaClassificationHead,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaTaskModel,
)


class ElectraTaskModel(RobertaTaskModel):
    """`electra` (no pooler) and a head drawn from the seed: RoBERTa's task models on ELECTRA's encoder."""

    encoder_name = "electra"
    build_encoder = staticmethod(electra_encoder)


class ElectraClassificationHead(RobertaClassificationHead):
    """[CLS]'s output → dropout → dense → gelu → dropout → out_proj (ELECTRA's, where BERT reads
    its pooler: transformers' ELECTRA uses gelu whatever `hidden_act` says)."""

    activation = staticmethod(F.gelu)


class ElectraForSequenceClassification(ElectraTaskModel, RobertaForSequenceClassification):
    """`electra` → `classifier` on [CLS] (Hugging Face's names and math); `num_labels` 1 is regression."""

    head_class = ElectraClassificationHead


class ElectraForTokenClassification(ElectraTaskModel, RobertaForTokenClassification):
    """`electra` → every token's output → dropout → `classifier` (Hugging Face's names and math)."""


class ElectraForQuestionAnswering(ElectraTaskModel, RobertaForQuestionAnswering):
    """`electra` → every token's output → `qa_outputs` (C → 2), no dropout (Hugging Face's names and math)."""


def write_electra_task_folder(folder: Path, state: dict[str, torch.Tensor], config: BertConfig,
                              tokenizer_folder: Path, *, pooler: bool) -> dict:
    """A fine-tuned ELECTRA's weights (transformers' names) and its tokenizer files; returns
    config.json's content (`pooler` is BERT's: ELECTRA's task models have none)."""
    hf = write_electra_folder(folder, config, state, "ElectraForPreTraining")
    copy_tokenizer(tokenizer_folder, folder, config.max_position_embeddings)
    return hf
