"""Task heads on bertpre's encoder, with Hugging Face's names: a linear layer on the pooled [CLS]
output classifies (or regresses) a sentence or a pair, one on every token's output tags it."""
from __future__ import annotations

import torch
from torch import nn

from bertpre.model import BertConfig, BertModel
from bertpre.model.bert import init_weights


class BertForSequenceClassification(nn.Module):
    """`bert` → pooled [CLS] → dropout → `classifier` (Hugging Face's names and math);
    `num_labels` 1 is regression."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        init_weights(self.classifier, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, num_labels)."""
        pooled = self.bert(input_ids, attention_mask, token_type_ids).pooler_output  # (B, C)
        return self.classifier(self.dropout(pooled))


class BertForTokenClassification(nn.Module):
    """`bert` → every token's output → dropout → `classifier` (Hugging Face's names and math;
    its pooler is not used, and not saved)."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        init_weights(self.classifier, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, num_labels)."""
        hidden = self.bert(input_ids, attention_mask, token_type_ids).last_hidden_state  # (B, T, C)
        return self.classifier(self.dropout(hidden))


def build_task_model(config: BertConfig, encoder_state: dict[str, torch.Tensor], num_labels: int,
                     *, tagging: bool) -> nn.Module:
    """A task model whose encoder holds `encoder_state` (BertModel names, no `bert.` prefix);
    the head is freshly initialized from the current torch seed."""
    model_class = BertForTokenClassification if tagging else BertForSequenceClassification
    model = model_class(config, num_labels)
    model.bert.load_state_dict(encoder_state, strict=True)
    return model
