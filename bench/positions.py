"""Position embeddings side by side: validation MLM loss at the training length L, 2L and 4L, and training tokens/s.

Every variant trains the same tiny model (configs/tiny.yaml, widened) on the same DATA with the
same seed and steps at length L, then is scored with `evaluate_saved_model` on the same
validation documents at L, 2L and 4L (at each length every variant sees the same sequences and
masks). The variants:

- `absolute`: BERT's learned table with L rows, so 2L and 4L are refused ("cannot read");
- `absolute-4L`: a table of 4L rows trained only at L, to show what untrained rows do;
- `transformer_xl`: Transformer-XL's relative attention bias;
- `rope`: rotary queries and keys.

Tokens/s are those of the trainer's optimizer step (`Trainer.train_step`), measured after the
training runs in rounds of a few steps with the variants taking turns, so that other load on
the machine hits them alike; the median of the rounds is compared. The DATA is WikiText-2
(validation and test splits, one article a document) tokenized here with a small vocabulary.

    .venv/bin/python -m bench.positions                      # L=64, 600 steps, 4 variants: ~12 min, one thread
    .venv/bin/python -m bench.positions --steps 40 --rounds 2 --round-steps 3   # short
    .venv/bin/python -m bench.positions --data DATA --length 128 --variants absolute rope
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import (
    CORPORA,
    RESULTS,
    ROOT,
    median,
    read_wikitext,
    write_bert_format,
    write_result,
)
from bertpre.config import Config, load_config, resolve
from bertpre.data import load_data
from bertpre.data.build import tokenize_corpus
from bertpre.errors import UserError
from bertpre.model import BertForPreTraining
from bertpre.tools.inference import evaluate_saved_model
from bertpre.train.evaluation import Evaluator
from bertpre.train.runtime import seed_everything
from bertpre.train.trainer import Trainer, pretrain

# name: (model.position_embedding_type, rows of the position table in units of L)
VARIANTS: dict[str, tuple[str, int]] = {
    "absolute": ("absolute", 1),
    "absolute-4L": ("absolute", 4),
    "transformer_xl": ("transformer_xl", 1),
    "rope": ("rope", 1),
}
LENGTH_FACTORS = (1, 2, 4)
DEFAULT_CORPUS = [CORPORA / "wikitext2-valid.txt", CORPORA / "wikitext2-test.txt"]


def variant_overrides(variant: str, length: int) -> list[str]:
    """The `--set` overrides that make `variant` at training length `length`.

    A relative model has no table: its max_position_embeddings is only the length it is meant for.
    """
    kind, table_factor = VARIANTS[variant]
    return [f"model.position_embedding_type={kind}", f"model.max_position_embeddings={table_factor * length}"]


def model_overrides(hidden_size: int, layers: int, heads: int) -> list[str]:
    """A BERT shape: `layers` layers of `hidden_size`, `heads` heads, a feed-forward 4× as wide."""
    return [f"model.hidden_size={hidden_size}", f"model.num_hidden_layers={layers}",
            f"model.num_attention_heads={heads}", f"model.intermediate_size={4 * hidden_size}"]


def score_cell(metrics: dict | None) -> str:
    """A table cell: 'loss (accuracy)', or 'cannot read' where the model refused the length."""
    if metrics is None or "cannot_read" in metrics:
        return "cannot read"
    return f"{metrics['mlm_loss']:.3f} ({metrics['mlm_acc']:.1%})"


def median_after_first(values: list[float]) -> float:
    """The median of a run's logged tokens/s, its first window (start-up) left out where there are more."""
    return median(values[1:] if len(values) > 1 else values)


def build_data(corpora: list[Path], folder: Path, vocab_size: int, validation_share: float) -> Path:
    """WikiText files as one DATA folder: each article a document, `validation_share` of them held out."""
    documents = [document for path in corpora for document in read_wikitext(path)]
    if not documents:
        raise UserError(f"no WikiText articles (` = Title = ` lines) in {', '.join(map(str, corpora))}")
    corpus = write_bert_format(documents, folder / "corpus.txt")
    tokenize_corpus([corpus], folder / "data", vocab_size=vocab_size, validation_share=validation_share,
                    show_progress=False)
    return folder / "data"


def validation_fill(data_path: Path, config: Config, lengths: list[int]) -> dict[str, dict]:
    """At each length, the validation sequences' count and mean length as a share of the length:
    evidence that the documents fill the long sequences."""
    data = load_data(data_path)
    filled = {}
    for length in lengths:
        data_config = copy.deepcopy(config.data)
        data_config.max_seq_length = length
        evaluator = Evaluator(data, data_config, seed=config.train.seed)
        sizes = evaluator.instances.__getitems__(range(len(evaluator.instances))).lengths
        filled[str(length)] = {"sequences": len(sizes), "mean_tokens": float(sizes.mean()),
                               "mean_fill": float(sizes.mean() / length)}
    return filled


def initial_scores(config: Config, data_path: Path) -> dict:
    """The untrained model's validation metrics at the training length (the trainer's initial weights)."""
    data = load_data(data_path)
    seed_everything(config.train.seed)
    model = BertForPreTraining(config.model)
    return Evaluator(data, config.data, micro_batch_size=config.train.micro_batch_size, seed=config.train.seed)(model)


def train_and_score(config: Config, data_path: Path, lengths: list[int]) -> dict:
    """Train one variant with `pretrain`, then score its saved run at each length."""
    start = time.perf_counter()
    pretrain(config, resume=False)
    seconds = time.perf_counter() - start
    run = Path(config.train.out)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [row for row in rows if "perf/tokens_per_s" in row]
    scores = {}
    for length in lengths:
        try:
            scores[str(length)] = evaluate_saved_model(run, data_path, seed=config.train.seed,
                                                       micro_batch_size=config.train.micro_batch_size,
                                                       max_seq_length=length)
        except UserError as error:
            scores[str(length)] = {"cannot_read": str(error).replace(str(run), "RUN")}
    return {"train_seconds": seconds,
            "final_train_mlm_loss": logged[-1]["train/mlm_loss"],
            "run_tokens_per_s_median": median_after_first([row["perf/tokens_per_s"] for row in logged]),
            "eval": scores}


def measure_throughput(configs: dict[str, Config], scratch: Path, rounds: int, steps: int) -> dict[str, list[float]]:
    """Tokens/s of each variant's optimizer step: `rounds` rounds of `steps` steps, the variants taking turns."""
    rates: dict[str, list[float]] = {name: [] for name in configs}
    with contextlib.ExitStack() as stack:
        trainers = {}
        for name, config in configs.items():
            config = copy.deepcopy(config)
            config.train.out = str(scratch / f"speed-{name}")
            trainers[name] = stack.enter_context(Trainer(config, resume=False))
            trainers[name].train_step()  # first-step allocations are not timed
        for _ in range(rounds):
            for name, trainer in trainers.items():
                start, tokens = time.perf_counter(), 0
                for _ in range(steps):
                    tokens += trainer.train_step().host_counts[2]  # non-padding tokens
                rates[name].append(tokens / (time.perf_counter() - start))
    return rates


def print_table(variants: dict[str, dict], lengths: list[int]) -> None:
    """Variants × validation MLM loss (accuracy) at each length, and training tokens/s."""
    head = "".join(f"{f'loss @ {length}':>20}" for length in lengths)
    print(f"{'variant':<16}{'start':>8}{head}{'tokens/s':>11}")
    for name, figures in variants.items():
        cells = "".join(f"{score_cell(figures['eval'].get(str(length))):>20}" for length in lengths)
        print(f"{name:<16}{figures['initial_mlm_loss']:>8.3f}{cells}{figures['tokens_per_s']:>11,.0f}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "tiny.yaml")
    parser.add_argument("--data", type=Path, default=None, help="DATA folder (default: --corpus tokenized here)")
    parser.add_argument("--corpus", type=Path, nargs="+", default=DEFAULT_CORPUS, help="WikiText files")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--validation-share", type=float, default=0.1, help="share of articles held out")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--length", type=int, default=64, help="training length L")
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--rounds", type=int, default=5, help="throughput rounds, the variants taking turns")
    parser.add_argument("--round-steps", type=int, default=10, help="optimizer steps per variant a round")
    # One thread: on a shared 2-core machine, two threads slowed 15x whenever another process was
    # busy (OpenMP threads waiting on each other), one thread by under 2x.
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="more config overrides")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    lengths = [factor * args.length for factor in LENGTH_FACTORS]
    load_before = os.getloadavg()
    # The tiny config's prediction cap (10 at 64) as a share of the length; evaluation scales it.
    predictions = max(1, round(args.length * 10 / 64))
    shared = [*model_overrides(args.hidden_size, args.layers, args.heads),
              f"data.max_seq_length={args.length}", f"data.max_predictions_per_seq={predictions}",
              f"train.seed={args.seed}", f"train.batch_size={args.batch_size}",
              f"train.micro_batch_size={args.batch_size}", f"train.max_steps={args.steps}",
              f"train.log_every={max(1, args.steps // 20)}", f"train.eval_every={args.steps}",
              f"train.save_every={args.steps}", "train.precision=fp32", "train.device=cpu", *args.overrides]
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        data_path = args.data or build_data(args.corpus, scratch, args.vocab_size, args.validation_share)
        configs = {}
        for name in args.variants:
            configs[name] = load_config(args.config, [*shared, f"data.path={data_path}",
                                                      *variant_overrides(name, args.length),
                                                      f"train.out={scratch / f'run-{name}'}"])
            resolve(configs[name], load_data(data_path).tokenizer)
        fill = validation_fill(data_path, configs[args.variants[0]], lengths)
        variants = {}
        for name, config in configs.items():
            print(f"== {name}: training {args.steps} steps at length {args.length}", flush=True)
            start = initial_scores(config, data_path)
            variants[name] = {"position_embedding_type": config.model.position_embedding_type,
                              "max_position_embeddings": config.model.max_position_embeddings,
                              "parameters": sum(p.numel() for p in BertForPreTraining(config.model).parameters()),
                              "initial_mlm_loss": start["mlm_loss"], "initial_mlm_acc": start["mlm_acc"],
                              **train_and_score(config, data_path, lengths)}
        print(f"== throughput: {args.rounds} rounds of {args.round_steps} steps, the variants taking turns",
              flush=True)
        rates = measure_throughput(configs, scratch, args.rounds, args.round_steps)
    for name, figures in variants.items():
        figures["tokens_per_s"] = median(rates[name])
        figures["tokens_per_s_rounds"] = rates[name]
    print_table(variants, lengths)

    config = configs[args.variants[0]]
    result = {
        "settings": {
            "config": str(args.config.relative_to(ROOT) if args.config.is_relative_to(ROOT) else args.config),
            "overrides": [*shared, "data.path=DATA", "model.position_embedding_type=<variant>",
                          "model.max_position_embeddings=<L, or 4L for absolute-4L>"],
            "model": {"hidden_size": args.hidden_size, "num_hidden_layers": args.layers,
                      "num_attention_heads": args.heads, "intermediate_size": 4 * args.hidden_size,
                      "vocab_size": config.model.vocab_size},
            "training_length": args.length, "eval_lengths": lengths, "steps": args.steps,
            "batch_size": args.batch_size, "lr": config.optim.lr, "warmup_steps": config.optim.warmup_steps,
            "seed": args.seed, "precision": "fp32", "device": "cpu",
            "max_predictions_per_seq": predictions, "pair_task": config.data.pair_task,
            "throughput": {"rounds": args.rounds, "steps_per_round": args.round_steps},
            "data": str(args.data) if args.data else {
                "corpus": [path.name for path in args.corpus], "vocab_size": args.vocab_size,
                "validation_share": args.validation_share, "documents": "one WikiText article each"},
        },
        "validation": fill,
        "variants": variants,
        "notes": ["loss = validation MLM loss (nats) from evaluate_saved_model; the same validation "
                  "sequences and masks at each length for every variant",
                  "absolute has a table of L rows: 2L and 4L are refused (cannot read); absolute-4L "
                  "has 4L rows of which only the first L were trained",
                  "tokens/s: Trainer.train_step in interleaved rounds, median; run_tokens_per_s_median "
                  "is each training run's own (not interleaved)"],
    }
    path = write_result("positions", result, args.out, argv, torch_threads=args.threads,
                        benchmark="position embeddings: MLM loss at L, 2L, 4L and training tokens/s",
                        machine={"device": "cpu",
                                 "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()}})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
