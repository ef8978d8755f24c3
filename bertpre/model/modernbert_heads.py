"""Fine-tuning heads on ModernBERT, with transformers' `ModernBertFor*` names and math: the encoder
under `model`, then `head` (dense → classifier_activation → LayerNorm, the MLM head's layout),
`drop` (classifier_dropout) and a linear `classifier`. Sharing the MLM head's names, `head` starts
from a source's MLM head where it has one, as transformers' from_pretrained loads it
(`Family.task_head_parts`); `classifier` is drawn. A sequence is read at its first token
(`classifier_pooling` "cls") or as the mean of its real tokens' outputs ("mean", padding left out);
a tagger and a question-answering model read every token (the latter's `classifier` gives a start
and an end logit, transformers' name, where BERT's head is `qa_outputs`).

A fine-tuned model's folder is a `ModernBertFor*` folder (`write_modernbert_task_folder`) whose
config.json records the pooling it was trained with."""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import bertpre
from bertpre.model import hf_format
from bertpre.model.common import copy_tokenizer_files
from bertpre.model.config import BertConfig
from bertpre.model.modernbert import (
    ModernBertModel,
    ModernBertPredictionHead,
    init_std,
    special_token_ids,
    trunc_normal,
    write_modernbert_folder,
)


class ModernBertTaskModel(nn.Module):
    """`model`, `head`, `drop` and `classifier` (C → num_labels): what ModernBERT's task models share."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.config = config
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.reset_head()

    def reset_head(self) -> None:
        """Draw the head's weights from the current torch seed as transformers initializes them:
        the dense layer truncated-normal at the depth-scaled std, the LayerNorm ones and zeros, the
        classifier truncated-normal at hidden_size ** -0.5; biases zero."""
        std, cutoff = init_std(self.config), self.config.initializer_cutoff_factor
        trunc_normal(self.head.dense, std["out"], cutoff)
        self.head.norm.reset_parameters()
        trunc_normal(self.classifier, std["final_out"], cutoff)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The encoder's output for every token (B, T, C), before the head (a probe's features);
        `token_type_ids` is taken for BERT's call and not read."""
        return self.model(input_ids, attention_mask)

    def token_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """head → drop → classifier on every token: (B, T, num_labels)."""
        return self.classifier(self.drop(self.head(self.model(input_ids, attention_mask))))


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """The mean of each row's real tokens (B, T, C) → (B, C), as transformers computes it: the
    outputs times the mask, summed, over the mask's sum (every token where there is no mask)."""
    if attention_mask is None:
        return hidden.mean(dim=1)
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1)


class ModernBertForSequenceClassification(ModernBertTaskModel):
    """`model` → the first token's output, or the mean of the real tokens' (`classifier_pooling`)
    → `head` → `drop` → `classifier`; `num_labels` 1 is regression."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, num_labels)."""
        hidden = self.model(input_ids, attention_mask)  # (B, T, C)
        pooled = mean_pool(hidden, attention_mask) if self.config.family_fields.classifier_pooling == "mean" \
            else hidden[:, 0]
        return self.classifier(self.drop(self.head(pooled)))


class ModernBertForTokenClassification(ModernBertTaskModel):
    """`model` → every token's output → `head` → `drop` → `classifier`."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, num_labels)."""
        return self.token_logits(input_ids, attention_mask)


class ModernBertForQuestionAnswering(ModernBertTaskModel):
    """`model` → every token's output → `head` → `drop` → `classifier` (C → 2)."""

    def __init__(self, config: BertConfig, num_labels: int = 2) -> None:
        super().__init__(config, num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, 2): the start logit of each token at [..., 0], the end logit at [..., 1]."""
        return self.token_logits(input_ids, attention_mask)


def write_modernbert_task_folder(folder: Path, state: dict[str, torch.Tensor], config: BertConfig,
                                 tokenizer_folder: Path, *, pooler: bool) -> dict:
    """A fine-tuned ModernBERT's weights (its names are transformers' already) and its tokenizer
    files as they are: ModernBERT reads the tokenizer's own layout (`same_layout`), so a pair is
    what the tokenizer's template makes of it in transformers as it was in fine-tuning (token
    types, where a WordPiece tokenizer gives them, are taken and not read). Returns config.json's
    content, with the tokenizer's special ids and the `classifier_pooling` it was trained with
    (`pooler` is BERT's: ModernBERT has none)."""
    ids = special_token_ids(tokenizer_folder)
    write_modernbert_folder(folder, config, state, **ids)
    copy_tokenizer_files(tokenizer_folder, folder)
    hf_format.limit_model_max_length(folder, config.max_position_embeddings)
    return {**config.to_hf_dict(), "bertpre_version": bertpre.__version__, **ids}
