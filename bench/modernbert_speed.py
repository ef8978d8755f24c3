"""ModernBERT's training step: bertpre's next to transformers' `ModernBertForMaskedLM`, and beside
bertpre's BERT of the same size, same run.

One step = forward, backward, AdamW step on the same batch (`bench.common.make_batch`'s rows of
random tokens, a share of them padded, round(share·(s−3)) positions a row masked; no token
types, no pair labels). Rounds interleave the models (the order reversed every other round) so
that the machine's other load hits them alike; medians are compared.
- `bertpre`: `bertpre.model.modernbert.ModernBertForMaskedLM` (its head and decoder on the
  predicted rows alone).
- `transformers`: transformers' `ModernBertForMaskedLM` loaded from bertpre's own export of the
  same weights (so the same config and numbers), its default attention (SDPA) and its default
  `sparse_prediction: false` (head and decoder on every row); `transformers-sparse`: the same
  with `sparse_prediction: true` (the predicted rows alone, as bertpre), to tell the model's
  body from the head's layout.
- `bert`: bertpre's `BertForPreTraining` (MLM loss only, `pair_task: none`'s step) at the same
  hidden size, layers and heads, its feed-forward width the multiple of 8 that brings its
  parameter count (the cost model's, `count_parameters`) nearest the ModernBERT's; no dropout
  either side. Tokens/s are compared: on a CPU, SDPA computes a local layer's attention densely
  and masks it, so the window saves nothing here (on a GPU, FlexAttention skips the blocks).

Writes bench/results/modernbert_speed-DATE.json with the medians, the ratios, the shape, the
machine and its load average (other work on a shared machine: ratios from one run stay fair,
absolute figures do not).

    .venv/bin/python -m bench.modernbert_speed             # hidden 256, 3 layers, 8 x 128, window 32: ~1 min on 2 quiet cores
    .venv/bin/python -m bench.modernbert_speed --steps 2 --warmup 1 --hidden 32 --layers 3 --seq-length 32
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import RESULTS, make_batch, median, write_result

SIDES = ("bertpre", "transformers", "transformers-sparse", "bert")


def shapes(args):
    """The ModernBERT's and the BERT's BertConfig: same hidden, layers, heads; BERT's FFN width
    matched in parameters."""
    from bertpre.model.config import BertConfig
    from bertpre.model.cost import count_parameters

    modernbert = BertConfig(architecture="modernbert", vocab_size=args.vocab_size, hidden_size=args.hidden,
                            num_hidden_layers=args.layers, num_attention_heads=args.hidden // 64 or 1,
                            intermediate_size=args.intermediate or 3 * args.hidden // 2,
                            max_position_embeddings=args.seq_length, local_attention=args.window,
                            global_attn_every_n_layers=args.global_every, pad_token_id=0)
    target = count_parameters(modernbert).total

    def bert(width: int) -> BertConfig:
        return BertConfig(vocab_size=args.vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
                          num_attention_heads=modernbert.num_attention_heads, intermediate_size=width,
                          max_position_embeddings=args.seq_length, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)

    width = min(range(8, 16 * args.hidden + 1, 8), key=lambda w: abs(count_parameters(bert(w)).total - target))
    return modernbert, bert(width)


def build(args) -> tuple[dict, dict]:
    """The four models (same weights for the three ModernBERTs) and their configs' counts."""
    import transformers

    from bertpre.model import BertForPreTraining
    from bertpre.model.cost import count_parameters
    from bertpre.model.modernbert import ModernBertForMaskedLM

    modernbert_config, bert_config = shapes(args)
    torch.manual_seed(0)
    ours = ModernBertForMaskedLM(modernbert_config)
    models = {"bertpre": ours}
    with tempfile.TemporaryDirectory(prefix="bertpre-modernbert-speed-") as folder:
        ours.save_pretrained(folder)
        for name, sparse in (("transformers", False), ("transformers-sparse", True)):
            models[name] = transformers.AutoModelForMaskedLM.from_pretrained(folder, sparse_prediction=sparse)
    models["bert"] = BertForPreTraining(bert_config)
    counts = {"modernbert": count_parameters(modernbert_config).total, "bert": count_parameters(bert_config).total,
              "modernbert_counted_by_torch": ours.num_parameters(),
              "transformers_counted_by_torch": sum(p.numel() for p in models["transformers"].parameters())}
    shape = {"modernbert": {key: value for key, value in dataclasses.asdict(modernbert_config).items()
                            if key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                       "local_attention", "global_attn_every_n_layers", "vocab_size")},
             "bert_intermediate_size": bert_config.intermediate_size, "parameters": counts,
             "transformers_attention": models["transformers"].config._attn_implementation}
    return {name: model.train() for name, model in models.items()}, shape


def step_seconds(name: str, model, optimizer, batch: dict) -> float:
    """Seconds for one forward + backward + AdamW step."""
    start = time.perf_counter()
    if name in ("bertpre", "bert"):
        loss = model(batch["input_ids"], batch["attention_mask"], labels=batch["labels"]).loss
    else:
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="timed rounds (one step of each model a round)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-length", type=int, default=128)
    parser.add_argument("--short-rows", type=float, default=0.1, help="share of rows shorter than the length (padded)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--intermediate", type=int, default=None, help="ModernBERT's GeGLU width (default 1.5 x hidden)")
    parser.add_argument("--window", type=int, default=32, help="local_attention")
    parser.add_argument("--global-every", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--name", default="modernbert_speed")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    models, shape = build(args)
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
                  for name, model in models.items()}
    batch = make_batch(args.batch_size, args.seq_length, short_rows=args.short_rows, capped=False,
                       vocab_size=args.vocab_size)
    batch = {key: batch[key] for key in ("input_ids", "attention_mask", "labels")}
    tokens = int(batch["attention_mask"].sum())
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    for round_ in range(args.warmup + args.steps):
        for name in SIDES if round_ % 2 == 0 else reversed(SIDES):
            seconds = step_seconds(name, models[name], optimizers[name], batch)
            if round_ >= args.warmup:
                times[name].append(seconds)
    step = {name: median(values) for name, values in times.items()}
    rate = {name: tokens / seconds for name, seconds in step.items()}
    ratios = {"bertpre_over_transformers": rate["bertpre"] / rate["transformers"],
              "bertpre_over_transformers_sparse": rate["bertpre"] / rate["transformers-sparse"],
              "modernbert_over_bert": rate["bertpre"] / rate["bert"]}
    load = os.getloadavg()
    print(f"{'model':<22}{'median step (s)':>17}{'tokens/s':>12}")
    for name in SIDES:
        print(f"{name:<22}{step[name]:>17.4f}{rate[name]:>12.0f}")
    print(f"bertpre / transformers {ratios['bertpre_over_transformers']:.2f}x, / transformers-sparse "
          f"{ratios['bertpre_over_transformers_sparse']:.2f}x; ModernBERT / BERT (parameters "
          f"{shape['parameters']['modernbert']:,} / {shape['parameters']['bert']:,}) "
          f"{ratios['modernbert_over_bert']:.2f}x; load average {load[0]:.1f}")
    path = write_result(args.name, {
        "settings": {key: value for key, value in vars(args).items() if key not in ("out", "name")},
        "shape": shape,
        "tokens_per_batch": tokens,
        "median_step_s": step, "tokens_per_s": rate, "step_s": times, "ratios": ratios,
        "load_average_before_after": [list(load_before), list(load)],
    }, args.out, argv, versions=("torch", "transformers"), torch_threads=args.threads,
        benchmark="ModernBERT training step (forward, backward, AdamW): bertpre, transformers, bertpre's BERT")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
