"""The masked LM's decoder and cross-entropy, whole or in chunks of rows (`model.loss_chunk_rows`):
peak memory and time of one forward and backward, measured on the CPU.

Each setting runs in a process of its own (`--one`), so that its peak resident memory
(`ru_maxrss`, less what the inputs had taken) is its alone: ROWS predicted rows of WIDTH features,
the decoder (WIDTH → VOCAB, with a bias) and random labels, fp32, the loss as the trainer's step
takes it (`summed_cross_entropy` on the Linear's logits for 0, `chunked_cross_entropy` otherwise).
The losses must agree; the peak is what chunking is for, and the time is its price (its loop and
elementwise passes over each chunk).

Writes bench/results/chunked_loss-DATE.json.

    .venv/bin/python -m bench.chunked_loss                          # 2,000 rows at ModernBERT's 50,368 ids: ~1 min
    .venv/bin/python -m bench.chunked_loss --rows 64 --vocab 1000 --width 32 --chunks 0 16
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.common import RESULTS, ROOT, write_result


def measure(rows: int, vocab: int, width: int, chunk: int) -> dict:
    """One forward and backward of the loss on `rows` x `width` features over `vocab` ids, whole
    (`chunk` 0) or in chunks of `chunk` rows: the loss, the peak RSS above the inputs', seconds."""
    import torch
    from torch import nn

    from bertpre.model.chunked_loss import chunked_cross_entropy
    from bertpre.model.common import summed_cross_entropy

    torch.manual_seed(0)
    decoder = nn.Linear(width, vocab)
    features = torch.randn(rows, width, requires_grad=True)
    labels = torch.randint(0, vocab, (rows,))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if chunk:
        loss, _ = chunked_cross_entropy(features, decoder, labels, 0.0, chunk)
    else:
        loss = summed_cross_entropy(decoder(features), labels)
    loss.backward()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"loss_chunk_rows": chunk, "loss": loss.item(), "peak_mib": (peak - before) / 1024, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000, help="predicted rows (default 2,000)")
    parser.add_argument("--vocab", type=int, default=50368, help="ids (default ModernBERT's 50,368)")
    parser.add_argument("--width", type=int, default=768, help="the decoder's input width (default 768)")
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 512],
                        help="loss_chunk_rows settings to compare, 0 the whole product (default 0 512)")
    parser.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a child: one setting
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.rows, args.vocab, args.width, args.one)))
        return 0
    runs = []
    for chunk in args.chunks:
        child = subprocess.run([sys.executable, "-m", "bench.chunked_loss", "--rows", str(args.rows), "--vocab",
                                str(args.vocab), "--width", str(args.width), "--one", str(chunk)],
                               cwd=ROOT, capture_output=True, text=True, check=True)
        runs.append(json.loads(child.stdout.splitlines()[-1]))
        run = runs[-1]
        print(f"loss_chunk_rows {chunk:>6}: peak {run['peak_mib']:8,.0f} MiB above the inputs, "
              f"{run['seconds']:6.2f} s, loss {run['loss']:.4f}")
    shape = {"rows": args.rows, "vocab": args.vocab, "width": args.width, "dtype": "float32"}
    path = write_result("chunked_loss", {"shape": shape, "runs": runs}, args.out, argv)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
