"""XLNet's permutation-LM step: bertpre's collator and model next to Hugging Face's, same run.

Both models hold the same weights (bertpre's `XLNetLMHeadModel` is in transformers' layout).
Three training steps (forward, backward, AdamW) are timed on prebuilt batches of random tokens,
interleaved round by round, medians compared:
- bertpre: `PermutationCollator` (XLNet's plan: round(T/6) targets, the query stream over
  those P rows only), `expand_plm` on the device, bertpre's model;
- transformers: `DataCollatorForPermutationLanguageModeling` (plm_probability 1/6, spans of
  up to 5 tokens, every position a query row: P = T) and `transformers.XLNetLMHeadModel`;
- transformers on bertpre's batch: the same model given P = round(T/6) target rows, to tell the
  model's speed from the objective's layout.
Collating a batch is timed apart for the two collators (host work a DataLoader worker does).

    .venv/bin/python -m bench.plm                 # CPU, 2 threads, 10 timed steps each
    .venv/bin/python -m bench.plm --steps 3       # shorter
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from bench.common import RESULTS, median, write_result
from bertpre.batches.plm import PermutationCollator, expand_plm
from bertpre.model.xlnet import XLNetConfig, XLNetLMHeadModel

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SHAPE = dict(vocab_size=8192, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)


def step_seconds(run, optimizer: torch.optim.Optimizer, device: str) -> float:
    """Seconds for one forward + backward + AdamW step of `run()` (which returns the loss)."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    run().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per side first")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-length", type=int, default=128, help="even (Hugging Face's collator needs it)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = args.device

    tokens = SPECIALS + [f"w{i}" for i in range(SHAPE["vocab_size"] - len(SPECIALS))]
    ours_tokenizer = Tokenizer(WordPiece({token: i for i, token in enumerate(tokens)}, unk_token="[UNK]"))
    with tempfile.TemporaryDirectory() as folder:
        vocab = Path(folder) / "vocab.txt"
        vocab.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
        peer_tokenizer = transformers.BertTokenizerFast(vocab_file=str(vocab))
    rng = np.random.default_rng(0)
    rows = rng.integers(len(SPECIALS), SHAPE["vocab_size"], size=(args.batch_size, args.seq_length)).tolist()

    collator = PermutationCollator(ours_tokenizer, pad_to_length=args.seq_length, seed=0)
    peer_collator = transformers.DataCollatorForPermutationLanguageModeling(
        peer_tokenizer, plm_probability=1 / 6, max_span_length=5, return_tensors="pt")
    collate_times: dict[str, list[float]] = {"bertpre": [], "transformers": []}
    for round_number in range(args.warmup + args.steps):
        for name in (["bertpre", "transformers"] if round_number % 2 == 0 else ["transformers", "bertpre"]):
            start = time.perf_counter()
            if name == "bertpre":
                ours_batch = collator([{"input_ids": row, "seed_key": n} for n, row in enumerate(rows)])
            else:
                peer_batch = peer_collator([{"input_ids": torch.tensor(row)} for row in rows])
            if round_number >= args.warmup:
                collate_times[name].append(time.perf_counter() - start)
    ours_batch = {name: tensor.to(device) for name, tensor in ours_batch.items()}
    perm_mask, target_mapping = expand_plm(ours_batch)
    peer_batch = {name: tensor.to(device) for name, tensor in peer_batch.items()}

    torch.manual_seed(0)
    config = XLNetConfig(**SHAPE, dropout=0.1)
    ours = XLNetLMHeadModel(config).to(device).train()
    peer = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**config.to_hf_dict())).to(device).train()
    peer.load_state_dict(ours.state_dict())
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
                  for name, model in (("bertpre", ours), ("transformers", peer))}
    runs = {
        "bertpre": (lambda: ours(ours_batch["input_ids"], perm_mask=perm_mask, target_mapping=target_mapping,
                                 labels=ours_batch["labels"]).loss, "bertpre"),
        "transformers": (lambda: peer(input_ids=peer_batch["input_ids"], perm_mask=peer_batch["perm_mask"],
                                      target_mapping=peer_batch["target_mapping"],
                                      labels=peer_batch["labels"]).loss, "transformers"),
        "transformers, P = T/6": (lambda: peer(input_ids=ours_batch["input_ids"], perm_mask=perm_mask.float(),
                                               target_mapping=target_mapping,
                                               labels=ours_batch["labels"]).loss, "transformers"),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_number in range(args.warmup + args.steps):
        order = list(runs) if round_number % 2 == 0 else list(reversed(runs))
        for name in order:
            run, optimizer = runs[name]
            seconds = step_seconds(run, optimizers[optimizer], device)
            if round_number >= args.warmup:
                times[name].append(seconds)

    median_step = {name: median(values) for name, values in times.items()}
    tokens_per_s = {name: args.batch_size * args.seq_length / seconds for name, seconds in median_step.items()}
    collate = {name: median(values) for name, values in collate_times.items()}
    ratio = tokens_per_s["bertpre"] / tokens_per_s["transformers"]
    print(f"{'step':<24}{'median (s)':>12}{'tokens/s':>12}")
    for name in runs:
        print(f"{name:<24}{median_step[name]:>12.4f}{tokens_per_s[name]:>12,.0f}")
    print(f"collate a batch (s): bertpre {collate['bertpre']:.4f}, transformers {collate['transformers']:.4f}")
    print(f"ratio bertpre / transformers (each its own objective layout): {ratio:.2f}x")
    print(f"ratio bertpre / transformers on bertpre's batch: "
          f"{tokens_per_s['bertpre'] / tokens_per_s['transformers, P = T/6']:.2f}x")

    suffix = "" if device == "cpu" else f"-{device}"
    path = write_result(f"plm{suffix}", {
        "settings": {**SHAPE, "batch_size": args.batch_size, "seq_length": args.seq_length, "steps": args.steps,
                     "warmup": args.warmup, "predicted": int(target_mapping.shape[1]),
                     "peer_query_rows": int(peer_batch["target_mapping"].shape[1])},
        "bertpre": {"median_step_s": median_step["bertpre"], "tokens_per_s": tokens_per_s["bertpre"],
                    "collate_s": collate["bertpre"], "step_s": times["bertpre"]},
        "peer": {"name": "transformers.XLNetLMHeadModel + DataCollatorForPermutationLanguageModeling",
                 "median_step_s": median_step["transformers"], "tokens_per_s": tokens_per_s["transformers"],
                 "collate_s": collate["transformers"], "step_s": times["transformers"]},
        "peer_on_bertpre_batch": {"median_step_s": median_step["transformers, P = T/6"],
                                  "tokens_per_s": tokens_per_s["transformers, P = T/6"],
                                  "step_s": times["transformers, P = T/6"]},
        "ratio": ratio,
        "ratio_same_batch": tokens_per_s["bertpre"] / tokens_per_s["transformers, P = T/6"],
    }, args.out, argv, versions=("torch", "transformers"), torch_threads=args.threads,
        benchmark="XLNet permutation-LM training step (forward, backward, AdamW)",
        machine={"device": device if device == "cpu" else torch.cuda.get_device_name()})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
