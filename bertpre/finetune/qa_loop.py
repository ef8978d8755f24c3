"""One seed of extractive question answering on windows: the family's question-answering model
trained with BERT's loss (the mean of the start and the end cross-entropy), the whole model or,
as a probe, its start/end layer alone on the frozen encoder; then every window's start and end
logits."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bertpre.config.finetune import Hyperparameters
from bertpre.finetune.loop import AfterEpoch, model_inputs, pad_token_id, train_task_model
from bertpre.finetune.qa_windows import QAWindows
from bertpre.finetune.source import Encoder
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
    """The question-answering model trained from `seed` for `hp.epochs` passes over the windows
    (`train_task_model`); in probe mode the encoder stays frozen and only the head learns
    (`qa_outputs`; ModernBERT's `head` and `classifier`).
    `after_epoch(epoch, model)` is called after each (from 1), e.g. to answer dev's questions."""
    pad_id = pad_token_id(encoder)

    def batch_of(indices: list[int]) -> dict[str, torch.Tensor]:
        return pad_windows(windows, indices, pad_id, encoder.padding_side)

    def loss_of(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:  # logits (B, T, 2)
        starts = batch["start_positions"].to(runtime.device)
        ends = batch["end_positions"].to(runtime.device)
        return span_loss(logits, starts, ends, batch["attention_mask"])

    return train_task_model(encoder, len(windows), batch_of, loss_of, head="span", num_labels=2, hp=hp, seed=seed,
                            runtime=runtime, unit="windows", probe=hp.mode == "probe", after_epoch=after_epoch)


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
