"""Evaluate a pretraining model on the validation split of a DATA folder (or of each folder of a mixture)."""
from __future__ import annotations

import contextlib
import math

import torch

from bertpre.batches import MaskingCollator, PretrainingInstances, source_seed
from bertpre.batches.plm import PermutationCollator
from bertpre.batches.segments import SegmentInstances
from bertpre.config import DataConfig
from bertpre.data import DataFolder, DataMixture
from bertpre.labels import IGNORE_INDEX, MASK_ACTION_NAMES
from bertpre.train.step import HostCounts, device_batch


def perplexity(loss: float) -> float:
    """exp(loss), the perplexity of a mean cross-entropy in nats: inf where that overflows a float
    (a loss above about 709.78), nan for a nan loss (nothing measured)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


class Evaluator:
    """Validation metrics on fixed batches: epoch 0's pairs and masks for `seed`, planned once.

    Every call sees the same validation batches, so the curve measures the model, not the draw.
    Under DDP each of `world_size` processes scores every `world_size`-th batch and the sums are
    all-reduced: every process gets the same results, none waits for another.
    """

    def __init__(self, data: DataFolder, data_config: DataConfig, *, micro_batch_size: int = 32,
                 seed: int = 42, rank: int = 0, world_size: int = 1) -> None:
        self.instances = PretrainingInstances.from_config(data.validation, data.tokenizer,
                                                          data_config, seed=seed)
        self.instances.set_epoch(0)
        self.collate = MaskingCollator.from_config(data.tokenizer, data_config, seed=seed)
        self.micro_batch_size = micro_batch_size
        self.rank, self.world_size = rank, world_size

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, *, device: torch.device | None = None,
                 autocast: contextlib.AbstractContextManager | None = None,
                 max_batches: int | None = None) -> dict[str, float]:
        """MLM loss, perplexity, MLM accuracy (all, [MASK], random, kept) and pair accuracy.

        The model is put back in its previous train/eval mode. The device's sums are read once,
        at the end.

        Returns:
            {"mlm_loss", "perplexity", "mlm_acc", "mlm_acc_mask", "mlm_acc_random",
            "mlm_acc_kept", "pair_loss", "pair_acc", "predictions", "sequences"}; accuracies
            over no positions are NaN.
        """
        device = device or next(model.parameters()).device
        was_training = model.training
        model.eval()
        actions = list(MASK_ACTION_NAMES)
        # On the device: mlm loss, correct, pair loss, pair correct, then correct per action.
        device_sums = torch.zeros(4 + len(actions), dtype=torch.float64, device=device)
        # On the host: predictions, pairs, sequences, then predictions per action.
        host_counts = torch.zeros(3 + len(actions), dtype=torch.float64)
        starts = range(0, len(self.instances), self.micro_batch_size)
        if max_batches is not None:
            starts = starts[:max_batches]
        for start in starts[self.rank::self.world_size]:
            rows = range(start, min(start + self.micro_batch_size, len(self.instances)))
            batch = self.collate(self.instances.__getitems__(rows))
            ids = batch["masked_lm_ids"]
            slot_actions = torch.where(ids != IGNORE_INDEX,
                                       batch["mask_action"].gather(1, batch["masked_lm_positions"]), -1)
            counts = HostCounts.of(batch)
            host_counts += torch.tensor([counts.predictions, counts.pairs, len(rows)]
                                        + [int((slot_actions == code).sum()) for code in actions])
            inputs = device_batch(batch, device, keep_attention_mask=False)
            with autocast or contextlib.nullcontext():
                out = model(inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                            token_type_ids=inputs["token_type_ids"],
                            next_sentence_label=inputs.get("next_sentence_label"),
                            masked_lm_positions=inputs["masked_lm_positions"],
                            masked_lm_ids=inputs["masked_lm_ids"])
            hits = out.prediction_logits.argmax(-1) == inputs["masked_lm_ids"]  # (B, P)
            slot_actions = slot_actions.to(device, non_blocking=True)
            pair_labels = inputs.get("next_sentence_label")
            zero = out.mlm_loss_sum.new_zeros(())
            device_sums += torch.stack([
                out.mlm_loss_sum, hits.sum(),
                out.pair_loss_sum if pair_labels is not None else zero,
                (out.seq_relationship_logits.argmax(-1) == pair_labels).sum() if pair_labels is not None else zero,
                *[(hits & (slot_actions == code)).sum() for code in actions],
            ]).double()
        model.train(was_training)
        if self.world_size > 1:
            torch.distributed.all_reduce(device_sums)
            host_counts = host_counts.to(device)
            torch.distributed.all_reduce(host_counts)
        (mlm_loss, correct, pair_loss, pair_correct, *action_correct) = device_sums.tolist()
        (predictions, pairs, sequences, *action_counts) = host_counts.tolist()

        def ratio(numerator: float, denominator: float) -> float:
            return numerator / denominator if denominator else float("nan")

        mlm_loss = ratio(mlm_loss, predictions)
        results = {
            "mlm_loss": mlm_loss,
            "perplexity": perplexity(mlm_loss),
            "mlm_acc": ratio(correct, predictions),
        }
        for code, hit, count in zip(actions, action_correct, action_counts, strict=True):
            results[f"mlm_acc_{MASK_ACTION_NAMES[code]}"] = ratio(hit, count)
        results["pair_loss"] = ratio(pair_loss, pairs)
        results["pair_acc"] = ratio(pair_correct, pairs)
        results["predictions"] = int(predictions)
        results["sequences"] = int(sequences)
        return results


class SegmentEvaluator:
    """Validation for plm/clm: the validation documents read as the run reads its data, one
    segment after the next in `micro_batch_size` lanes, each batch attending to the memory the
    previous one left; epoch 0's segments and targets for `seed`, planned once.

    Under DDP each process reads its own lanes and the sums are all-reduced.
    """

    def __init__(self, data: DataFolder, data_config: DataConfig, *, micro_batch_size: int = 32,
                 seed: int = 42, rank: int = 0, world_size: int = 1) -> None:
        self.objective = data_config.objective
        self.rank, self.world_size = rank, world_size
        self.instances, self.lanes = None, 0
        if len(data.validation):
            whole = SegmentInstances.from_config(data.validation, data.tokenizer, data_config, lanes=1, seed=seed)
            self.lanes = min(micro_batch_size, whole.segment_count() // world_size)
        if self.lanes:  # else the validation split has too few segments: nothing to score
            self.instances = whole.with_lanes(self.lanes, rank=rank, world_size=world_size)
        self.collate = PermutationCollator.from_config(data.tokenizer, data_config, seed=seed)

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, *, device: torch.device | None = None,
                 autocast: contextlib.AbstractContextManager | None = None,
                 max_batches: int | None = None) -> dict[str, float]:
        """`{objective}_loss`, perplexity, `{objective}_acc`, predictions, sequences (NaN where
        nothing was predicted). The model is put back in its previous train/eval mode."""
        from bertpre.batches.plm import expand_plm
        from bertpre.train.plm_step import RecurrentMemory, plm_device_batch, plm_predictions

        device = device or next(model.parameters()).device
        was_training = model.training
        model.eval()
        device_sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss, correct
        host_counts = torch.zeros(2, dtype=torch.float64)  # predictions, sequences
        steps = 0 if self.instances is None else len(self.instances) // self.lanes
        if max_batches is not None:
            steps = min(steps, max_batches)
        memory = RecurrentMemory(1)
        for step in range(steps):
            batch = self.collate(self.instances.__getitems__(range(step * self.lanes, (step + 1) * self.lanes)))
            host_counts += torch.tensor([plm_predictions(batch), self.lanes], dtype=torch.float64)
            inputs = plm_device_batch(batch, device, keep_attention_mask=False)
            mems, mask = memory.read(0, inputs["memory_reset"])
            perm_mask, target_mapping = expand_plm(inputs)
            with autocast or contextlib.nullcontext():
                out = model(inputs["input_ids"], token_type_ids=inputs["token_type_ids"],
                            attention_mask=inputs.get("attention_mask"), perm_mask=perm_mask,
                            target_mapping=target_mapping, mems=mems, mems_attention_mask=mask,
                            labels=inputs["labels"])
            memory.write(0, out.mems, out.mems_attention_mask)
            hits = (out.logits.argmax(-1) == inputs["labels"]).sum()
            device_sums += torch.stack([out.loss_sum.double(), hits.double()])
        model.train(was_training)
        if self.world_size > 1:
            torch.distributed.all_reduce(device_sums)
            host_counts = host_counts.to(device)
            torch.distributed.all_reduce(host_counts)
        (loss, correct), (predictions, sequences) = device_sums.tolist(), host_counts.tolist()
        loss = loss / predictions if predictions else float("nan")
        return {f"{self.objective}_loss": loss,
                "perplexity": perplexity(loss),
                f"{self.objective}_acc": correct / predictions if predictions else float("nan"),
                "predictions": int(predictions), "sequences": int(sequences)}


class MixtureEvaluator:
    """An `Evaluator` per source of a mixture (each with the source's own seed), and the overall
    metrics as the mixture weighs them.

    The results hold `<name>/<metric>` for every source, then the overall metrics: losses and
    accuracies are the sources' values averaged with the mixture's weights (a source with
    nothing to measure, NaN, is left out and the rest reweighted), the perplexity is that of the
    averaged loss, and counts are summed.
    """

    def __init__(self, mixture: DataMixture, data_config: DataConfig, *, micro_batch_size: int = 32,
                 seed: int = 42, rank: int = 0, world_size: int = 1) -> None:
        self.names, self.weights = mixture.names, mixture.weights
        self.loss = f"{data_config.objective}_loss"
        source_evaluator = SegmentEvaluator if data_config.recurrent else Evaluator
        self.evaluators = [
            source_evaluator(folder, data_config, micro_batch_size=micro_batch_size,
                      seed=source_seed(seed, index), rank=rank, world_size=world_size)
            for index, folder in enumerate(mixture.folders)]

    def __call__(self, model: torch.nn.Module, *, device: torch.device | None = None,
                 autocast: contextlib.AbstractContextManager | None = None,
                 max_batches: int | None = None) -> dict[str, float]:
        """Every source's `Evaluator` results as `<name>/<metric>`, then the overall metrics."""
        per_source = [evaluator(model, device=device, autocast=autocast, max_batches=max_batches)
                      for evaluator in self.evaluators]
        results = {f"{name}/{metric}": value for name, source in zip(self.names, per_source, strict=True)
                   for metric, value in source.items()}
        for metric in per_source[0]:
            values = [source[metric] for source in per_source]
            if metric in ("predictions", "sequences"):
                results[metric] = sum(values)
                continue
            weighed = [(weight, value) for weight, value in zip(self.weights, values, strict=True)
                       if value == value]
            total = sum(weight for weight, _ in weighed)
            results[metric] = (sum(weight * value for weight, value in weighed) / total if total
                               else float("nan"))
        loss = results[self.loss]
        results["perplexity"] = perplexity(loss)
        return results


def build_evaluator(mixture: DataMixture, data_config: DataConfig, *, micro_batch_size: int = 32,
                    seed: int = 42, rank: int = 0,
                    world_size: int = 1) -> Evaluator | MixtureEvaluator | SegmentEvaluator:
    """The validation metrics of `mixture`: an `Evaluator` for one folder, a `MixtureEvaluator`
    for several."""
    options = dict(micro_batch_size=micro_batch_size, seed=seed, rank=rank, world_size=world_size)
    if mixture.is_mixture:
        return MixtureEvaluator(mixture, data_config, **options)
    if data_config.recurrent:
        return SegmentEvaluator(mixture.folders[0], data_config, **options)
    return Evaluator(mixture.folders[0], data_config, **options)


def evaluate(model: torch.nn.Module, data: DataFolder | DataMixture, data_config: DataConfig, *,
             micro_batch_size: int = 32, seed: int = 42, device: torch.device | None = None,
             autocast: contextlib.AbstractContextManager | None = None,
             max_batches: int | None = None) -> dict[str, float]:
    """One evaluation of `model` on `data`'s validation split (an evaluator used once); a
    mixture's results are per source and overall, as `MixtureEvaluator` gives them."""
    if isinstance(data, DataMixture):
        evaluator = build_evaluator(data, data_config, micro_batch_size=micro_batch_size, seed=seed)
    elif data_config.recurrent:
        evaluator = SegmentEvaluator(data, data_config, micro_batch_size=micro_batch_size, seed=seed)
    else:
        evaluator = Evaluator(data, data_config, micro_batch_size=micro_batch_size, seed=seed)
    return evaluator(model, device=device, autocast=autocast, max_batches=max_batches)
