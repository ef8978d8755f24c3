"""A toy objective defined only here, to prove the objective seam: the masked LM's batches and
model with loss terms of its own, weighed its own way.

- `masked`: the masked tokens' cross-entropy, averaged over the predictions;
- `copy`: at every real token, the LM head's cross-entropy against the token the input holds
  there (a loss over every position, as ELECTRA's discriminator's), averaged over the real tokens
  and weighed by COPY_WEIGHT;
- a device stat of its own, the [MASK] tokens in the input, logged as `train/mask_share`.

Registered by `tests/train/test_objectives.py`'s fixture as the row `toy` of OBJECTIVES.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from bertpre.labels import IGNORE_INDEX
from bertpre.train.objectives import LossTerm
from bertpre.train.objectives.mlm import MaskedLanguageModel

COPY_WEIGHT = 0.5


class ToyStep(nn.Module):
    """The toy's step: the masked LM's forward, and the LM head on every token's state."""

    def __init__(self, model: nn.Module, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, batch: dict[str, torch.Tensor], carry: None = None):
        masked_lm_ids = batch["masked_lm_ids"]  # (B, P)
        out = self.model(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                         token_type_ids=batch["token_type_ids"], label_smoothing=self.label_smoothing,
                         masked_lm_positions=batch["masked_lm_positions"], masked_lm_ids=masked_lm_ids)
        encoded = self.model.bert(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                                  token_type_ids=batch["token_type_ids"])
        states = getattr(encoded, "last_hidden_state", encoded)  # (B, T, C)
        logits = self.model.cls.predictions(states)  # (B, T, V)
        mask = batch.get("attention_mask", torch.ones_like(batch["input_ids"])).bool()
        targets = batch["input_ids"].masked_fill(~mask, IGNORE_INDEX)
        copy_loss_sum = nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(),
                                                    ignore_index=IGNORE_INDEX, reduction="sum")
        with torch.no_grad():
            masked_correct = (out.prediction_logits.argmax(-1) == masked_lm_ids).sum()
            copy_correct = (logits.argmax(-1) == targets).sum()
            mask_tokens = (batch["input_ids"] == batch["mask_token_id"]).sum()
            sums = torch.stack([out.mlm_loss_sum.detach().double(), masked_correct.double(),
                                copy_loss_sum.detach().double(), copy_correct.double(), mask_tokens.double()])
        return (out.mlm_loss_sum, copy_loss_sum), sums, None


class ToyObjective(MaskedLanguageModel):
    """The masked LM's batches, evaluator and texts; its own terms, stats, weights and scalars."""

    host_stats = ("predictions", "tokens")
    terms = (LossTerm("masked", "predictions"), LossTerm("copy", "tokens", weight=COPY_WEIGHT))

    @property
    def device_stats(self) -> tuple[str, ...]:
        return (*super().device_stats, "mask_tokens")

    def host_counts(self, batch: dict[str, torch.Tensor]) -> list[int]:
        return [int((batch["masked_lm_ids"] != IGNORE_INDEX).sum()), int(batch["attention_mask"].sum())]

    def to_device(self, batch: dict[str, torch.Tensor], device: torch.device, *,
                  keep_attention_mask: bool) -> dict[str, torch.Tensor]:
        inputs = super().to_device(batch, device, keep_attention_mask=True)
        inputs["mask_token_id"] = torch.tensor(4, device=device)  # the tiny vocabulary's [MASK]
        return inputs

    def step_module(self, model: nn.Module, label_smoothing: float = 0.0) -> nn.Module:
        return ToyStep(model, label_smoothing)

    def train_scalars(self, sums: dict[str, float]) -> dict[str, float]:
        return {**super().train_scalars(sums), "train/mask_share": sums["mask_tokens"] / max(sums["tokens"], 1)}

    def eval_loss(self, results: dict[str, float]) -> float:
        return results.get("mlm_loss", math.nan)  # the masked LM's evaluator scores it
