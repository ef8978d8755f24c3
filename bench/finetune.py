"""Does `bertpre finetune` score as a plain transformers fine-tuning loop of the same model does,
and how fast does it train? Test accuracy (mean ± std over seeds) and training examples/s.

- model: a small BERT pretrained here by `bertpre pretrain` on WikiText-2 (validation + test
  files of ../shared/corpora, NSP, so that the pooler is trained) and written by `bertpre
  export`; or `--source` (an export, a RUN or a checkpoint; exported here when it is not one).
- task: WordNet supersenses (`data_prep.wordnet_supersenses`, Debian's `wordnet-base`): a
  synset's definition → one of 41 noun and verb supersenses; `--train-examples` of the
  training split (per-label shares kept), the whole test split scored.
- bertpre: the library calls behind `bertpre finetune` (`load_encoder`, `load_task`, the
  encoding, `train_full`, `predict`), full mode, the `bert` preset with `--lr`/`--epochs`
  (default a stated small-model variant: lr 1e-4, 3 epochs; Google's small BERTs are tuned in
  1e-4 … 3e-5 where BERT-base uses 2e-5).
- reference: what a transformers user writes (the `run_glue_no_trainer` example's loop):
  `BertTokenizerFast.from_pretrained(EXPORT)` (truncation at the same length, no padding),
  `AutoModelForSequenceClassification.from_pretrained(EXPORT, num_labels=K)`, a DataLoader
  with `DataCollatorWithPadding` (each batch padded to its longest row, as the example does
  without --pad_to_max_length, and as bertpre does), AdamW without decay on bias and
  LayerNorm weights, `get_linear_schedule_with_warmup`, gradients clipped at 1.0.
- same for both: the exported weights, hyperparameters (lr, epochs, batch 32, warmup 10%,
  weight decay 0.01, max length 128, eval batch 64), fp32, torch threads, and each seed's
  example order (both draw `torch.randperm` from a generator seeded with the seed: the run
  checks that the orders and the token ids are identical), and each seed's initial head: bertpre
  draws it first thing after the seed, as transformers' set_seed + from_pretrained does (the
  run checks it). Dropout masks then differ: bertpre's layers see the real tokens alone.
- timing: training alone (first batch to last optimizer step, collation included; tokenization
  and model loading excluded), as training examples/s = epochs × examples / seconds; the test
  pass alone as examples/s. Sides alternate which goes first, seed by seed, so load from other
  work on the machine hits both; the load average is recorded.

Writes bench/results/finetune-DATE.json: per seed each side's accuracy and times; per side mean ±
std; bertpre − reference accuracy with a 95% Welch interval [goal: within 1 point]; the
training-speed ratio of medians [goal: bertpre ≥ 1.5× on CPU].

    .venv/bin/python -m bench.finetune                       # ~15 min on 2 cores
    .venv/bin/python -m bench.finetune --quick               # a minute: tiny model, few examples
    .venv/bin/python -m bench.finetune --source EXPORT --seeds 5
    .venv/bin/python -m bench.finetune --by-length --threads 1   # a minute: step speed by text length

`--by-length` times the training step alone (forward, loss, backward, AdamW) of both sides' models
of the same shape and weights on random-token batches of 32 whose real lengths are drawn from a
few ranges (all at --max-seq-length, i.e. no padding; half to full; short), rounds interleaved,
the fastest round a side: how much of the speed-up is skipping padding, which depends on the
task's text lengths. Writes bench/results/finetune-by-length-DATE.json.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench.common import CORPORA, RESULTS, ROOT, write_result
from bench.learning import model_shape, t975, welch

QUICK = {"pretrain_steps": 20, "hidden": 64, "layers": 2, "vocab_size": 2000, "train_examples": 300,
         "test_examples": 300, "seeds": 2, "epochs": 1}


WIKITEXT = ("wikitext2-valid.txt", "wikitext2-test.txt")


def pretrain_model(args, scratch: Path, corpus: tuple[str, ...] = WIKITEXT,
                   overrides: tuple[str, ...] = ("data.max_seq_length=64",)) -> Path:
    """A small BERT pretrained by bertpre on `corpus` (files of ../shared/corpora; WikiText-2 by
    default), NSP, with config `overrides`, exported; returns the export folder."""
    from bertpre.config import load_config
    from bertpre.data.build import tokenize_corpus
    from bertpre.tools.export import export
    from bertpre.train.trainer import pretrain

    files = [CORPORA / name for name in corpus]
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        raise SystemExit(f"no corpus to pretrain on: {', '.join(missing)} absent; pass --source EXPORT")
    data, run = scratch / "data", scratch / "run"
    tokenize_corpus(files, data, vocab_size=args.vocab_size, validation_share=0.01, show_progress=False)
    shape = model_shape(args) | {"max_position_embeddings": args.max_seq_length}
    pretrain(load_config(ROOT / "configs" / "tiny.yaml", [
        f"data.path={data}", f"train.out={run}", *overrides, "data.pair_task=nsp", "data.num_workers=0",
        f"train.max_steps={args.pretrain_steps}", "train.batch_size=32", "train.micro_batch_size=32", "train.seed=0", f"train.save_every={args.pretrain_steps}",
        f"train.eval_every={args.pretrain_steps}", f"train.log_every={max(1, args.pretrain_steps // 5)}",
        "optim.lr=5e-4", f"optim.warmup_steps={max(1, args.pretrain_steps // 10)}",
        *(f"model.{key}={value}" for key, value in shape.items())]), resume=False)
    return export(run, scratch / "export").out


def model_folder(args, scratch: Path, **pretraining) -> Path:
    """--source as a Hugging Face folder transformers can read (exported when it is a RUN or a
    checkpoint), or a model pretrained here."""
    if args.source is None:
        return pretrain_model(args, scratch, **pretraining)
    if (args.source / "config.json").is_file() and (args.source / "tokenizer_config.json").is_file():
        return args.source
    from bertpre.tools.export import export

    return export(args.source, scratch / "export").out


def write_task(args, folder: Path) -> dict:
    from data_prep.wordnet_supersenses import build

    return build(args.wordnet, folder, max_train=args.train_examples, max_eval=args.test_examples)


class Bertpre:
    """bertpre's side: the library calls `bertpre finetune` makes, timed apart."""

    def __init__(self, export: Path, task: Path, hp) -> None:
        from bertpre.finetune.kinds import load_task
        from bertpre.finetune.run import encode
        from bertpre.finetune.source import load_encoder
        from bertpre.train.runtime import init_runtime

        self.hp, self.runtime = hp, init_runtime("fp32", device="cpu")
        self.encoder = load_encoder(export)
        self.data = load_task("classification", task / "train.csv", task / "validation.csv", task / "test.csv")
        self.train, self.test = (encode(self.encoder, self.data, examples, hp)
                                 for examples in (self.data.train, self.data.test))

    def run(self, seed: int) -> dict:
        from bertpre.finetune.loop import pad_token_id, predict, train_full

        began = now()
        model = train_full(self.encoder, self.train, task="classification", num_labels=len(self.data.label_names),
                           hp=self.hp, seed=seed, runtime=self.runtime)
        trained = now()
        predicted = predict(model, self.test, task="classification", batch_size=self.hp.eval_batch_size,
                            pad_id=pad_token_id(self.encoder), runtime=self.runtime)
        scored = now()
        correct = sum(int(p) == label for p, label in zip(predicted, self.test.labels, strict=True))
        return timings(correct / len(self.test), began, trained, scored, len(self.train), len(self.test),
                       self.hp.epochs)

    def order(self, seed: int) -> list[int]:
        from bertpre.finetune.loop import shuffled_batches

        generator = torch.Generator().manual_seed(seed)
        return [index for batch in shuffled_batches(len(self.train), self.hp.batch_size, generator)
                for index in batch]


class Reference:
    """The transformers user's loop (run_glue_no_trainer's shape), on the same export and files."""

    def __init__(self, export: Path, task: Path, label_names: list[str], hp) -> None:
        import datasets
        import transformers

        self.transformers, self.hp, self.export = transformers, hp, export
        transformers.logging.set_verbosity_error()  # the load report of the head's new weights
        transformers.logging.disable_progress_bar()
        datasets.disable_progress_bars()
        self.tokenizer = transformers.BertTokenizerFast.from_pretrained(str(export))
        self.label_names = label_names
        index = {name: number for number, name in enumerate(label_names)}
        splits = datasets.load_dataset("csv", data_files={"train": str(task / "train.csv"),
                                                          "test": str(task / "test.csv")},
                                       keep_in_memory=True)

        def preprocess(rows):
            encoded = self.tokenizer(rows["text"], truncation=True, max_length=hp.max_seq_length)
            encoded["labels"] = [index[label] for label in rows["label"]]
            return encoded

        self.splits = splits.map(preprocess, batched=True, remove_columns=["text", "label"],
                                 keep_in_memory=True)
        self.collator = transformers.DataCollatorWithPadding(self.tokenizer)

    def loader(self, split: str, seed: int | None) -> torch.utils.data.DataLoader:
        dataset = self.splits[split]
        sampler = (torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
                   if seed is not None else None)
        batch_size = self.hp.batch_size if seed is not None else self.hp.eval_batch_size
        return torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=batch_size,
                                           collate_fn=self.collator)

    def run(self, seed: int) -> dict:
        transformers = self.transformers
        transformers.set_seed(seed)
        began = now()
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            str(self.export), num_labels=len(self.label_names))
        loaded = now()  # counted, as bertpre's train_full builds its model too
        no_decay = ("bias", "LayerNorm.weight")
        groups = [{"params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
                   "weight_decay": self.hp.weight_decay},
                  {"params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
                   "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=self.hp.lr)
        train = self.loader("train", seed)
        total = self.hp.epochs * len(train)
        schedule = transformers.get_linear_schedule_with_warmup(
            optimizer, math.ceil(total * self.hp.warmup_ratio), total)
        model.train()
        for _ in range(self.hp.epochs):
            for batch in train:
                loss = model(**batch).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.hp.max_grad_norm)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
        trained = now()
        model.eval()
        correct = 0
        with torch.no_grad():
            for batch in self.loader("test", None):
                labels = batch.pop("labels")
                correct += int((model(**batch).logits.argmax(-1) == labels).sum())
        scored = now()
        test = len(self.splits["test"])
        result = timings(correct / test, began, trained, scored, len(self.splits["train"]), test,
                         self.hp.epochs)
        result["attention"] = model.config._attn_implementation
        result["model_load_s"] = round(loaded[0] - began[0], 2)
        result["no_decay_parameters"] = len(groups[1]["params"])
        return result

    def order(self, seed: int) -> list[int]:
        return list(self.loader("train", seed).sampler)


def now() -> tuple[float, float]:
    """(wall, this process's CPU) seconds: CPU time is what other work on the machine disturbs least."""
    return time.perf_counter(), time.process_time()


def timings(accuracy: float, began: tuple, trained: tuple, scored: tuple, train: int, test: int,
            epochs: int) -> dict:
    """Accuracy, and training and test passes as seconds and examples per wall and CPU second."""
    train_s, test_s = trained[0] - began[0], scored[0] - trained[0]
    train_cpu_s, test_cpu_s = trained[1] - began[1], scored[1] - trained[1]
    return {"accuracy": accuracy, "train_s": round(train_s, 2), "test_s": round(test_s, 2),
            "train_cpu_s": round(train_cpu_s, 2), "test_cpu_s": round(test_cpu_s, 2),
            "train_examples_per_s": epochs * train / train_s, "test_examples_per_s": test / test_s,
            "train_examples_per_cpu_s": epochs * train / train_cpu_s}


def same_inputs(ours: Bertpre, reference: Reference, seed: int) -> dict:
    """Whether both sides see identical token ids and the same example order."""
    ids = {split: list(reference.splits[split]["input_ids"]) == encoded.input_ids
           for split, encoded in (("train", ours.train), ("test", ours.test))}
    labels = list(reference.splits["test"]["labels"]) == list(ours.test.labels)
    return {"token_ids": all(ids.values()), "labels": labels,
            "example_order": ours.order(seed) == reference.order(seed)}


def same_math(ours: Bertpre, reference: Reference, steps: int = 20) -> dict:
    """The two loops with their randomness taken out: dropout off, both heads drawn from seed 0
    (the same draw, checked), the lr held at its peak (the schedules differ by design in warmup:
    transformers' first update has lr 0, bertpre's reaches the peak on warmup's last step).
    Each trains `steps` batches in seed 0's order; returns the largest loss difference seen.

    Equal losses step after step mean the same model, loss, gradient clipping and AdamW update
    (bertpre fused, transformers' default), so an accuracy gap between the seeded runs comes
    from their random draws (dropout masks), not from the recipe."""
    import transformers

    from bertpre.finetune.loop import (
        build_task_model,
        model_inputs,
        pad_batch,
        pad_token_id,
        task_loss,
    )
    from bertpre.train.optim import parameter_groups

    labels = len(ours.data.label_names)
    quiet = replace(ours.encoder.config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    transformers.set_seed(0)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(reference.export), num_labels=labels, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    mine = build_task_model(quiet, ours.encoder.state, labels, tagging=False)
    same_head = all(torch.equal(getattr(mine.classifier, name), getattr(theirs.classifier, name))
                    for name in ("weight", "bias"))
    no_decay = ("bias", "LayerNorm.weight")
    their_groups = [{"params": [p for n, p in theirs.named_parameters() if not any(k in n for k in no_decay)],
                     "weight_decay": ours.hp.weight_decay},
                    {"params": [p for n, p in theirs.named_parameters() if any(k in n for k in no_decay)],
                     "weight_decay": 0.0}]
    optimizers = (torch.optim.AdamW(parameter_groups(mine, ours.hp.weight_decay), lr=ours.hp.lr, fused=True),
                  torch.optim.AdamW(their_groups, lr=ours.hp.lr))
    pad = pad_token_id(ours.encoder)
    order = ours.order(0)
    largest, losses = 0.0, []
    mine.train()
    theirs.train()
    batches = zip(range(steps), reference.loader("train", 0), strict=False)
    for step, their_batch in batches:
        indices = order[step * ours.hp.batch_size:(step + 1) * ours.hp.batch_size]
        batch = pad_batch(ours.train, indices, pad, regression=False, tagging=False)
        pair = (task_loss(mine(**model_inputs(mine, batch, torch.device("cpu"))),
                          batch["labels"], "classification"), theirs(**their_batch).loss)
        for model, optimizer, loss in zip((mine, theirs), optimizers, pair, strict=True):
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), ours.hp.max_grad_norm)
            optimizer.step()
        losses.append([float(loss.detach()) for loss in pair])
        largest = max(largest, abs(losses[-1][0] - losses[-1][1]))
    return {"same_initial_head": same_head, "steps": len(losses), "largest_loss_difference": largest, "first_and_last_losses": [losses[0], losses[-1]]}


def paired(ours: list[float], theirs: list[float]) -> dict:
    """Mean of the per-seed differences with its 95% t interval: a seed gives both sides the same
    initial head and example order, so its two runs differ by their dropout masks alone."""
    differences = [a - b for a, b in zip(ours, theirs, strict=True)]
    mean = statistics.fmean(differences)
    if len(differences) < 2:
        return {"difference": mean, "interval": None}
    std = statistics.stdev(differences)
    half = t975(len(differences) - 1) * std / math.sqrt(len(differences))
    return {"difference": mean, "interval": [mean - half, mean + half], "std_of_differences": std}


LENGTH_RANGES = ((1.0, 1.0), (0.5, 1.0), (1 / 16, 5 / 16))  # shares of --max-seq-length


def length_batches(vocab_size: int, labels: int, low: int, high: int, steps: int, batch_size: int) -> list[dict]:
    """`steps` batches whose rows' real lengths are uniform in [low, high], padded to the batch's
    longest row with id 0 (transformers' keys: input_ids, attention_mask, token_type_ids, labels)."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(steps):
        lengths = torch.randint(low, high + 1, (batch_size,), generator=generator)
        width = int(lengths.max())
        mask = torch.arange(width)[None] < lengths[:, None]
        ids = torch.randint(5, vocab_size, (batch_size, width), generator=generator).masked_fill(~mask, 0)
        batches.append({"input_ids": ids, "attention_mask": mask.long(), "token_type_ids": torch.zeros_like(ids),
                        "labels": torch.randint(0, labels, (batch_size,), generator=generator)})
    return batches


def step_speed_by_length(args, steps: int = 8, rounds: int = 3, labels: int = 41) -> list[dict]:
    """Seconds for `steps` training steps of each side on each length range (the fastest of
    `rounds` interleaved rounds) and the ratio; real-token share of each range's batches."""
    import transformers

    from bertpre.finetune.loop import build_task_model, model_inputs, task_loss
    from bertpre.model.config import BertConfig

    shape = model_shape(args) | {"vocab_size": args.vocab_size, "max_position_embeddings": args.max_seq_length}
    torch.manual_seed(0)
    theirs = transformers.BertForSequenceClassification(
        transformers.BertConfig(**shape, num_labels=labels, attn_implementation="sdpa"))
    state = {name.removeprefix("bert."): value for name, value in theirs.state_dict().items()
             if name.startswith("bert.")}
    mine = build_task_model(BertConfig(**shape), state, labels, tagging=False)
    models = {"bertpre": mine, "reference": theirs}
    optimizers = {side: torch.optim.AdamW(model.parameters(), lr=1e-5) for side, model in models.items()}

    def train(side: str, batches: list[dict]) -> float:
        model, optimizer = models[side], optimizers[side]
        model.train()
        began = time.perf_counter()
        for batch in batches:
            if side == "bertpre":
                loss = task_loss(model(**model_inputs(model, batch, torch.device("cpu"))), batch["labels"],
                                 "classification")
            else:
                loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return time.perf_counter() - began

    rows = []
    for low_share, high_share in LENGTH_RANGES:
        low = max(2, round(low_share * args.max_seq_length))
        high = max(low, round(high_share * args.max_seq_length))
        batches = length_batches(args.vocab_size, labels, low, high, steps, args.batch_size)
        real = sum(int(batch["attention_mask"].sum()) for batch in batches)
        seconds: dict[str, list[float]] = {"bertpre": [], "reference": []}
        for turn in range(rounds):
            for side in (("bertpre", "reference") if turn % 2 == 0 else ("reference", "bertpre")):
                seconds[side].append(train(side, batches))
        best = {side: min(values) for side, values in seconds.items()}
        rows.append({"lengths": [low, high], "real_token_share": real / sum(b["input_ids"].numel() for b in batches),
                     "steps": steps, "batch_size": args.batch_size, "seconds": seconds, "fastest": best,
                     "speed_ratio": best["reference"] / best["bertpre"]})
        print(f"lengths {low}-{high} ({rows[-1]['real_token_share']:.0%} real tokens): bertpre {best['bertpre']:.2f} s, "
              f"reference {best['reference']:.2f} s for {steps} steps: {rows[-1]['speed_ratio']:.2f}x", flush=True)
    return rows


def mean_std(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None,
                        help="a pretrained model (export, RUN or checkpoint); default: pretrain one here")
    parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument("--quick", action="store_true", help="a minute: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--train-examples", type=int, default=4000)
    parser.add_argument("--test-examples", type=int, default=None, help="default: the whole test split")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--pretrain-steps", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--by-length", action="store_true",
                        help="time the training step alone on random batches of a few length ranges (a minute)")
    parser.add_argument("--name", default=None, help="result file's name (default finetune, finetune-by-length)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.by_length:
        rows = step_speed_by_length(args)
        path = write_result(args.name or "finetune-by-length", {
            "settings": {"hidden": args.hidden, "layers": args.layers, "vocab_size": args.vocab_size,
                         "max_seq_length": args.max_seq_length, "batch_size": args.batch_size},
            "by_length": rows,
            "note": "random weights and tokens, one model shape; the step alone (no data loading)",
        }, args.out, argv, versions=("torch", "transformers"), torch_threads=torch.get_num_threads())
        print(f"wrote {path}")
        return 0
    if not (args.wordnet / "data.noun").is_file():
        print(f"no WordNet: {args.wordnet / 'data.noun'} absent; install it with "
              "`apt-get install -y wordnet-base` (or pass --wordnet DIR); skipping")
        return 0
    threads = torch.get_num_threads()
    started = time.perf_counter()

    from bertpre.finetune import PRESETS

    hp = replace(PRESETS["bert"], lr=args.lr, epochs=args.epochs, batch_size=args.batch_size,
                 max_seq_length=args.max_seq_length)
    results: dict[str, list[dict]] = {"bertpre": [], "reference": []}
    with tempfile.TemporaryDirectory(prefix="bertpre-bench-finetune-") as scratch:
        scratch = Path(scratch)
        began = time.perf_counter()
        export = model_folder(args, scratch)
        pretrain_s = time.perf_counter() - began
        counts = write_task(args, scratch / "task")
        print(f"task: {counts['train']['rows']:,} training and {counts['test']['rows']:,} test definitions, "
              f"{counts['train']['labels']} supersenses; model {export}", flush=True)
        ours = Bertpre(export, scratch / "task", hp)
        reference = Reference(export, scratch / "task", ours.data.label_names, hp)
        checks = same_inputs(ours, reference, 0)
        print(f"same inputs: {checks}", flush=True)
        math_check = same_math(ours, reference)
        print(f"same math (no dropout, the same initial head, {math_check['steps']} steps): largest loss "
              f"difference {math_check['largest_loss_difference']:.2e}", flush=True)
        sides = {"bertpre": ours, "reference": reference}
        for seed in range(args.seeds):
            for side in (("bertpre", "reference") if seed % 2 == 0 else ("reference", "bertpre")):
                results[side].append(sides[side].run(seed) | {"seed": seed})
            print(f"seed {seed}: " + "; ".join(
                f"{side} accuracy {runs[-1]['accuracy']:.2%}, {runs[-1]['train_examples_per_s']:,.0f} train ex/s, "
                f"{runs[-1]['test_examples_per_s']:,.0f} test ex/s" for side, runs in results.items()), flush=True)
        majority = max(statistics.multimode(ours.data.train.labels), key=ours.data.train.labels.count)
        majority_accuracy = sum(label == majority for label in ours.data.test.labels) / len(ours.data.test)

    summary = {side: {"accuracy": mean_std([run["accuracy"] for run in runs]),
                      "train_examples_per_s": statistics.median(run["train_examples_per_s"] for run in runs),
                      "train_examples_per_cpu_s": statistics.median(run["train_examples_per_cpu_s"] for run in runs),
                      "test_examples_per_s": statistics.median(run["test_examples_per_s"] for run in runs)}
               for side, runs in results.items()}
    accuracies = [[run["accuracy"] for run in results[side]] for side in ("bertpre", "reference")]
    difference = welch(*accuracies)
    by_seed = paired(*accuracies)
    speed = {key: summary["bertpre"][key] / summary["reference"][key]
             for key in ("train_examples_per_s", "train_examples_per_cpu_s", "test_examples_per_s")}
    print(f"\ntest accuracy over {args.seeds} seed(s) (majority label: {majority_accuracy:.2%})")
    for side, values in summary.items():
        print(f"  {side:<10} {values['accuracy']['mean']:.2%} ± {values['accuracy']['std']:.2%}   "
              f"train {values['train_examples_per_s']:,.0f} ex/s   test {values['test_examples_per_s']:,.0f} ex/s")
    interval = difference["interval"]
    shown = f"[{interval[0]:+.2%}, {interval[1]:+.2%}]" if interval else "(one seed: no interval)"
    print(f"  bertpre - reference accuracy {difference['difference']:+.2%} {shown} (goal: within 1 point)")
    if by_seed["interval"]:
        print(f"  paired by seed: {by_seed['difference']:+.2%} "
              f"[{by_seed['interval'][0]:+.2%}, {by_seed['interval'][1]:+.2%}]")
    print(f"  training speed bertpre / reference {speed['train_examples_per_s']:.2f}x (goal: >= 1.5x on CPU), "
          f"per CPU second {speed['train_examples_per_cpu_s']:.2f}x, test pass {speed['test_examples_per_s']:.2f}x")
    path = write_result(args.name or "finetune", {
        "settings": {key: (str(value) if isinstance(value, Path) else value)
                     for key, value in vars(args).items() if key not in ("out",)}
        | {"hyperparameters": vars(hp), "torch_threads": threads},
        "task": {"name": "wordnet-supersenses", "examples": counts, "majority_accuracy": majority_accuracy},
        "same_inputs": checks, "same_math": math_check,
        "reference_attention": results["reference"][0].get("attention"),
        "pretrain_s": round(pretrain_s, 1), "wall_s": round(time.perf_counter() - started, 1),
        "per_seed": results, "summary": summary, "bertpre_minus_reference_accuracy": difference,
        "bertpre_minus_reference_accuracy_paired": by_seed,
        "speed_ratio": speed,
        "note": "other agents share this machine's 2 cores; sides alternate first/second each seed "
                "so load hits both, load average in machine",
        "target": "accuracy within 1 point (95% Welch interval); training examples/s >= 1.5x on CPU",
    }, args.out, argv, versions=("torch", "transformers", "datasets"), torch_threads=threads)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
