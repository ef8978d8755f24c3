"""Evaluate a pretraining model on the validation split of a DATA folder (or of each folder of a mixture)."""
from __future__ import annotations

import contextlib

import torch

from bertpre.batches import source_seed
from bertpre.config import DataConfig
from bertpre.data import DataFolder, DataMixture
from bertpre.model.cost import ForwardShape, plm_query_rows
from bertpre.train.objectives import objective_for
from bertpre.train.objectives.base import perplexity
from bertpre.train.objectives.mlm import Evaluator
from bertpre.train.objectives.plm import SegmentEvaluator

__all__ = ["Evaluator", "MixtureEvaluator", "SegmentEvaluator", "build_evaluator", "evaluate", "evaluation_forward",
           "perplexity"]


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
        objective = objective_for(data_config.objective)
        self.loss = f"{objective.terms[0].name}_loss"  # the language model's: its perplexity
        self.evaluators = [
            objective.source_evaluator(folder, data_config, micro_batch_size=micro_batch_size,
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
    """The validation metrics of `mixture`: the objective's evaluator for one folder, a
    `MixtureEvaluator` for several."""
    options = dict(micro_batch_size=micro_batch_size, seed=seed, rank=rank, world_size=world_size)
    if mixture.is_mixture:
        return MixtureEvaluator(mixture, data_config, **options)
    return objective_for(data_config.objective).source_evaluator(mixture.folders[0], data_config, **options)


def evaluation_forward(data_config: DataConfig, micro_batch_size: int, mem_len: int = 0) -> ForwardShape:
    """The largest forward an evaluation of `data_config` runs: `micro_batch_size` sequences of
    `max_seq_length`, the head on the predicted share of them; plm and clm with the model's
    memory (`mem_len`) and training's permutation inputs, as `SegmentEvaluator` passes them."""
    objective, length = objective_for(data_config.objective), data_config.max_seq_length
    recurrent = objective.recurrent
    return ForwardShape(batch_size=micro_batch_size, seq_length=length,
                        predicted_rows=plm_query_rows(length, objective.predicted_share(data_config)),
                        memory_length=mem_len if recurrent else 0, permutation=recurrent)


def evaluate(model: torch.nn.Module, data: DataFolder | DataMixture, data_config: DataConfig, *,
             micro_batch_size: int = 32, seed: int = 42, device: torch.device | None = None,
             autocast: contextlib.AbstractContextManager | None = None,
             max_batches: int | None = None) -> dict[str, float]:
    """One evaluation of `model` on `data`'s validation split (an evaluator used once); a
    mixture's results are per source and overall, as `MixtureEvaluator` gives them."""
    if isinstance(data, DataMixture):
        evaluator = build_evaluator(data, data_config, micro_batch_size=micro_batch_size, seed=seed)
    else:
        evaluator = objective_for(data_config.objective).source_evaluator(
            data, data_config, micro_batch_size=micro_batch_size, seed=seed)
    return evaluator(model, device=device, autocast=autocast, max_batches=max_batches)
