"""Evaluate a pretraining model on a DATA folder's validation split with fixed instances."""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from bertpre.batches import MaskingCollator, PretrainingInstances
from bertpre.config import DataConfig
from bertpre.data import DataFolder
from bertpre.labels import IGNORE_INDEX, MASK_ACTION_NAMES


class Evaluator:
    """Validation metrics on fixed batches: epoch 0's pairs and masks for `seed`, planned once.

    Every call sees the same validation batches, so the curve measures the model, not the draw.
    """

    def __init__(self, data: DataFolder, data_config: DataConfig, *, micro_batch_size: int = 32,
                 seed: int = 42) -> None:
        self.instances = PretrainingInstances.from_config(data.validation, data.tokenizer,
                                                          data_config, seed=seed)
        self.instances.set_epoch(0)
        self.collate = MaskingCollator.from_config(data.tokenizer, data_config, seed=seed)
        self.micro_batch_size = micro_batch_size

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, *, device: torch.device | None = None,
                 autocast: contextlib.AbstractContextManager | None = None,
                 max_batches: int | None = None) -> dict[str, float]:
        """MLM loss, perplexity, MLM accuracy (all, [MASK], random, kept) and pair accuracy.

        The model is put back in its previous train/eval mode.

        Returns:
            {"mlm_loss", "perplexity", "mlm_acc", "mlm_acc_mask", "mlm_acc_random",
            "mlm_acc_kept", "pair_loss", "pair_acc", "predictions", "sequences"}; accuracies
            over no positions are NaN.
        """
        device = device or next(model.parameters()).device
        instances, collate, micro_batch_size = self.instances, self.collate, self.micro_batch_size
        was_training = model.training
        model.eval()
        # sums: mlm loss, predictions, correct, pair loss, pairs, pair correct, then per action
        totals = {key: 0.0 for key in ("mlm_loss", "predictions", "correct", "pair_loss", "pairs",
                                        "pair_correct", "sequences")}
        per_action = {name: [0, 0] for name in MASK_ACTION_NAMES.values()}  # correct, count
        for batch_index, start in enumerate(range(0, len(instances), micro_batch_size)):
            if max_batches is not None and batch_index >= max_batches:
                break
            batch = collate(instances.__getitems__(range(start, min(start + micro_batch_size, len(instances)))))
            labels = batch["labels"].to(device)
            pair_labels = batch.get("next_sentence_label")
            pair_labels = (torch.full_like(labels[:, 0], IGNORE_INDEX) if pair_labels is None
                           else pair_labels.to(device))
            with autocast or contextlib.nullcontext():
                out = model(batch["input_ids"].to(device),
                            attention_mask=batch["attention_mask"].to(device),
                            token_type_ids=batch["token_type_ids"].to(device), labels=labels)
            predicted = labels != IGNORE_INDEX
            targets = labels[predicted]  # aligned with out.prediction_logits rows
            logits = out.prediction_logits.float()
            totals["mlm_loss"] += F.cross_entropy(logits, targets, reduction="sum").item()
            hits = logits.argmax(dim=-1) == targets
            totals["predictions"] += targets.numel()
            totals["correct"] += hits.sum().item()
            actions = batch["mask_action"].to(device)[predicted]
            for code, name in MASK_ACTION_NAMES.items():
                chosen = actions == code
                per_action[name][0] += hits[chosen].sum().item()
                per_action[name][1] += chosen.sum().item()
            kept = pair_labels != IGNORE_INDEX
            pair_logits = out.seq_relationship_logits.float()[kept]
            if kept.any():
                totals["pair_loss"] += F.cross_entropy(pair_logits, pair_labels[kept], reduction="sum").item()
                totals["pair_correct"] += (pair_logits.argmax(-1) == pair_labels[kept]).sum().item()
                totals["pairs"] += kept.sum().item()
            totals["sequences"] += labels.shape[0]
        model.train(was_training)

        def ratio(numerator: float, denominator: float) -> float:
            return numerator / denominator if denominator else float("nan")

        mlm_loss = ratio(totals["mlm_loss"], totals["predictions"])
        results = {
            "mlm_loss": mlm_loss,
            "perplexity": math.exp(min(mlm_loss, 700.0)) if mlm_loss == mlm_loss else float("nan"),
            "mlm_acc": ratio(totals["correct"], totals["predictions"]),
        }
        for name, (correct, count) in per_action.items():
            results[f"mlm_acc_{name}"] = ratio(correct, count)
        results["pair_loss"] = ratio(totals["pair_loss"], totals["pairs"])
        results["pair_acc"] = ratio(totals["pair_correct"], totals["pairs"])
        results["predictions"] = int(totals["predictions"])
        results["sequences"] = int(totals["sequences"])
        return results


def evaluate(model: torch.nn.Module, data: DataFolder, data_config: DataConfig, *,
             micro_batch_size: int = 32, seed: int = 42, device: torch.device | None = None,
             autocast: contextlib.AbstractContextManager | None = None,
             max_batches: int | None = None) -> dict[str, float]:
    """One evaluation of `model` on `data`'s validation split (an `Evaluator` used once)."""
    evaluator = Evaluator(data, data_config, micro_batch_size=micro_batch_size, seed=seed)
    return evaluator(model, device=device, autocast=autocast, max_batches=max_batches)
