"""XLNet's fine-tuning task heads, with Hugging Face's names and math: a projection, tanh and a
linear layer on the last token's output (its [CLS]: XLNet pads on the left) classify (or regress)
a sentence or a pair; a linear layer on every token's output tags it, or gives it a start and an
end logit (extractive question answering)."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

import torch
from torch import nn

from bertpre.model.config import BertConfig
from bertpre.model.xlnet import XLNetModel
from bertpre.model.xlnet import init_weights as init_xlnet_weights
from bertpre.model.xlnet_config import xlnet_config


def xlnet_encoder(config: BertConfig) -> XLNetModel:
    """XLNet's content stream for fine-tuning: no memory is kept between batches."""
    return XLNetModel(replace(xlnet_config(config), mem_len=0))


class XLNetSequenceSummary(nn.Module):
    """Hugging Face's sequence summary as XLNet's config.json sets it (summary_type "last",
    summary_use_proj, summary_activation "tanh", summary_last_dropout): the last token's output
    → `summary` (C → C) → tanh → dropout."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.summary = nn.Linear(config.hidden_size, config.hidden_size)
        self.last_dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, C) → (B, C)."""
        return self.last_dropout(torch.tanh(self.summary(hidden[:, -1])))


class XLNetForSequenceClassification(nn.Module):
    """`transformer` → `sequence_summary` of the last token ([CLS], with left padding) →
    `logits_proj` (Hugging Face's names and math); `num_labels` 1 is regression."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.transformer = xlnet_encoder(config)
        self.sequence_summary = XLNetSequenceSummary(config)
        self.logits_proj = nn.Linear(config.hidden_size, num_labels)
        self.initializer_range = config.initializer_range
        self.reset_head()

    def reset_head(self) -> None:
        """Draw the head's initial weights from the current torch seed, as transformers does
        (the summary projection first, then the logits)."""
        for head in (self.sequence_summary, self.logits_proj):
            head.apply(partial(init_xlnet_weights, std=self.initializer_range))

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The content stream's output for every token (B, T, C)."""
        return self.transformer(input_ids, token_type_ids, attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, num_labels)."""
        return self.logits_proj(self.sequence_summary(self.hidden_states(input_ids, attention_mask, token_type_ids)))


class XLNetForTokenClassification(nn.Module):
    """`transformer` → every token's output → `classifier` (Hugging Face's names and math: the
    transformer's own output dropout, no other)."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.transformer = xlnet_encoder(config)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.initializer_range = config.initializer_range
        self.reset_head()

    def reset_head(self) -> None:
        """Draw the head's initial weights from the current torch seed, as transformers does."""
        init_xlnet_weights(self.classifier, self.initializer_range)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The content stream's output for every token (B, T, C)."""
        return self.transformer(input_ids, token_type_ids, attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, num_labels)."""
        return self.classifier(self.hidden_states(input_ids, attention_mask, token_type_ids))



class XLNetForQuestionAnsweringSimple(nn.Module):
    """`transformer` → every token's output → `qa_outputs` (C → 2): a start and an end logit a
    token (Hugging Face's names and math; transformers' XLNetForQuestionAnswering is the other,
    beam-searching head of XLNet's paper, which bertpre does not build)."""

    def __init__(self, config: BertConfig, num_labels: int = 2) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.transformer = xlnet_encoder(config)
        self.qa_outputs = nn.Linear(config.hidden_size, num_labels)
        self.initializer_range = config.initializer_range
        self.reset_head()

    def reset_head(self) -> None:
        """Draw the head's initial weights from the current torch seed, as transformers does."""
        init_xlnet_weights(self.qa_outputs, self.initializer_range)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The content stream's output for every token (B, T, C)."""
        return self.transformer(input_ids, token_type_ids, attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, 2): the start logit of each token at [..., 0], the end logit at [..., 1]."""
        return self.qa_outputs(self.hidden_states(input_ids, attention_mask, token_type_ids))
