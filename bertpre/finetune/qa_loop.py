"""One seed of extractive question answering on windows: the family's question-answering model
trained with BERT's loss (the mean of the start and the end cross-entropy), the whole model or,
as a probe, its start/end layer alone on the frozen encoder; then every window's start and end
logits."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bertpre.config.finetune import Hyperparameters
from bertpre.finetune.loop import (
    FUSED_ADAMW_DEVICES,
    AfterEpoch,
    SeedProgress,
    model_inputs,
    optimizer_step,
    pad_token_id,
    schedule_steps,
    shuffled_batches,
)
from bertpre.finetune.model import build_task_model
from bertpre.finetune.qa_windows import QAWindows
from bertpre.finetune.source import Encoder
from bertpre.model.families import encoder_of, family
from bertpre.train.optim import learning_rate, parameter_groups
from bertpre.train.runtime import Runtime


def pad_windows(windows: QAWindows, indices: list[int], pad_id: int, padding_side: str = "right"
                ) -> dict[str, torch.Tensor]:
    """The windows `indices` padded to the longest: ids, token types, attention mask, and the
    answer's start and end positions (moved with the tokens under left padding)."""
    longest = max(len(windows.input_ids[index]) for index in indices)
    batch: dict[str, list] = {"input_ids": [], "token_type_ids": [], "attention_mask": [],
                              "start_positions": [], "end_positions": []}
    for index in indices:
        length = len(windows.input_ids[index])
        pad = longest - length
        left = pad if padding_side == "left" else 0

        def padded(row: list[int], value: int, pad: int = pad) -> list[int]:
            return [value] * pad + row if padding_side == "left" else row + [value] * pad

        batch["input_ids"].append(padded(windows.input_ids[index], pad_id))
        batch["token_type_ids"].append(padded(windows.token_type_ids[index], 0))
        batch["attention_mask"].append(padded([1] * length, 0))
        batch["start_positions"].append(windows.start_positions[index] + left)
        batch["end_positions"].append(windows.end_positions[index] + left)
    return {name: torch.tensor(rows, dtype=torch.long) for name, rows in batch.items()}


def span_loss(logits: torch.Tensor, start_positions: torch.Tensor, end_positions: torch.Tensor,
              attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """BERT's question-answering loss: the mean of the start and the end cross-entropy over the
    window's tokens. logits (B, T, 2); `attention_mask` (B, T) leaves padding out of the softmax,
    so that a window's loss is its own whatever the length of its batch-mates (transformers' loss
    counts the padding's logits too: the same on a batch without padding)."""
    logits = logits.float()
    if attention_mask is not None:  # padding is never an answer
        logits = logits.masked_fill(~attention_mask.bool().to(logits.device)[..., None], torch.finfo(logits.dtype).min)
    return (nn.functional.cross_entropy(logits[..., 0], start_positions)
            + nn.functional.cross_entropy(logits[..., 1], end_positions)) / 2


def train_question_answering(encoder: Encoder, windows: QAWindows, *, hp: Hyperparameters, seed: int,
                             runtime: Runtime, after_epoch: AfterEpoch | None = None) -> nn.Module:
    """The question-answering model trained from `seed` for `hp.epochs` passes over the windows;
    in probe mode the encoder stays frozen (eval mode, no gradients) and only the head learns
    (`qa_outputs`; ModernBERT's `head` and `classifier`).
    `after_epoch(epoch, model)` is called after each (from 1), e.g. to answer dev's questions."""
    torch.manual_seed(seed)
    model = build_task_model(encoder.config, encoder.state, 2, tagging=False, question_answering=True,
                             head_state=encoder.head_state).to(runtime.device)
    probe = hp.mode == "probe"
    if probe:
        encoder_of(model, encoder.config).requires_grad_(False)
    encoder_name = family(encoder.config).encoder_attribute
    trained = nn.ModuleList(module for name, module in model.named_children() if name != encoder_name) if probe else model
    optimizer = torch.optim.AdamW(parameter_groups(trained, hp.weight_decay), lr=hp.lr,
                                  fused=runtime.device.type in FUSED_ADAMW_DEVICES or None)
    scaler = runtime.grad_scaler()
    total, warmup = schedule_steps(len(windows), hp)
    generator = torch.Generator().manual_seed(seed)
    pad_id = pad_token_id(encoder)
    step = 0
    with SeedProgress(seed, total, hp.epochs, "windows") as progress:
        for epoch in range(hp.epochs):
            model.train()  # again after each epoch's scoring, which leaves it in eval mode
            if probe:  # frozen means no dropout either: the features a probe reads are the encoder's own
                encoder_of(model, encoder.config).eval()
            for indices in shuffled_batches(len(windows), hp.batch_size, generator):
                batch = pad_windows(windows, indices, pad_id, encoder.padding_side)
                inputs = model_inputs(model, batch, runtime.device)
                starts = batch["start_positions"].to(runtime.device)
                ends = batch["end_positions"].to(runtime.device)
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate(step, lr=hp.lr, warmup_steps=warmup, max_steps=total)
                with runtime.autocast():
                    logits = model(**inputs)  # (B, T, 2)
                loss = span_loss(logits, starts, ends, batch["attention_mask"])
                optimizer_step(loss, optimizer, scaler, trained.parameters(), hp.max_grad_norm)
                step += 1
                progress.step(epoch, loss, len(indices))
            if after_epoch is not None:
                after_epoch(epoch + 1, model)
    return model


@torch.no_grad()
def window_logits(model: nn.Module, windows: QAWindows, *, batch_size: int, pad_id: int, runtime: Runtime,
                  padding_side: str = "right") -> tuple[np.ndarray, np.ndarray]:
    """Every window's start and end logits, (windows, longest window) each, a window's own tokens
    first in its row (whatever the padding side), as `predict_answers` reads them."""
    model.eval()
    longest = max(map(len, windows.input_ids), default=0)
    starts = np.zeros((len(windows), longest), dtype=np.float32)
    ends = np.zeros((len(windows), longest), dtype=np.float32)
    order = sorted(range(len(windows)), key=lambda index: len(windows.input_ids[index]))
    for first in range(0, len(order), batch_size):
        indices = order[first:first + batch_size]
        batch = pad_windows(windows, indices, pad_id, padding_side)
        with runtime.autocast():
            logits = model(**model_inputs(model, batch, runtime.device)).float().cpu().numpy()  # (B, T, 2)
        width = logits.shape[1]
        for row, index in enumerate(indices):
            length = len(windows.input_ids[index])
            kept = slice(width - length, width) if padding_side == "left" else slice(0, length)
            starts[index, :length] = logits[row, kept, 0]
            ends[index, :length] = logits[row, kept, 1]
    return starts, ends
