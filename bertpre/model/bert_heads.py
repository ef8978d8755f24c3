"""BERT's fine-tuning task heads, with Hugging Face's names and math: a linear layer on the pooled
[CLS] output classifies (or regresses) a sentence or a pair; a linear layer on every token's
output tags it, or gives it a start and an end logit (extractive question answering)."""
from __future__ import annotations

import torch
from torch import nn

from bertpre.model import BertConfig, BertModel
from bertpre.model.bert import init_weights
from bertpre.model.unpad import Unpadded


class BertTaskModel(nn.Module):
    """`bert`, `dropout` and a linear `classifier` (Hugging Face's names): what BERT's task
    models share."""

    takes_unpadded = True  # forward's `unpadded`: the layers compute nothing for padding

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.bert = BertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.reset_head()

    def reset_head(self) -> None:
        """Draw the head's initial weights from the current torch seed, as transformers does."""
        init_weights(self.classifier, self.bert.config.initializer_range)


class BertForSequenceClassification(BertTaskModel):
    """`bert` → pooled [CLS] → dropout → `classifier` (Hugging Face's names and math);
    `num_labels` 1 is regression."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, num_labels)."""
        # The pooler reads [CLS] alone: the last layer computes that position only (exact).
        pooled = self.bert(input_ids, attention_mask, token_type_ids, last_rows=1,
                           unpadded=unpadded).pooler_output  # (B, C)
        return self.classifier(self.dropout(pooled))


class BertForTokenClassification(BertTaskModel):
    """`bert` → every token's output → dropout → `classifier` (Hugging Face's names and math;
    its pooler is not used, and not saved)."""

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """The encoder's output for every token (B, T, C)."""
        return self.bert(input_ids, attention_mask, token_type_ids, unpadded=unpadded).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, T, num_labels)."""
        hidden = self.hidden_states(input_ids, attention_mask, token_type_ids, unpadded)  # (B, T, C)
        return self.classifier(self.dropout(hidden))


class BertForQuestionAnswering(nn.Module):
    """`bert` → every token's output → `qa_outputs` (C → 2): a start and an end logit a token
    (Hugging Face's names and math: no dropout; its pooler is not used, and not saved)."""

    takes_unpadded = True  # forward's `unpadded`: the layers compute nothing for padding

    def __init__(self, config: BertConfig, num_labels: int = 2) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.bert = BertModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, num_labels)
        self.reset_head()

    def reset_head(self) -> None:
        """Draw the head's initial weights from the current torch seed, as transformers does."""
        init_weights(self.qa_outputs, self.bert.config.initializer_range)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """The encoder's output for every token (B, T, C)."""
        return self.bert(input_ids, attention_mask, token_type_ids, unpadded=unpadded).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, T, 2): the start logit of each token at [..., 0], the end logit at [..., 1]."""
        return self.qa_outputs(self.hidden_states(input_ids, attention_mask, token_type_ids, unpadded))
