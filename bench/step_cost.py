"""A GPU training step seen on the CPU: one step of a real bertpre model traced on fake tensors.

    .venv/bin/python -m bench.step_cost                                  # BERT-base, 256 x 128, as bench.gpu throughput
    .venv/bin/python -m bench.step_cost --architecture modernbert        # ModernBERT-base, 32 x 1024
    .venv/bin/python -m bench.step_cost --set low_precision_layernorm=false   # a model key changed (A/B)
    .venv/bin/python -m bench.step_cost --json trace.json                # the report as JSON too
    .venv/bin/python -m bench.step_cost --set unpad=true [--unpad-bucket 1024]   # the real tokens alone
    .venv/bin/python -m bench.step_cost --architecture modernbert --set unpad=true   # on varlen_attn, windowed

The step is `bench.gpu`'s bertpre side (the trainer's `MaskedLMStep` on (B, P)
`masked_lm_positions`, loss sums over counts taken on the CPU), forward and backward, on
`FakeTensorMode` tensors (shapes and dtypes, no data: BERT-base costs no memory and ~20 s), with
every aten kernel recorded by a `TorchDispatchMode`. The model runs under CUDA's bf16 autocast
policy, emulated (`CudaAutocast`): matrix products in bf16, layer_norm, softmax, log_softmax and
the losses in fp32 and returning fp32, as CUDA autocast does (CPU autocast keeps layer_norm in its
input dtype and would hide the fp32 residual stream). Attention stands in as one fused kernel each
way (cuDNN / FlashAttention on the H100: no (T, T) tensor in memory) and dropout as CUDA's
`native_dropout` (one kernel, a 1-byte mask). Under `unpad=true`, attention that a GPU runs as
`varlen_attn` (no attention dropout: ModernBERT's, not BERT's 0.1) is traced as that kernel
(`FusedVarlenAttention`), at the FLOPs of the tiles it computes, not as the CPU's padded view.

Reported: kernels a step; executed FLOPs (matrix products, attention at the FLOPs its kernel
computes: a dense window mask computes every pair) against useful FLOPs
(`bertpre.model.cost.training_flops_per_token` × real tokens); bytes each kernel reads and writes
by class (matrix-product I/O, attention, everything else); casts and their bytes; activation-sized
fp32 kernels (an fp32 output of at least B·T·C elements: one hidden state); host syncs (kernels
whose result the host must read: `.item()`, `nonzero`); the largest tensor a kernel writes (a
floor under the step's peak memory: the masked LM's (rows, V) logits, unless they run in chunks,
`model.loss_chunk_rows`); and a predicted GPU step time:

    step_ms = matmul TFLOP / rate + attention TFLOP / rate at the row length
              + other GB / bandwidth + kernels × µs a kernel + optimizer_ms

with constants fitted on recorded eager profiles (`FIT`: two H200 profiles of 2026-11-28, an A/B
that moved bytes and kernels differently; printed with each prediction). Refit them after every
GPU run (`--refit PROFILE.json`, twice for an A/B pair: bandwidth and µs a kernel solved from
both), tracing each profiled configuration, and say how far each prediction missed. Not
modelled: torch.compile's fusion (compare compiled
variants only with each other), the optimizer's own traffic (a constant).
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from bench.common import ROOT, make_batch, parse_changes
from bench.gpu import (
    DEFAULTS,
    MODERNBERT_MASKING,
    MODERNBERT_VOCAB_SIZE,
    model_config,
    modernbert_config,
    objective_loss,
    prediction_slots,
    trainer_batches,
)

MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
# Kernels that move no data: views, metadata, allocation (an empty tensor is not written).
FREE_OPS = frozenset({
    "view", "_unsafe_view", "transpose", "t", "expand", "permute", "unsqueeze", "squeeze", "select", "slice",
    "as_strided", "alias", "detach", "split", "split_with_sizes", "unbind", "chunk", "narrow", "unflatten",
    "reshape", "_reshape_alias", "view_as", "expand_as", "diagonal", "lift_fresh", "empty", "empty_like",
    "new_empty", "empty_strided", "new_empty_strided", "is_same_size", "_has_compatible_shallow_copy_type",
})
# Kernels that write without reading.
FILL_OPS = frozenset({"zero_", "fill_", "zeros", "ones", "zeros_like", "ones_like", "full", "full_like", "new_zeros",
                      "new_ones", "new_full", "arange", "scalar_tensor"})
# In-place kernels that write a tensor at the indexed places alone: they move the index, the
# source and as many of the destination's elements as the source holds, not the destination.
SCATTER_OPS = frozenset({"scatter_add_", "scatter_", "scatter_reduce_", "index_put_", "index_add_"})
# Kernels whose result the host must wait for (a stalled queue on a GPU).
SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_consecutive",
                      "unique_dim", "is_nonzero", "equal", "repeat_interleave"})

# CUDA autocast's lists (aten/src/ATen/autocast_mode.cpp), for the functions bertpre's models call.
LOWER_PRECISION = frozenset({F.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm,
                             torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.addmm, torch.baddbmm})
FLOAT32 = frozenset({F.layer_norm, torch.layer_norm, F.group_norm, F.softmax, torch.softmax, torch.Tensor.softmax,
                     F.log_softmax, torch.log_softmax, torch.Tensor.log_softmax, F.cross_entropy, F.nll_loss,
                     torch.exp, torch.Tensor.exp, torch.rsqrt, torch.Tensor.rsqrt, torch.pow, torch.Tensor.pow,
                     torch.cumsum, torch.Tensor.cumsum, torch.logsumexp, torch.Tensor.logsumexp})
# The autocast state switches themselves: run as they are, so that a model's own
# `torch.autocast(enabled=False)` holds inside the emulation.
AUTOCAST_SWITCHES = frozenset({torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast})


def nbytes(value: Any) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in nested lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


@dataclass
class Kernel:
    """One recorded kernel: its aten name, forward or backward, bytes read and written, FLOPs,
    class (matmul, attention, other), its first output's dtype and elements, and for a cast the
    dtypes it converts between."""

    op: str
    phase: str
    read: int
    written: int
    flops: int = 0
    kind: str = "other"
    dtype: str = ""
    numel: int = 0
    cast: tuple[str, str] | None = None
    largest: int = 0  # bytes of its largest output


@dataclass
class Trace:
    """The kernels of one step, in order."""

    kernels: list[Kernel] = field(default_factory=list)
    phase: str = "forward"
    syncs: list[str] = field(default_factory=list)

    def add(self, kernel: Kernel) -> None:
        self.kernels.append(kernel)


def matmul_flops(op: str, args: tuple) -> int:
    """2·M·K·N of a (batched) matrix product: mm/bmm (a, b), addmm/baddbmm (bias, a, b)."""
    a, b = (args[0], args[1]) if op in ("mm", "bmm") else (args[1], args[2])
    batch = a.shape[0] if a.dim() == 3 else 1
    return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


class KernelRecorder(TorchDispatchMode):
    """Records each aten kernel that moves data into `trace`."""

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = func.overloadpacket.__name__
        if op in SYNC_OPS:
            self.trace.syncs.append(op)
        out = func(*args, **kwargs)
        outputs = list(tensors_in(out))
        if not outputs or op in FREE_OPS or op.endswith("_view"):  # metadata (device, sizes) or a view
            return out
        # an `out=` tensor is written, not read
        inputs = (args, {name: value for name, value in kwargs.items() if name != "out"})
        read = 0 if op in FILL_OPS else sum(nbytes(t) for t in tensors_in(inputs))
        written = sum(nbytes(t) for t in outputs)
        if op == "copy_":  # reads the source, writes the destination
            read = nbytes(args[1])
        if op in SCATTER_OPS:  # the source's worth of the destination, read and written
            touched = nbytes(list(tensors_in(args[1:]))[-1])
            read, written = sum(nbytes(t) for t in tensors_in(args[1:])) + touched, touched
        first = outputs[0] if outputs else None
        cast = (str(args[0].dtype), str(out.dtype)) if op == "_to_copy" and args[0].dtype != out.dtype else None
        self.trace.add(Kernel(op=op, phase=self.trace.phase, read=read, written=written,
                              flops=matmul_flops(op, args) if op in MATMUL_OPS else 0,
                              kind="matmul" if op in MATMUL_OPS else "other",
                              dtype=str(first.dtype) if first is not None else "",
                              numel=first.numel() if first is not None else 0, cast=cast,
                              largest=max(nbytes(t) for t in outputs)))
        return out


class FusedAttention(torch.autograd.Function):
    """SDPA as the H100 runs it: one fused kernel forward (scores never stored; it keeps the
    row log-sum-exp, fp32) and one backward. Recorded with the FLOPs of its products:
    4·B·H·Tq·Tk·hs forward, twice that backward (model FLOPs, as the cost model counts them)."""

    @staticmethod
    def forward(ctx, query, key, value, mask, trace: Trace):
        B, H, Tq, hs = query.shape
        Tk = key.shape[2]
        ctx.save_for_backward(query, key, value)
        ctx.trace, ctx.mask_bytes = trace, nbytes(mask)
        ctx.flops = 4 * B * H * Tq * Tk * hs
        lse = B * H * Tq * 4
        trace.add(Kernel(op="fused_attention", phase="forward", kind="attention", flops=ctx.flops,
                         read=nbytes(query) + nbytes(key) + nbytes(value) + ctx.mask_bytes,
                         written=nbytes(query) + lse, dtype=str(query.dtype), numel=query.numel()))
        return query.new_empty(query.shape)

    @staticmethod
    def backward(ctx, grad):
        query, key, value = ctx.saved_tensors
        io = nbytes(query) + nbytes(key) + nbytes(value)
        ctx.trace.add(Kernel(op="fused_attention_backward", phase="backward", kind="attention",
                             flops=2 * ctx.flops, read=io + 2 * nbytes(query) + ctx.mask_bytes
                             + query.shape[0] * query.shape[1] * query.shape[2] * 4,
                             written=io, dtype=str(query.dtype), numel=query.numel()))
        return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape), None, None


# FlashAttention's query and key blocks: a (tile x tile) block of scores is computed whole or skipped.
VARLEN_TILE = 128


def varlen_pairs(lengths: list[int], window: int | None, tile: int = VARLEN_TILE) -> int:
    """The (query, key) pairs `varlen_attn` computes on sequences of `lengths` tokens: every block
    of each sequence's tiles (cut at its end); with a `window` (keys within that many positions
    each way), the blocks that hold a pair within it alone, the others skipped."""
    pairs = 0
    for length in lengths:
        sizes = [min(tile, length - start) for start in range(0, length, tile)]
        for a, rows in enumerate(sizes):
            for b, columns in enumerate(sizes):
                nearest = 0 if a == b else (abs(a - b) - 1) * tile + 1  # the closest pair's distance
                if window is None or nearest <= window:
                    pairs += rows * columns
    return pairs


class FusedVarlenAttention(torch.autograd.Function):
    """`varlen_attn` as a GPU runs it (FlashAttention on `cu_seqlens`): one kernel each way, q, k,
    v (N, nh, hs), at 4·nh·hs FLOPs a computed pair (`varlen_pairs`) forward, twice that backward."""

    @staticmethod
    def forward(ctx, query, key, value, pairs: int, trace: Trace):
        N, H, hs = query.shape
        ctx.save_for_backward(query, key, value)
        ctx.trace, ctx.flops = trace, 4 * H * hs * pairs
        trace.add(Kernel(op="varlen_attention", phase="forward", kind="attention", flops=ctx.flops,
                         read=nbytes(query) + nbytes(key) + nbytes(value), written=nbytes(query) + N * H * 4,
                         dtype=str(query.dtype), numel=query.numel()))
        return query.new_empty(query.shape)

    @staticmethod
    def backward(ctx, grad):
        query, key, value = ctx.saved_tensors
        io = nbytes(query) + nbytes(key) + nbytes(value)
        ctx.trace.add(Kernel(op="varlen_attention_backward", phase="backward", kind="attention",
                             flops=2 * ctx.flops, read=io + 2 * nbytes(query) + query.shape[0] * query.shape[1] * 4,
                             written=io, dtype=str(query.dtype), numel=query.numel()))
        return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape), None, None


def varlen_as_on_a_gpu(trace: Trace, lengths: list[int]) -> contextlib.ExitStack:
    """Patches under which the traced model takes `varlen_attn` where a GPU would (`varlen_usable`
    with a CUDA device and bf16 autocast: no attention dropout, a pretraining layout), traced as
    `FusedVarlenAttention` on the host layout's sequence `lengths` (fake tensors hold no values)."""
    from bertpre.model import bert, modernbert, unpad

    def usable(hidden_states, unpadded, dropout_p):
        return dropout_p == 0.0 and unpadded.cu_seqlens is not None

    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, window_size=(-1, -1), **options):
        window = None if tuple(window_size) == (-1, -1) else window_size[0]
        return FusedVarlenAttention.apply(query, key, value, varlen_pairs(lengths, window), trace)

    stack = contextlib.ExitStack()
    for module in (bert, modernbert):
        stack.enter_context(mock.patch.object(module, "varlen_usable", usable))
    stack.enter_context(mock.patch.object(unpad, "varlen_attn", varlen_attn))
    return stack


class CudaAutocast(TorchFunctionMode):
    """CUDA's autocast policy, applied wherever the real CPU autocast state is on (so that
    `torch.is_autocast_enabled`, `get_autocast_dtype` and a model's `autocast(enabled=False)`
    read and act as on a GPU): lower-precision functions cast floating inputs to the autocast
    dtype (a leaf parameter's cast cached for the step, as autocast caches it), fp32 functions to
    float32, the rest run in the dtypes they are given; each runs with CPU autocast off, so that
    only CUDA's policy applies. SDPA and dropout run as CUDA's fused kernels."""

    def __init__(self, trace: Trace) -> None:
        super().__init__()
        self.trace = trace
        self.cache: dict[int, torch.Tensor] = {}

    def cast(self, value: Any, dtype: torch.dtype) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(self.cast(item, dtype) for item in value)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dtype == dtype:
            return value
        leaf = value.is_leaf and value.requires_grad
        if leaf and (id(value), dtype) in self.cache:
            return self.cache[(id(value), dtype)]
        result = value.to(dtype)
        if leaf:
            self.cache[(id(value), dtype)] = result
        return result

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in AUTOCAST_SWITCHES or not torch.is_autocast_enabled("cpu"):
            return self.run_fused(func, args, kwargs)
        dtype = torch.get_autocast_dtype("cpu")
        if func in LOWER_PRECISION or func is F.scaled_dot_product_attention:
            args, kwargs = self.cast(args, dtype), {k: self.cast(v, dtype) for k, v in kwargs.items()}
        elif func in FLOAT32:
            args = self.cast(args, torch.float32)
            kwargs = {k: self.cast(v, torch.float32) for k, v in kwargs.items()}
        with torch.autocast("cpu", enabled=False):
            return self.run_fused(func, args, kwargs)

    def run_fused(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        """`func`, with SDPA and dropout as the GPU's fused kernels."""
        if func is F.scaled_dot_product_attention:
            query, key, value = args[:3]
            return FusedAttention.apply(query, key, value, kwargs.get("attn_mask"), self.trace)
        if func is F.dropout:
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            if not training or p == 0:
                return args[0]  # as CUDA's dropout: no kernel
            return torch.native_dropout(args[0], p, True)[0]
        return func(*args, **kwargs)


# --- the model and its step ------------------------------------------------------------------


@dataclass
class StepShape:
    """What is traced: the family, its bench.gpu size, the batch and the model keys changed."""

    architecture: str = "bert"
    model: str = "base"
    batch_size: int | None = None
    seq_length: int | None = None
    short_rows: float = 0.1
    changes: dict[str, Any] = field(default_factory=dict)
    unpad_bucket: int = 1  # under unpad=true: the token count rounded up to a multiple (train.compile's)

    def __post_init__(self) -> None:
        defaults = DEFAULTS[self.architecture]
        self.batch_size = self.batch_size or defaults["batch_size"]
        self.seq_length = self.seq_length or defaults["seq_length"]


def build_step(shape: StepShape, fake_mode) -> tuple[torch.nn.Module, Callable, dict, Any, Any, list[int] | None]:
    """The model (built under `fake_mode`), `bench.gpu`'s bertpre loss, its fake batch, the step's
    host counts, the model's config and, under `unpad`, the lengths of the layout's sequences."""
    from bertpre.model import BertConfig, BertForPreTraining
    from bertpre.model.modernbert import ModernBertForMaskedLM
    from bertpre.train.objectives.mlm import MaskedLMStep

    modernbert = shape.architecture == "modernbert"
    if modernbert:
        config = modernbert_config(shape.model, shape.seq_length)
        for name, value in shape.changes.items():
            setattr(config, name, value)
        batch = make_batch(shape.batch_size, shape.seq_length, "cpu", 0, shape.short_rows, MODERNBERT_MASKING,
                           capped=False, vocab_size=MODERNBERT_VOCAB_SIZE)
        del batch["next_sentence_label"]
    else:
        config = BertConfig(**{**model_config(shape.model, shape.seq_length), **shape.changes})
        batch = make_batch(shape.batch_size, shape.seq_length, "cpu", 0, shape.short_rows)
    config.validate()
    # Fake weights have no values to draw: trunc_normal_'s redraw loop would read them (a host sync).
    with fake_mode, mock.patch.object(torch.nn.init, "trunc_normal_", lambda tensor, *args, **kwargs: tensor):
        model = (ModernBertForMaskedLM if modernbert else BertForPreTraining)(config).train()
    slots = prediction_slots(shape.seq_length, [batch], capped=not modernbert)
    inputs, totals = trainer_batches([batch], slots, torch.device("cpu"), keep_attention_mask=False)
    lengths = None
    if getattr(config, "unpad", False):  # the collator's layout of the real tokens (`model.unpad`)
        from bertpre.batches.padding import unpadded_layout

        layout = unpadded_layout(batch["attention_mask"].bool().numpy(), inputs[0]["masked_lm_positions"].numpy(),
                                 bucket=shape.unpad_bucket)
        inputs[0].update({name: torch.from_numpy(array) for name, array in layout.items()})
        lengths = [length for length in np.diff(layout["cu_seqlens"]).tolist() if length]
    fake_batch = {name: fake_mode.from_tensor(tensor) for name, tensor in inputs[0].items()}
    return model, objective_loss(MaskedLMStep(model), totals), fake_batch, totals, config, lengths


def build_peer_step(shape: StepShape, fake_mode) -> tuple[Callable, dict]:
    """`bench.gpu`'s peer, `transformers.BertForPreTraining` (built under `fake_mode` from the
    shared shape, bertpre's `--set` changes left out), its step Hugging Face's way (`model(**batch).loss`
    from full-length `labels`) and its fake batch: the same batch as bertpre's."""
    import transformers

    if shape.architecture != "bert":
        # ModernBertForMaskedLM's sparse prediction selects its rows by a boolean mask: a
        # data-dependent shape, which fake tensors cannot trace without a shape environment.
        raise SystemExit(f"--peer traces BertForPreTraining only, not {shape.architecture}'s peer")
    with fake_mode, mock.patch.object(torch.nn.init, "trunc_normal_", lambda tensor, *args, **kwargs: tensor):
        config = transformers.BertConfig(**model_config(shape.model, shape.seq_length))
        model = transformers.BertForPreTraining(config).train()
    batch = make_batch(shape.batch_size, shape.seq_length, "cpu", 0, shape.short_rows)
    return lambda inputs: model(**inputs).loss, {name: fake_mode.from_tensor(t) for name, t in batch.items()}


def trace_step(shape: StepShape, peer: bool = False) -> tuple[Trace, Any, Any]:
    """Forward and backward of one step under emulated CUDA bf16 autocast: (trace, host counts,
    config); with `peer`, the trace is the peer's step on the same batch (the counts and config
    stay bertpre's: the useful work is the same)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    model, loss_of, batch, totals, config, lengths = build_step(shape, fake_mode)
    if peer:
        loss_of, batch = build_peer_step(shape, fake_mode)
    trace = Trace()
    varlen = varlen_as_on_a_gpu(trace, lengths) if lengths is not None and not peer else contextlib.nullcontext()
    with fake_mode, varlen, KernelRecorder(trace):
        with CudaAutocast(trace), torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_of(batch)
        trace.phase = "backward"
        loss.backward()
    return trace, totals, config


# --- the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """Constants of the step-time model, and where they came from."""

    matmul_tflops: float  # TFLOP/s the step's matrix products ran at
    # TFLOP/s of the fused attention kernels by row length (log-interpolated between, held beyond):
    # short rows keep the kernel far from its peak
    attention_tflops: tuple[tuple[int, float], ...]
    bandwidth_tb_s: float  # effective TB/s of everything else
    optimizer_ms: float  # gradient clipping + fused AdamW
    source: str
    # µs a kernel costs beyond its bytes and FLOPs (the eager step's host dispatch, launches): the
    # H200 run of 2026-11-28 showed the eager step paying per kernel; 0 where one profile fitted
    kernel_us: float = 0.0

    def attention_rate(self, length: int) -> float:
        points = sorted(self.attention_tflops)
        if length <= points[0][0] or len(points) == 1:
            return points[0][1]
        for (short, slow), (long, fast) in itertools.pairwise(points):
            if length <= long:
                return slow + (fast - slow) * math.log(length / short) / math.log(long / short)
        return points[-1][1]

    def predict_ms(self, matmul_tflop: float, attention_tflop: float, gb_other: float, length: int,
                   kernels: int = 0) -> dict[str, float]:
        parts = {"matmul": matmul_tflop / self.matmul_tflops * 1e3,
                 "attention": attention_tflop / self.attention_rate(length) * 1e3,
                 "other": gb_other / self.bandwidth_tb_s, "kernels": kernels * self.kernel_us / 1e3,
                 "optimizer": self.optimizer_ms}
        return {**parts, "step": sum(parts.values())}


# Fitted (`--refit bench/results/gpu-throughput-base-128-profile-2026-11-26.json`) on the H100 eager
# profile of 2026-11-26 (torch 2.11, BERT-base 256 x 128, bf16, fused AdamW): its median step 77.27 ms;
# aten::mm + aten::addmm 52.78 ms over the 2 profiled steps against this tool's trace of that step
# (main 14e2594, 17.44 TFLOP of matrix products); the cuDNN attention backward 4.74 ms a step, its
# forward (not in the profile's top rows) taken as 2/5 of it (FlashAttention's 2 products against 5):
# 0.464 TFLOP in 6.64 ms; clipping + fused AdamW 1.8 ms (perf-proxy README's calibration); the rest
# of the step over the trace's 91.6 GB of other traffic. Attention at 1,024 tokens: the cuDNN
# backward of ModernBERT-base's 8 global layers, 17.07 ms over 2 steps
# (gpu-throughput-modernbert-base-1024-flex-profile-2026-11-26.json: 1.65 TFLOP a step).
H100_FIT = Fit(matmul_tflops=660.7, attention_tflops=((128, 69.9), (1024, 193.2)), bandwidth_tb_s=2.16,
              optimizer_ms=1.8, source="H100 eager profile 2026-11-26 (bench/results/gpu-throughput-base-128-"
                                       "profile-2026-11-26.json), median step 77.27 ms")
# Refitted on the two H200 eager profiles of 2026-11-28 (torch 2.11, BERT-base 256 x 128, bf16):
#   .venv/bin/python -m bench.step_cost \
#       --refit bench/results/gpu-throughput-base-128-low-precision-layernorm-false-profile-2026-11-28.json \
#       --refit bench/results/gpu-throughput-base-128-profile-2026-11-28.json
# The step with float32 LayerNorm (69.87 ms; 91.6 GB other, 1,065 kernels) and with bf16 LayerNorm
# (62.22 ms; 57.0 GB, 1,043 kernels). Bytes alone (one profile's fit each) gave 2.52 and then
# 2.00 TB/s: the first predicted the second step 6.0 ms short (56.2 ms). Bytes and kernels
# together: 4.64 TB/s (the H200's data sheet: 4.8) and 15.6 µs a kernel, the eager step's host
# dispatch; with that kernel cost, the 2026-11-26 H100 profile alone refits to 3.52 TB/s (its data
# sheet: 3.35), where bytes alone had said 2.16.
FIT = Fit(matmul_tflops=668.1, attention_tflops=((128, 81.1), (1024, 193.2)), bandwidth_tb_s=4.64,
          optimizer_ms=1.8, kernel_us=15.6,
          source="two H200 eager profiles 2026-11-28 (bench/results/gpu-throughput-base-128-"
                 "[low-precision-layernorm-false-]profile-2026-11-28.json), median steps 69.87 and 62.22 ms")
OPTIMIZER_MS = 1.8  # perf-proxy README: clip + fused AdamW on the H100, BERT-base
ATTENTION_FORWARD_SHARE = 2 / 5  # FlashAttention's forward products against its backward's


def summarize(trace: Trace, totals: Any, config: Any, shape: StepShape, fit: Fit = FIT) -> dict:
    """The report of one traced step (see the module's docstring)."""
    from bertpre.model.cost import training_flops_per_token

    kernels = trace.kernels
    gb = lambda items: sum(k.read + k.written for k in items) / 1e9  # noqa: E731
    by_kind = {kind: [k for k in kernels if k.kind == kind] for kind in ("matmul", "attention", "other")}
    casts = [k for k in kernels if k.cast]
    activation = shape.batch_size * shape.seq_length * config.hidden_size
    fp32_wide = [k for k in by_kind["other"] if k.dtype == "torch.float32" and k.numel >= activation]
    matmul_tflop = sum(k.flops for k in by_kind["matmul"]) / 1e12
    attention_tflop = sum(k.flops for k in by_kind["attention"]) / 1e12
    share = totals.predictions / totals.tokens
    useful_tflop = training_flops_per_token(config, shape.seq_length, share) * totals.tokens / 1e12
    counts = Counter(k.op for k in kernels)
    report = {
        "shape": asdict(shape), "tokens": totals.tokens, "predictions": totals.predictions,
        "kernels": len(kernels), "kernels_forward": sum(k.phase == "forward" for k in kernels),
        "matmuls": {op: counts[op] for op in sorted(MATMUL_OPS) if counts[op]},
        "layer_norms": {"forward": counts["native_layer_norm"], "backward": counts["native_layer_norm_backward"]},
        "matmul_tflop": matmul_tflop, "attention_tflop": attention_tflop, "useful_tflop": useful_tflop,
        "executed_over_useful": (matmul_tflop + attention_tflop) / useful_tflop,
        "gb_matmul_io": gb(by_kind["matmul"]), "gb_attention_io": gb(by_kind["attention"]),
        "gb_other": gb(by_kind["other"]),
        "casts": len(casts), "gb_casts": gb(casts),
        "casts_by_dtype": dict(Counter(f"{a.removeprefix('torch.')}->{b.removeprefix('torch.')}"
                                       for a, b in (k.cast for k in casts))),
        "fp32_activation_kernels": len(fp32_wide),
        "fp32_activation_kernels_by_op": dict(Counter(f"{k.phase}:{k.op}" for k in fp32_wide).most_common()),
        "host_syncs": len(trace.syncs),
        "largest_tensor_mb": max(k.largest for k in kernels) / 2**20,
        "largest_tensor_op": max(kernels, key=lambda k: k.largest).op,
        "other_gb_by_op": {op: round(gb([k for k in by_kind["other"] if k.op == op]), 2)
                           for op, _ in Counter({op: sum(k.read + k.written for k in by_kind["other"] if k.op == op)
                                                 for op in counts}).most_common(12)},
    }
    report["predicted_ms"] = fit.predict_ms(matmul_tflop, attention_tflop, report["gb_other"], shape.seq_length,
                                            len(kernels))
    report["fit"] = asdict(fit)
    return report


def print_report(report: dict) -> None:
    shape, ms = report["shape"], report["predicted_ms"]
    changes = ", ".join(f"{k}={v}" for k, v in shape["changes"].items()) or "as configured"
    print(f"{shape['architecture']}-{shape['model']}, {shape['batch_size']} x {shape['seq_length']} "
          f"({report['tokens']:,} real tokens, {report['predictions']:,} predictions), emulated CUDA bf16 "
          f"autocast, model {changes}")
    rows = [("kernels a step (forward)", f"{report['kernels']:,} ({report['kernels_forward']:,})"),
            ("matrix products", ", ".join(f"{n} {op}" for op, n in report["matmuls"].items())),
            ("LayerNorm forward / backward", f"{report['layer_norms']['forward']} / {report['layer_norms']['backward']}"),
            ("executed / useful TFLOP", f"{report['matmul_tflop'] + report['attention_tflop']:.2f} / "
                                        f"{report['useful_tflop']:.2f} = {report['executed_over_useful']:.3f}"),
            ("GB matmul I/O", f"{report['gb_matmul_io']:.1f}"), ("GB attention", f"{report['gb_attention_io']:.1f}"),
            ("GB everything else", f"{report['gb_other']:.1f}"),
            ("casts (GB)", f"{report['casts']} ({report['gb_casts']:.1f})"),
            ("fp32 activation-sized kernels", str(report["fp32_activation_kernels"])),
            ("host syncs", str(report["host_syncs"])),
            ("largest tensor made (MiB)", f"{report['largest_tensor_mb']:,.0f} ({report['largest_tensor_op']})"),
            ("predicted step (ms)", f"{ms['step']:.1f} = matmul {ms['matmul']:.1f} + attention "
                                    f"{ms['attention']:.1f} + other {ms['other']:.1f} + kernels "
                                    f"{ms['kernels']:.1f} + optimizer {ms['optimizer']:.1f}; "
                                    f"{report['tokens'] / ms['step'] * 1e3:,.0f} tokens/s")]
    for name, value in rows:
        print(f"  {name:<32}{value}")
    fit = report["fit"]
    attention = ", ".join(f"{rate:.0f} at {length}" for length, rate in fit["attention_tflops"])
    print(f"  fit: {fit['matmul_tflops']:.0f} TFLOP/s matmul, attention TFLOP/s by row length {attention}, "
          f"{fit['bandwidth_tb_s']:.2f} TB/s other, {fit['kernel_us']:.1f} µs a kernel, optimizer "
          f"{fit['optimizer_ms']:.1f} ms; from the {fit['source']}")
    print("  everything else, GB by op: " + ", ".join(f"{op} {gb}" for op, gb in report["other_gb_by_op"].items()))


# --- refitting on a GPU profile ------------------------------------------------------------------


def profile_rows(table: str) -> dict[str, float]:
    """Self CUDA ms of each aten row of torch.profiler's key_averages table."""
    rows = {}
    for line in table.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 11 and cells[0].startswith("aten::"):
            value = cells[6]
            rows[cells[0]] = float(value[:-2]) if value.endswith("ms") else float(value[:-2]) / 1e3
    return rows


@dataclass
class ProfiledStep:
    """One `bench.gpu throughput --profile N` result beside this tool's trace of the same step."""

    path: Path
    recorded: dict
    report: dict
    step_ms: float
    matmul_ms: float
    attention_ms: float

    @property
    def rest_ms(self) -> float:
        """The step less its matrix products, attention and optimizer: bytes and kernels."""
        return self.step_ms - self.matmul_ms - self.attention_ms - OPTIMIZER_MS


def profiled_step(path: Path) -> ProfiledStep:
    """A profile's step traced here (the model as the profiled commit ran it: `profiled_runtime`),
    its kernels' times."""
    recorded = json.loads(path.read_text(encoding="utf-8"))
    settings = recorded["settings"]
    steps = int(re.search(r"--profile (\d+)", recorded["command"]).group(1))
    rows = profile_rows(recorded["profile"]["bertpre"])
    shape = StepShape(settings.get("architecture", "bert"), settings["model"], settings["batch_size"],
                      settings["seq_length"], settings["short_rows"],
                      changes=profiled_runtime(settings))
    # cuDNN's, FlashAttention's or the memory-efficient kernel's backward, whichever SDPA took there
    backward = [name for name in rows if name.startswith("aten::_") and name.endswith("attention_backward")]
    if not backward:
        raise SystemExit(f"{path}: no attention backward row among the profile's top rows")
    return ProfiledStep(path, recorded, summarize(*trace_step(shape), shape),
                        step_ms=recorded["bertpre"]["median_step_s"] * 1e3,
                        matmul_ms=(rows["aten::mm"] + rows["aten::addmm"]) / steps,
                        attention_ms=sum(rows[name] for name in backward) / steps * (1 + ATTENTION_FORWARD_SHARE))


def refit(paths: list[Path]) -> Fit:
    """`Fit` on one or two `bench.gpu throughput --profile N` results. One: the rest of the step
    is bytes over a bandwidth (the current fit's µs a kernel kept). Two steps that differ in bytes
    and kernels (an A/B of the same shape): bandwidth and µs a kernel solved from both."""
    if not 1 <= len(paths) <= 2:
        raise SystemExit("--refit takes one or two profiles")
    steps = [profiled_step(path) for path in paths]
    last = steps[-1]
    kernels = [step.report["kernels"] for step in steps]
    gb = [step.report["gb_other"] for step in steps]
    if len(steps) == 2:
        # rest_i = gb_i / bandwidth + kernels_i * kernel_ms: two equations, two unknowns
        determinant = gb[0] * kernels[1] - gb[1] * kernels[0]
        if abs(determinant) < 1e-9:
            raise SystemExit("the two profiles' steps move bytes and kernels in proportion: nothing to solve")
        inverse_bandwidth = (steps[0].rest_ms * kernels[1] - steps[1].rest_ms * kernels[0]) / determinant
        kernel_ms = (gb[0] * steps[1].rest_ms - gb[1] * steps[0].rest_ms) / determinant
        if inverse_bandwidth <= 0 or kernel_ms < 0:
            raise SystemExit(f"the two profiles give no positive bandwidth and kernel cost "
                             f"(1/TB/s {inverse_bandwidth:.3f}, ms a kernel {kernel_ms:.4f})")
        bandwidth, kernel_us = 1 / inverse_bandwidth, kernel_ms * 1e3
    else:
        kernel_us = FIT.kernel_us
        bandwidth = gb[0] / (last.rest_ms - kernels[0] * kernel_us / 1e3)
    matmul = sum(step.report["matmul_tflop"] for step in steps) / sum(step.matmul_ms for step in steps) * 1e3
    attention_rate = sum(step.report["attention_tflop"] for step in steps) / \
        sum(step.attention_ms for step in steps) * 1e3
    attention = {**dict(FIT.attention_tflops), last.report["shape"]["seq_length"]: round(attention_rate, 1)}
    names = ", ".join(str(step.path.relative_to(ROOT) if step.path.is_relative_to(ROOT) else step.path)
                      for step in steps)
    gpu = last.recorded["machine"].get("gpu", {}).get("name", "GPU")
    return Fit(matmul_tflops=round(matmul, 1), attention_tflops=tuple(sorted(attention.items())),
               bandwidth_tb_s=round(bandwidth, 2), optimizer_ms=OPTIMIZER_MS, kernel_us=round(kernel_us, 1),
               source=f"{gpu} profile{'s' if len(steps) > 1 else ''} {last.recorded['date']} ({names}), "
                      f"median step{'s' if len(steps) > 1 else ''} "
                      f"{' and '.join(f'{step.step_ms:.2f}' for step in steps)} ms")


def profiled_runtime(settings: dict) -> dict[str, Any]:
    """The model's run-time keys (`RUNTIME_FIELDS`: low_precision_layernorm, fused_qkv, ...) as
    the profiled step ran them: the record's own `model_runtime` (bench.gpu writes it since
    2026-11-28's second H200 run) and `--set` changes; a key the record does not name ran the path
    before the key existed (false; `loss_chunk_rows` 0), except the bf16 LayerNorm that records
    with `model_changes` (2026-11-28's first run) ran by default."""
    from bertpre.model.config import RUNTIME_FIELDS

    runtime: dict[str, Any] = {**dict.fromkeys(RUNTIME_FIELDS, False), "loss_chunk_rows": 0}
    if "model_changes" in settings:
        runtime["low_precision_layernorm"] = "auto"
    return {**runtime, **settings.get("model_runtime", {}), **settings.get("model_changes", {})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--architecture", choices=sorted(DEFAULTS), default="bert")
    parser.add_argument("--model", choices=("tiny", "base", "large"), default="base")
    parser.add_argument("--batch-size", type=int, default=None, help="default 256 (BERT), 32 (ModernBERT)")
    parser.add_argument("--seq-length", type=int, default=None, help="default 128 (BERT), 1024 (ModernBERT)")
    parser.add_argument("--short-rows", type=float, default=0.1, help="share of rows shorter, padded")
    parser.add_argument("--set", dest="changes", action="append", default=[], metavar="KEY=VALUE",
                        help="a model config key, e.g. low_precision_layernorm=false (repeatable)")
    parser.add_argument("--refit", type=Path, action="append", default=[], metavar="PROFILE_JSON",
                        help="fit the step-time constants on a bench.gpu --profile result first; twice "
                             "(an A/B of one shape): bandwidth and µs a kernel solved from both")
    parser.add_argument("--unpad-bucket", type=int, default=1, metavar="N",
                        help="with --set unpad=true: round the token count up to a multiple of N "
                             "(train.compile's bucket, 1024), else the exact count")
    parser.add_argument("--peer", action="store_true",
                        help="also trace bench.gpu's peer (transformers.BertForPreTraining, eager) on the same "
                             "batch: its predicted step and the predicted ratio of bertpre's tokens/s to its")
    parser.add_argument("--json", type=Path, default=None, metavar="OUT", help="write the report as JSON")
    args = parser.parse_args(argv)
    fit = FIT
    if args.refit:
        fit = refit(args.refit)
        print(f"refitted: {fit}")
    torch.manual_seed(0)
    shape = StepShape(args.architecture, args.model, args.batch_size, args.seq_length, args.short_rows,
                      parse_changes(args.changes), args.unpad_bucket)
    report = summarize(*trace_step(shape), shape, fit)
    print_report(report)
    if args.peer:
        peer = summarize(*trace_step(shape, peer=True), shape, fit)
        ratio = peer["predicted_ms"]["step"] / report["predicted_ms"]["step"]
        report["peer"] = {"model": "transformers.BertForPreTraining, eager", **peer,
                          "predicted_ratio": ratio}
        print("\npeer: transformers.BertForPreTraining, eager, the same batch (useful work counted as bertpre's)")
        print_report(peer)
        print(f"predicted ratio, bertpre's tokens/s over the peer's: {ratio:.2f}x (a prediction, not a measurement)")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
