"""The interface every objective gives the Trainer and the Evaluator, and what the step counts.

A GPU runs ahead of the Python that feeds it only while nothing asks it for a value. So every
number the step needs to weigh its losses (predictions, pair labels, real tokens) is counted on
the CPU batch before it is copied, and everything the device computes (loss and accuracy sums)
stays there until the logging window reads it once.

The step module of every objective has one signature, `forward(batch, carry) -> ((loss sum, pair
loss sum), DEVICE_STATS sums, carry)`; the carry is what one micro-batch slot hands the next
step's (none for BERT's masked LM; XLNet's recurrent memory). So the Trainer's step is one path:
read the carry, step, write the carry.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from bertpre.batches import BatchStream
from bertpre.train.runtime import Runtime, all_reduce_sum

if TYPE_CHECKING:  # the config sits above the training package's data classes
    from bertpre.config import Config, DataConfig
    from bertpre.data import DataFolder, DataMixture

# Sums the device keeps per step, and the counts the host knows before the batch is copied.
DEVICE_STATS = ("mlm_loss", "mlm_correct", "pair_loss", "pair_correct")
HOST_STATS = ("predictions", "pairs", "tokens")


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

    def as_list(self) -> list[int]:
        return [self.predictions, self.pairs, self.tokens]


def step_totals(counts: list[HostCounts], runtime: Runtime) -> list[int]:
    """The step's HOST_STATS: summed over its micro-batches, and over processes when distributed."""
    totals = [sum(values) for values in zip(*(count.as_list() for count in counts), strict=True)]
    if not runtime.distributed:
        return totals
    reduced = torch.tensor(totals, dtype=torch.int64, device=runtime.device)
    return [int(value) for value in all_reduce_sum(reduced, runtime).tolist()]


def copy_inputs(batch: dict[str, torch.Tensor], names: tuple[str, ...], device: torch.device, *,
                keep_attention_mask: bool) -> dict[str, torch.Tensor]:
    """The model's inputs (`names`) of a host batch, copied without waiting (from pinned memory).

    A batch without padding drops its attention mask, so SDPA may take its fastest kernel;
    that is decided here on the CPU. A compiled step keeps it (`keep_attention_mask`): one
    graph for every batch.
    """
    kept = [name for name in names if name in batch]
    if not keep_attention_mask and bool(batch["attention_mask"].all()):
        kept.remove("attention_mask")
    return {name: batch[name].to(device, non_blocking=True) for name in kept}


def perplexity(loss: float) -> float:
    """exp(loss), the perplexity of a mean cross-entropy in nats: inf where that overflows a float
    (a loss above about 709.78), nan for a nan loss (nothing measured)."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


class NoCarry:
    """The carry of an objective whose micro-batches stand alone (BERT's masked LM)."""

    def take(self, slot: int, batch: dict[str, torch.Tensor]) -> None:
        return None

    def keep(self, slot: int, carry: Any) -> None:
        pass

    def rank_tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """What each process saves in a checkpoint (file pattern with `{rank}` → tensors)."""
        return {}

    def restore(self, checkpoint: Path, rank: int, device: torch.device) -> None:
        pass


class Objective:
    """What a run learns to predict, asked once by the Trainer, the Evaluator and the cost model.

    Subclasses give: `build_batches` (this process's instances and collator for a phase),
    `host_counts` and `to_device` (a host batch's counts and its copy), `step_module` (the model,
    its loss sums and accuracy counts as one module: what `train.compile` compiles and DDP
    wraps), `new_carry`, `source_evaluator` (one DATA folder's validation metrics) and the texts.
    """

    name: str = ""

    def __init__(self, name: str) -> None:
        self.name = name

    def build_batches(self, mixture: DataMixture, config: Config, *, accumulation: int, rank: int,
                      world_size: int) -> tuple[Any, Callable[[list[dict]], dict[str, torch.Tensor]]]:
        raise NotImplementedError

    def stream(self, mixture: DataMixture, config: Config, *, accumulation: int, rank: int, world_size: int,
               pin_memory: bool, position: dict[str, int] | None = None) -> BatchStream:
        """This process's batches of a phase, from `position` (epoch, position) or epoch 0."""
        instances, collate = self.build_batches(mixture, config, accumulation=accumulation, rank=rank,
                                                world_size=world_size)
        return BatchStream(instances, collate, micro_batch_size=config.train.micro_batch_size,
                           num_workers=config.data.num_workers, pin_memory=pin_memory, seed=config.train.seed,
                           **(position or {}))

    def shares(self, instances: Any) -> dict[str, float]:
        """A mixture's realised share of each source in every epoch, where the instances know it."""
        return {}

    def host_counts(self, batch: dict[str, torch.Tensor]) -> HostCounts:
        raise NotImplementedError

    def to_device(self, batch: dict[str, torch.Tensor], device: torch.device, *,
                  keep_attention_mask: bool) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def step_module(self, model: nn.Module, label_smoothing: float = 0.0) -> nn.Module:
        raise NotImplementedError

    def new_carry(self, slots: int, config: Config) -> Any:
        """What each of a step's `slots` micro-batches hands the next step's in a phase of `config`
        (none by default)."""
        return NoCarry()

    def prepare_model(self, model: nn.Module, config: Config) -> None:
        """Fit the model to a phase's config, after its optimizer is built (nothing by default)."""

    def source_evaluator(self, folder: DataFolder, data_config: DataConfig, **options: Any) -> Any:
        raise NotImplementedError

    def log_names(self, scalars: dict[str, float]) -> dict[str, float]:
        """`train/mlm_*` named for the objective (`train/plm_loss`, `train/clm_acc`)."""
        if self.name == "mlm":
            return scalars
        return {tag.replace("/mlm_", f"/{self.name}_"): value for tag, value in scalars.items()}

    def cost_options(self, config: Config) -> dict[str, int]:
        """The cost model's objective-specific arguments for a phase's config (none by default)."""
        return {}

    def describe(self, data_config: DataConfig) -> str:
        """The phase line's words for what this objective reads of the data."""
        raise NotImplementedError

    def summary(self, data_config: DataConfig) -> str:
        """What the start block adds to the model's shape about the objective (nothing by default)."""
        return ""
