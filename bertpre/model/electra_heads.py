"""ELECTRA's fine-tuning task heads, with Hugging Face's names and math: `electra` (no pooler) and,
to classify (or regress), ELECTRA's own head on [CLS] (dense, gelu, out_proj); a linear layer on
every token's output tags it, or gives it a start and an end logit (extractive question answering)."""
from __future__ import annotations

from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertpre.model.bert import init_weights
from bertpre.model.config import BertConfig
from bertpre.model.electra import copy_tokenizer, electra_encoder, write_electra_folder
from bertpre.model.unpad import Unpadded


class ElectraTaskModel(nn.Module):
    """`electra` (no pooler) and a head drawn from the seed: what ELECTRA's task models share."""

    takes_unpadded = True  # forward's `unpadded`: the layers compute nothing for padding

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.num_labels = num_labels
        self.electra = electra_encoder(config)

    def reset_head(self) -> None:
        """Draw the head's initial weights from the current torch seed, as transformers does."""
        for name, module in self.named_children():
            if name != "electra":
                module.apply(partial(init_weights, std=self.electra.config.initializer_range))

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """The encoder's output for every token (B, T, C)."""
        return self.electra(input_ids, attention_mask, token_type_ids, unpadded=unpadded).last_hidden_state


class ElectraClassificationHead(nn.Module):
    """[CLS]'s output → dropout → dense → gelu → dropout → out_proj (ELECTRA's, where BERT reads
    its pooler: transformers' ELECTRA uses gelu whatever `hidden_act` says)."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.out_proj = nn.Linear(config.hidden_size, num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """(B, T, C) → (B, num_labels)."""
        first = self.dropout(hidden_states[:, 0])
        return self.out_proj(self.dropout(F.gelu(self.dense(first))))


class ElectraForSequenceClassification(ElectraTaskModel):
    """`electra` → `classifier` on [CLS] (Hugging Face's names and math); `num_labels` 1 is regression."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__(config, num_labels)
        self.classifier = ElectraClassificationHead(config, num_labels)
        self.reset_head()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, num_labels)."""
        # The head reads [CLS] alone: the last layer computes that position only (exact).
        hidden = self.electra(input_ids, attention_mask, token_type_ids, last_rows=1,
                              unpadded=unpadded).last_hidden_state  # (B, 1, C)
        return self.classifier(hidden)


class ElectraForTokenClassification(ElectraTaskModel):
    """`electra` → every token's output → dropout → `classifier` (Hugging Face's names and math)."""

    def __init__(self, config: BertConfig, num_labels: int) -> None:
        super().__init__(config, num_labels)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.reset_head()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, T, num_labels)."""
        return self.classifier(self.dropout(self.hidden_states(input_ids, attention_mask, token_type_ids, unpadded)))


class ElectraForQuestionAnswering(ElectraTaskModel):
    """`electra` → every token's output → `qa_outputs` (C → 2), no dropout (Hugging Face's names and math)."""

    def __init__(self, config: BertConfig, num_labels: int = 2) -> None:
        super().__init__(config, num_labels)
        self.qa_outputs = nn.Linear(config.hidden_size, num_labels)
        self.reset_head()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, unpadded: Unpadded | None = None) -> torch.Tensor:
        """Logits (B, T, 2): the start logit of each token at [..., 0], the end logit at [..., 1]."""
        return self.qa_outputs(self.hidden_states(input_ids, attention_mask, token_type_ids, unpadded))


def write_electra_task_folder(folder: Path, state: dict[str, torch.Tensor], config: BertConfig,
                              tokenizer_folder: Path, *, pooler: bool) -> dict:
    """A fine-tuned ELECTRA's weights (transformers' names) and its tokenizer files; returns
    config.json's content (`pooler` is BERT's: ELECTRA's task models have none)."""
    hf = write_electra_folder(folder, config, state, "ElectraForPreTraining")
    copy_tokenizer(tokenizer_folder, folder, config.max_position_embeddings)
    return hf
