"""The micro-batch on the device: what the step compiles, and the counts it takes from the host.

A GPU runs ahead of the Python that feeds it only while nothing asks it for a value. So every
number the step needs to weigh its losses (predictions, pair labels, real tokens) is counted on
the CPU batch before it is copied, and everything the device computes (loss and accuracy sums)
stays there until the logging window reads it once.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bertpre.labels import IGNORE_INDEX
from bertpre.model import BertForPreTraining

# Sums the device keeps per step, and the counts the host knows before the batch is copied.
DEVICE_STATS = ("mlm_loss", "mlm_correct", "pair_loss", "pair_correct")
HOST_STATS = ("predictions", "pairs", "tokens")
# What the model reads of a batch; `labels` and `mask_action` stay on the host.
MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "masked_lm_positions",
                "masked_lm_ids", "next_sentence_label")


def named_stats(device_values: list[float], host_counts: list[int]) -> dict[str, float]:
    """DEVICE_STATS values read from the device and HOST_STATS counts, by name."""
    stats = dict(zip(DEVICE_STATS, device_values, strict=True))
    stats.update(zip(HOST_STATS, map(float, host_counts), strict=True))
    return stats


@dataclass
class HostCounts:
    """A micro-batch's predictions, pair labels and real tokens, counted on the CPU."""

    predictions: int
    pairs: int
    tokens: int

    @classmethod
    def of(cls, batch: dict[str, torch.Tensor]) -> HostCounts:
        pair_labels = batch.get("next_sentence_label")  # absent under pair_task none
        return cls(predictions=int((batch["masked_lm_ids"] != IGNORE_INDEX).sum()),
                   pairs=0 if pair_labels is None else int((pair_labels != IGNORE_INDEX).sum()),
                   tokens=int(batch["attention_mask"].sum()))

    def as_list(self) -> list[int]:
        return [self.predictions, self.pairs, self.tokens]


def device_batch(batch: dict[str, torch.Tensor], device: torch.device, *,
                 keep_attention_mask: bool) -> dict[str, torch.Tensor]:
    """The model's inputs of a host batch, copied without waiting (from pinned memory).

    A batch without padding drops its attention mask, so SDPA may take its fastest kernel;
    that is decided here on the CPU. A compiled step keeps it (`keep_attention_mask`): one
    graph for every batch.
    """
    names = [name for name in MODEL_INPUTS if name in batch]
    if not keep_attention_mask and bool(batch["attention_mask"].all()):
        names.remove("attention_mask")
    return {name: batch[name].to(device, non_blocking=True) for name in names}


class PretrainingObjective(nn.Module):
    """The model, its loss sums and its accuracy counts for one micro-batch, as one module:
    what `train.compile` compiles whole (fixed shapes, no graph break) and DDP wraps."""

    def __init__(self, model: BertForPreTraining, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns the MLM and pair loss sums (in the graph) and the DEVICE_STATS sums (float64)."""
        masked_lm_ids = batch["masked_lm_ids"]  # (B, P)
        pair_labels = batch.get("next_sentence_label")  # (B,)
        out = self.model(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                         token_type_ids=batch["token_type_ids"], next_sentence_label=pair_labels,
                         label_smoothing=self.label_smoothing,
                         masked_lm_positions=batch["masked_lm_positions"], masked_lm_ids=masked_lm_ids)
        mlm_loss_sum = out.mlm_loss_sum
        pair_loss_sum = out.pair_loss_sum if pair_labels is not None else mlm_loss_sum.new_zeros(())
        with torch.no_grad():
            # An unused slot's id is -100, which no argmax equals.
            mlm_correct = (out.prediction_logits.argmax(-1) == masked_lm_ids).sum()
            if pair_labels is None:
                pair_correct = mlm_correct.new_zeros(())
            else:
                pair_correct = (out.seq_relationship_logits.argmax(-1) == pair_labels).sum()
            sums = torch.stack([mlm_loss_sum.detach().double(), mlm_correct.double(),
                                pair_loss_sum.detach().double(), pair_correct.double()])
        return mlm_loss_sum, pair_loss_sum, sums


def freeze_pair_head(model: BertForPreTraining) -> None:
    """Under `pair_task: none` the pooler and the pair head take no part in the loss: freeze
    them, so DDP does not wait for gradients that never come. They are still saved and exported.
    """
    for module in (model.bert.pooler, model.cls.seq_relationship):
        module.requires_grad_(False)
