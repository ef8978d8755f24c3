"""The masked LM's vocabulary projection and cross-entropy computed a chunk of predicted rows at a
time (`model.loss_chunk_rows`), so that a training step never holds the (rows, V) logits, their
float32 log-probabilities or their gradient at once: at ModernBERT's 50,368 ids and ~5,000
predictions a micro-batch those are ~1 GB each, at XLM-R's 250,002 the step's largest tensors.

The loss is the graph's last node, so each chunk's gradients are made in the forward, while its
logits are at hand (as fused linear cross-entropy kernels do), and the backward scales them by the
one number it receives: no second (rows, E) x (E, V) product, and no chunk kept. The numerics are the
unchunked path's: the product in the dtype the Linear would run in (the autocast dtype), the
softmax in float32, the argmax on the product's own logits."""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bertpre.labels import IGNORE_INDEX

# `auto`: a chunk's float32 logits at most this many elements (512 MiB): 2,624 rows at
# ModernBERT's vocabulary, 512 at XLM-R's; few chunks keep the per-chunk work (the (V, E)
# gradient's float32 sum, a dozen kernel launches) small beside the logits' own traffic.
AUTO_CHUNK_ELEMENTS = 1 << 27
# Chunks hold a multiple of this many rows (whole tensor-core tiles).
ROW_MULTIPLE = 64


class VocabularyHead(NamedTuple):
    """A masked-LM head cut before its vocabulary projection: `transform` (states (..., C) →
    features (..., E): dense, activation, norm) then `decoder` (E → V, its weight tied to the word
    embeddings). Called, it is the whole head: logits (..., V)."""

    transform: Callable[[torch.Tensor], torch.Tensor]
    decoder: nn.Linear

    def __call__(self, states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(states))


def chunk_rows(setting: int | str, rows: int, vocab_size: int) -> int:
    """The rows a chunk holds for `rows` predicted rows over `vocab_size` ids under the
    `model.loss_chunk_rows` `setting`; 0: unchunked (the setting 0, or one chunk would hold every
    row: the whole product, without the backward's second one). `auto`: the most rows, a multiple
    of `ROW_MULTIPLE`, whose float32 logits stay within `AUTO_CHUNK_ELEMENTS`."""
    if setting == "auto":
        setting = max(ROW_MULTIPLE, AUTO_CHUNK_ELEMENTS // vocab_size // ROW_MULTIPLE * ROW_MULTIPLE)
    return setting if 0 < setting < rows else 0


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype a Linear on `tensor` computes in here: the autocast dtype where autocast is on."""
    device_type = tensor.device.type
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else tensor.dtype


def chunked_cross_entropy(features: torch.Tensor, decoder: nn.Linear, labels: torch.Tensor,
                          label_smoothing: float, rows_per_chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`decoder` on `features` (..., E) and the cross-entropy against `labels` (...), a chunk of
    `rows_per_chunk` rows at a time.

    Returns:
        (the loss summed over the rows whose label is not -100, float32 and in the graph; the
        count of those rows whose argmax is their label, int64, outside it).
    """
    dtype = compute_dtype(features)
    bias = None if decoder.bias is None else decoder.bias.to(dtype)
    # The casts autocast would make in the Linear, outside the Function: autograd casts the
    # gradients back to the parameters' float32.
    weight = decoder.weight.to(dtype)
    gradients = torch.is_grad_enabled() and any(
        tensor is not None and tensor.requires_grad for tensor in (features, weight, bias))
    return ChunkedCrossEntropy.apply(features.reshape(-1, features.shape[-1]).to(dtype), weight, bias,
                                     labels.reshape(-1), label_smoothing, rows_per_chunk, gradients)


class ChunkedCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of `F.linear(features, weight, bias)` (N, V) against `labels` (N,),
    computed over chunks of rows. The loss is the graph's last node, so the gradient it receives
    is one number: each chunk's gradients (for an incoming gradient of 1) are computed in the
    forward, while its logits are at hand, and the backward only scales them: the logits are
    made once (no second product), and no chunk outlives its loop turn. Every product runs in
    the inputs' dtype with autocast off (the caller casts). A chunk's loop body is a few kernels
    (what each row needs lands in an (N,) tensor; the sums run once after the loop): on a GPU
    run eagerly, each kernel costs its launch."""

    @staticmethod
    def forward(ctx, features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                labels: torch.Tensor, label_smoothing: float, rows_per_chunk: int, gradients: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
        rows_total, vocab_size = features.shape[0], weight.shape[0]
        targets = labels.clamp(min=0)[:, None]  # (N, 1): a -100 row reads id 0, then counts for nothing
        label_log_probs = features.new_empty((rows_total, 1), dtype=torch.float32)
        mean_log_probs = features.new_zeros(rows_total, dtype=torch.float32)
        predicted = labels.new_empty(rows_total)
        if gradients:
            # d loss / d logits of a predicted row = softmax − ε / V − (1 − ε) at the label; 0 on a
            # -100 row. The (V, E) and (V,) sums run in float32 across chunks: one rounding to
            # `weight.dtype`, as the unchunked product's.
            scale = (labels != IGNORE_INDEX).float()[:, None]  # (N, 1)
            shift, at_label = -scale * (label_smoothing / vocab_size), -scale * (1 - label_smoothing)
            grad_features = torch.empty_like(features)  # (N, E)
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            grad_bias = None if bias is None else torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        with torch.autocast(features.device.type, enabled=False):
            for rows in chunks(rows_total, rows_per_chunk):
                logits = F.linear(features[rows], weight, bias)  # (c, V)
                log_probs = F.log_softmax(logits, dim=-1, dtype=torch.float32)  # (c, V)
                torch.gather(log_probs, 1, targets[rows], out=label_log_probs[rows])
                if label_smoothing:
                    torch.mean(log_probs, dim=-1, out=mean_log_probs[rows])
                torch.argmax(logits, dim=-1, out=predicted[rows])
                if gradients:
                    probs = log_probs.exp_()  # (c, V), in place: the log-probabilities are read
                    torch.addcmul(shift[rows], probs, scale[rows], out=probs)
                    probs.scatter_add_(1, targets[rows], at_label[rows])
                    grad_logits = probs.to(logits.dtype)  # as the unchunked backward casts it
                    torch.mm(grad_logits, weight, out=grad_features[rows])
                    if grad_weight.dtype == grad_logits.dtype:  # float32: summed in place
                        grad_weight.addmm_(grad_logits.t(), features[rows])
                    else:
                        grad_weight += grad_logits.t().mm(features[rows])
                    if grad_bias is not None:
                        grad_bias += grad_logits.sum(0, dtype=torch.float32)
                    del probs, grad_logits
                # freed before the next chunk's are made: one chunk's (c, V) tensors alive at a time
                del logits, log_probs
        # F.cross_entropy's: (1 − ε)·(−log p(label)) + ε·(the mean over ids of −log p)
        row_losses = -(1 - label_smoothing) * label_log_probs.squeeze(1) - label_smoothing * mean_log_probs
        loss = torch.where(labels != IGNORE_INDEX, row_losses, 0.0).sum()
        correct = (predicted == labels).sum()  # a -100 label equals no argmax
        if gradients:
            ctx.save_for_backward(grad_features, grad_weight, grad_bias)
            ctx.dtypes = weight.dtype, None if bias is None else bias.dtype
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, grad_correct: torch.Tensor | None):
        grad_features, grad_weight, grad_bias = ctx.saved_tensors
        weight_dtype, bias_dtype = ctx.dtypes
        grad_features = grad_features * grad_loss.to(grad_features.dtype)
        grad_weight = (grad_weight * grad_loss.float()).to(weight_dtype)
        grad_bias = None if grad_bias is None else (grad_bias * grad_loss.float()).to(bias_dtype)
        return grad_features, grad_weight, grad_bias, None, None, None, None


def chunks(total: int, size: int) -> list[slice]:
    """`total` rows as slices of `size` (the last one shorter)."""
    return [slice(start, min(start + size, total)) for start in range(0, total, size)]
