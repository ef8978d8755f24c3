"""GPU training throughput, MFU and gradient checkpointing: bertpre next to transformers.

    .venv/bin/python -m bench.gpu throughput                       # BERT-base, length 128, batch 256
    .venv/bin/python -m bench.gpu throughput --model large         # BERT-large at 128
    .venv/bin/python -m bench.gpu throughput --seq-length 512 --micro-batch-size 64   # base at 512
    .venv/bin/python -m bench.gpu checkpointing                    # memory saving, cost, largest batch
    .venv/bin/python -m bench.gpu matmul                           # the dense fp16/bf16 rate only

throughput: one optimizer step on a global batch (default 256 sequences, accumulated from
micro-batches when --micro-batch-size is smaller), fp16 autocast with a GradScaler, fused AdamW
for both models (--no-fused: foreach AdamW for both). The peer is
`transformers.BertForPreTraining` run eagerly with its default attention (SDPA), same weights,
same batch. Rounds of steps alternate between the two; medians are compared. MFU uses
FLOPs/token = 6·N_enc + 12·L·s·d + 6·f·(d² + d·V) (`bertpre.model.cost`), f = predicted share, against
the fp16 matmul rate measured here (large square matmuls).

Batches are synthetic but shaped like real ones (`bench.common.make_batch`): [CLS] A [SEP] B
[SEP] segments, 10% of rows shorter and padded (--short-rows; ~4% padding, as measured on
article-level wikitext-2 NSP instances at 128), round(0.15·(n-3)) predicted positions per row of
n tokens (capped at 20 for s=128, 76 for s=512, as Google's recipe), random pair labels.
Tokens/s count non-padding tokens.
The checkpointing measurements use full rows, the worst case for memory.

Without a CUDA device every subcommand prints "no CUDA device: skipping" and exits 0.
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import torch

from bench.common import RESULTS, VOCAB_SIZE, make_batch, median, print_table, write_result

SHAPES = {
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}
NO_CUDA = "no CUDA device: skipping"


def model_config(shape: str, seq_length: int) -> dict:
    """HF BertConfig fields shared by both models."""
    return dict(vocab_size=VOCAB_SIZE, max_position_embeddings=max(512, seq_length), **SHAPES[shape])


def build_models(shape: str, seq_length: int, device: torch.device, peer: bool,
                 checkpointing: bool = False, compile_model: bool = False) -> dict[str, torch.nn.Module]:
    """bertpre's model and, with `peer`, transformers' with the same weights, in train mode."""
    from bertpre.model import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    ours = BertForPreTraining(BertConfig(**model_config(shape, seq_length))).to(device).train()
    ours.set_gradient_checkpointing(checkpointing)
    models = {"bertpre": torch.compile(ours) if compile_model else ours}
    if peer:
        import transformers

        theirs = transformers.BertForPreTraining(transformers.BertConfig(**model_config(shape, seq_length)))
        theirs.load_state_dict(ours.state_dict(), strict=False)  # same weights: same work per step
        if checkpointing:
            theirs.gradient_checkpointing_enable()
        models["transformers"] = theirs.to(device).train()
    return models


class Stepper:
    """One optimizer step on a global batch: fp16 autocast, GradScaler, AdamW, accumulation."""

    def __init__(self, model: torch.nn.Module, device: torch.device, fused: bool) -> None:
        self.model, self.device = model, device
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                           fused=fused or None, foreach=None if fused else True)
        self.scaler = torch.amp.GradScaler(device.type)

    def step(self, micro_batches: list[dict]) -> float:
        """Seconds for forward + backward of every micro-batch, then the optimizer step."""
        synchronize(self.device)
        start = time.perf_counter()
        for batch in micro_batches:
            with torch.autocast(self.device.type, dtype=torch.float16):
                loss = self.model(**batch).loss / len(micro_batches)
            self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        synchronize(self.device)
        return time.perf_counter() - start


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


def measure_step_rate(shape: str, seq_length: int, micro_batch_size: int, steps: int, peer: bool,
                      batch_size: int | None = None, warmup: int = 5, round_steps: int = 5,
                      fused: bool = True, compile_model: bool = False, short_rows: float = 0.1,
                      device: torch.device | None = None) -> dict:
    """Median step time and sequences/s for bertpre (and the peer), rounds alternating."""
    device = device or torch.device("cuda")
    batch_size = batch_size or micro_batch_size
    if batch_size % micro_batch_size:
        raise SystemExit(f"--batch-size {batch_size} is not a multiple of --micro-batch-size {micro_batch_size}")
    models = build_models(shape, seq_length, device, peer, compile_model=compile_model)
    steppers = {name: Stepper(model, device, fused) for name, model in models.items()}
    micro_batches = [make_batch(micro_batch_size, seq_length, device, seed, short_rows)
                     for seed in range(batch_size // micro_batch_size)]
    tokens = sum(int(batch["attention_mask"].sum()) for batch in micro_batches)  # not padding
    predicted = sum(int((batch["labels"] != -100).sum()) for batch in micro_batches)
    times: dict[str, list[float]] = {name: [] for name in models}
    peaks: dict[str, float] = {}
    for name, stepper in steppers.items():
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(warmup):
            stepper.step(micro_batches)
        if device.type == "cuda":
            peaks[name] = torch.cuda.max_memory_allocated(device) / 2**30
    names = list(models)
    for round_index in range(-(-steps // round_steps)):
        for name in names if round_index % 2 == 0 else reversed(names):
            times[name] += [steppers[name].step(micro_batches) for _ in range(round_steps)]
    result = {"settings": {"model": shape, "seq_length": seq_length, "batch_size": batch_size,
                           "micro_batch_size": micro_batch_size, "steps": len(times["bertpre"]),
                           "warmup": warmup, "fused_adamw": fused, "compile": compile_model,
                           "precision": "fp16 autocast + GradScaler", "short_rows": short_rows,
                           "tokens_per_step": tokens, "padding_share": 1 - tokens / (batch_size * seq_length),
                           "predicted_share": predicted / tokens}}
    for name in names:
        seconds = median(times[name])
        result[name] = {"median_step_s": seconds, "sequences_per_s": batch_size / seconds,
                        "tokens_per_s": tokens / seconds, "step_s": times[name],
                        "peak_memory_gib_both_models_resident": peaks.get(name)}
    if peer:
        result["transformers"]["attention"] = models["transformers"].config._attn_implementation
    return result


def run_throughput(args: argparse.Namespace, device: torch.device) -> dict:
    from bertpre.model import BertConfig
    from bertpre.model.cost import training_flops_per_token

    result = measure_step_rate(args.model, args.seq_length, args.micro_batch_size or args.batch_size,
                               args.steps, peer=not args.no_peer, batch_size=args.batch_size,
                               fused=not args.no_fused, compile_model=args.compile,
                               short_rows=args.short_rows, device=device)
    share = result["settings"]["predicted_share"]
    flops = training_flops_per_token(BertConfig(**model_config(args.model, args.seq_length)),
                                     args.seq_length, share)
    peak = {"fp16": matmul_rate(torch.float16), "bf16": matmul_rate(torch.bfloat16)} \
        if device.type == "cuda" else {"fp16": float("nan"), "bf16": float("nan")}
    result["mfu"] = {"flops_per_token": flops, "predicted_share": share,
                     "matmul_flops_per_s": peak, "against": "fp16"}
    rows = [("tokens/s", result["bertpre"]["tokens_per_s"],
             result["transformers"]["tokens_per_s"] if "transformers" in result else None)]
    for name in ("bertpre", "transformers"):
        if name in result:
            result[name]["mfu"] = result[name]["tokens_per_s"] * flops / peak["fp16"]
    print(f"BERT-{args.model}, length {args.seq_length}, batch {args.batch_size}, fp16 autocast, "
          f"{'fused' if not args.no_fused else 'foreach'} AdamW{', torch.compile' if args.compile else ''}")
    print(f"dense matmul: fp16 {peak['fp16'] / 1e12:.0f} TFLOP/s, bf16 {peak['bf16'] / 1e12:.0f} TFLOP/s; "
          f"{flops / 1e6:.1f} MFLOP per token (f = {share:.3f})")
    print_table(rows + [("MFU %", 100 * result["bertpre"]["mfu"],
                         100 * result["transformers"]["mfu"] if "transformers" in result else None)],
                "", "transformers")
    if "transformers" in result:
        result["ratio"] = result["bertpre"]["tokens_per_s"] / result["transformers"]["tokens_per_s"]
        print(f"ratio bertpre / transformers: {result['ratio']:.2f}x (target >= 2.0x); "
              f"bertpre MFU {100 * result['bertpre']['mfu']:.1f}% (target >= 50%)")
    result["peer"] = result.pop("transformers", None)
    return result


def fits(stepper: Stepper, micro_batch_size: int, seq_length: int, device: torch.device) -> bool:
    """Whether one training step at this micro-batch runs without running out of memory."""
    gc.collect()  # what a failed try left behind
    torch.cuda.empty_cache()
    try:
        stepper.step([make_batch(micro_batch_size, seq_length, device)])
        return True
    except torch.OutOfMemoryError:
        stepper.optimizer.zero_grad(set_to_none=True)
        # The step may have stopped between unscale_ and update: start the scaler afresh.
        stepper.scaler = torch.amp.GradScaler(device.type)
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
                           "precision": "fp16 autocast + GradScaler", "fused_adamw": not args.no_fused}}
    for checkpointing in (False, True):
        name = "with" if checkpointing else "without"
        model = build_models(args.model, args.seq_length, device, peer=False,
                             checkpointing=checkpointing)["bertpre"]
        stepper = Stepper(model, device, fused=not args.no_fused)
        batch = [make_batch(args.micro_batch_size, args.seq_length, device)]  # full rows: the worst case
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
    print(f"BERT-{args.model}, length {args.seq_length}, micro-batch {args.micro_batch_size}")
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
        command.add_argument("--seq-length", type=int, default=128)
        command.add_argument("--no-fused", action="store_true", help="foreach AdamW instead of fused")
    throughput.add_argument("--short-rows", type=float, default=0.1,
                            help="share of rows shorter than --seq-length, padded (0: no padding)")
    throughput.add_argument("--batch-size", type=int, default=256, help="global batch, sequences")
    throughput.add_argument("--micro-batch-size", type=int, default=None, help="default: the batch")
    throughput.add_argument("--steps", type=int, default=20, help="timed steps per model")
    throughput.add_argument("--compile", action="store_true", help="torch.compile bertpre's model")
    throughput.add_argument("--no-peer", action="store_true", help="bertpre only")
    checkpointing.add_argument("--micro-batch-size", type=int, default=64)
    checkpointing.add_argument("--steps", type=int, default=10)
    checkpointing.add_argument("--granularity", type=int, default=8, help="search step, sequences")
    checkpointing.add_argument("--limit", type=int, default=8192, help="largest batch tried")
    checkpointing.add_argument("--no-search", action="store_true", help="skip the largest-batch search")
    return parser.parse_args(argv)


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
    if args.command == "throughput" and args.compile:
        suffix += "-compile"
    if getattr(args, "no_fused", False):
        suffix += "-foreach"
    path = write_result(f"gpu-{args.command}{suffix}", result, args.out, argv,
                        versions=("torch", "transformers"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
