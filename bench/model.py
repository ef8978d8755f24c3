"""Training-step throughput of bertpre's BertForPreTraining next to transformers', same run.

One step = forward, backward, AdamW step on the same batch, model shape and optimizer settings.
The batch is `bench.common.make_batch`'s synthetic NSP batch, full rows, round(share·(s-3))
predicted positions a row. Steps of the two models are interleaved so that machine noise hits
both alike; the medians are compared.

    .venv/bin/python -m bench.model                 # CPU, 2 threads, 20 timed steps each
    .venv/bin/python -m bench.model --steps 5       # shorter
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import transformers

from bench.common import RESULTS, make_batch, median, write_result
from bertpre.model import BertConfig, BertForPreTraining

SHAPE = dict(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
             intermediate_size=1024, max_position_embeddings=512)


def training_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, device: str) -> float:
    """Seconds for one forward + backward + AdamW step."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--predicted-share", type=float, default=0.15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    ours = BertForPreTraining(BertConfig(**SHAPE)).to(args.device).train()
    peer = transformers.BertForPreTraining(transformers.BertConfig(**SHAPE)).to(args.device).train()
    peer.load_state_dict(ours.state_dict(), strict=False)  # same weights: same work per step
    optimizers = {
        name: torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
        for name, model in (("bertpre", ours), ("transformers", peer))
    }
    models = {"bertpre": ours, "transformers": peer}
    batch = make_batch(args.batch_size, args.seq_length, args.device,
                       predicted_share=args.predicted_share, capped=False,
                       vocab_size=SHAPE["vocab_size"])

    times: dict[str, list[float]] = {name: [] for name in models}
    for step in range(args.warmup + args.steps):
        order = list(models) if step % 2 == 0 else list(reversed(models))
        for name in order:
            seconds = training_step(models[name], optimizers[name], batch, args.device)
            if step >= args.warmup:
                times[name].append(seconds)

    median_step = {name: median(values) for name, values in times.items()}
    throughput = {name: args.batch_size / seconds for name, seconds in median_step.items()}
    ratio = throughput["bertpre"] / throughput["transformers"]
    print(f"{'model':<14}{'median step (s)':>17}{'sequences/s':>14}")
    for name in models:
        print(f"{name:<14}{median_step[name]:>17.4f}{throughput[name]:>14.2f}")
    print(f"ratio bertpre / transformers: {ratio:.2f}x (target >= 1.3x)")

    suffix = ("" if args.device == "cpu" else f"-{args.device}") + \
        ("" if args.threads == 2 else f"-threads{args.threads}")
    path = write_result(f"model{suffix}", {
        "settings": {**SHAPE, "batch_size": args.batch_size, "seq_length": args.seq_length,
                     "predicted_share": args.predicted_share, "steps": args.steps, "warmup": args.warmup,
                     "peer_attention": peer.config._attn_implementation},
        "bertpre": {"median_step_s": median_step["bertpre"], "sequences_per_s": throughput["bertpre"],
                    "step_s": times["bertpre"]},
        "peer": {"name": "transformers.BertForPreTraining", "median_step_s": median_step["transformers"],
                 "sequences_per_s": throughput["transformers"], "step_s": times["transformers"]},
        "ratio": ratio,
    }, args.out, argv, versions=("torch", "transformers"), torch_threads=args.threads,
        benchmark="model training step (forward, backward, AdamW)",
        machine={"device": args.device if args.device == "cpu" else torch.cuda.get_device_name()})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
