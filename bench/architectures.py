"""ModernBERT or BERT? The two architectures pretrained at equal training FLOPs on two kinds of
text, scored by one held-out MLM loss and a downstream linear probe, K seeds each; and
ModernBERT's WSD schedule beside linear decay at equal steps.

- variants (`--variants`), one recipe (MLM at 15%, 80/10/10, documents packed, `pair_task:
  none`, AdamW, warmup over a tenth of the steps, the same peak lr, batch, length, no dropout):
  `bert`: `model.architecture: bert` (post-LayerNorm, learned absolute positions up to the
  length, GELU feed-forward of 4 × hidden, dense attention everywhere, dropout set to 0 as
  ModernBERT's); `modernbert`: `architecture: modernbert` (pre-LayerNorm, rotary, GeGLU, no
  biases but the decoder's, layers 0, n, 2n … global and the others reading `--window` tokens,
  `--global-every` n), linear decay; `modernbert-wsd`: the same with `optim.schedule: wsd`
  (decay over the last fifth, 1 − √), at the SAME steps and seeds as `modernbert`.
- matched shapes: the same hidden size, layers, heads (head size 64) and vocabulary; the
  ModernBERT's GeGLU width is the multiple of 8 that brings its parameter count (the cost
  model's, `count_parameters`) nearest BERT's, so the two are the same size.
- matched FLOPs: BERT runs `--steps`; each ModernBERT the steps that buy the same training FLOPs
  by `bertpre.model.cost.training_flops_per_token` (the cost model: a local layer's attention
  counted at its window) times the batch's positions. The same token budget would not be equal
  FLOPs (a GeGLU of 3·d·I and windowed attention cost otherwise than BERT's layers). FLOPs and
  not wall time: this CPU is shared, and its SDPA computes a local layer densely and masks it
  (on a GPU's FlexAttention the window's blocks alone run), so CPU seconds would charge ModernBERT
  for global attention it does not need. Every run records FLOPs, seconds and tokens/s too.
- the length is at least 4 × the window (default 128 and 32), so local layers do see less.
- held-out MLM loss and accuracy (`bench.learning.masked_validation` + `bench.learning.score`:
  the same batches of validation documents masked once at 15%, the same code for both
  architectures, every final model).
- downstream (`--downstream DIR`, default data/wordnet-supersenses-4000): every final model
  through `bertpre finetune`'s linear probe (`--probe-seeds` seeds, pooling mean); where
  finetune refuses an architecture the probe is recorded as not run, with the reason; with
  `--full-seeds N`, also full fine-tuning (`bertpre finetune --mode full`, the `bert` preset at
  lr 1e-4 and 3 epochs, N seeds), its test accuracy compared the same way.

Writes bench/results/architectures-DATE.json: per corpus, per run the scores, FLOPs, steps,
seconds and tokens/s; per variant mean and std over seeds; modernbert − bert and
modernbert-wsd − modernbert with 95% Welch intervals. Prints a table.

    .venv/bin/python -m bench.architectures                   # 2 corpora x 3 seeds x 3 variants
    .venv/bin/python -m bench.architectures --quick           # a minute: tiny model, few steps
    .venv/bin/python -m bench.architectures --corpus sample=FILE --steps 2 --no-downstream
    .venv/bin/python -m bench.architectures --corpus wikitext --variants modernbert-wsd --name arch-wsd  # beside another
    .venv/bin/python -m bench.architectures --corpus wikitext --variants bert modernbert --full-seeds 2  # + full fine-tuning
    .venv/bin/python -m bench.architectures --merge results/A.json results/B.json --name architectures-both
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import RESULTS, ROOT, write_bert_format, write_result
from bench.learning import (
    bertpre_logits,
    bertpre_overrides,
    downstream_identity,
    downstream_task,
    masked_validation,
    probe,
    score,
    welch,
)
from bench.objectives import corpus_documents, corpus_files, measure, spread

VARIANTS = ("bert", "modernbert", "modernbert-wsd")
BASE_CONFIG = {"bert": "tiny.yaml", "modernbert": "tiny-modernbert.yaml", "modernbert-wsd": "tiny-modernbert.yaml"}
# name -> (path in a run's record, higher is better)
MEASURES = {
    "mlm_loss": (("held_out", "mlm_loss"), False),
    "mlm_acc": (("held_out", "mlm_acc"), True),
    "probe_acc": (("probe", "probe_acc"), True),
    "full_acc": (("full", "full_acc"), True),
    "train_s": (("train_s",), None),
    "tokens_per_s": (("tokens_per_s_median",), None),
    "flops": (("flops",), None),
    "steps": (("steps",), None),
}
COMPARED = ("mlm_loss", "mlm_acc", "probe_acc", "full_acc")
# Full fine-tuning of a tiny model (bench.finetune's small-model variant of BERT's recipe): BERT's
# 2e-5 barely moves a hidden-128 encoder in 3 epochs.
FULL_SETTINGS = ("lr=1e-4", "epochs=3")
PAIRS = (("modernbert", "bert"), ("modernbert-wsd", "modernbert"), ("modernbert-wsd", "bert"))


def variant_settings(variant: str, args, intermediate: int | None = None) -> list[str]:
    """The config overrides that make a run `variant` (beside `bench.learning`'s shared recipe)."""
    shared = [f"model.max_position_embeddings={args.length}", "data.mlm_probability=0.15"]
    if variant == "bert":
        return [*shared, "model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0"]
    return [*shared, f"model.local_attention={args.window}", f"model.global_attn_every_n_layers={args.global_every}",
            *([f"model.intermediate_size={intermediate}"] if intermediate else []),
            f"optim.schedule={'wsd' if variant == 'modernbert-wsd' else 'linear'}"]


def run_config(args, variant: str, data: Path, out: Path, seed: int, steps: int, intermediate: int | None = None):
    """The bertpre config of one run: `bench.learning`'s recipe at `steps` steps, the variant's keys."""
    from bertpre.config import load_config

    shared = argparse.Namespace(**{**vars(args), "steps": steps, "warmup": max(1, round(args.warmup_share * steps)),
                                   "variant": None,
                                   "set": [*variant_settings(variant, args, intermediate),
                                           "train.eval_every=1000000000", *args.set]})
    overrides = [item for item in bertpre_overrides(shared, data, out, seed) if item != "optim.schedule=linear"]
    return load_config(ROOT / "configs" / BASE_CONFIG[variant], overrides)


def sized(config, vocab_size: int):
    return dataclasses.replace(config.model, vocab_size=vocab_size)


def parameters(config, vocab_size: int) -> int:
    """The cost model's parameter count of `config` at `vocab_size` (tied decoder once)."""
    from bertpre.model.families import family

    model = sized(config, vocab_size)
    return family(model).count_parameters(model).total


def flops_per_token(config, vocab_size: int) -> float:
    """Training FLOPs per position (forward + backward, the cost model, local layers at their window)."""
    from bertpre.model.cost import training_flops_per_token
    from bertpre.train.setup import predicted_share

    return training_flops_per_token(sized(config, vocab_size), config.data.max_seq_length,
                                    predicted_share(config.data))


def matched_intermediate(args, data: Path, scratch: Path, vocab_size: int) -> int:
    """The GeGLU width (a multiple of 8) whose ModernBERT's parameter count is nearest BERT's."""
    target = parameters(run_config(args, "bert", data, scratch, 0, args.steps), vocab_size)

    def gap(width: int) -> int:
        return abs(parameters(run_config(args, "modernbert", data, scratch, 0, args.steps, width), vocab_size) - target)

    return min(range(8, 16 * args.hidden + 1, 8), key=gap)


def load_final(run: Path):
    from bertpre.model.families import FAMILIES
    from bertpre.model.hf_format import read_config
    from bertpre.train.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(run)
    return FAMILIES[read_config(checkpoint).architecture].pretraining_class.from_pretrained(checkpoint).eval()


def train_run(args, variant: str, data_path: Path, run: Path, seed: int, steps: int, vocab_size: int,
              intermediate: int | None) -> dict:
    """Pretrain one model; its cost in FLOPs, seconds and positions, and the trainer's tokens/s."""
    from bertpre.train.trainer import pretrain

    config = run_config(args, variant, data_path, run, seed, steps, intermediate)
    began = time.perf_counter()
    result = pretrain(config, resume=False)
    train_s = time.perf_counter() - began
    if result.step != steps:
        raise SystemExit(f"{variant} seed {seed} stopped at step {result.step} of {steps}; nothing recorded")
    rates = [row["perf/tokens_per_s"] for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if "perf/tokens_per_s" in row]
    per_token = flops_per_token(config, vocab_size)
    positions = steps * args.batch_size * args.length
    return {"variant": variant, "seed": seed, "steps": steps, "warmup_steps": config.optim.warmup_steps,
            "schedule": config.optim.schedule, "parameters": parameters(config, vocab_size),
            "flops_per_token": per_token, "flops": per_token * positions, "positions": positions,
            "train_s": round(train_s, 1), "tokens_per_s_median": statistics.median(rates) if rates else None}


def downstream(run_dir: Path, task, args, out: Path) -> dict:
    """The linear probe's test accuracy, or why it did not run (finetune refusing the architecture)."""
    from bertpre.errors import UserError

    try:
        return probe(run_dir, task, argparse.Namespace(length=args.length, probe_set=["pooling=mean"],
                                                       probe_seeds=args.probe_seeds), out)
    except UserError as error:
        return {"not_run": str(error)}


def full_finetune(run_dir: Path, task, args, out: Path) -> dict:
    """Test accuracy of `bertpre finetune --mode full` (the `bert` preset at FULL_SETTINGS, examples
    cut at the pretraining length) over `--full-seeds` seeds, or why it did not run."""
    from bertpre.errors import UserError
    from bertpre.finetune import finetune, load_hyperparameters

    hp = load_hyperparameters("bert", None, [f"max_seq_length={args.length}", *FULL_SETTINGS])
    try:
        result = finetune(run_dir, task, out, hp=hp, seeds=list(range(args.full_seeds)), precision="fp32",
                          device="cpu", say=lambda line: None)[-1]
    except UserError as error:
        return {"not_run": str(error)}
    accuracy = result["metrics"]["accuracy"]
    return {"full_acc": accuracy["mean"], "full_acc_per_seed": accuracy["per_seed"], "split": result["split"]}


def summarise(runs: list[dict], variants: list[str]) -> tuple[dict, dict]:
    """Per variant each measure's mean and std over seeds; each pair's difference with its 95% Welch interval."""
    by_variant = {variant: [run for run in runs if run["variant"] == variant] for variant in variants}
    summary = {variant: {name: spread([measure(run, path) for run in chosen])
                         for name, (path, _) in MEASURES.items()
                         if any(measure(run, path) is not None for run in chosen)}
               for variant, chosen in by_variant.items() if chosen}
    differences = {}
    for a, b in PAIRS:
        if a in summary and b in summary:
            differences[f"{a} - {b}"] = {
                name: welch([measure(run, MEASURES[name][0]) for run in by_variant[a]],
                            [measure(run, MEASURES[name][0]) for run in by_variant[b]])
                for name in COMPARED if name in summary[a] and name in summary[b]}
    return summary, differences


def run_corpus(args, spec: str, task, scratch: Path, progress=lambda partial: None) -> dict:
    """Tokenize one corpus once, pretrain every variant with every seed, score every model;
    `progress` gets the runs so far after each (so that a long run's record grows as it goes)."""
    from bertpre.data import load_data
    from bertpre.data.build import tokenize_corpus

    name, source = corpus_documents(spec)
    folder = scratch / name
    folder.mkdir()
    corpus = source if isinstance(source, Path) else write_bert_format(
        source[:args.max_documents] if args.max_documents else source, folder / "corpus.txt")
    tokenize_corpus([corpus], folder / "data", vocab_size=args.vocab_size, validation_share=0.05, show_progress=False)
    data = load_data(folder / "data")
    vocab_size = data.tokenizer.get_vocab_size()
    held_out = masked_validation(data, args.length)
    intermediate = matched_intermediate(args, folder / "data", folder / "shape", vocab_size)
    configs = {variant: run_config(args, variant, folder / "data", folder / "shape", 0, args.steps, intermediate)
               for variant in VARIANTS}
    budget = flops_per_token(configs["bert"], vocab_size) * args.steps * args.batch_size * args.length
    modernbert_steps = max(1, round(budget / (args.batch_size * args.length
                                              * flops_per_token(configs["modernbert"], vocab_size))))
    steps = {variant: args.steps if variant == "bert" else modernbert_steps for variant in args.variants}
    runs = []
    for seed in range(args.seeds):
        for variant in args.variants:
            run_dir = folder / f"{variant}-{seed}"
            record = train_run(args, variant, folder / "data", run_dir, seed, steps[variant], vocab_size,
                               None if variant == "bert" else intermediate)
            record["held_out"] = score(bertpre_logits(load_final(run_dir)), held_out)
            if task is not None:
                began = time.perf_counter()
                record["probe"] = downstream(run_dir, task, args, folder / f"probe-{variant}-{seed}")
                record["probe_s"] = round(time.perf_counter() - began, 1)
                if args.full_seeds:
                    began = time.perf_counter()
                    record["full"] = full_finetune(run_dir, task, args, folder / f"full-{variant}-{seed}")
                    record["full_s"] = round(time.perf_counter() - began, 1)
            runs.append(record)
            progress({"steps": steps, "per_run": runs})
            shown = record.get("probe", {})
            print(f"{name} seed {seed} {variant}: {record['steps']} steps, {record['flops']:.3g} FLOPs, "
                  f"{record['train_s']:.0f} s, held-out loss {record['held_out']['mlm_loss']:.3f} "
                  f"(acc {record['held_out']['mlm_acc']:.3f})"
                  + (f", probe {shown['probe_acc']:.3f}" if "probe_acc" in shown else
                     ", probe not run" if shown else "")
                  + (f", full fine-tuning {record['full']['full_acc']:.3f}" if "full_acc" in record.get("full", {})
                     else ""), flush=True)
    summary, differences = summarise(runs, args.variants)
    return {"documents": {"train": len(data.train), "validation": len(data.validation)},
            "tokens_train": int(sum(len(sentence) for document in data.train["input_ids"] for sentence in document)),
            "vocab_size": vocab_size, "held_out_predictions": runs[0]["held_out"]["predictions"] if runs else None,
            "modernbert_intermediate_size": intermediate,
            "parameters": {variant: parameters(configs[variant], vocab_size) for variant in ("bert", "modernbert")},
            "flops_per_token": {variant: flops_per_token(configs[variant], vocab_size)
                                for variant in ("bert", "modernbert")},
            "flops_budget": budget, "steps": steps, "per_run": runs, "summary": summary, "differences": differences}


def merge(paths: list[Path], name: str, out: Path, argv: list[str] | None) -> Path:
    """One record of several runs' records (variants run in parallel processes, one per file):
    per corpus their runs together, summarised and compared again. The runs must share the
    corpus, shapes, FLOPs budget and steps; a variant or seed seen twice is refused."""
    records = [json.loads(path.read_text(encoding="utf-8")) for path in paths]
    if not all(record.get("complete") for record in records):
        raise SystemExit("a record to merge is not complete (its run was stopped or is still going)")
    merged: dict[str, dict] = {}
    for record in records:
        for corpus, result in record["corpora"].items():
            into = merged.setdefault(corpus, {**result, "per_run": [], "steps": {}})
            for key in ("flops_budget", "parameters", "modernbert_intermediate_size", "held_out_predictions"):
                if into[key] != result[key]:
                    raise SystemExit(f"{corpus}: the records differ in {key}: not one experiment")
            seen = {(run["variant"], run["seed"]) for run in into["per_run"]}
            if seen & {(run["variant"], run["seed"]) for run in result["per_run"]}:
                raise SystemExit(f"{corpus}: a variant and seed is in two records")
            into["per_run"] += result["per_run"]
            into["steps"] |= result["steps"]
    for result in merged.values():
        variants = [variant for variant in VARIANTS if variant in result["steps"]]
        result["summary"], result["differences"] = summarise(result["per_run"], variants)
    print_table(merged)
    return write_result(name, {"complete": True, "merged_from": [path.name for path in paths],
                               "settings": [record["settings"] for record in records],
                               "equalised_by": records[0]["equalised_by"], "held_out": records[0]["held_out"],
                               **({"downstream": records[0]["downstream"]} if "downstream" in records[0] else {}),
                               "wall_s": [record["wall_s"] for record in records], "corpora": merged},
                        out, argv, versions=("torch",))


def print_table(results: dict) -> None:
    shown = [("mlm_loss", "held-out loss", "{:.3f}"), ("mlm_acc", "held-out acc", "{:.3f}"),
             ("probe_acc", "probe acc", "{:.3f}"), ("full_acc", "full acc", "{:.3f}"), ("train_s", "train s", "{:.0f}"),
             ("tokens_per_s", "tokens/s", "{:.0f}"), ("flops", "FLOPs", "{:.3g}")]
    for corpus, result in results.items():
        print(f"\n{corpus}: mean ± std over seeds (steps {result['steps']}, parameters {result['parameters']}, "
              f"budget {result['flops_budget']:.3g} FLOPs)")
        print(f"  {'':<15}" + "".join(f"{label:>20}" for _, label, _ in shown))
        for variant, by_name in result["summary"].items():
            cells = [f"{form.format(by_name[name]['mean'])} ± {form.format(by_name[name]['std'])}"
                     if name in by_name else "-" for name, _, form in shown]
            print(f"  {variant:<15}" + "".join(f"{cell:>20}" for cell in cells))
        for pair, by_name in result["differences"].items():
            for name, entry in by_name.items():
                interval = entry["interval"]
                where = f"[{interval[0]:+.4f}, {interval[1]:+.4f}]" if interval else "(one seed: no interval)"
                print(f"  {pair} {name}: {entry['difference']:+.4f} {where}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", default=None,
                        help="wikitext, shakespeare or NAME=FILE in BERT's format (repeatable; default both)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="BERT's steps; ModernBERT gets its FLOPs")
    parser.add_argument("--warmup-share", type=float, default=0.1)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--window", type=int, default=32, help="ModernBERT's local_attention")
    parser.add_argument("--global-every", type=int, default=2, help="ModernBERT's global_attn_every_n_layers")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-documents", type=int, default=None, help="read only a corpus's first N documents")
    parser.add_argument("--set", action="append", default=[], help="a bertpre config override for every run")
    parser.add_argument("--downstream", type=Path, default=ROOT / "data" / "wordnet-supersenses-4000",
                        help="train/validation/test CSV (text,label) for the linear probe")
    parser.add_argument("--no-downstream", action="store_true")
    parser.add_argument("--probe-seeds", type=int, default=3)
    parser.add_argument("--full-seeds", type=int, default=0,
                        help="also fully fine-tune every final model with this many seeds (0: the probe only)")
    parser.add_argument("--quick", action="store_true",
                        help="about a minute: hidden 64, 20 BERT steps, 2 seeds, 60 documents a corpus, 1 probe seed")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: on a shared machine, 2 threads busy-wait for each other's core)")
    parser.add_argument("--name", default="architectures")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="no run: merge these records (variants run in parallel processes) into --name")
    args = parser.parse_args(argv)
    if args.merge:
        print(f"wrote {merge(args.merge, args.name, args.out, argv)}")
        return 0
    if args.quick:
        args.hidden, args.steps, args.seeds, args.probe_seeds = 64, 20, 2, 1
        args.max_documents = args.max_documents or 60
        args.name = args.name if args.name != "architectures" else "architectures-quick"
    if args.length < 4 * args.window:
        print(f"note: length {args.length} is under 4 x the window {args.window}: local layers see most of a row")
    specs = args.corpus or ["wikitext", "shakespeare"]
    missing = [str(path) for spec in specs for path in corpus_files(spec) if not path.is_file()]
    if missing:
        print(f"no corpus: {', '.join(missing)} absent; pass --corpus NAME=FILE")
        return 0
    task = None if args.no_downstream else downstream_task(args.downstream)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    results: dict[str, dict] = {}

    def record(complete: bool) -> Path:
        return write_result(args.name, {
            "complete": complete,
            "settings": {key: value for key, value in vars(args).items() if key not in ("out", "downstream", "corpus")}
            | {"corpora": specs},
            "equalised_by": "training FLOPs (bertpre.model.cost.training_flops_per_token x batch x length x steps; "
                            "local layers at their window): BERT runs --steps steps, ModernBERT the steps that buy "
                            "the same FLOPs; shapes matched in parameters (the cost model's count) by the GeGLU width; "
                            "modernbert-wsd runs modernbert's steps and seeds",
            "held_out": "bench.learning.masked_validation + score: the validation documents at --length, masked "
                        "once at 15% (seed 1234), the same batches and code for every model",
            **({"downstream": {"folder": str(args.downstream), "identity": downstream_identity(argparse.Namespace(
                downstream=args.downstream, probe_seeds=args.probe_seeds, probe_set=["pooling=mean"])),
                               "probe": "bertpre finetune --mode probe --preset probe, pooling mean, test accuracy",
                               **({"full": f"bertpre finetune --mode full --preset bert, {', '.join(FULL_SETTINGS)}, "
                                           f"{args.full_seeds} seeds, test accuracy"} if args.full_seeds else {})}}
               if task is not None else {}),
            "wall_s": round(time.perf_counter() - started, 1),
            "corpora": results,
        }, args.out, argv, versions=("torch",), torch_threads=args.threads)

    with tempfile.TemporaryDirectory(prefix="bertpre-architectures-") as scratch:
        for spec in specs:
            name = spec.split("=", 1)[0]

            def progress(partial: dict, name: str = name) -> None:
                results[name] = partial
                record(complete=False)

            results[name] = run_corpus(args, spec, task, Path(scratch), progress)
            record(complete=False)  # what has finished survives a later failure
    print_table(results)
    path = record(complete=True)
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
