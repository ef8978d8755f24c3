"""BERT's masked LM (`data.objective: mlm`), with its sentence-pair task (NSP, SOP) when the data
has one: the batches, the step module that computes the loss sums, and the validation metrics."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn

from bertpre.batches import MaskingCollator, MixedInstances, PretrainingInstances, build_instances
from bertpre.labels import IGNORE_INDEX, MASK_ACTION_NAMES
from bertpre.model import BertForPreTraining
from bertpre.model.families import family_of
from bertpre.model.unpad import Unpadded
from bertpre.train.objectives.base import (
    LossTerm,
    Objective,
    copy_inputs,
    perplexity,
    summed_over_processes,
)

if TYPE_CHECKING:
    from bertpre.config import Config, DataConfig
    from bertpre.data import DataFolder, DataMixture

# What the model reads of a batch; `labels` and `mask_action` stay on the host.
MODEL_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "masked_lm_positions",
                "masked_lm_ids", "next_sentence_label",
                # `model.unpad`: the real tokens' layout, built by the collator (`unpadded_layout`)
                "token_index", "cu_seqlens", "document_ids", "cls_token_index", "masked_lm_token_index")
# `model.unpad` under `train.compile`: the token count is rounded up to a multiple of this (or of an
# eighth of the micro-batch's B·T, where smaller), so the step compiles for at most
# max(B·T / 1024, 8) token counts; at 256 x 128, 32 (a step's counts spread over a few).
UNPAD_BUCKET = 1024


class MaskedLMCounts(NamedTuple):
    """A masked-LM micro-batch's counts, in `MaskedLanguageModel.host_stats` order."""

    predictions: int
    pairs: int
    tokens: int


def mlm_host_counts(batch: dict[str, torch.Tensor]) -> MaskedLMCounts:
    """A masked-LM micro-batch's predictions, pair labels and real tokens, counted on the CPU."""
    pair_labels = batch.get("next_sentence_label")  # absent under pair_task none
    return MaskedLMCounts(predictions=int((batch["masked_lm_ids"] != IGNORE_INDEX).sum()),
                          pairs=0 if pair_labels is None else int((pair_labels != IGNORE_INDEX).sum()),
                          tokens=int(batch["attention_mask"].sum()))


def device_batch(batch: dict[str, torch.Tensor], device: torch.device, *,
                 keep_attention_mask: bool) -> dict[str, torch.Tensor]:
    """The model's inputs of a host batch, copied without waiting (see `base.copy_inputs`)."""
    return copy_inputs(batch, MODEL_INPUTS, device, keep_attention_mask=keep_attention_mask)


class MaskedLMStep(nn.Module):
    """The masked-LM step: the model, its loss sums and its accuracy counts for one micro-batch,
    as one module: what `train.compile` compiles whole (fixed shapes, no graph break) and DDP wraps."""

    def __init__(self, model: BertForPreTraining, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, batch: dict[str, torch.Tensor], carry: None = None
                ) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor, None]:
        """Returns the MLM and pair loss sums (in the graph), the device stats' sums (float64:
        mlm_loss, mlm_correct, pair_loss, pair_correct) and no carry (masked-LM micro-batches
        stand alone)."""
        masked_lm_ids = batch["masked_lm_ids"]  # (B, P)
        pair_labels = batch.get("next_sentence_label")  # (B,)
        unpadded = Unpadded.from_batch(batch) if "token_index" in batch else None  # model.unpad
        out = self.model(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                         token_type_ids=batch["token_type_ids"], next_sentence_label=pair_labels,
                         label_smoothing=self.label_smoothing,
                         masked_lm_positions=batch["masked_lm_positions"], masked_lm_ids=masked_lm_ids,
                         unpadded=unpadded)
        mlm_loss_sum = out.mlm_loss_sum
        pair_loss_sum = out.pair_loss_sum if pair_labels is not None else mlm_loss_sum.new_zeros(())
        with torch.no_grad():
            # An unused slot's id is -100, which no argmax equals; a chunked loss counted its own.
            mlm_correct = out.mlm_correct if out.mlm_correct is not None \
                else (out.prediction_logits.argmax(-1) == masked_lm_ids).sum()
            if pair_labels is None:
                pair_correct = mlm_correct.new_zeros(())
            else:
                pair_correct = (out.seq_relationship_logits.argmax(-1) == pair_labels).sum()
            sums = torch.stack([mlm_loss_sum.detach().double(), mlm_correct.double(),
                                pair_loss_sum.detach().double(), pair_correct.double()])
        return (mlm_loss_sum, pair_loss_sum), sums, None


def unpad_bucket(config: Config) -> int | None:
    """The collator's `unpad_bucket`: None without `model.unpad`; 1 (the exact count) for an eager
    step; under `train.compile`, `UNPAD_BUCKET` or an eighth of a micro-batch's B·T, where smaller."""
    if not config.model.unpad:
        return None
    if config.train.compile is not True:
        return 1
    return compiled_unpad_bucket(config.train.micro_batch_size * config.data.max_seq_length)


def compiled_unpad_bucket(positions: int) -> int:
    """The compiled step's bucket for a micro-batch of `positions` (B·T): `UNPAD_BUCKET`, or an
    eighth of B·T where smaller."""
    return min(UNPAD_BUCKET, max(1, positions // 8))


def freeze_pair_head(model: BertForPreTraining) -> None:
    """Under `pair_task: none` the pooler and the pair head take no part in the loss: freeze
    them, so DDP does not wait for gradients that never come. They are still saved and exported.
    A family without them (RoBERTa) has nothing to freeze.
    """
    if not family_of(model).pair_task:
        return
    for module in (model.bert.pooler, model.cls.seq_relationship):
        module.requires_grad_(False)


class MaskedLanguageModel(Objective):
    """`data.objective: mlm`: fresh pairs and masks each epoch from every document."""

    host_stats = ("predictions", "pairs", "tokens")
    # The masked tokens, then the sentence-pair task's labels (none under pair_task none).
    terms = (LossTerm("mlm", "predictions"), LossTerm("pair", "pairs", optional=True, summary=("acc",)))

    def predicted_share(self, data_config: DataConfig) -> float:
        """The mask rate, capped per sequence by max_predictions_per_seq."""
        if data_config.max_predictions_per_seq is None:
            return data_config.mlm_probability
        return min(data_config.mlm_probability, data_config.max_predictions_per_seq / data_config.max_seq_length)

    def build_batches(self, mixture: DataMixture, config: Config, *, accumulation: int, rank: int,
                      world_size: int) -> tuple[PretrainingInstances | MixedInstances, Callable]:
        """This process's instances of a phase (one folder or a mixture; a mixture's realised
        shares are said once) and the masking collator."""
        seed = config.train.seed
        instances = build_instances(mixture, config.data, seed=seed, rank=rank, world_size=world_size)
        if isinstance(instances, MixedInstances) and rank == 0:
            shares = ", ".join(f"{name} {share:.2%} ({count:,} instances, {count / block:.2f} of its epochs)"
                               for (name, share), count, block in zip(
                                   instances.shares.items(), instances.draws.tolist(),
                                   instances.stream_block.tolist(), strict=True))
            print(f"data: {instances.size:,} instances an epoch from {len(instances.names)} "
                  f"sources, every epoch: {shares}", file=sys.stderr)
        collate = MaskingCollator.from_config(mixture.tokenizer, config.data, seed,
                                              fixed_shapes=config.train.compile is True,
                                              unpad_bucket=unpad_bucket(config))
        return instances, collate

    def shares(self, instances: Any) -> dict[str, float]:
        return instances.shares if isinstance(instances, MixedInstances) else {}

    def host_counts(self, batch: dict[str, torch.Tensor]) -> MaskedLMCounts:
        return mlm_host_counts(batch)

    def to_device(self, batch: dict[str, torch.Tensor], device: torch.device, *,
                  keep_attention_mask: bool) -> dict[str, torch.Tensor]:
        return device_batch(batch, device, keep_attention_mask=keep_attention_mask)

    def step_module(self, model: nn.Module, label_smoothing: float = 0.0) -> nn.Module:
        return MaskedLMStep(model, label_smoothing)

    def prepare_model(self, model: nn.Module, config: Config) -> None:
        if config.data.pair_task == "none":
            # After the optimizer is built: its state keeps one layout whatever the pair task.
            freeze_pair_head(model)

    def source_evaluator(self, folder: DataFolder, data_config: DataConfig, **options: Any) -> Evaluator:
        return Evaluator(folder, data_config, **options)

    def describe(self, data_config: DataConfig) -> str:
        return f"max_predictions_per_seq {data_config.max_predictions_per_seq}"


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
            counts = mlm_host_counts(batch)
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
        device_values, host_values = summed_over_processes(device_sums, host_counts, self.world_size)
        (mlm_loss, correct, pair_loss, pair_correct, *action_correct) = device_values
        (predictions, pairs, sequences, *action_counts) = host_values

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
