"""Does a bertpre step teach as much as a reference step? Held-out MLM loss of bertpre's Trainer and
of a plain transformers loop, same shape, optimizer, schedule, data and steps, K seeds each.

- bertpre: `bertpre pretrain` (`pair_task: none`, one segment per sequence, its pair sampling,
  masking and truncation), with any `--set` overrides (the ablations: `data.mask_count=sampled`,
  `data.mlm_probability=0.3`, ...).
- reference: `transformers.BertForMaskedLM` trained as the Hugging Face `run_mlm` example does:
  each document tokenized with [CLS] … [SEP], all concatenated and cut into blocks of L tokens,
  `DataCollatorForLanguageModeling` (each token masked with p, 80/10/10), AdamW without decay on
  biases and LayerNorms, `get_linear_schedule_with_warmup`, gradients clipped at 1.
- scoring: every final model by the same code (full logits, cross-entropy and accuracy over the
  predicted positions) on two held-out sets of the validation documents, each masked once with a
  fixed seed: cut bertpre's way (its sentence-aligned chunks of one document each, unpacked, and
  its collator) and the reference's way (blocks and its collator).
- downstream (`--downstream DIR`, a folder of train/validation/test CSV files with columns
  text,label): every final model, both sides, through `bertpre finetune`'s linear probe (the
  `probe` preset, frozen encoder, `--probe-seeds` seeds; the reference model is saved as a
  Hugging Face folder with the DATA tokenizer first), test accuracy per pretraining seed. The
  WordNet supersense task (`python -m data_prep.wordnet_supersenses --out DIR --max-train 4000
  --max-eval 1000`, 41 labels) keeps it to seconds a model. Probe with `--probe-set pooling=mean`:
  with `pair_task: none` no loss reads [CLS]'s output, and its probe may not beat the majority class.

Writes bench/results/learning-DATE.json (NAME-DATE with `--name`): per seed, each side's loss and
accuracy on both sets (and probe accuracy); per side the mean and standard deviation; bertpre −
reference with a 95% Welch interval (ablations: this run's bertpre − the baseline's).

    .venv/bin/python -m bench.learning                                   # 3 seeds, 600 steps (~48 min on 2 cores)
    .venv/bin/python -m bench.learning --name learning-sampled --set data.mask_count=sampled
    .venv/bin/python -m bench.learning --no-reference --name learning-truncate-end --variant truncate-end
    .venv/bin/python -m bench.learning --steps 20 --seeds 1 --hidden 64 # quick
    .venv/bin/python -m bench.learning --name learning-downstream --downstream data/wordnet-supersenses-4000 --probe-set pooling=mean
"""
from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import CORPORA, RESULTS, ROOT, transformers_bert_tokenizer, write_result

# t quantiles at 0.975 by degrees of freedom (interpolated in 1/df; the normal's beyond 30).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 8: 2.306, 10: 2.228, 15: 2.131,
         20: 2.086, 30: 2.042}


def t975(df: float) -> float:
    """The 97.5% quantile of Student's t with `df` (possibly fractional) degrees of freedom."""
    if df >= 30:
        return 1.96 + (2.042 - 1.96) * 30 / df
    points = sorted(_T975)
    low = max(point for point in points if point <= max(df, 1))
    high = min(point for point in points if point >= max(df, 1))
    if low == high:
        return _T975[low]
    weight = (1 / low - 1 / df) / (1 / low - 1 / high)
    return _T975[low] + weight * (_T975[high] - _T975[low])


def welch(ours: list[float], theirs: list[float]) -> dict:
    """Difference of means with its 95% Welch interval (None with fewer than two values a side)."""
    difference = statistics.fmean(ours) - statistics.fmean(theirs)
    if min(len(ours), len(theirs)) < 2:
        return {"difference": difference, "interval": None}
    a, b = statistics.variance(ours) / len(ours), statistics.variance(theirs) / len(theirs)
    if a + b == 0:
        return {"difference": difference, "interval": [difference, difference]}
    df = (a + b) ** 2 / (a**2 / (len(ours) - 1) + b**2 / (len(theirs) - 1))
    half = t975(df) * math.sqrt(a + b)
    return {"difference": difference, "interval": [difference - half, difference + half], "df": df}


def model_shape(args) -> dict:
    return {"hidden_size": args.hidden, "num_hidden_layers": args.layers,
            "num_attention_heads": max(1, args.hidden // 64), "intermediate_size": 4 * args.hidden}


def bertpre_overrides(args, data: Path, out: Path, seed: int) -> list[str]:
    shape = model_shape(args)
    return [f"data.path={data}", f"train.out={out}", f"data.max_seq_length={args.length}",
            "data.pair_task=none", "data.max_predictions_per_seq=null", "data.num_workers=0",
            f"train.max_steps={args.steps}", f"train.batch_size={args.batch_size}",
            f"train.micro_batch_size={args.batch_size}", f"train.seed={seed}",
            f"train.log_every={max(1, args.steps // 10)}", f"train.eval_every={args.steps}",
            f"train.save_every={args.steps}", f"optim.lr={args.lr}", f"optim.warmup_steps={args.warmup}",
            "optim.schedule=linear", *(f"model.{key}={value}" for key, value in shape.items()),
            *args.set]


@contextlib.contextmanager
def variant(name: str | None):
    """A recipe switch with no config key, applied to bertpre's side while it trains (ablations)."""
    import bertpre.batches.pairs as pairs
    import bertpre.train.trainer as trainer

    patches = {
        None: [],
        # over-long chunks trimmed from the end only, as a reference block simply stops
        "truncate-end": [(pairs, "_front_trims", lambda removed, key, counter_base: 0)],
        # warmup from lr 0 at step 0, as get_linear_schedule_with_warmup (bertpre's first is lr/W)
        "warmup-from-zero": [(trainer, "learning_rate", _warmup_from_zero(trainer.learning_rate))],
    }[name]
    saved = [(module, attribute, getattr(module, attribute)) for module, attribute, _ in patches]
    for module, attribute, value in patches:
        setattr(module, attribute, value)
    try:
        yield
    finally:
        for module, attribute, value in saved:
            setattr(module, attribute, value)


def _warmup_from_zero(learning_rate):
    def shifted(step: int, *, lr: float, warmup_steps: int, max_steps: int, schedule: str = "linear") -> float:
        if step < warmup_steps:
            return lr * step / warmup_steps
        return learning_rate(step, lr=lr, warmup_steps=warmup_steps, max_steps=max_steps, schedule=schedule)
    return shifted


def train_bertpre(args, data: Path, out: Path, seed: int):
    from bertpre.config import load_config
    from bertpre.model import BertForPreTraining
    from bertpre.train.checkpoint import latest_checkpoint
    from bertpre.train.trainer import pretrain

    with variant(args.variant):
        pretrain(load_config(ROOT / "configs" / "tiny.yaml", bertpre_overrides(args, data, out, seed)))
    checkpoint = latest_checkpoint(out)
    if checkpoint is None or checkpoint.name != f"step-{args.steps:08d}":  # SIGTERM: the Trainer stops early, cleanly
        raise SystemExit(f"bertpre's seed {seed} stopped at {checkpoint.name if checkpoint else 'step 0'} "
                         f"of {args.steps} steps; nothing recorded")
    return BertForPreTraining.from_pretrained(checkpoint).eval()


def blocks_of(documents, hf_tokenizer, length: int) -> list[list[int]]:
    """The reference's examples: documents as [CLS] … [SEP], concatenated, cut into `length` tokens."""
    ids: list[int] = []
    for document in documents:
        ids += hf_tokenizer(" ".join(document))["input_ids"]
    return [ids[start:start + length] for start in range(0, len(ids) - length + 1, length)]


def train_reference(args, data_path: Path, seed: int):
    """`BertForMaskedLM` trained as run_mlm does, on the same training documents."""
    import transformers

    from bertpre.data import load_data
    from bertpre.tokenizer.wordpiece import tokenizer_lowercases

    data = load_data(data_path)
    hf_tokenizer = transformers_bert_tokenizer(data_path / "tokenizer" / "vocab.txt",
                                               tokenizer_lowercases(data.tokenizer))
    texts = [[data.tokenizer.decode(sentence) for sentence in document] for document in data.train["input_ids"]]
    blocks = blocks_of(texts, hf_tokenizer, args.length)
    collate = transformers.DataCollatorForLanguageModeling(hf_tokenizer, mlm_probability=0.15, return_tensors="pt")
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=data.tokenizer.get_vocab_size(), max_position_embeddings=512,
                                     **model_shape(args))
    model = transformers.BertForMaskedLM(config).train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.999), eps=1e-6)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, args.warmup, args.steps)
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    for _ in range(args.steps):
        if len(order) < args.batch_size:
            order += torch.randperm(len(blocks), generator=generator).tolist()
        batch = collate([{"input_ids": blocks[i]} for i in order[:args.batch_size]])
        order = order[args.batch_size:]
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    return model.eval()


def masked_validation(data, length: int, mlm_probability: float = 0.15) -> list[dict[str, torch.Tensor]]:
    """DATA's validation documents cut bertpre's way (sentence-aligned chunks of `length` tokens,
    one document a sequence, unpacked, so that the set stays put whatever recipe trains) and
    masked once by its collator with a fixed seed: batches of 32 for `score`."""
    from bertpre.batches import MaskingCollator, PretrainingInstances

    instances = PretrainingInstances(data.validation, data.tokenizer, max_seq_length=length,
                                     pair_task="none", seed=1234, pack_documents=False)
    collate = MaskingCollator(data.tokenizer, mlm_probability=mlm_probability, seed=1234)
    return [collate(instances.__getitems__(range(start, min(start + 32, len(instances)))))
            for start in range(0, len(instances), 32)]


def held_out_sets(args, data_path: Path) -> dict[str, list[dict[str, torch.Tensor]]]:
    """The validation documents as masked batches, cut bertpre's way and the reference's way."""
    import transformers

    from bertpre.data import load_data
    from bertpre.tokenizer.wordpiece import tokenizer_lowercases

    data = load_data(data_path)
    bertpre_cut = masked_validation(data, args.length)
    hf_tokenizer = transformers_bert_tokenizer(data_path / "tokenizer" / "vocab.txt",
                                               tokenizer_lowercases(data.tokenizer))
    texts = [[data.tokenizer.decode(sentence) for sentence in document] for document in data.validation["input_ids"]]
    blocks = blocks_of(texts, hf_tokenizer, args.length)
    theirs = transformers.DataCollatorForLanguageModeling(hf_tokenizer, mlm_probability=0.15, return_tensors="pt")
    torch.manual_seed(1234)
    reference_cut = [theirs([{"input_ids": block} for block in blocks[start:start + 32]])
                     for start in range(0, len(blocks), 32)]
    keep = ("input_ids", "attention_mask", "token_type_ids", "labels")
    return {name: [{key: batch[key] for key in keep if key in batch} for batch in batches]
            for name, batches in (("bertpre_cut", bertpre_cut), ("reference_cut", reference_cut))}


def bertpre_logits(model):
    return lambda batch: model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")).prediction_logits


def reference_logits(model):
    return lambda batch: model(**{key: value for key, value in batch.items() if key != "labels"}).logits


@torch.no_grad()
def score(logits_of, batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Mean cross-entropy and accuracy over every predicted position of `batches`."""
    loss = correct = count = 0.0
    for batch in batches:
        logits = logits_of(batch).float()  # (B, T, V)
        predicted = batch["labels"] != -100
        loss += torch.nn.functional.cross_entropy(logits[predicted], batch["labels"][predicted],
                                                  reduction="sum").item()
        correct += (logits[predicted].argmax(-1) == batch["labels"][predicted]).sum().item()
        count += predicted.sum().item()
    return {"mlm_loss": loss / count, "mlm_acc": correct / count, "predictions": int(count)}


def save_reference(model, data_path: Path, folder: Path) -> Path:
    """The reference model as a Hugging Face folder with the DATA tokenizer: a `bertpre finetune` SOURCE."""
    import shutil

    model.save_pretrained(folder)
    for file in (data_path / "tokenizer").iterdir():
        shutil.copy(file, folder / file.name)
    return folder


def downstream_task(folder: Path):
    """`bertpre finetune`'s view of `folder`: train.csv, validation.csv and (scored when there) test.csv."""
    from bertpre.finetune import TaskFiles

    missing = [name for name in ("train.csv", "validation.csv") if not (folder / name).is_file()]
    if missing:
        raise SystemExit(f"{folder} has no {' or '.join(missing)}; write one with "
                         f"`python -m data_prep.wordnet_supersenses --out {folder} --max-train 4000 --max-eval 1000`")
    test = folder / "test.csv"
    return TaskFiles(task="classification", train=folder / "train.csv", validation=folder / "validation.csv",
                     test=test if test.is_file() else None)


def probe(source: Path, files, args, out: Path) -> dict:
    """Linear-probe accuracy of SOURCE's frozen encoder on the downstream task, over the probe seeds."""
    from bertpre.finetune import finetune, load_hyperparameters

    # Examples cut at the pretraining length: tiny.yaml's models have 64 positions, fewer than the preset's 128.
    hp = load_hyperparameters("probe", None, [f"max_seq_length={args.length}", *args.probe_set])
    result = finetune(source, files, out, hp=hp, seeds=list(range(args.probe_seeds)), precision="fp32",
                      device="cpu", say=lambda line: None)[-1]
    accuracy = result["metrics"]["accuracy"]
    return {"probe_acc": accuracy["mean"], "probe_acc_per_probe_seed": accuracy["per_seed"],
            "split": result["split"], "majority": result["baselines"]["majority"].get("accuracy")}


# Settings that must match for two runs' bertpre sides to be compared as an ablation.
_SHAPE = ("steps", "warmup", "length", "batch_size", "lr", "hidden", "layers", "vocab_size")


def read_baseline(path: Path, args, files: list[Path]) -> dict:
    """A recorded result whose bertpre runs this run's are compared with (same size, corpus, seeds)."""
    import json

    record = json.loads(path.read_text())
    theirs = record["settings"]
    different = [key for key in (*_SHAPE, "seeds") if theirs.get(key) != getattr(args, key)]
    if theirs.get("corpora") != [file.name for file in files]:
        different.append("corpora")
    if different:
        raise SystemExit(f"{path} was run with other settings ({', '.join(different)}); "
                         "an ablation compares runs of one size")
    ours = downstream_identity(args)
    if ours and record.get("downstream") and record["downstream"]["identity"] != ours:
        raise SystemExit(f"{path} probed another downstream task or with other probe settings; "
                         "its probe accuracies are not comparable with this run's")
    return record


def downstream_identity(args) -> dict | None:
    """What two runs' probe accuracies must share: the task files' contents and the probe settings."""
    import hashlib

    if args.downstream is None:
        return None
    files = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
             for path in sorted(args.downstream.glob("*.csv"))}
    return {"files_sha256": files, "probe_seeds": args.probe_seeds, "probe_set": args.probe_set}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, nargs="+", default=None,
                        help="text files (default: ../shared/corpora/wikitext2-valid.txt and -test.txt)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=60)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--set", action="append", default=[], help="a bertpre config override (repeatable)")
    parser.add_argument("--variant", choices=["truncate-end", "warmup-from-zero"], default=None,
                        help="a bertpre recipe switch with no config key (ablations)")
    parser.add_argument("--no-reference", action="store_true", help="bertpre only (ablations)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a recorded result of the same size: also print and record this run's "
                             "bertpre minus that one's bertpre (an ablation's effect); when it does not "
                             "exist yet, it is awaited after training, so an ablation can run beside its baseline")
    parser.add_argument("--downstream", type=Path, default=None,
                        help="a folder of train/validation/test CSV (text,label): also probe every final "
                             "model on it (e.g. python -m data_prep.wordnet_supersenses --out DIR --max-train 4000)")
    parser.add_argument("--probe-seeds", type=int, default=3, help="linear-probe seeds per final model")
    parser.add_argument("--probe-set", action="append", default=[],
                        help="a probe setting over the probe preset, e.g. pooling=mean (repeatable)")
    parser.add_argument("--name", default="learning")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    files = args.corpora or [CORPORA / "wikitext2-valid.txt", CORPORA / "wikitext2-test.txt"]
    awaited = args.baseline is not None and not args.baseline.exists()
    if awaited:
        print(f"{args.baseline} does not exist yet: it is read once this run has trained", flush=True)
    baseline = read_baseline(args.baseline, args, files) if args.baseline and not awaited else None
    if not all(path.is_file() for path in files):
        print(f"no corpus: {', '.join(map(str, files))} absent; pass --corpora FILE...")
        return 0
    torch.set_num_threads(torch.get_num_threads())
    task = downstream_task(args.downstream) if args.downstream else None

    from bertpre.data.build import tokenize_corpus

    results: dict[str, list[dict]] = {"bertpre": [], "reference": []}
    with tempfile.TemporaryDirectory(prefix="bertpre-learning-") as scratch:
        data = Path(scratch) / "data"
        tokenize_corpus(files, data, vocab_size=args.vocab_size, validation_share=0.05, show_progress=False)
        sets = held_out_sets(args, data)
        def train_and_score(side: str, train, logits_of, source_of) -> None:
            began = time.perf_counter()
            model = train()
            train_s = round(time.perf_counter() - began, 1)
            results[side].append({name: score(logits_of(model), batches) for name, batches in sets.items()}
                                 | {"train_s": train_s})
            if task is not None:
                began = time.perf_counter()
                folder = Path(scratch) / f"{side}-{len(results[side])}"
                results[side][-1]["downstream"] = probe(source_of(model, folder), task, args, folder / "probe")
                results[side][-1]["probe_s"] = round(time.perf_counter() - began, 1)

        for seed in range(args.seeds):
            run = Path(scratch) / f"run-{seed}"
            train_and_score("bertpre", lambda: train_bertpre(args, data, run, seed),  # noqa: B023
                            bertpre_logits, lambda model, folder: run)  # noqa: B023
            if not args.no_reference:
                train_and_score("reference", lambda: train_reference(args, data, seed), reference_logits,  # noqa: B023
                                lambda model, folder: save_reference(model, data, folder / "model"))
            print(f"seed {seed}: " + "; ".join(
                f"{side} " + ", ".join(f"{name} {values[name]['mlm_loss']:.4f}" for name in sets)
                + (f", probe acc {values['downstream']['probe_acc']:.4f}" if "downstream" in values else "")
                for side, runs in results.items() if runs for values in runs[-1:]), flush=True)

    if awaited:
        while not args.baseline.exists():
            time.sleep(30)
        time.sleep(1)  # a file seen mid-write is whole a moment later
        baseline = read_baseline(args.baseline, args, files)
    summary = {}
    for side, runs in results.items():
        if runs:
            summary[side] = {name: {"mean": statistics.fmean(run[name]["mlm_loss"] for run in runs),
                                    "std": statistics.stdev(run[name]["mlm_loss"] for run in runs) if len(runs) > 1 else 0.0,
                                    "acc_mean": statistics.fmean(run[name]["mlm_acc"] for run in runs)}
                             for name in sets}
            if task is not None:
                accuracies = [run["downstream"]["probe_acc"] for run in runs]
                summary[side]["downstream"] = {
                    "probe_acc_mean": statistics.fmean(accuracies),
                    "probe_acc_std": statistics.stdev(accuracies) if len(runs) > 1 else 0.0}

    def against(runs: list[dict]) -> dict:
        differences = {name: welch([run[name]["mlm_loss"] for run in results["bertpre"]],
                                   [run[name]["mlm_loss"] for run in runs]) for name in sets}
        if task is not None and all("downstream" in run for run in runs):
            differences["downstream_probe_acc"] = welch([run["downstream"]["probe_acc"] for run in results["bertpre"]],
                                                        [run["downstream"]["probe_acc"] for run in runs])
        return differences

    comparison = against(results["reference"]) if results["reference"] else {}
    against_baseline = against(baseline["per_seed"]["bertpre"]) if baseline else {}
    print(f"\nheld-out MLM loss, mean ± std over {args.seeds} seed(s), {args.steps} steps")
    for side, by_set in summary.items():
        print(f"  {side:<10} " + "  ".join(f"{name} {v['mean']:.4f} ± {v['std']:.4f} (acc {v['acc_mean']:.2%})"
                                           for name, v in by_set.items() if name in sets))
        if "downstream" in by_set:
            print(f"  {side:<10} downstream probe accuracy {by_set['downstream']['probe_acc_mean']:.4f} "
                  f"± {by_set['downstream']['probe_acc_std']:.4f}")
    for label, differences in (("bertpre - reference", comparison),
                               (f"this run - {args.baseline.name if baseline else ''} (bertpre)", against_baseline)):
        for name, welch_result in differences.items():
            interval = welch_result["interval"]
            shown = f"[{interval[0]:+.4f}, {interval[1]:+.4f}]" if interval else "(one seed: no interval)"
            print(f"  {label} on {name}: {welch_result['difference']:+.4f} {shown}"
                  + (" (probe accuracy: higher is better)" if name == "downstream_probe_acc" else ""))
    path = write_result(args.name, {
        "settings": {key: value for key, value in vars(args).items()
                     if key not in ("out", "corpora", "baseline", "downstream", "probe_seeds", "probe_set")}
        | {"corpora": [path.name for path in files]},
        **({"downstream": {"folder": str(args.downstream), "identity": downstream_identity(args),
                           "probe": "bertpre finetune --mode probe --preset probe, test accuracy"}}
           if task is not None else {}),
        "wall_s": round(time.perf_counter() - started, 1),  # per_seed's train_s: each training alone
        "per_seed": results, "summary": summary, "bertpre_minus_reference": comparison,
        **({"baseline": {"file": args.baseline.name, "settings": baseline["settings"],
                         "bertpre_minus_baseline_bertpre": against_baseline}} if baseline else {}),
        "target": "bertpre's mean held-out MLM loss no worse than the reference's beyond noise on both sets"
                  + (", and its mean probe accuracy no lower" if task is not None else ""),
    }, args.out, argv, versions=("torch", "transformers"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
