"""One seed of fine-tuning, for every task kind: the task model trained (`train_task_model`: AdamW
without decay on biases and LayerNorm, warmup then linear decay, clipping; the encoder too, or
frozen under a probe), or a linear probe trained on frozen features; a labelled kind's predictions
on the scored splits."""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from bertpre.config.finetune import Hyperparameters
from bertpre.finetune.encoding import Encoded, pad_batch
from bertpre.finetune.kinds import task_kind
from bertpre.finetune.model import build_task_model
from bertpre.finetune.source import Encoder
from bertpre.labels import IGNORE_INDEX
from bertpre.model.families import encoder_of, family
from bertpre.model.unpad import Unpadded
from bertpre.tokenizer.roles import token_roles
from bertpre.train.optim import learning_rate, parameter_groups
from bertpre.train.runtime import Runtime

FUSED_ADAMW_DEVICES = ("cpu", "cuda")  # where torch has a fused AdamW kernel
AfterEpoch = Callable[[int, nn.Module], None]  # (epoch from 1, the model or probe head) after each epoch


def schedule_steps(examples: int, hp: Hyperparameters) -> tuple[int, int]:
    """(total optimizer steps, warmup steps) for `hp.epochs` passes over `examples`."""
    total = hp.epochs * math.ceil(examples / hp.batch_size)
    return total, math.ceil(total * hp.warmup_ratio)


def shuffled_batches(count: int, batch_size: int, generator: torch.Generator) -> Iterator[list[int]]:
    order = torch.randperm(count, generator=generator).tolist()
    for start in range(0, count, batch_size):
        yield order[start:start + batch_size]


class SeedProgress:
    """A seed's tqdm bar on stderr: step of steps, epoch, loss, examples a second. Silent where
    stderr is no terminal (a log file, a pipe, a test), as tqdm's `disable=None` decides."""

    REFRESH_SECONDS = 0.5  # the loss is read off the device (a wait) no oftener than this

    def __init__(self, seed: int, total_steps: int, epochs: int, unit: str = "examples") -> None:
        self.bar = tqdm(total=total_steps, desc=f"seed {seed}", unit="step", file=sys.stderr, disable=None,
                        dynamic_ncols=True)
        self.epochs, self.unit = epochs, unit
        self.examples, self.started, self.shown = 0, time.perf_counter(), -math.inf

    def step(self, epoch: int, loss: torch.Tensor, examples: int) -> None:
        """One optimizer step of `examples` examples done in epoch `epoch` (from 0)."""
        self.examples += examples
        if self.bar.disable:
            return
        now = time.perf_counter()
        if now - self.shown >= self.REFRESH_SECONDS or self.bar.n + 1 == self.bar.total:
            rate = self.examples / max(now - self.started, 1e-9)
            self.bar.set_postfix_str(f"epoch {epoch + 1}/{self.epochs}, loss {loss.item():.4f}, "
                                     f"{rate:,.0f} {self.unit}/s", refresh=False)
            self.shown = now
        self.bar.update()

    def __enter__(self) -> SeedProgress:
        return self

    def __exit__(self, *exception: object) -> None:
        self.bar.close()  # also when the seed fails or is stopped: no bar left to print at exit


def optimizer_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                   scaler: torch.amp.GradScaler | None, parameters: Iterable[nn.Parameter],
                   max_grad_norm: float) -> None:
    """Backward (scaled under fp16), clip the gradients' norm, step: one optimizer step."""
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()


def task_loss(logits: torch.Tensor, labels: torch.Tensor, task: str) -> torch.Tensor:
    """The loss of `task`'s kind (cross-entropy over classes or tags, mean squared error for values)."""
    return task_kind(task).loss(logits, labels)


def train_full(encoder: Encoder, train: Encoded, *, task: str, num_labels: int, hp: Hyperparameters,
               seed: int, runtime: Runtime, after_epoch: AfterEpoch | None = None) -> nn.Module:
    """The task model (encoder and head) trained together from `seed` for `hp.epochs` passes;
    `after_epoch(epoch, model)` is called after each (from 1), e.g. to score it on dev."""
    kind, pad_id = task_kind(task), pad_token_id(encoder)

    def batch_of(indices: list[int]) -> dict[str, torch.Tensor]:
        return pad_batch(train, indices, pad_id, regression=kind.float_labels, tagging=kind.per_token,
                         padding_side=encoder.padding_side)

    def loss_of(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return kind.loss(logits, batch["labels"].to(runtime.device, non_blocking=True))

    return train_task_model(encoder, len(train), batch_of, loss_of, head=kind.head, num_labels=num_labels, hp=hp,
                            seed=seed, runtime=runtime, unit=kind.unit, probe=False, after_epoch=after_epoch)


def train_task_model(encoder: Encoder, count: int, batch_of: Callable[[list[int]], dict[str, torch.Tensor]],
                     loss_of: Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor], *, head: str,
                     num_labels: int, hp: Hyperparameters, seed: int, runtime: Runtime, unit: str, probe: bool,
                     after_epoch: AfterEpoch | None = None) -> nn.Module:
    """Every kind's task model trained from `seed` for `hp.epochs` passes over `count` examples:
    `batch_of(indices)` pads a batch on the CPU, `loss_of(logits, batch)` scores the model's
    logits. AdamW without decay on biases and LayerNorm, warmup then linear decay, clipping. With
    `probe` the encoder stays frozen (eval mode, no gradients) and only the head learns.
    `after_epoch(epoch, model)` is called after each (from 1), e.g. to score it on dev."""
    torch.manual_seed(seed)
    model = build_task_model(encoder.config, encoder.state, num_labels, head=head,
                             head_state=encoder.head_state).to(runtime.device)
    frozen = encoder_of(model, encoder.config) if probe else None
    trained: nn.Module = model
    if frozen is not None:
        frozen.requires_grad_(False)
        encoder_name = family(encoder.config).encoder_attribute
        trained = nn.ModuleList(module for name, module in model.named_children() if name != encoder_name)
    # Fused AdamW (one kernel over all parameters, CPU or GPU) is the same update as the
    # per-tensor loop torch picks on a CPU, several times faster than it for a small model.
    optimizer = torch.optim.AdamW(parameter_groups(trained, hp.weight_decay), lr=hp.lr,
                                  fused=runtime.device.type in FUSED_ADAMW_DEVICES or None)
    scaler = runtime.grad_scaler()
    total, warmup = schedule_steps(count, hp)
    generator = torch.Generator().manual_seed(seed)
    step = 0
    with SeedProgress(seed, total, hp.epochs, unit) as progress:
        for epoch in range(hp.epochs):
            model.train()  # again after each epoch's scoring, which leaves it in eval mode
            if frozen is not None:  # frozen means no dropout either: the features a probe reads are the encoder's own
                frozen.eval()
            for indices in shuffled_batches(count, hp.batch_size, generator):
                batch = batch_of(indices)
                inputs = model_inputs(model, batch, runtime.device)
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate(step, lr=hp.lr, warmup_steps=warmup, max_steps=total)
                with runtime.autocast():
                    logits = model(**inputs)
                loss = loss_of(logits, batch)
                optimizer_step(loss, optimizer, scaler, trained.parameters(), hp.max_grad_norm)
                step += 1
                progress.step(epoch, loss, len(indices))
            if after_epoch is not None:
                after_epoch(epoch + 1, model)
    return model


@torch.no_grad()
def predict(model: nn.Module, encoded: Encoded, *, task: str, batch_size: int, pad_id: int,
            runtime: Runtime, padding_side: str = "right") -> np.ndarray:
    """Class ids (or values) per example; for tagging, the concatenated first-piece predictions.

    Batches take the examples in order of length, so that little of each is padding; the
    outputs are put back in the examples' order.
    """
    model.eval()
    kind = task_kind(task)
    order = sorted(range(len(encoded)), key=lambda index: len(encoded.input_ids[index]))
    outputs: list[torch.Tensor] = [torch.empty(0)] * len(encoded)  # one per example
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = pad_batch(encoded, indices, pad_id, regression=kind.float_labels, tagging=kind.per_token,
                          padding_side=padding_side)
        inputs = model_inputs(model, batch, runtime.device)
        batch = to_device(batch, runtime.device)
        with runtime.autocast():
            logits = model(**inputs).float()
        rows = kind.outputs(logits, batch)  # a class id or value an example, or (words,) tag ids
        for index, row in zip(indices, rows, strict=True):
            outputs[index] = row.reshape(-1)
    return torch.cat(outputs).numpy()


def padding_mask(batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """The batch's attention mask, or None when no row is padded (SDPA's faster path); read on
    the CPU, before the batch moves, so that no device is waited on."""
    mask = batch["attention_mask"]
    return None if bool(mask.all()) else mask


def model_inputs(model: nn.Module, batch: dict[str, torch.Tensor], device: torch.device) -> dict:
    """A CPU batch as the task model's keyword inputs on `device`: ids, token types, the padding
    mask (None without padding) and, for a model that takes it, where the real tokens are, so
    that its layers compute nothing for padding (`Unpadded`, made on the CPU)."""
    mask = padding_mask(batch)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": mask, "token_type_ids": batch["token_type_ids"]}
    inputs = {name: None if tensor is None else tensor.to(device, non_blocking=True)
              for name, tensor in inputs.items()}
    if mask is not None and getattr(model, "takes_unpadded", False):
        inputs["unpadded"] = Unpadded.from_mask(mask).to(device)
    return inputs


@torch.no_grad()
def encoder_features(encoder: Encoder, encoded: Encoded, *, task: str, pooling: str, batch_size: int,
                     runtime: Runtime) -> torch.Tensor:
    """Frozen features: the [CLS] output (BERT's first token, XLNet's last) or the mean over
    tokens per example (B, C); for tagging, each word's first piece (words, C). fp32, on the CPU."""
    model = build_task_model(encoder.config, encoder.state, 1, tagging=True).to(runtime.device)
    model.eval()
    kind, pad_id = task_kind(task), pad_token_id(encoder)
    pooling = kind.pooling or pooling
    features = []
    for start in range(0, len(encoded), batch_size):
        indices = list(range(start, min(start + batch_size, len(encoded))))
        batch = pad_batch(encoded, indices, pad_id, regression=kind.float_labels, tagging=kind.per_token,
                          padding_side=encoder.padding_side)
        inputs = model_inputs(model, batch, runtime.device)
        batch = to_device(batch, runtime.device)
        with runtime.autocast():
            hidden = model.hidden_states(**inputs).float()  # (B, T, C)
        if pooling == "first-piece":  # a word's features: its first piece's
            features.append(hidden[batch["labels"] != IGNORE_INDEX].cpu())
        elif pooling == "mean":
            mask = batch["attention_mask"].unsqueeze(-1).float()
            features.append(((hidden * mask).sum(1) / mask.sum(1)).cpu())
        else:  # with left padding every row's [CLS] is last
            features.append(hidden[:, -1 if encoder.padding_side == "left" else 0].cpu())
    return torch.cat(features)


def probe_labels(encoded: Encoded, task: str) -> torch.Tensor:
    """The labels probe features line up with: per example, or per kept word for tagging."""
    return task_kind(task).targets(encoded)


def train_probe(train_features: torch.Tensor, train_labels: torch.Tensor, scored_features: torch.Tensor,
                *, task: str, num_labels: int, hp: Hyperparameters, seed: int,
                after_epoch: AfterEpoch | None = None) -> np.ndarray:
    """A linear head on frozen features (AdamW, warmup then linear decay); predictions on `scored`.
    `after_epoch(epoch, head)` is called after each epoch (from 1)."""
    torch.manual_seed(seed)
    head, kind = nn.Linear(train_features.shape[1], num_labels), task_kind(task)
    optimizer = torch.optim.AdamW(parameter_groups(head, hp.weight_decay), lr=hp.lr)
    total, warmup = schedule_steps(len(train_features), hp)
    generator = torch.Generator().manual_seed(seed)
    step = 0
    with SeedProgress(seed, total, hp.epochs, kind.probe_unit) as progress:
        for epoch in range(hp.epochs):
            for indices in shuffled_batches(len(train_features), hp.batch_size, generator):
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate(step, lr=hp.lr, warmup_steps=warmup, max_steps=total)
                loss = kind.loss(head(train_features[indices]), train_labels[indices])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(head.parameters(), hp.max_grad_norm)
                optimizer.step()
                step += 1
                progress.step(epoch, loss, len(indices))
            if after_epoch is not None:
                after_epoch(epoch + 1, head)
    return probe_outputs(head, scored_features, task)


@torch.no_grad()
def probe_outputs(head: nn.Module, features: torch.Tensor, task: str) -> np.ndarray:
    """A probe's class ids (or values) for `features`."""
    return task_kind(task).predicted(head(features)).numpy()  # a row of features each


def pad_token_id(encoder: Encoder) -> int:
    """The id a batch is padded with: the tokenizer's padding by role (BERT's [PAD], RoBERTa's
    <pad>, which is 1: its 0 is <s>, and its positions skip the padding's id)."""
    return token_roles(encoder.tokenizer).pad_token_id


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}
