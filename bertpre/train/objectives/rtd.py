"""ELECTRA's replaced-token detection (`data.objective: rtd`): a small generator fills the masked
tokens with samples from its masked LM, and the discriminator tells, at every real token, whether
it was replaced. The loss is the generator's masked LM plus λ (`objective.rtd_weight`) times the
discriminator's binary loss; the batches are the masked LM's, every masked token [MASK].
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from bertpre.batches import MaskingCollator, PretrainingInstances
from bertpre.labels import IGNORE_INDEX
from bertpre.model.config import BertConfig
from bertpre.model.replaced_token import ReplacedTokenDetection, pair_generator_config
from bertpre.train.objectives.base import CostPart, LossTerm, perplexity, summed_over_processes
from bertpre.train.objectives.mlm import MaskedLanguageModel, device_batch

if TYPE_CHECKING:
    from bertpre.config import Config, DataConfig
    from bertpre.data import DataFolder, DataMixture

# What the step keeps on the device beyond its terms' sums: the discriminator's correct calls on
# replaced tokens, and the replaced tokens.
EXTRA_STATS = ("replaced_correct", "replaced_tokens")
# The evaluator's histogram of discriminator logits (replaced tokens' and originals'), for its AUC:
# bins 1/64 of a logit wide over [-16, 16] (a logit past either end counts in the end bin).
AUC_LOGIT_RANGE = 16.0
AUC_BINS = 2048


def generator_data(data_config: DataConfig) -> DataConfig:
    """The masking the generator reads: every masked token [MASK] (no 80/10/10, as ELECTRA)."""
    return dataclasses.replace(data_config, mask_replace_prob=1.0, random_replace_prob=0.0)


def replaced_token_host_counts(batch: dict[str, torch.Tensor]) -> list[int]:
    """A host batch's predictions (the generator's term) and real tokens (the discriminator's)."""
    return [int((batch["masked_lm_ids"] != IGNORE_INDEX).sum()), int(batch["attention_mask"].sum())]


def sample_tokens(logits: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """One token a row of `logits` (..., V), drawn from their softmax by the Gumbel-max trick with
    the uniform noise `uniform` (same shape): no host sync, one graph under compile."""
    tiny = torch.finfo(torch.float32).tiny
    gumbel = -torch.log(-torch.log(uniform.float().clamp(min=tiny)))
    return (logits.float() + gumbel).argmax(-1)


def logit_histogram(logits: torch.Tensor, replaced: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The real tokens' discriminator logits counted in `AUC_BINS` bins, (2, AUC_BINS) float64:
    row 0 the replaced tokens', row 1 the originals'."""
    width = 2 * AUC_LOGIT_RANGE / AUC_BINS
    bins = ((logits.float() + AUC_LOGIT_RANGE) / width).floor().clamp(0, AUC_BINS - 1).long()
    rows = torch.where(replaced, 0, 1)
    flat = (rows * AUC_BINS + bins)[real]
    return torch.bincount(flat, minlength=2 * AUC_BINS).double().view(2, AUC_BINS)


def histogram_auc(replaced: list[float], original: list[float]) -> float:
    """The area under the ROC curve from `logit_histogram`'s rows: the chance that a replaced token
    scores above an original one (a tie, within a bin, counting half). 0.5 is a discriminator that
    knows nothing, 1.0 one that ranks every replaced token first, whatever its threshold (ELECTRA's
    own `disc_auc`). NaN when either row is empty."""
    replaced_total, original_total = sum(replaced), sum(original)
    if not replaced_total or not original_total:
        return float("nan")
    below, area = 0.0, 0.0
    for caught, passed in zip(replaced, original, strict=True):
        area += caught * (below + 0.5 * passed)
        below += passed
    return area / (replaced_total * original_total)


def replaced_token_sums(model: ReplacedTokenDetection, batch: dict[str, torch.Tensor],
                        noise: Callable[[torch.Tensor], torch.Tensor], label_smoothing: float = 0.0,
                        histogram: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One micro-batch through the generator and the discriminator.

    Args:
        noise: uniform [0, 1) noise shaped as the generator's logits (the run's RNG in training).
        histogram: where given, (2, AUC_BINS) float64 that the batch's `logit_histogram` is added to.

    Returns:
        The generator's summed MLM loss and the discriminator's summed binary loss (both in the
        graph), and the device stats (float64): mlm_loss, mlm_correct, rtd_loss, rtd_correct,
        replaced_correct, replaced_tokens.
    """
    input_ids, token_type_ids = batch["input_ids"], batch["token_type_ids"]  # (B, T), masked tokens [MASK]
    positions, original = batch["masked_lm_positions"], batch["masked_lm_ids"]  # (B, P), -100 unused
    attention_mask = batch.get("attention_mask")  # absent: no padding
    generated = model.generator(input_ids, attention_mask, token_type_ids, masked_lm_positions=positions,
                                masked_lm_ids=original, label_smoothing=label_smoothing)
    generator_logits, mlm_loss_sum = generated.prediction_logits, generated.mlm_loss_sum  # (B, P, V), ()
    with torch.no_grad():  # no gradient through the sample
        predicted = original != IGNORE_INDEX
        sampled = sample_tokens(generator_logits.detach(), noise(generator_logits))  # (B, P)
        # An unused slot names position 0 ([CLS]) and writes back the token there.
        sampled = torch.where(predicted, sampled, input_ids.gather(1, positions))
        corrupted = input_ids.scatter(1, positions, sampled)
        # A sample equal to the original is an original token.
        replaced = torch.zeros_like(input_ids, dtype=torch.bool).scatter(1, positions, predicted & (sampled != original))
        real = torch.ones_like(replaced) if attention_mask is None else attention_mask.bool()
    logits = model.discriminate(corrupted, attention_mask, token_type_ids)  # (B, T)
    losses = F.binary_cross_entropy_with_logits(logits.float(), replaced.float(), reduction="none")
    rtd_loss_sum = losses.masked_fill(~real, 0.0).sum()
    with torch.no_grad():
        correct = ((logits > 0) == replaced) & real
        sums = torch.stack([mlm_loss_sum.detach().double(),
                            (generator_logits.argmax(-1) == original).sum().double(),
                            rtd_loss_sum.detach().double(), correct.sum().double(),
                            (correct & replaced).sum().double(), (replaced & real).sum().double()])
        if histogram is not None:
            histogram += logit_histogram(logits, replaced, real)
    return mlm_loss_sum, rtd_loss_sum, sums


class ReplacedTokenStep(nn.Module):
    """The rtd step: generator, sampling, discriminator and their sums for one micro-batch, as one
    module (what `train.compile` compiles and DDP wraps). The samples' noise is drawn from the
    run's RNG (as dropout is), so a resumed run draws what the uninterrupted one did."""

    def __init__(self, model: ReplacedTokenDetection, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, batch: dict[str, torch.Tensor], carry: None = None
                ) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor, None]:
        mlm_loss_sum, rtd_loss_sum, sums = replaced_token_sums(
            self.model, batch, lambda logits: torch.rand_like(logits, dtype=torch.float32), self.label_smoothing)
        return (mlm_loss_sum, rtd_loss_sum), sums, None


def called_replaced(correct: float, replaced_correct: float, replaced: float, tokens: float) -> float:
    """How many tokens the discriminator called replaced: those it caught, and the originals it
    got wrong. Its precision (caught / called) against the share replaced says how much it tells
    apart whatever its threshold: a guess that knows nothing has precision = the share. A
    discriminator that calls none replaced has precision 0, as ELECTRA's own metrics count it."""
    return replaced_correct + (tokens - replaced) - (correct - replaced_correct)


class ReplacedTokenObjective(MaskedLanguageModel):
    """`data.objective: rtd`: the masked LM's batches (every masked token [MASK]), a generator and
    a discriminator (`ReplacedTokenDetection`), the generator's `mlm` and the discriminator's
    `rtd` terms."""

    host_stats = ("predictions", "tokens")

    @property
    def terms(self) -> tuple[LossTerm, ...]:
        return (LossTerm("mlm", "predictions"), LossTerm("rtd", "tokens", weight=self.keys.rtd_weight))

    @property
    def device_stats(self) -> tuple[str, ...]:
        return (*super().device_stats, *EXTRA_STATS)

    def build_model(self, config: BertConfig, tokenizer: Tokenizer,
                    family_builder: Callable[[BertConfig, Tokenizer], nn.Module]) -> nn.Module:
        return ReplacedTokenDetection(config, self.keys.generator_size, self.keys.embedding_sharing)

    def build_batches(self, mixture: DataMixture, config: Config, *, accumulation: int, rank: int,
                      world_size: int) -> tuple[Any, Callable]:
        config = dataclasses.replace(config, data=generator_data(config.data))
        return super().build_batches(mixture, config, accumulation=accumulation, rank=rank, world_size=world_size)

    def host_counts(self, batch: dict[str, torch.Tensor]) -> list[int]:
        return replaced_token_host_counts(batch)

    def step_module(self, model: nn.Module, label_smoothing: float = 0.0) -> nn.Module:
        return ReplacedTokenStep(model, label_smoothing)

    def prepare_model(self, model: nn.Module, config: Config) -> None:
        """Nothing to freeze: the pair has no pooler or pair head."""

    def train_scalars(self, sums: dict[str, float]) -> dict[str, float]:
        """The terms' scalars, the discriminator's accuracy on replaced and on original tokens and
        its precision (the share replaced of the tokens it calls replaced), and the share of real
        tokens replaced."""
        replaced, tokens = sums["replaced_tokens"], sums["tokens"]
        called = called_replaced(sums["rtd_correct"], sums["replaced_correct"], replaced, tokens)
        return {**super().train_scalars(sums),
                "train/rtd_acc_replaced": sums["replaced_correct"] / max(replaced, 1),
                "train/rtd_acc_original": (sums["rtd_correct"] - sums["replaced_correct"]) / max(tokens - replaced, 1),
                "train/rtd_precision": sums["replaced_correct"] / max(called, 1),
                "train/replaced_share": replaced / max(tokens, 1)}

    def source_evaluator(self, folder: DataFolder, data_config: DataConfig, **options: Any) -> ReplacedTokenEvaluator:
        return ReplacedTokenEvaluator(folder, data_config, **options)

    def cost_parts(self, config: Config) -> tuple[CostPart, ...]:
        """The discriminator (its encoder on every token, no vocabulary head, and its one-logit
        head: dense d×d then d×1, on every token) and the generator (its encoder and masked-LM
        head on the predicted share)."""
        model = config.model
        head = 6 * (model.hidden_size * model.hidden_size + model.hidden_size)
        return (CostPart("discriminator", model, 0.0, head),
                CostPart("generator", pair_generator_config(model, self.keys.generator_size),
                         self.predicted_share(config.data), prefix="generator."))

    def describe(self, data_config: DataConfig) -> str:
        return (f"generator {self.keys.generator_size:g} of the discriminator, rtd_weight {self.keys.rtd_weight:g}, "
                f"max_predictions_per_seq {data_config.max_predictions_per_seq}")


class ReplacedTokenEvaluator:
    """The rtd losses and accuracies on fixed validation batches: epoch 0's masks for `seed`, and
    the generator's samples drawn from a generator of their own seeded by `seed` (every call sees
    the same draw, and the run's RNG is left alone). Under DDP each of `world_size` processes
    scores every `world_size`-th batch and the sums are all-reduced."""

    def __init__(self, data: DataFolder, data_config: DataConfig, *, micro_batch_size: int = 32,
                 seed: int = 42, rank: int = 0, world_size: int = 1) -> None:
        data_config = generator_data(data_config)
        self.instances = PretrainingInstances.from_config(data.validation, data.tokenizer, data_config, seed=seed)
        self.instances.set_epoch(0)
        self.collate = MaskingCollator.from_config(data.tokenizer, data_config, seed=seed)
        self.micro_batch_size, self.seed = micro_batch_size, seed
        self.rank, self.world_size = rank, world_size

    @torch.no_grad()
    def __call__(self, model: nn.Module, *, device: torch.device | None = None,
                 autocast: contextlib.AbstractContextManager | None = None,
                 max_batches: int | None = None) -> dict[str, float]:
        """Returns {"mlm_loss", "perplexity", "mlm_acc", "rtd_loss", "rtd_acc", "rtd_acc_replaced",
        "rtd_acc_original", "rtd_precision", "rtd_auc", "replaced_share", "predictions", "tokens"};
        the model's train/eval mode is put back."""
        device = device or next(model.parameters()).device
        was_training = model.training
        model.eval()
        draws = torch.Generator(device=device).manual_seed(self.seed)
        device_sums = torch.zeros(6, dtype=torch.float64, device=device)
        histogram = torch.zeros(2, AUC_BINS, dtype=torch.float64, device=device)
        host_counts = torch.zeros(2, dtype=torch.float64)  # predictions, tokens
        starts = range(0, len(self.instances), self.micro_batch_size)
        if max_batches is not None:
            starts = starts[:max_batches]
        for start in starts[self.rank::self.world_size]:
            rows = range(start, min(start + self.micro_batch_size, len(self.instances)))
            batch = self.collate(self.instances.__getitems__(rows))
            host_counts += torch.tensor(replaced_token_host_counts(batch), dtype=torch.float64)
            inputs = device_batch(batch, device, keep_attention_mask=True)
            with autocast or contextlib.nullcontext():
                *_, sums = replaced_token_sums(model, inputs, lambda logits: torch.rand(
                    logits.shape, generator=draws, device=logits.device), histogram=histogram)
            device_sums += sums
        model.train(was_training)
        device_values, (predictions, tokens) = summed_over_processes(
            torch.cat([device_sums, histogram.flatten()]), host_counts, self.world_size)
        sums_kept = device_sums.numel()  # the histogram's counts follow the sums
        (mlm_loss, mlm_correct, rtd_loss, rtd_correct, replaced_correct, replaced), counts = (
            device_values[:sums_kept], device_values[sums_kept:])

        def ratio(numerator: float, denominator: float) -> float:
            return numerator / denominator if denominator else float("nan")

        return {"mlm_loss": ratio(mlm_loss, predictions), "perplexity": perplexity(ratio(mlm_loss, predictions)),
                "mlm_acc": ratio(mlm_correct, predictions), "rtd_loss": ratio(rtd_loss, tokens),
                "rtd_acc": ratio(rtd_correct, tokens), "rtd_acc_replaced": ratio(replaced_correct, replaced),
                "rtd_acc_original": ratio(rtd_correct - replaced_correct, tokens - replaced),
                "rtd_precision": replaced_correct / max(called_replaced(rtd_correct, replaced_correct, replaced, tokens), 1),
                "rtd_auc": histogram_auc(counts[:AUC_BINS], counts[AUC_BINS:]),
                "replaced_share": ratio(replaced, tokens), "predictions": int(predictions), "tokens": int(tokens)}
