"""GPU training throughput, MFU and gradient checkpointing: bertpre next to transformers.

    .venv/bin/python -m bench.gpu throughput                       # BERT-base, length 128, batch 256, bf16
    .venv/bin/python -m bench.gpu throughput --model large         # BERT-large at 128
    .venv/bin/python -m bench.gpu throughput --seq-length 512 --micro-batch-size 64   # base at 512
    .venv/bin/python -m bench.gpu throughput --compile             # the objective compiled (train.compile)
    .venv/bin/python -m bench.gpu throughput --precision fp16      # fp16 autocast + GradScaler (old GPUs)
    .venv/bin/python -m bench.gpu throughput --architecture modernbert   # ModernBERT-base, length 1024, batch 32
    .venv/bin/python -m bench.gpu checkpointing                    # memory saving, cost, largest batch
    .venv/bin/python -m bench.gpu matmul                           # the dense fp16/bf16 rate only

throughput: one optimizer step on a global batch (default 256 sequences, accumulated from
micro-batches when --micro-batch-size is smaller), --precision autocast for both models (bf16 by
default, as the trainer on a modern GPU; fp16 adds a GradScaler), gradient clipping, fused AdamW
for both models (--no-fused: foreach AdamW for both).
bertpre's side is the trainer's step: `bertpre.train.objectives.mlm.MaskedLMStep` on Google's
fixed-size (B, P) masked_lm_positions / masked_lm_ids, loss = MLM loss sum / predictions + pair
loss sum / pairs with the counts taken on the CPU at set-up, no attention mask for a micro-batch
without padding (kept under --compile, which compiles the objective with fullgraph=True, as
`train.compile` does: one graph). The peer is `transformers.BertForPreTraining` run Hugging Face's
way: `model(**batch).loss` from `labels`, eagerly, with its default attention (SDPA), same
weights, same batch, same autocast dtype. Rounds of steps alternate between the two; medians are
compared. MFU uses FLOPs/token = 6·N_enc + 12·L·s·d + 6·f·(d² + d·V) (`bertpre.model.cost`),
f = predicted share, against the card's data-sheet dense bf16/fp16 peak
(`bertpre.train.runtime.PEAK_FLOPS`, the trainer's perf/mfu yardstick); the share of the
--precision dtype's matmul rate measured here (large square matmuls) is printed beside it. Each
side's record also holds its median ms a step and the FLOPs one more step executes (torch's
FlopCounterMode: matrix products and attention, padding included; not under --compile) over the
cost model's useful FLOPs (non-padding tokens); the settings hold the padding share.

Batches are synthetic but shaped like real ones (`bench.common.make_batch`): [CLS] A [SEP] B
[SEP] segments, 10% of rows shorter and padded (--short-rows; ~4% padding, as measured on
article-level wikitext-2 NSP instances at 128), round(0.15·(n-3)) predicted positions per row of
n tokens (capped at 20 for s=128, 76 for s=512, as Google's recipe), random pair labels.
Tokens/s count non-padding tokens.
The checkpointing measurements use bertpre's side only, on full rows, the worst case for memory.

`--architecture modernbert` times ModernBERT instead (`--model` then names ModernBERT's sizes:
base is 22 layers, hidden 768, GeGLU 1152, window 128, vocabulary 50,368; length 1024 and a
global batch of 32 by default, the same 32,768 tokens a step as BERT's default). bertpre's side
is the same trainer step (`MaskedLMStep`, no pair labels: `pair_task: none`), local layers
on SDPA with a dense window mask or FlexAttention's block mask as `ModernBertModel.uses_flex` says
(recorded; FlexAttention above 1024 tokens; --local-attention forces one); the peer is
transformers' `ModernBertForMaskedLM` loaded from bertpre's export of the same weights, with
`sparse_prediction: true` (its head and decoder on the predicted rows alone, as bertpre's), its
default attention. Rows mask 30% (ModernBERT's recipe), uncapped. MFU uses
`bertpre.model.modernbert_cost.modernbert_training_flops`: local layers counted at their window,
although FlexAttention computes every block the window crosses (more work than counted).
Results are named gpu-throughput-modernbert-MODEL-LENGTH.

Without a CUDA device every subcommand prints "no CUDA device: skipping" and exits 0 (with the
hidden --allow-cpu, throughput runs on the CPU as a code check and writes nothing).
"""
from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.common import (
    MAX_PREDICTIONS,
    RESULTS,
    VOCAB_SIZE,
    make_batch,
    median,
    parse_changes,
    print_table,
    write_result,
)

if TYPE_CHECKING:
    from bertpre.train.objectives.mlm import MaskedLMCounts

SHAPES = {
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}
# ModernBERT's sizes (Warner et al. 2024; transformers' ModernBertConfig defaults are base's).
MODERNBERT_SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
                 local_attention=16),
    "base": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152,
                 local_attention=128),
    "large": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, intermediate_size=2624,
                  local_attention=128),
}
MODERNBERT_VOCAB_SIZE = 50368
MODERNBERT_MASKING = 0.3  # the share of tokens ModernBERT's recipe predicts
# --seq-length and --batch-size when not given: ModernBERT's 1024 tokens a row (so that local
# layers matter), and as many tokens a step as BERT's default.
DEFAULTS = {"bert": {"seq_length": 128, "batch_size": 256}, "modernbert": {"seq_length": 1024, "batch_size": 32}}
# What transformers' BertForPreTraining reads of a batch (a DATA folder's batches hold more).
BERT_PEER_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label")
# What transformers' ModernBertForMaskedLM reads of a batch (no token types, no pair labels).
MODERNBERT_PEER_INPUTS = ("input_ids", "attention_mask", "labels")
MODERNBERT_FLOPS_NOTE = ("local layers counted at their window (window_pairs); FlexAttention still "
                         "computes every block the window crosses, so it does more work than counted")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISIONS = {"bf16": "bf16 autocast", "fp16": "fp16 autocast + GradScaler"}
IGNORE_INDEX = -100  # bertpre.labels.IGNORE_INDEX and transformers' ignored label
NO_CUDA = "no CUDA device: skipping"

# A model's loss for one micro-batch, already weighted for the whole step.
Loss = Callable[[dict[str, torch.Tensor]], torch.Tensor]


def model_config(shape: str, seq_length: int, vocab_size: int | None = None) -> dict:
    """HF BertConfig fields shared by both models (`vocab_size`: BERT's 30,522 unless given)."""
    return dict(vocab_size=vocab_size or VOCAB_SIZE, max_position_embeddings=max(512, seq_length), **SHAPES[shape])


def modernbert_config(shape: str, seq_length: int, changes: dict | None = None, vocab_size: int | None = None):
    """bertpre's BertConfig of a ModernBERT of this size (no dropout, as ModernBERT trains), with
    `changes` (bertpre's model keys, `--set`) over it (`vocab_size`: ModernBERT's unless given)."""
    from bertpre.model.config import BertConfig

    return BertConfig(architecture="modernbert", vocab_size=vocab_size or MODERNBERT_VOCAB_SIZE, pad_token_id=0,
                      max_position_embeddings=max(8192, seq_length),
                      **{**MODERNBERT_SHAPES[shape], **(changes or {})})


def build_modernbert_models(shape: str, seq_length: int, device: torch.device, peer: bool,
                            changes: dict | None = None, vocab_size: int | None = None) -> dict[str, torch.nn.Module]:
    """bertpre's ModernBERT and, with `peer`, transformers' loaded from bertpre's export of the same
    weights with `sparse_prediction: true`, in train mode."""
    from bertpre.model.modernbert import ModernBertForMaskedLM

    torch.manual_seed(0)
    ours = ModernBertForMaskedLM(modernbert_config(shape, seq_length, changes, vocab_size))
    models = {"bertpre": ours.to(device).train()}
    if peer:
        import transformers

        with tempfile.TemporaryDirectory(prefix="bertpre-gpu-modernbert-") as folder:
            ours.save_pretrained(folder)
            theirs = transformers.AutoModelForMaskedLM.from_pretrained(folder, sparse_prediction=True)
        models["transformers"] = theirs.to(device).train()
    return models


def build_models(shape: str, seq_length: int, device: torch.device, peer: bool,
                 checkpointing: bool = False, changes: dict | None = None,
                 vocab_size: int | None = None) -> dict[str, torch.nn.Module]:
    """bertpre's model and, with `peer`, transformers' with the same weights, in train mode;
    `changes` (`--set`) are bertpre's model keys over the shared shape, bertpre's side alone."""
    from bertpre.model import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    config = BertConfig(**{**model_config(shape, seq_length, vocab_size), **(changes or {})})
    ours = BertForPreTraining(config).to(device).train()
    ours.set_gradient_checkpointing(checkpointing)
    models = {"bertpre": ours}
    if peer:
        import transformers

        theirs = transformers.BertForPreTraining(transformers.BertConfig(**model_config(shape, seq_length, vocab_size)))
        theirs.load_state_dict(ours.state_dict(), strict=False)  # same weights: same work per step
        if checkpointing:
            theirs.gradient_checkpointing_enable()
        models["transformers"] = theirs.to(device).train()
    return models


def prediction_slots(seq_length: int, batches: list[dict[str, torch.Tensor]], capped: bool = True) -> int:
    """P of the (B, P) layout: Google's cap that `make_batch` applies at this length (20 at 128,
    76 at 512), as `data.max_predictions_per_seq`; at other lengths, or uncapped, the most
    predictions of a row."""
    if "masked_lm_ids" in batches[0]:  # the collator's (B, P): `data.max_predictions_per_seq` or a batch's longest row
        return max(batch["masked_lm_ids"].shape[1] for batch in batches)
    most = max(int((batch["labels"] != IGNORE_INDEX).sum(dim=1).max()) for batch in batches)
    return (MAX_PREDICTIONS.get(seq_length) if capped else None) or max(most, 1)


def data_batches(path: Path, architecture: str, seq_length: int, batch_size: int, micro_batch_size: int
                 ) -> tuple[list[dict[str, torch.Tensor]], dict]:
    """The trainer's first micro-batches of a step from a tokenized DATA folder (`bertpre tokenize`):
    the masked LM's stream (its instances from epoch 0 and its masking collator) as a run of the
    family's preset (`base`, `modernbert-base`) at this length draws them, and what describes them:
    the folder, its tokenizer's vocabulary size, the preset and the data keys the batches follow."""
    from bertpre.config import load_config
    from bertpre.data import load_mixture
    from bertpre.train.objectives import objective_for

    preset = "modernbert-base" if architecture == "modernbert" else "base"
    overrides = [f"data.path={path}", f"data.max_seq_length={seq_length}", "data.num_workers=0",
                 f"train.micro_batch_size={micro_batch_size}", f"train.batch_size={batch_size}"]
    if architecture != "modernbert" and seq_length in MAX_PREDICTIONS:  # Google's cap at this length
        overrides.append(f"data.max_predictions_per_seq={MAX_PREDICTIONS[seq_length]}")
    config = load_config(preset, overrides)
    mixture = load_mixture(config.data.sources)
    objective = objective_for(config.data.objective)
    stream = objective.stream(mixture, config, accumulation=batch_size // micro_batch_size, rank=0,
                              world_size=1, pin_memory=False)
    batches = [stream.next() for _ in range(batch_size // micro_batch_size)]
    for batch in batches:
        batch.pop("mask_action", None)  # the audit's, read by neither model
    data = config.data
    described = {"path": str(path), "vocab_size": mixture.tokenizer.get_vocab_size(), "preset": preset,
                 "batches": f"the trainer's ({type(objective).__name__}.stream: epoch 0's instances, its collator)",
                 "pair_task": data.pair_task, "mlm_probability": data.mlm_probability,
                 "max_predictions_per_seq": data.max_predictions_per_seq,
                 "pack_documents": data.pack_documents}
    return batches, described


def fixed_size_predictions(labels: torch.Tensor, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, P) positions of each row's labels != -100 in increasing order, then 0, and their ids,
    then -100: the collator's layout (`MaskingCollator.fixed_size_predictions`) of (B, T) labels."""
    predicted = labels != IGNORE_INDEX
    counts = predicted.sum(dim=1)
    if int(counts.max()) > slots:
        raise ValueError(f"a row has {int(counts.max())} predictions, more than {slots} slots")
    # A stable sort of "not predicted" puts each row's predicted positions first, in order.
    order = torch.sort((~predicted).to(torch.uint8), dim=1, stable=True).indices[:, :slots]
    positions = labels.new_zeros((labels.shape[0], slots))
    positions[:, : order.shape[1]] = order
    used = torch.arange(slots, device=labels.device)[None, :] < counts[:, None]
    positions = positions.where(used, 0)
    ids = labels.gather(1, positions).where(used, IGNORE_INDEX)
    return positions, ids


def trainer_batches(batches: list[dict[str, torch.Tensor]], slots: int, device: torch.device,
                    keep_attention_mask: bool, unpad_bucket: int | None = None
                    ) -> tuple[list[dict[str, torch.Tensor]], MaskedLMCounts]:
    """`make_batch`'s CPU micro-batches (or the collator's, which have their (B, P) predictions
    already) as the trainer copies them to `device`, and the step's counts, taken on the CPU as
    `Trainer.train_step` does. `unpad_bucket` (`model.unpad`): each batch also carries the real
    tokens' layout, as the collator adds it (one sequence a row: the synthetic rows, and `--data`'s
    rows here, carry no document boundaries)."""
    from bertpre.batches.padding import unpadded_layout
    from bertpre.train.objectives.mlm import MaskedLMCounts, device_batch, mlm_host_counts

    host = []
    for batch in batches:
        if "masked_lm_positions" not in batch:  # else the collator's own (B, P) layout (`--data`)
            positions, ids = fixed_size_predictions(batch["labels"], slots)
            batch = {**batch, "masked_lm_positions": positions, "masked_lm_ids": ids}
        if unpad_bucket is not None:
            layout = unpadded_layout(batch["attention_mask"].bool().numpy(), batch["masked_lm_positions"].numpy(),
                                     bucket=unpad_bucket)
            batch = {**batch, **{name: torch.from_numpy(array) for name, array in layout.items()}}
        host.append(batch)
    counts = [mlm_host_counts(batch) for batch in host]
    totals = MaskedLMCounts(predictions=sum(count.predictions for count in counts),
                        pairs=sum(count.pairs for count in counts),
                        tokens=sum(count.tokens for count in counts))
    # `device_batch` drops `labels` and, unless kept, the mask of a batch without padding.
    return [device_batch(batch, device, keep_attention_mask=keep_attention_mask) for batch in host], totals


def objective_loss(objective: Callable, totals: MaskedLMCounts) -> Loss:
    """The trainer's micro-batch loss: the objective's MLM and pair loss sums over the step's counts."""
    weights = [1 / total if total else 0.0 for total in (totals.predictions, totals.pairs)]

    def loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        (mlm_loss_sum, pair_loss_sum), _, _ = objective(batch)  # the device sums are computed, unread
        return mlm_loss_sum * weights[0] + pair_loss_sum * weights[1]

    return loss


class Stepper:
    """One optimizer step on a global batch: autocast, a GradScaler under fp16 only, clipping,
    AdamW, accumulation; `loss` says how the model turns a micro-batch into its loss."""

    def __init__(self, model: torch.nn.Module, loss: Loss, device: torch.device, fused: bool,
                 precision: str = "bf16") -> None:
        self.model, self.loss, self.device, self.precision = model, loss, device, precision
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                           fused=fused or None, foreach=None if fused else True)
        self.scaler = self.new_scaler()

    def new_scaler(self) -> torch.amp.GradScaler | None:
        """fp16's narrow range needs a loss scale; bf16 has fp32's range and none (as the trainer)."""
        return torch.amp.GradScaler(self.device.type) if self.precision == "fp16" else None

    def step(self, micro_batches: list[dict]) -> float:
        """Seconds for forward + backward of every micro-batch, then the optimizer step."""
        synchronize(self.device)
        start = time.perf_counter()
        for batch in micro_batches:
            with torch.autocast(self.device.type, dtype=DTYPES[self.precision]):
                loss = self.loss(batch)
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        synchronize(self.device)
        return time.perf_counter() - start


def bertpre_stepper(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], device: torch.device,
                    fused: bool, precision: str, compile_model: bool = False, capped: bool = True
                    ) -> tuple[Stepper, list[dict[str, torch.Tensor]], dict]:
    """bertpre's side as the trainer runs it, its device micro-batches and what describes them."""
    from bertpre.train.objectives.mlm import MaskedLMStep, compiled_unpad_bucket

    slots = prediction_slots(batches[0]["input_ids"].shape[1], batches, capped)
    bucket = None  # model.unpad: the exact count eager, bucketed compiled (`mlm.unpad_bucket`)
    if getattr(model.config, "unpad", False):
        bucket = compiled_unpad_bucket(batches[0]["input_ids"].numel()) if compile_model else 1
    # A compiled step keeps the mask, as the trainer does: one graph for every batch.
    inputs, totals = trainer_batches(batches, slots, device, keep_attention_mask=compile_model, unpad_bucket=bucket)
    objective = MaskedLMStep(model)
    if compile_model:
        objective = torch.compile(objective, fullgraph=True)
    described = {"prediction_slots": slots, "predictions": totals.predictions, "pairs": totals.pairs,
                 "tokens": totals.tokens, "unpad_bucket": bucket,
                 "micro_batches_without_mask": sum("attention_mask" not in batch for batch in inputs)}
    return Stepper(model, objective_loss(objective, totals), device, fused, precision), inputs, described


def peer_stepper(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], device: torch.device,
                 fused: bool, precision: str) -> tuple[Stepper, list[dict[str, torch.Tensor]]]:
    """transformers' side run Hugging Face's way: the mean loss from `labels`, averaged over the
    micro-batches."""
    accumulation = len(batches)
    inputs = [{name: tensor.to(device) for name, tensor in batch.items()} for batch in batches]
    return Stepper(model, lambda batch: model(**batch).loss / accumulation, device, fused, precision), inputs


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_rate(dtype: torch.dtype, size: int = 8192, repeats: int = 20) -> float:
    """Best FLOP/s of `size`-square matmuls in `dtype`: the dense peak MFU is measured against."""
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    return 2 * size**3 / best


def executed_flops(stepper, inputs, compiled: bool) -> float | None:
    """FLOPs one more step executes (matrix products and attention, padding included), as
    torch's FlopCounterMode counts the operators it dispatches; None for a compiled step,
    whose kernels it does not see."""
    if compiled:
        return None
    with FlopCounterMode(display=False) as counter:
        stepper.step(inputs)
    return float(counter.get_total_flops())


def profile_steps(stepper, inputs, steps: int, rows: int = 25) -> str:
    """The `rows` operations that took the most device time over `steps` steps, as a table
    (CPU time alone where there is no CUDA device)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            stepper.step(inputs)
    sort_by = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    table = profiler.key_averages().table(sort_by=sort_by, row_limit=rows, max_name_column_width=60)
    print(table)
    return table


def measure_step_rate(shape: str, seq_length: int, micro_batch_size: int, steps: int, peer: bool,
                      batch_size: int | None = None, warmup: int = 5, round_steps: int = 5,
                      fused: bool = True, compile_model: bool = False, short_rows: float = 0.1,
                      device: torch.device | None = None, precision: str = "bf16",
                      architecture: str = "bert", local_attention: str = "auto", profile: int = 0,
                      changes: dict | None = None, data: Path | None = None) -> dict:
    """Median step time and sequences/s for bertpre (and the peer), rounds alternating.

    `local_attention` (ModernBERT): auto (`uses_flex`), flex or sdpa for bertpre's local layers.
    `profile`: after the timing, that many more steps of each side under torch.profiler; the
    kernels that took the most device time are printed and kept in the result.
    `changes`: bertpre's model keys (`--set`, e.g. low_precision_layernorm=false), its side alone.
    `data`: a tokenized DATA folder whose batches the trainer would draw (`data_batches`) instead
    of synthetic rows; both models' vocabulary is then its tokenizer's."""
    from bertpre.model.config import RUNTIME_FIELDS

    device = device or torch.device("cuda")
    batch_size = batch_size or micro_batch_size
    if batch_size % micro_batch_size:
        raise SystemExit(f"--batch-size {batch_size} is not a multiple of --micro-batch-size {micro_batch_size}")
    modernbert = architecture == "modernbert"
    # Made on the CPU: the trainer's counts and mask decisions are taken there, once, at set-up.
    drawn = None
    if data is not None:
        batches, drawn = data_batches(data, architecture, seq_length, batch_size, micro_batch_size)
    build = build_modernbert_models if modernbert else build_models
    models = build(shape, seq_length, device, peer, changes=changes, vocab_size=drawn and drawn["vocab_size"])
    if modernbert and local_attention != "auto":
        models["bertpre"].model.flex_attention = local_attention == "flex"
    if drawn is None and modernbert:  # no pair labels (pair_task: none), ModernBERT's vocabulary and masking
        batches = [make_batch(micro_batch_size, seq_length, "cpu", seed, short_rows, MODERNBERT_MASKING,
                              capped=False, vocab_size=MODERNBERT_VOCAB_SIZE)
                   for seed in range(batch_size // micro_batch_size)]
        for batch in batches:
            del batch["next_sentence_label"]
    elif drawn is None:
        batches = [make_batch(micro_batch_size, seq_length, "cpu", seed, short_rows)
                   for seed in range(batch_size // micro_batch_size)]
    ours, ours_inputs, described = bertpre_stepper(models["bertpre"], batches, device, fused, precision,
                                                   compile_model, capped=not modernbert)
    steppers, inputs = {"bertpre": ours}, {"bertpre": ours_inputs}
    if peer:
        peer_batches = [{name: batch[name] for name in (MODERNBERT_PEER_INPUTS if modernbert else BERT_PEER_INPUTS)
                         if name in batch} for batch in batches]
        steppers["transformers"], inputs["transformers"] = peer_stepper(models["transformers"], peer_batches,
                                                                        device, fused, precision)
    tokens, predicted = described["tokens"], described["predictions"]  # not padding
    times: dict[str, list[float]] = {name: [] for name in models}
    peaks: dict[str, float] = {}
    for name, stepper in steppers.items():
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(warmup):
            stepper.step(inputs[name])
        if device.type == "cuda":
            peaks[name] = torch.cuda.max_memory_allocated(device) / 2**30
    names = list(models)
    for round_index in range(-(-steps // round_steps)):
        for name in names if round_index % 2 == 0 else reversed(names):
            times[name] += [steppers[name].step(inputs[name]) for _ in range(round_steps)]
    result = {"settings": {"model": shape, "seq_length": seq_length, "batch_size": batch_size,
                           "micro_batch_size": micro_batch_size, "steps": len(times["bertpre"]),
                           "warmup": warmup, "fused_adamw": fused, "compile": compile_model,
                           "precision": PRECISIONS[precision], "short_rows": short_rows,
                           "tokens_per_step": tokens, "padding_share": 1 - tokens / (batch_size * seq_length),
                           "predicted_share": predicted / tokens,
                           "bertpre_step": "MaskedLMStep, (B, P) masked_lm_positions/ids, "
                                           "loss sums over counts taken on the CPU"
                                           + (", torch.compile fullgraph" if compile_model else ""),
                           "prediction_slots": described["prediction_slots"],
                           "micro_batches_without_attention_mask": described["micro_batches_without_mask"],
                           "peer_step": "model(**batch).loss from labels, eager",
                           "model_changes": dict(changes or {}),
                           # every run-time key as bertpre's side ran it (bench.step_cost's refit reads it)
                           "model_runtime": {name: getattr(models["bertpre"].config, name)
                                             for name in RUNTIME_FIELDS},
                           # the trainer's own batches of a DATA folder, or null: synthetic rows (make_batch)
                           "data": drawn}}
    for name in names:
        seconds = median(times[name])
        result[name] = {"median_step_s": seconds, "median_step_ms": 1e3 * seconds,
                        "sequences_per_s": batch_size / seconds,
                        "tokens_per_s": tokens / seconds, "step_s": times[name],
                        "peak_memory_gib_both_models_resident": peaks.get(name),
                        "executed_flops_per_step": executed_flops(steppers[name], inputs[name],
                                                                  compile_model and name == "bertpre")}
    if peer:
        result["transformers"]["attention"] = models["transformers"].config._attn_implementation
    if profile:
        result["profile"] = {name: profile_steps(steppers[name], inputs[name], profile) for name in names}
    if modernbert:
        settings = result["settings"]
        settings["architecture"] = "modernbert"
        settings["bertpre_step"] = settings["bertpre_step"].replace(
            "MaskedLMStep", "MaskedLMStep (no pair labels)")
        settings["masking"] = MODERNBERT_MASKING if drawn is None else drawn["mlm_probability"]
        settings["vocab_size"] = models["bertpre"].config.vocab_size
        settings["local_attention"] = MODERNBERT_SHAPES[shape]["local_attention"]
        encoder = models["bertpre"].model
        # Whether local layers took FlexAttention's block mask (else SDPA with a dense window mask).
        settings["bertpre_local_attention"] = "FlexAttention block mask" if encoder.uses_flex(device, seq_length) \
            else "SDPA, window mask (dense)"
        settings["bertpre_flex_attention"] = encoder.uses_flex(device, seq_length)
        if peer:
            settings["peer_step"] += ", sparse_prediction true (head and decoder on predicted rows)"
            settings["peer_sparse_prediction"] = models["transformers"].config.sparse_prediction
    return result


def run_throughput(args: argparse.Namespace, device: torch.device) -> dict:
    from bertpre.model import BertConfig
    from bertpre.model.cost import training_flops_per_token
    from bertpre.model.modernbert_cost import modernbert_flops_by_part
    from bertpre.train.runtime import peak_flops_of

    modernbert = args.architecture == "modernbert"
    result = measure_step_rate(args.model, args.seq_length, args.micro_batch_size or args.batch_size,
                               args.steps, peer=not args.no_peer, batch_size=args.batch_size,
                               fused=not args.no_fused, compile_model=args.compile,
                               short_rows=args.short_rows, device=device, precision=args.precision,
                               architecture=args.architecture, local_attention=args.local_attention,
                               profile=args.profile, changes=args.changes, data=args.data)
    share = result["settings"]["predicted_share"]
    vocab_size = result["settings"]["data"] and result["settings"]["data"]["vocab_size"]
    if modernbert:
        parts = modernbert_flops_by_part(modernbert_config(args.model, args.seq_length, args.changes, vocab_size),
                                         args.seq_length, share)
        flops = parts.total
    else:
        flops = training_flops_per_token(BertConfig(**model_config(args.model, args.seq_length, vocab_size)),
                                         args.seq_length, share)
    measured = {"fp16": matmul_rate(torch.float16), "bf16": matmul_rate(torch.bfloat16)} \
        if device.type == "cuda" else {"fp16": float("nan"), "bf16": float("nan")}
    # MFU is against the card's data-sheet dense peak, as the trainer's perf/mfu (and as MFU is
    # usually reported); the share of the matmul rate measured here is beside it. The first H100
    # run measured bf16 at 749 and then 673 TFLOP/s: a moving yardstick, so not the headline.
    sheet = peak_flops_of(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    result["mfu"] = {"flops_per_token": flops, "predicted_share": share, "data_sheet_flops_per_s": sheet,
                     "matmul_flops_per_s": measured, "against": args.precision}
    if modernbert:
        result["mfu"]["flops_per_token_by_part"] = vars(parts)
        result["mfu"]["attention_flops"] = MODERNBERT_FLOPS_NOTE
    rows = [("tokens/s", result["bertpre"]["tokens_per_s"],
             result["transformers"]["tokens_per_s"] if "transformers" in result else None)]
    result["mfu"]["yardsticks"] = {"mfu": "the data sheet's dense peak (data_sheet_flops_per_s)",
                                   "matmul_share": f"the {args.precision} matmul rate measured here "
                                                   "(matmul_flops_per_s)"}
    useful = flops * result["settings"]["tokens_per_step"]  # the cost model's, non-padding tokens alone
    for name in ("bertpre", "transformers"):
        if name in result:
            achieved = result[name]["tokens_per_s"] * flops
            result[name]["mfu"] = achieved / sheet if sheet else None
            result[name]["matmul_share"] = achieved / measured[args.precision]
            executed = result[name]["executed_flops_per_step"]
            result[name]["useful_flops_per_step"] = useful
            result[name]["executed_over_useful"] = None if executed is None else executed / useful
    print(f"{'ModernBERT' if modernbert else 'BERT'}-{args.model}, length {args.seq_length}, batch {args.batch_size}, "
          f"{PRECISIONS[args.precision]}, {'fused' if not args.no_fused else 'foreach'} AdamW"
          f"{', torch.compile' if args.compile else ''}; (B, {result['settings']['prediction_slots']}) predictions")
    if modernbert:
        print(f"bertpre's local layers: {result['settings']['bertpre_local_attention']}; transformers: "
              f"{result.get('transformers', {}).get('attention', '-')} attention, sparse prediction")
    print(f"dense matmul measured: fp16 {measured['fp16'] / 1e12:.0f} TFLOP/s, bf16 {measured['bf16'] / 1e12:.0f} "
          f"TFLOP/s; data sheet {sheet / 1e12 if sheet else float('nan'):.0f} TFLOP/s; "
          f"{flops / 1e6:.1f} MFLOP per token (f = {share:.3f})")

    def percent(name: str, key: str) -> float | None:
        value = result.get(name, {}).get(key)
        return None if value is None else 100 * value

    def value(name: str, key: str) -> float | None:
        return result.get(name, {}).get(key)

    print_table(rows + [("ms a step", value("bertpre", "median_step_ms"), value("transformers", "median_step_ms")),
                        ("MFU % (data sheet)", percent("bertpre", "mfu"), percent("transformers", "mfu")),
                        (f"% of measured {args.precision}", percent("bertpre", "matmul_share"),
                         percent("transformers", "matmul_share"))],
                "", "transformers")

    def ratio(name: str) -> str:
        executed = value(name, "executed_over_useful")
        return "-" if executed is None else f"{executed:.3f}"

    print(f"executed / useful FLOPs a step (FlopCounterMode / cost model): bertpre {ratio('bertpre')}, "
          f"transformers {ratio('transformers')}; padding share {result['settings']['padding_share']:.1%}")
    if "transformers" in result:
        result["ratio"] = result["bertpre"]["tokens_per_s"] / result["transformers"]["tokens_per_s"]
        mfu = percent("bertpre", "mfu")
        print(f"ratio bertpre / transformers: {result['ratio']:.2f}x (target >= 2.0x); "
              f"bertpre MFU {'-' if mfu is None else f'{mfu:.1f}%'} (target >= 50%)")
    result["peer"] = result.pop("transformers", None)
    return result


def fits(stepper: Stepper, micro_batch_size: int, seq_length: int, device: torch.device) -> bool:
    """Whether one bertpre training step at this micro-batch runs without running out of memory."""
    gc.collect()  # what a failed try left behind
    torch.cuda.empty_cache()
    batches = [make_batch(micro_batch_size, seq_length)]
    try:
        inputs, _ = trainer_batches(batches, prediction_slots(seq_length, batches), device,
                                    keep_attention_mask=False)
        # The loss keeps the measured batch's counts as weights: the same work, all a probe needs.
        stepper.step(inputs)
        return True
    except torch.OutOfMemoryError:
        stepper.optimizer.zero_grad(set_to_none=True)
        # The step may have stopped between unscale_ and update: start the scaler afresh.
        stepper.scaler = stepper.new_scaler()
        return False
    finally:
        torch.cuda.empty_cache()


def largest_micro_batch(stepper: Stepper, seq_length: int, device: torch.device,
                        start: int, granularity: int, limit: int) -> int:
    """Largest multiple of `granularity` that fits: double from `start`, then bisect."""
    low, high = 0, start
    while high <= limit and fits(stepper, high, seq_length, device):
        low, high = high, high * 2
    high = min(high, limit + granularity)
    while high - low > granularity:
        middle = (low + high) // 2 // granularity * granularity
        if middle in (low, high):
            break
        low, high = (middle, high) if fits(stepper, middle, seq_length, device) else (low, middle)
    return low


def run_checkpointing(args: argparse.Namespace, device: torch.device) -> dict:
    result = {"settings": {"model": args.model, "seq_length": args.seq_length,
                           "micro_batch_size": args.micro_batch_size, "steps": args.steps,
                           "search_granularity": args.granularity, "search_limit": args.limit,
                           "precision": PRECISIONS[args.precision], "fused_adamw": not args.no_fused,
                           "bertpre_step": "MaskedLMStep, (B, P) masked_lm_positions/ids"}}
    for checkpointing in (False, True):
        name = "with" if checkpointing else "without"
        model = build_models(args.model, args.seq_length, device, peer=False,
                             checkpointing=checkpointing)["bertpre"]
        full_rows = [make_batch(args.micro_batch_size, args.seq_length)]  # the worst case for memory
        stepper, batch, _ = bertpre_stepper(model, full_rows, device, not args.no_fused, args.precision)
        for _ in range(3):
            stepper.step(batch)
        torch.cuda.reset_peak_memory_stats(device)
        seconds = median([stepper.step(batch) for _ in range(args.steps)])
        peak = torch.cuda.max_memory_allocated(device) / 2**30
        largest = largest_micro_batch(stepper, args.seq_length, device, args.micro_batch_size,
                                      args.granularity, args.limit) if not args.no_search else None
        result[name] = {"median_step_s": seconds, "sequences_per_s": args.micro_batch_size / seconds,
                        "peak_memory_gib": peak, "largest_micro_batch": largest}
        del model, stepper, batch
        torch.cuda.empty_cache()
    without, with_ = result["without"], result["with"]
    result["memory_saving"] = 1 - with_["peak_memory_gib"] / without["peak_memory_gib"]
    result["throughput_cost"] = 1 - with_["sequences_per_s"] / without["sequences_per_s"]
    print(f"BERT-{args.model}, length {args.seq_length}, micro-batch {args.micro_batch_size}, "
          f"{PRECISIONS[args.precision]}")
    print(f"{'gradient checkpointing':<24}{'without':>12}{'with':>12}")
    print(f"{'peak memory (GiB)':<24}{without['peak_memory_gib']:>12.2f}{with_['peak_memory_gib']:>12.2f}")
    print(f"{'sequences/s':<24}{without['sequences_per_s']:>12.1f}{with_['sequences_per_s']:>12.1f}")
    print(f"{'largest micro-batch':<24}{str(without['largest_micro_batch']):>12}{str(with_['largest_micro_batch']):>12}")
    print(f"memory saving {100 * result['memory_saving']:.0f}%, throughput cost "
          f"{100 * result['throughput_cost']:.0f}%")
    return result


def run_matmul(args: argparse.Namespace, device: torch.device) -> dict:
    rates = {"fp16": matmul_rate(torch.float16, args.size), "bf16": matmul_rate(torch.bfloat16, args.size)}
    for name, rate in rates.items():
        print(f"{name} {args.size}x{args.size} matmul: {rate / 1e12:.1f} TFLOP/s")
    return {"settings": {"size": args.size}, "matmul_flops_per_s": rates}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)  # code checks only
    commands = parser.add_subparsers(dest="command", required=True)
    throughput = commands.add_parser("throughput", help="tokens/s and MFU, bertpre vs transformers")
    checkpointing = commands.add_parser("checkpointing", help="gradient checkpointing's saving and cost")
    matmul = commands.add_parser("matmul", help="dense fp16/bf16 matmul rate")
    matmul.add_argument("--size", type=int, default=8192)
    for command in (throughput, checkpointing):
        command.add_argument("--model", choices=sorted(SHAPES), default="base")
        command.add_argument("--seq-length", type=int, default=None,
                             help="default 128 (BERT), 1024 (--architecture modernbert)")
        command.add_argument("--no-fused", action="store_true", help="foreach AdamW instead of fused")
        command.add_argument("--precision", choices=sorted(DTYPES), default="bf16",
                             help="autocast dtype of both models; fp16 adds a GradScaler (default bf16)")
    throughput.add_argument("--short-rows", type=float, default=0.1,
                            help="share of rows shorter than --seq-length, padded (0: no padding)")
    throughput.add_argument("--architecture", choices=sorted(DEFAULTS), default="bert",
                            help="bert (peer BertForPreTraining) or modernbert (peer ModernBertForMaskedLM); "
                                 "--model then names that family's size")
    throughput.add_argument("--batch-size", type=int, default=None,
                            help="global batch, sequences (default 256 for BERT, 32 for ModernBERT)")
    throughput.add_argument("--micro-batch-size", type=int, default=None, help="default: the batch")
    throughput.add_argument("--steps", type=int, default=20, help="timed steps per model")
    throughput.add_argument("--compile", action="store_true",
                            help="torch.compile bertpre's objective, fullgraph (as train.compile)")
    throughput.add_argument("--no-peer", action="store_true", help="bertpre only")
    throughput.add_argument("--local-attention", choices=("auto", "flex", "sdpa"), default="auto",
                            help="ModernBERT: bertpre's local layers on FlexAttention or SDPA with a dense "
                                 "window mask (auto: FlexAttention on CUDA above 1024 tokens)")
    throughput.add_argument("--set", dest="changes", action="append", default=[], metavar="KEY=VALUE",
                            help="a bertpre model key for bertpre's side (A/B), e.g. low_precision_layernorm=false; "
                                 "named in the result's file name")
    throughput.add_argument("--data", type=Path, default=None, metavar="DATA",
                            help="time the trainer's own batches of this tokenized DATA folder (bertpre tokenize) "
                                 "instead of synthetic rows; their padding share is recorded")
    throughput.add_argument("--profile", type=int, default=0, metavar="STEPS",
                            help="then profile this many steps of each side: the costliest kernels")
    checkpointing.add_argument("--micro-batch-size", type=int, default=64)
    checkpointing.add_argument("--steps", type=int, default=10)
    checkpointing.add_argument("--granularity", type=int, default=8, help="search step, sequences")
    checkpointing.add_argument("--limit", type=int, default=8192, help="largest batch tried")
    checkpointing.add_argument("--no-search", action="store_true", help="skip the largest-batch search")
    args = parser.parse_args(argv)
    if args.command == "throughput":
        args.changes = parse_changes(args.changes)
    defaults = DEFAULTS[getattr(args, "architecture", "bert")]
    for name in ("seq_length", "batch_size"):
        if getattr(args, name, 0) is None:
            setattr(args, name, defaults[name])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available() and not (args.allow_cpu and args.command == "throughput"):
        print(NO_CUDA)
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers (optimizer, loss) as in training
    run = {"throughput": run_throughput, "checkpointing": run_checkpointing, "matmul": run_matmul}
    try:
        result = run[args.command](args, device)
    except torch.OutOfMemoryError:
        print("out of memory: try a smaller --micro-batch-size (the global batch is accumulated)",
              file=sys.stderr)
        return 1
    if device.type != "cuda":
        return 0  # a code check: CPU figures are not GPU results
    suffix = "" if args.command == "matmul" else f"-{args.model}-{args.seq_length}"
    if getattr(args, "architecture", "bert") == "modernbert":
        suffix = f"-modernbert{suffix}"
    if getattr(args, "precision", "bf16") == "fp16":
        suffix += "-fp16"  # bf16, the default, keeps the plain name
    if args.command == "throughput" and args.compile:
        suffix += "-compile"
    if getattr(args, "no_fused", False):
        suffix += "-foreach"
    if getattr(args, "local_attention", "auto") != "auto":
        suffix += f"-{args.local_attention}"
    for name, value in getattr(args, "changes", {}).items():
        suffix += f"-{name.replace('_', '-')}-{str(value).lower()}"
    if getattr(args, "data", None) is not None:
        suffix += "-data"
    if getattr(args, "profile", 0):
        suffix += "-profile"
    path = write_result(f"gpu-{args.command}{suffix}", result, args.out, argv,
                        versions=("torch", "transformers"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
