"""The interface every objective gives the Trainer and the Evaluator, and what the step counts.

A GPU runs ahead of the Python that feeds it only while nothing asks it for a value. So every
number the step needs to weigh its losses (predictions, pair labels, real tokens) is counted on
the CPU batch before it is copied, and everything the device computes (loss and accuracy sums)
stays there until the logging window reads it once.

Each objective names what it computes: its loss terms (`LossTerm`: BERT's masked LM and pair
task, XLNet's permutation LM), the sums its step module keeps on the device (`device_stats`)
and the counts it takes of the host batch (`host_stats`). The step module of every objective
has one signature, `forward(batch, carry) -> (one loss sum per term, device_stats sums, carry)`;
the carry is what one micro-batch slot hands the next step's (none for BERT's masked LM; XLNet's
recurrent memory). So the Trainer's step is one path: read the carry, step, weigh the terms as
the objective says, write the carry.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from bertpre.batches import BatchStream
from bertpre.config.objectives import objective_rules
from bertpre.model.config import BertConfig
from bertpre.train.runtime import Runtime, all_reduce_sum

if TYPE_CHECKING:  # the config sits above the training package's data classes
    from tokenizers import Tokenizer

    from bertpre.config import Config, DataConfig
    from bertpre.data import DataFolder, DataMixture


@dataclass(frozen=True)
class CostPart:
    """One network a run of an objective trains, as the cost model charges it: its config, the
    share of a row's tokens its vocabulary head predicts, and the FLOPs a token of any other head
    costs (ELECTRA's discriminator: a one-logit head on every token)."""

    name: str  # "model"; ELECTRA's "discriminator", "generator"
    model: BertConfig
    predicted_share: float
    head_flops: float = 0.0  # training FLOPs per token beside the family's cost model
    # the names of its parameters in the objective's model ("generator."); "": every one no other
    # part's prefix claims (a tensor two parts share counts once, for the part that owns it)
    prefix: str = ""


@dataclass(frozen=True)
class LossTerm:
    """One named term of an objective's loss: its sum (and its correct predictions' count) kept
    on the device, averaged over a count the host takes of the batch, times its weight.

    Its scalars are `train/{name}_loss` and `train/{name}_acc`; its device sums are
    `{name}_loss` and `{name}_correct`.
    """

    name: str
    count: str  # the host stat its sums are averaged over (predictions, pairs, tokens)
    optional: bool = False  # left out of the scalars of a window that counted none (pair_task none)
    weight: float = 1.0  # in the loss: weight × (sum / count), e.g. ELECTRA's λ on its discriminator
    # what a run's closing lines show of it ("loss", "acc"): BERT's pair task, its accuracy alone
    summary: tuple[str, ...] = ("loss", "acc")

    @property
    def stats(self) -> tuple[str, str]:
        return f"{self.name}_loss", f"{self.name}_correct"


def step_totals(counts: list[Sequence[int]], runtime: Runtime) -> list[int]:
    """The step's host stats: summed over its micro-batches, and over processes when distributed."""
    totals = [sum(values) for values in zip(*counts, strict=True)]
    if not runtime.distributed:
        return totals
    reduced = torch.tensor(totals, dtype=torch.int64, device=runtime.device)
    return [int(value) for value in all_reduce_sum(reduced, runtime).tolist()]


def summed_over_processes(device_sums: torch.Tensor, host_counts: torch.Tensor,
                          world_size: int) -> tuple[list[float], list[float]]:
    """An evaluator's device sums and host counts, summed over the `world_size` processes that each
    scored a share of the batches, read once."""
    if world_size > 1:
        torch.distributed.all_reduce(device_sums)
        host_counts = host_counts.to(device_sums.device)
        torch.distributed.all_reduce(host_counts)
    return device_sums.tolist(), host_counts.tolist()


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

    Subclasses give: `terms` (the named loss terms, and `device_stats` when the step keeps more
    sums than theirs), `host_stats` and `host_counts` (what is counted of a host batch), `build_batches`
    (this process's instances and collator for a phase), `to_device` (a host batch's copy),
    `step_module` (the model, its loss sums and device stats as one module: what `train.compile`
    compiles and DDP wraps), `new_carry`, `source_evaluator` (one DATA folder's validation
    metrics), what it reads of the data config (`recurrent`, `predicted_share`),
    the audit `bertpre inspect` runs, and the texts.
    """

    name: str = ""
    # Which audit `bertpre inspect` runs on the objective's batches (`bertpre.tools.audit.AUDITS`).
    audit: str = "masking"
    # The counts `host_counts` takes of a host batch, in its order; `tokens` (real tokens) is
    # what every objective counts, for tokens/s and the tokens seen.
    host_stats: tuple[str, ...] = ("predictions", "tokens")

    def __init__(self, name: str, keys: Any = None) -> None:
        self.name = name
        # What the config knows of it (`bertpre.config.objectives`): one answer for both sides.
        self.rules = objective_rules(name)
        # Its own keys (`objective:` of the config; their defaults where not given); None: it has none.
        self.keys = keys if keys is not None else self.rules.default_keys()

    @property
    def recurrent(self) -> bool:
        """Whether rows are read as consecutive segments, each carrying memory to the next."""
        return self.rules.recurrent

    @property
    def terms(self) -> tuple[LossTerm, ...]:
        """The loss terms, in the order the step module returns their sums."""
        return (LossTerm(self.name, "predictions"),)

    @property
    def summary_metrics(self) -> tuple[str, ...]:
        """What a run's closing lines show of its last window and evaluation (those it has): the
        loss, then each term's `summary` scalars."""
        return ("loss", *(f"{term.name}_{part}" for term in self.terms for part in term.summary))

    @property
    def device_stats(self) -> tuple[str, ...]:
        """The sums the step module keeps on the device (float64), in its order: each term's."""
        return tuple(stat for term in self.terms for stat in term.stats)

    def named_stats(self, device_values: Sequence[float], host_counts: Sequence[int]) -> dict[str, float]:
        """`device_stats` values read from the device and `host_stats` counts, by name."""
        stats = dict(zip(self.device_stats, device_values, strict=True))
        stats.update(zip(self.host_stats, map(float, host_counts), strict=True))
        return stats

    def loss_weights(self, totals: Sequence[int], world_size: int) -> list[float]:
        """What each term's loss sum is multiplied by in a step of `totals` (host stats over all
        processes): its weight over its count, so any split of the batch gives the same gradient
        (DDP averages over the processes, hence `world_size`)."""
        counts = dict(zip(self.host_stats, totals, strict=True))
        return [term.weight * world_size / counts[term.count] if counts[term.count] else 0.0
                for term in self.terms]

    def weighted_loss(self, loss_sums: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
        """The micro-batch's loss to backpropagate: each term's sum times its weight, added."""
        loss = loss_sums[0] * weights[0]
        for loss_sum, weight in zip(loss_sums[1:], weights[1:], strict=True):
            loss = loss + loss_sum * weight
        return loss

    def term_means(self, sums: dict[str, float]) -> dict[str, float]:
        """Each counted term's mean loss over its count, by term name (the loss the step took)."""
        return {term.name: sums[term.stats[0]] / max(sums[term.count], 1) for term in self.terms
                if sums[term.count] or not term.optional}

    def total_loss(self, sums: dict[str, float]) -> float:
        """The loss the step took: each counted term's mean times its weight, added."""
        means = self.term_means(sums)
        return sum(term.weight * means[term.name] for term in self.terms if term.name in means)

    def train_scalars(self, sums: dict[str, float]) -> dict[str, float]:
        """The `train/*` scalars of a logging window's summed stats: `train/loss` (`total_loss`),
        then each term's loss and accuracy."""
        counted = [term for term in self.terms if sums[term.count] or not term.optional]
        means = self.term_means(sums)
        scalars = {"train/loss": self.total_loss(sums)}
        scalars.update({f"train/{term.name}_loss": means[term.name] for term in counted})
        scalars.update({f"train/{term.name}_acc": sums[term.stats[1]] / max(sums[term.count], 1)
                        for term in counted})
        return scalars

    def eval_loss(self, results: dict[str, float]) -> float:
        """The validation results' counterpart of `train/loss`: the terms' losses weighed and added
        (an optional term's missing or NaN loss, the results' mark of nothing measured, left out)."""
        total = 0.0
        for term in self.terms:
            value = results.get(f"{term.name}_loss", math.nan)
            total += 0.0 if term.optional and value != value else term.weight * value
        return total

    def predicted_share(self, data_config: DataConfig) -> float:
        """The share of a row's tokens the head predicts (what the cost model charges it for)."""
        raise NotImplementedError

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

    def host_counts(self, batch: dict[str, torch.Tensor]) -> list[int]:
        """A host batch's `host_stats`, counted on the CPU before it is copied."""
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

    def build_model(self, config: BertConfig, tokenizer: Tokenizer,
                    family_builder: Callable[[BertConfig, Tokenizer], nn.Module]) -> nn.Module:
        """The model a run of it trains, from the model's config (its own copy): the family's
        pretraining model (`family_builder`) by default."""
        return family_builder(config, tokenizer)

    def prepare_model(self, model: nn.Module, config: Config) -> None:
        """Fit the model to a phase's config, after its optimizer is built (nothing by default)."""

    def source_evaluator(self, folder: DataFolder, data_config: DataConfig, **options: Any) -> Any:
        raise NotImplementedError

    def cost_parts(self, config: Config) -> tuple[CostPart, ...]:
        """The networks a phase of `config` trains, each as the cost model charges it (FLOPs per
        token, memory): the family's model at the objective's predicted share by default."""
        return (CostPart("model", config.model, self.predicted_share(config.data)),)

    def cost_options(self, config: Config) -> dict[str, int]:
        """The cost model's objective-specific arguments for a phase's config (none by default)."""
        return {}

    def describe(self, data_config: DataConfig) -> str:
        """The phase line's words for what this objective reads of the data."""
        raise NotImplementedError

    def summary(self, data_config: DataConfig) -> str:
        """What the start block adds to the model's shape about the objective (nothing by default)."""
        return ""
