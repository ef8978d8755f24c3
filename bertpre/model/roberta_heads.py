"""RoBERTa's (and XLM-R's) fine-tuning task heads, with Hugging Face's names and math: `roberta`
(no pooler) and, to classify (or regress), RoBERTa's own head on <s>; a linear layer on every
token's output tags it, or gives it a start and an end logit (extractive question answering)."""
from __future__ import annotations

from functools import partial

import torch
from torch import nn

from bertpre.model.bert import init_weights
from bertpre.model.config import BertConfig
from bertpre.model.roberta import RobertaModel
from bertpre.model.unpad import Unpadded


class RobertaTaskModel(nn.Module):
    """`roberta` (no pooler) and a head drawn from the seed: what RoBERTa's task models share. A
    family whose task models are RoBERTa's but for their encoder (ELECTRA's) names it in
    `encoder_name` and builds it in `build_encoder`."""

    takes_unpadded = True  # forward's `unpadded`: the layers compute nothing for padding
    encoder_name = "roberta"  # the encoder's attribute: transformers' name of its weights

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        setattr(self, self.encoder_name, self.build_encoder(config))

    @staticmethod
    def build_encoder(config: BertConfig) -> nn.Module:
        return RobertaModel(config)

    @property
    def encoder(self) -> nn.Module:
        return getattr(self, self.encoder_name)

    def reset_head(self) -> None:
        """Draw the head's initial weights from the current torch seed, as transformers does."""
        for name, module in self.named_children():
            if name != self.encoder_name:
                module.apply(partial(init_weights, std=self.encoder.config.initializer_range))

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """The encoder's output for every token (B, T, C)."""
        return self.encoder(input_ids, attention_mask, token_type_ids, unpadded=unpadded).last_hidden_state


class RobertaClassificationHead(nn.Module):
    """<s>'s output → dropout → dense → tanh → dropout → out_proj (RoBERTa's own, where BERT
    reads its pooler)."""

    activation = staticmethod(torch.tanh)

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.out_proj = nn.Linear(config.hidden_size, num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(B, T, C) → (B, num_labels)."""
        first = self.dropout(hidden_states[:, 0])
        return self.out_proj(self.dropout(self.activation(self.dense(first))))


class RobertaForSequenceClassification(RobertaTaskModel):
    """`roberta` → `classifier` on <s> (Hugging Face's names and math); `num_labels` 1 is regression."""

    head_class: type[nn.Module] = RobertaClassificationHead

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__(config, num_labels)
        self.classifier = self.head_class(config, num_labels)
        self.reset_head()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, num_labels)."""
        # The head reads <s> alone: the last layer computes that position only (exact).
        hidden = self.encoder(input_ids, attention_mask, token_type_ids, last_rows=1,
                              unpadded=unpadded).last_hidden_state  # (B, 1, C)
        return self.classifier(hidden)


class RobertaForTokenClassification(RobertaTaskModel):
    """`roberta` → every token's output → dropout → `classifier` (Hugging Face's names and math)."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__(config, num_labels)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.reset_head()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, T, num_labels)."""
        return self.classifier(self.dropout(self.hidden_states(input_ids, attention_mask, token_type_ids, unpadded)))


class RobertaForQuestionAnswering(RobertaTaskModel):
    """`roberta` → every token's output → `qa_outputs` (C → 2), no dropout (Hugging Face's names and math)."""

    def __init__(self, config: BertConfig, num_labels: int = 2) -> None:
        super().__init__(config, num_labels)
        self.qa_outputs = nn.Linear(config.hidden_size, num_labels)
        self.reset_head()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, T, 2): the start logit of each token at [..., 0], the end logit at [..., 1]."""
        return self.qa_outputs(self.hidden_states(input_ids, attention_mask, token_type_ids, unpadded))
