"""MLM, PLM or RTD? BERT's masked LM, XLNet's permutation LM (and Transformer-XL's left-to-right LM)
and ELECTRA's replaced-token detection (tied and GDES embeddings) pretrained at equal training
FLOPs on two kinds of corpus, scored by held-out loss and a downstream linear probe, K seeds each.

- objectives, one shape (hidden, layers, heads = hidden / 64, FFN 4 × hidden, length, batch,
  AdamW, linear warmup over a tenth of the steps then linear decay to 0, the same peak lr):
  `mlm`: `model.architecture: bert`, `pair_task: none`, bertpre's MLM defaults as `bench.learning`
  runs them (15% masked, 80/10/10, documents packed); `plm`: `architecture: xlnet`, XLNet's plan
  (1/6 of each row predicted, spans of up to 5 words, the order drawn within `reuse_length` =
  length / 2), `mem_len` = length; `clm`: `architecture: xlnet`, the left-to-right order, every
  token predicted, `mem_len` = length; `rtd`: `architecture: electra` at BERT's shape (the
  discriminator is BERT's encoder), `data.objective: rtd` with its defaults (a generator a quarter
  of the discriminator's width, λ 50, the masked 15% all [MASK] for the generator); `rtd-gdes`: the
  same with `objective.embedding_sharing: gdes`. RTD's cost counts both networks
  (`Objective.cost_parts`), so its runs buy fewer steps than MLM's; it predicts no tokens, so it
  has no fill-in score: its own held-out scores are the discriminator's loss, accuracy and
  accuracy on replaced tokens (with the share replaced).
- equal compute: equal training FLOPs by `bertpre.model.cost.training_flops_per_token` (exact
  against FlopCounterMode for both architectures), times the batch's positions. MLM runs
  `--steps` steps; each other objective runs as many steps as that budget buys at its own cost
  per token (fewer: XLNet's query stream, its memory keys, clm's head over every row). FLOPs
  rather than wall time because this 2-core machine is shared (its wall time measures the
  neighbours as much as the model, and CPU kernels are no guide to an accelerator's), and
  rather than tokens because a PLM or CLM token costs more than an MLM one. Every run records
  all three: FLOPs, seconds (and tokens/s from the trainer's windows) and positions read
  (plm's segments overlap by half, so it reads each new token twice: `new_tokens` too).
- corpora: WikiText-2 (English encyclopaedic prose, articles as documents) and Shakespeare
  (English verse dialogue, runs of 24 speeches with their speakers' names as documents): a
  second kind of text that the English downstream task can still read (a Chinese corpus's
  vocabulary would leave the English probe meaningless). `--corpus NAME=FILE` adds any file in
  BERT's format (the test's sample corpus).
- held-out scores on each corpus's validation documents (5%, fixed seed), every final model:
  its own objective's loss (`bertpre evaluate`'s numbers: MLM over the masked 15%; PLM over its
  1/6 targets, each seeing the rest of the row, the targets before it in the order and the
  memory; CLM over every token, seeing what precedes it and the memory) — these three are NOT
  comparable with each other: they predict different tokens from different contexts. Two
  scores that are: `fill_in`, the same held-out windows (length − 2 tokens), the same 15% of
  tokens chosen once, each predicted from the same visible 85% and nothing else (BERT: the
  targets are [MASK]; XLNet: the targets hidden from every position by `perm_mask`, no memory),
  comparable across all three models though none trained on exactly this (BERT's training is
  closest; the CLM model never saw a right context); and, between the two XLNet models only,
  each XLNet objective's loss (`xlnet_plm_loss`, `xlnet_clm_loss` = the left-to-right
  perplexity's log, a proper language model's) on the same segments.
- downstream (`--task NAME=DIR`, repeatable; default WordNet supersenses, data/wordnet-supersenses-4000,
  and a word's part of speech in a sentence, data/wordnet-pos-4000, a pair task): every final model through `bertpre
  finetune` on each task's test split, fp32: the linear probe (frozen encoder, `--probe-seeds`
  seeds; a classification task by pooling `mean` and `cls`, [CLS] first for BERT, last for XLNet,
  which with `pair_task: none` no pretraining loss reads) and full fine-tuning (every weight,
  `--full-seeds` seeds at `--full-lr`, ELECTRA-Small's 3e-4 by default, `--full-epochs`).
  Classification reports accuracy, QA the F1.
- positions (`--positions absolute|rope`): BERT's absolute table, or rotary positions for MLM and
  RTD alike (RTD then trains the `bert` row: the `electra` row exports ELECTRA's absolute table).
  Tiny discriminators with absolute positions stay on a "unigram plateau" (they judge a token by
  its frequency alone; transformers' ElectraForPreTraining does the same) far longer than with
  rotary positions, so the rope comparison is the one that says what the objective does.
- a kept folder (`--work DIR`): the tokenized corpora, every run and its record (settings, held-out
  and downstream scores) stay there; a later invocation reuses every run whose settings match
  (and refuses one that does not) and scores only the tasks or scorings a record lacks, so a
  comparison too long for one sitting is finished by running the same command again, and
  `--report` summarises what the folder holds meanwhile (training and scoring nothing).

Writes bench/results/objectives-DATE.json: per corpus, per run the scores, FLOPs, seconds and
tokens/s; per objective mean and standard deviation over seeds; PLM − MLM (and CLM − MLM)
with 95% Welch intervals. Prints a table.

    .venv/bin/python -m bench.objectives                     # 2 corpora x 3 seeds x mlm, plm, clm, 400 MLM steps (~22 min, one core)
    .venv/bin/python -m bench.objectives --quick             # ~70 s: tiny model, few steps, part of each corpus
    .venv/bin/python -m bench.objectives --corpus wikitext --objectives mlm plm --steps 1200 --name objectives-wikitext-1200
    .venv/bin/python -m bench.objectives --objectives mlm rtd rtd-gdes --positions rope --steps 1500 --work runs/objectives
    .venv/bin/python -m bench.objectives --objectives rtd --rtd-set objective.generator_size=0.125 --positions rope --steps 1500
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import (
    CORPORA,
    RESULTS,
    ROOT,
    read_wikitext,
    source_digest,
    write_bert_format,
    write_result,
)
from bench.learning import bertpre_overrides, welch

OBJECTIVES = ("mlm", "plm", "clm", "rtd", "rtd-gdes")
# ELECTRA's replaced-token detection: the discriminator is BERT's encoder (`model.architecture:
# electra` at BERT's shape, no factorized embeddings), a generator of `objective.generator_size`
# beside it; `rtd-gdes` shares their embeddings as DeBERTa-v3 does.
REPLACED_TOKEN = ("rtd", "rtd-gdes")
POOLINGS = ("mean", "cls")
# The labelled tasks by default, both from data_prep and WordNet: supersenses (a definition's
# lexicographer file, 41 classes: meaning) and pos (a word's part of speech in a usage example, the
# words split so none is seen in training: syntax). Definitions (does this word have this meaning?
# data_prep.wordnet_definitions) is a --task too, but every tiny model scores it at chance; WordNet
# reading comprehension (QA, data_prep.wordnet_questions) is one, but costs minutes a model on a CPU.
DEFAULT_TASKS = (f"supersenses={ROOT / 'data' / 'wordnet-supersenses-4000'}",
                 f"pos={ROOT / 'data' / 'wordnet-pos-4000'}")
SPEECHES_PER_DOCUMENT = 24  # about a scene's worth of turns
FILL_IN_SHARE = 0.15
FILL_IN_WINDOWS = 512  # held-out windows scored by fill_in, at most


def read_dialogue(path: Path, speeches: int = SPEECHES_PER_DOCUMENT) -> list[list[str]]:
    """tinyshakespeare's speeches (blocks between blank lines, the speaker's name first) in runs
    of `speeches` as documents, each line a sentence."""
    blocks = [block.strip().splitlines() for block in path.read_text(encoding="utf-8").split("\n\n") if block.strip()]
    return [sum(blocks[start:start + speeches], []) for start in range(0, len(blocks), speeches)]


def corpus_documents(spec: str) -> tuple[str, list[list[str]] | Path]:
    """A corpus by name (`wikitext`, `shakespeare`) as documents, or `NAME=FILE` as the file itself."""
    if "=" in spec:
        name, file = spec.split("=", 1)
        return name, Path(file)
    if spec == "wikitext":
        return spec, read_wikitext(CORPORA / "wikitext2-valid.txt") + read_wikitext(CORPORA / "wikitext2-test.txt")
    if spec == "shakespeare":
        return spec, read_dialogue(CORPORA / "tinyshakespeare.txt")
    raise SystemExit(f"unknown corpus {spec!r}: wikitext, shakespeare or NAME=FILE")


def corpus_files(spec: str) -> list[Path]:
    if "=" in spec:
        return [Path(spec.split("=", 1)[1])]
    return {"wikitext": [CORPORA / "wikitext2-valid.txt", CORPORA / "wikitext2-test.txt"],
            "shakespeare": [CORPORA / "tinyshakespeare.txt"]}.get(spec, [])


def objective_settings(objective: str, args) -> list[str]:
    """The config overrides that make a run `objective` (beside the shared shape and recipe). With
    `--positions rope` every BERT-shaped run rotates its queries and keys instead of adding a
    position table, and RTD trains the `bert` row (the `electra` row's export has ELECTRA's
    absolute table)."""
    rope = ["model.position_embedding_type=rope"] if args.positions == "rope" else []
    if objective == "mlm":
        return rope
    if objective in REPLACED_TOKEN:
        return [f"model.architecture={'bert' if rope else 'electra'}", *rope, "data.objective=rtd",
                f"objective.embedding_sharing={'gdes' if objective == 'rtd-gdes' else 'tied'}", *args.rtd_set]
    return ["model.architecture=xlnet", f"data.objective={objective}", "data.plm_plan=xlnet",
            f"model.mem_len={args.length}"]


def run_config(args, objective: str, data: Path, out: Path, seed: int, steps: int):
    """The bertpre config of one run: `bench.learning`'s recipe at `steps` steps, the objective's keys."""
    from bertpre.config import load_config

    warmup = max(1, round(args.warmup_share * steps))
    shared = argparse.Namespace(**{**vars(args), "steps": steps, "warmup": warmup,
                                   "set": [*objective_settings(objective, args), "train.eval_every=1000000000",
                                           *args.set]})
    # a checkpoint a fifth of the way, the last one kept: a run stopped from outside (`--work`)
    # resumes from it, bit for bit, instead of starting again
    saves = [f"train.save_every={max(1, steps // 5)}", "train.keep_last=1"]
    return load_config(ROOT / "configs" / "tiny.yaml", [*bertpre_overrides(shared, data, out, seed), *saves])


def flops_per_token(config, vocab_size: int) -> float:
    """Training FLOPs per position of `config` (forward + backward, the cost model's terms)."""
    from bertpre.train.setup import token_flops

    return token_flops(dataclasses.replace(config, model=dataclasses.replace(config.model, vocab_size=vocab_size)))


def fill_in_windows(data, length: int, seed: int = 1234) -> dict[str, torch.Tensor]:
    """Held-out windows of `length` − 2 tokens (whole, one document each) and the same
    FILL_IN_SHARE of positions in each, chosen once: what every model predicts in `fill_in`."""
    width = length - 2
    windows = []
    for document in data.validation["input_ids"]:
        tokens = [token for sentence in document for token in sentence]
        windows += [tokens[start:start + width] for start in range(0, len(tokens) - width + 1, width)]
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(windows), generator=generator)[:FILL_IN_WINDOWS].sort().values
    ids = torch.tensor([windows[i] for i in order.tolist()], dtype=torch.long).reshape(-1, width)  # (N, n)
    count = max(1, round(FILL_IN_SHARE * width))
    positions = torch.stack([torch.randperm(width, generator=generator)[:count].sort().values
                             for _ in range(len(ids))]) if len(ids) else torch.zeros(0, count, dtype=torch.long)
    return {"input_ids": ids, "positions": positions, "labels": ids.gather(1, positions)}


@torch.no_grad()
def fill_in(model, windows: dict[str, torch.Tensor], tokenizer, xlnet: bool, batch_size: int = 64) -> dict:
    """Cross-entropy and accuracy of each window's chosen tokens, each predicted from the rest of
    its window only (see the module)."""
    model.eval()
    loss = correct = count = 0.0
    mask_id, cls_id, sep_id = (tokenizer.token_to_id(token) for token in ("[MASK]", "[CLS]", "[SEP]"))
    for start in range(0, len(windows["input_ids"]), batch_size):
        ids = windows["input_ids"][start:start + batch_size]  # (B, n)
        positions = windows["positions"][start:start + batch_size]  # (B, P)
        labels = windows["labels"][start:start + batch_size]  # (B, P)
        if xlnet:
            hidden = torch.zeros_like(ids, dtype=torch.bool).scatter_(1, positions, True)  # (B, n)
            perm_mask = hidden.unsqueeze(1).expand(-1, ids.shape[1], -1)  # nobody sees a target
            target_mapping = torch.nn.functional.one_hot(positions, ids.shape[1]).float()  # (B, P, n)
            logits = model(ids, perm_mask=perm_mask, target_mapping=target_mapping).logits  # (B, P, V)
        else:
            masked = ids.scatter(1, positions, mask_id)
            edges = torch.full((len(ids), 1), cls_id), torch.full((len(ids), 1), sep_id)
            inputs = torch.cat([edges[0], masked, edges[1]], dim=1)  # [CLS] window [SEP]
            out = model(inputs, torch.ones_like(inputs), torch.zeros_like(inputs)).prediction_logits
            logits = out.gather(1, (positions + 1).unsqueeze(-1).expand(-1, -1, out.shape[-1]))  # (B, P, V)
        logits = logits.float().flatten(0, 1)
        loss += torch.nn.functional.cross_entropy(logits, labels.flatten(), reduction="sum").item()
        correct += (logits.argmax(-1) == labels.flatten()).sum().item()
        count += labels.numel()
    return {"loss": loss / count if count else float("nan"), "acc": correct / count if count else float("nan"),
            "predictions": int(count)}


def held_out(model, config, data, objective: str, windows, tokenizer) -> dict:
    """Every held-out score of a final model (see the module for which are comparable)."""
    from bertpre.train.evaluation import evaluate

    if objective in REPLACED_TOKEN:  # the discriminator predicts no tokens: its own scores alone
        result = evaluate(model, data, config.data, micro_batch_size=32, seed=1234)
        return {"own": {"loss": result["rtd_loss"], "acc": result["rtd_acc"],
                        "acc_replaced": result["rtd_acc_replaced"], "precision": result["rtd_precision"],
                        "auc": result["rtd_auc"], "replaced_share": result["replaced_share"],
                        "generator_mlm_loss": result["mlm_loss"], "tokens": result["tokens"]}}
    scores = {"fill_in": fill_in(model, windows, tokenizer, xlnet=objective != "mlm")}
    if objective == "mlm":
        result = evaluate(model, data, config.data, micro_batch_size=32, seed=1234)
        scores["own"] = {"loss": result["mlm_loss"], "acc": result["mlm_acc"], "predictions": result["predictions"]}
        return scores
    for scored in ("plm", "clm"):  # the XLNet models on each XLNet objective's segments
        data_config = dataclasses.replace(config.data, objective=scored, reuse_length=None)
        result = evaluate(model, data, data_config, micro_batch_size=32, seed=1234)
        scores[f"xlnet_{scored}"] = {"loss": result[f"{scored}_loss"], "acc": result[f"{scored}_acc"],
                                     "predictions": result["predictions"]}
    scores["own"] = scores[f"xlnet_{objective}"]
    return scores


def train_run(args, objective: str, data_path: Path, run: Path, seed: int, steps: int, vocab_size: int,
              resume: bool = False) -> dict:
    """Pretrain one model (`resume`: continue RUN's latest checkpoint); its cost in FLOPs, seconds
    and positions, and the trainer's tokens/s."""
    from bertpre.train.trainer import pretrain

    config = run_config(args, objective, data_path, run, seed, steps)
    began = time.perf_counter()
    result = pretrain(config, resume=resume)
    train_s = time.perf_counter() - began
    if result.step != steps:
        raise SystemExit(f"{objective} seed {seed} stopped at step {result.step} of {steps}; nothing recorded")
    rates = [row["perf/tokens_per_s"] for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if "perf/tokens_per_s" in row]
    per_token = flops_per_token(config, vocab_size)
    positions = steps * args.batch_size * args.length
    return {"config": config, "objective": objective, "seed": seed, "steps": steps,
            "warmup_steps": config.optim.warmup_steps, "flops_per_token": per_token, "flops": per_token * positions,
            "positions": positions, "new_tokens": steps * args.batch_size * config.data.segment_step
            if config.data.recurrent else positions, "train_s": round(train_s, 1),
            "tokens_per_s_median": statistics.median(rates) if rates else None}


def load_final(run: Path, objective: str):
    from bertpre.model import BertForPreTraining, XLNetLMHeadModel
    from bertpre.model.replaced_token import ReplacedTokenDetection
    from bertpre.train.checkpoint import latest_checkpoint

    checkpoint = latest_checkpoint(run)
    if objective in REPLACED_TOKEN:
        return ReplacedTokenDetection.from_pretrained(checkpoint).eval()
    model_class = BertForPreTraining if objective == "mlm" else XLNetLMHeadModel
    return model_class.from_pretrained(checkpoint).eval()


def spread(values: list[float]) -> dict:
    values = [value for value in values if value is not None]
    return {"mean": statistics.fmean(values) if values else None,
            "std": statistics.stdev(values) if len(values) > 1 else 0.0}


@dataclasses.dataclass(frozen=True)
class Task:
    """A labelled task every final model is fine-tuned on: `bertpre finetune`'s files and the metric
    reported (classification: accuracy; qa: F1)."""

    name: str
    folder: Path
    kind: str  # classification or qa
    full: bool = True  # scored by full fine-tuning too (`--full-seeds` > 0)

    @property
    def metric(self) -> str:
        return "f1" if self.kind == "qa" else "accuracy"

    @property
    def scorings(self) -> tuple[str, ...]:
        """How a model is scored on it: the probe (a classification probe by each pooling) and full."""
        probes = tuple(f"probe_{pooling}" for pooling in POOLINGS) if self.kind == "classification" else ("probe",)
        return (*probes, "full") if self.full else probes

    def files(self):
        from bertpre.finetune import TaskFiles
        from bertpre.finetune.qa_data import QASettings

        if self.kind == "qa":
            return TaskFiles(task="qa", train=self.folder / "train.json", validation=self.folder / "dev.json",
                             test=self.folder / "test.json", qa=QASettings())
        test = self.folder / "test.csv"
        text, *pair = self.text_columns()
        return TaskFiles(task="classification", train=self.folder / "train.csv",
                         validation=self.folder / "validation.csv", test=test if test.is_file() else None,
                         text_column=text, text_pair_column=pair[0] if pair else None)

    def text_columns(self) -> list[str]:
        """train.csv's columns beside `label`: one text, or a pair's two (e.g. word,definition)."""
        import csv

        with (self.folder / "train.csv").open(encoding="utf-8", newline="") as file:
            columns = [column for column in next(csv.reader(file)) if column != "label"]
        if not 1 <= len(columns) <= 2:
            raise SystemExit(f"{self.folder / 'train.csv'}: a label column and one or two text columns, got {columns}")
        return columns

    @functools.cached_property
    def files_sha256(self) -> dict:
        """The files' contents, hashed once: two records scored the same task when these are equal."""
        import hashlib

        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
                for path in sorted(self.folder.iterdir()) if path.suffix in (".csv", ".json") and path.name != "summary.json"}


def read_task(spec: str, full: bool = True) -> Task:
    """NAME=DIR: DIR holds train.csv and validation.csv (text,label; test.csv scored when there) or
    SQuAD-layout train.json, dev.json and test.json (extractive QA)."""
    name, _, folder = spec.rpartition("=")
    folder = Path(folder)
    if (folder / "train.json").is_file() and (folder / "dev.json").is_file() and (folder / "test.json").is_file():
        return Task(name or folder.name, folder, "qa", full)
    if (folder / "train.csv").is_file() and (folder / "validation.csv").is_file():
        return Task(name or folder.name, folder, "classification", full)
    raise SystemExit(f"--task {spec}: {folder} holds neither train.csv and validation.csv nor train.json, dev.json "
                     f"and test.json; write one with `python -m data_prep.wordnet_supersenses --out {folder} "
                     f"--max-train 4000 --max-eval 1000` (or data_prep.wordnet_pos_in_context, the same options)")


def score_on_task(run: Path, task: Task, scoring: str, args, out: Path) -> dict:
    """`bertpre finetune` of RUN's final model on `task` (test split, fp32, CPU) over the seeds:
    `probe*` the frozen encoder and a linear head (`--probe-seeds`), `full` every weight
    (`--full-seeds`, `--full-lr`, `--full-epochs`); windows of the pretraining length."""
    from bertpre.finetune import finetune, load_hyperparameters

    length = [f"max_seq_length={args.length}"]
    if scoring == "full":
        hp = load_hyperparameters("bert", None, [*length, f"lr={args.full_lr}", f"epochs={args.full_epochs}"])
        seeds = args.full_seeds
    else:
        pooling = [f"pooling={scoring.removeprefix('probe_')}"] if scoring != "probe" else []
        hp = load_hyperparameters("probe", None, [*length, *pooling])
        seeds = args.probe_seeds
    began = time.perf_counter()
    result = finetune(run, task.files(), out, hp=hp, seeds=list(range(seeds)), precision="fp32", device="cpu",
                      say=lambda line: None)[-1]
    metric = result["metrics"][task.metric]
    return {"score": metric["mean"], "per_seed": metric["per_seed"], "metric": task.metric, "split": result["split"],
            "majority": result.get("baselines", {}).get("majority", {}).get(task.metric),
            "seconds": round(time.perf_counter() - began, 1)}


def measures(tasks: list[Task]) -> dict[str, tuple[tuple[str, ...], bool | None]]:
    """What each run's record holds that is summarised and compared: name -> (path in a run,
    higher is better)."""
    downstream = {f"{task.name}_{scoring}": (("downstream", task.name, scoring, "score"), True)
                  for task in tasks for scoring in task.scorings}
    return {**downstream,
            "fill_in_loss": (("held_out", "fill_in", "loss"), False),
            "fill_in_acc": (("held_out", "fill_in", "acc"), True),
            "own_loss": (("held_out", "own", "loss"), False),
            "rtd_acc_replaced": (("held_out", "own", "acc_replaced"), True),
            "rtd_precision": (("held_out", "own", "precision"), True),
            "rtd_auc": (("held_out", "own", "auc"), True),
            "replaced_share": (("held_out", "own", "replaced_share"), None),
            "xlnet_plm_loss": (("held_out", "xlnet_plm", "loss"), False),
            "xlnet_clm_loss": (("held_out", "xlnet_clm", "loss"), False),
            "train_s": (("train_s",), None),
            "tokens_per_s": (("tokens_per_s_median",), None),
            "flops": (("flops",), None)}


def compared(tasks: list[Task]) -> tuple[str, ...]:
    """Differences that compare like with like: the downstream scores and fill-in, not own_loss
    across objectives."""
    return (*(f"{task.name}_{scoring}" for task in tasks for scoring in task.scorings), "fill_in_loss", "fill_in_acc")


def with_precision(record: dict) -> dict:
    """A discriminator's record, its precision added where a record written before the bench kept
    it lacks it: derived exactly from its accuracy, accuracy on replaced tokens and share replaced
    (the objective's own `called_replaced`, on shares of the tokens rather than counts)."""
    from bertpre.train.objectives.rtd import called_replaced

    own = record.get("held_out", {}).get("own", {})
    if "acc_replaced" in own and "precision" not in own:
        caught = own["replaced_share"] * own["acc_replaced"]
        called = called_replaced(own["acc"], caught, own["replaced_share"], 1.0)
        own["precision"] = caught / called if called > 1e-12 else 0.0  # none called: 0
    return record


def measure(run: dict, path: tuple[str, ...]):
    for key in path:
        if not isinstance(run, dict) or key not in run:
            return None
        run = run[key]
    return run


def summarise(runs: list[dict], objectives: list[str], tasks: list[Task]) -> tuple[dict, dict]:
    """Per objective each measure's mean and std over seeds; each other objective − MLM (and
    CLM − PLM on the XLNet losses) with its 95% Welch interval."""
    chosen_measures, like = measures(tasks), compared(tasks)
    runs = [with_precision(run) for run in runs]
    by_objective = {objective: [run for run in runs if run["objective"] == objective] for objective in objectives}
    summary = {objective: {name: spread([measure(run, path) for run in chosen])
                           for name, (path, _) in chosen_measures.items()
                           if any(measure(run, path) is not None for run in chosen)}
               for objective, chosen in by_objective.items() if chosen}
    differences = {}

    def compare(a: str, b: str, names) -> None:
        if a in summary and b in summary:
            differences[f"{a}-{b}"] = {
                name: welch([measure(run, chosen_measures[name][0]) for run in by_objective[a]],
                            [measure(run, chosen_measures[name][0]) for run in by_objective[b]])
                for name in names if name in summary[a] and name in summary[b]}

    for objective in objectives:
        if objective != "mlm":
            compare(objective, "mlm", like)
    compare("clm", "plm", (*like, "xlnet_plm_loss", "xlnet_clm_loss"))
    compare("rtd-gdes", "rtd", (*like, "own_loss", "rtd_acc_replaced", "rtd_precision", "rtd_auc"))
    return summary, differences


def pretraining_identity(args, objective: str, seed: int, steps: int) -> dict:
    """What a kept run (`--work`) must share with this invocation's to be reused."""
    keys = ("warmup_share", "length", "batch_size", "lr", "hidden", "layers", "vocab_size", "max_documents",
            "set", "positions")
    # --rtd-set joins the identity only where given, so runs kept before it existed are still reused
    own = {"rtd_set": args.rtd_set} if args.rtd_set and objective in REPLACED_TOKEN else {}
    return {"objective": objective, "seed": seed, "steps": steps, **{key: getattr(args, key) for key in keys}, **own}


def pretrained(args, objective: str, folder: Path, seed: int, steps: int, vocab_size: int, data, windows) -> dict:
    """One run pretrained and scored on its held-out text, or the kept record of one (`--work`):
    a run folder without its record (a run stopped from outside) continues from its checkpoint,
    or starts again where it has none."""
    import shutil

    run_dir = folder / f"{objective}-{seed}"
    kept = run_dir / "record.json"
    identity = pretraining_identity(args, objective, seed, steps)
    if kept.is_file():
        record = json.loads(kept.read_text())
        if record.get("identity") == identity:
            return record
        raise SystemExit(f"{run_dir} was pretrained with other settings ({record.get('identity')}); "
                         "pass another --work or remove it")
    resume = (run_dir / "checkpoints" / "latest").exists()  # a run stopped from outside: continued
    if run_dir.exists() and not resume:
        shutil.rmtree(run_dir)
    record = train_run(args, objective, folder / "data", run_dir, seed, steps, vocab_size, resume)
    record["resumed"] = resume  # train_s then counts this invocation's part alone
    record["code"] = source_digest()  # the code that finished it (a resumed run's start may be older)
    config = record.pop("config")
    record["held_out"] = held_out(load_final(run_dir, objective), config, data, objective, windows, data.tokenizer)
    record["identity"] = identity
    record["downstream"] = {}
    kept.write_text(json.dumps(record, indent=1))
    return record


def score_downstream(args, record: dict, run_dir: Path, tasks: list[Task]) -> None:
    """Every task's scorings of one run that its record lacks (or holds for other files or
    settings), each written to the record as it finishes."""
    import shutil

    settings = {"length": args.length, "probe_seeds": args.probe_seeds, "full_seeds": args.full_seeds,
                "full_lr": args.full_lr, "full_epochs": args.full_epochs}
    for task in tasks:
        identity = {"files_sha256": task.files_sha256, **settings}
        scores = record["downstream"].setdefault(task.name, {})
        for scoring in task.scorings:
            if scoring in scores and scores[scoring].get("identity") == identity:
                continue
            out = run_dir.parent / f"finetune-{run_dir.name}-{task.name}-{scoring}"
            if out.exists():
                shutil.rmtree(out)
            scores[scoring] = {**score_on_task(run_dir, task, scoring, args, out), "identity": identity}
            (run_dir / "record.json").write_text(json.dumps(record, indent=1))


def tokenized(args, spec: str, work: Path) -> tuple[str, Path]:
    """One corpus tokenized once into WORK/NAME/data (kept there for a later invocation with the
    same corpus, vocabulary and document count)."""
    from bertpre.data.build import tokenize_corpus

    name, source = corpus_documents(spec)
    folder = work / name
    identity = {"corpus": spec, "vocab_size": args.vocab_size, "max_documents": args.max_documents}
    marker = folder / "tokenized.json"
    if marker.is_file():
        if json.loads(marker.read_text()) == identity:
            return name, folder
        raise SystemExit(f"{folder} holds {spec} tokenized with other settings; pass another --work")
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(source, Path):
        corpus = source
    else:
        corpus = write_bert_format(source[:args.max_documents] if args.max_documents else source,
                                   folder / "corpus.txt")
    tokenize_corpus([corpus], folder / "data", vocab_size=args.vocab_size, validation_share=0.05, show_progress=False)
    marker.write_text(json.dumps(identity))
    return name, folder


def describe_run(name: str, record: dict) -> str:
    scores = record["held_out"]
    line = (f"{name} seed {record['seed']} {record['objective']}: {record['steps']} steps, {record['flops']:.3g} FLOPs, "
            f"{record['train_s']:.0f} s, own loss {scores['own']['loss']:.3f}"
            + (f", fill-in loss {scores['fill_in']['loss']:.3f}" if "fill_in" in scores
               else f", replaced acc {scores['own']['acc_replaced']:.3f} (share {scores['own']['replaced_share']:.3f}), "
                    f"precision {with_precision(record)['held_out']['own']['precision']:.3f}"
                    + (f", AUC {scores['own']['auc']:.3f}" if "auc" in scores["own"] else "")))
    for task, by_scoring in record["downstream"].items():
        line += "".join(f", {task} {scoring} {entry['score']:.3f}" for scoring, entry in by_scoring.items())
    return line


def run_corpus(args, spec: str, tasks: list[Task], work: Path) -> dict:
    """Tokenize one corpus once, pretrain every objective with every seed, score every model."""
    from bertpre.data import load_data

    name, folder = tokenized(args, spec, work)
    data = load_data(folder / "data")
    vocab_size = data.tokenizer.get_vocab_size()
    windows = fill_in_windows(data, args.length)
    mlm_cost = flops_per_token(run_config(args, "mlm", folder / "data", folder / "probe-config", 0, args.steps),
                               vocab_size)
    budget = mlm_cost * args.steps * args.batch_size * args.length
    steps = {objective: max(1, round(budget / (args.batch_size * args.length * flops_per_token(
        run_config(args, objective, folder / "data", folder / "probe-config", 0, args.steps), vocab_size))))
        for objective in args.objectives}
    runs = []
    for seed in range(args.seeds):
        for objective in args.objectives:
            if args.report:  # what --work holds: its finished runs, as scored so far
                kept = folder / f"{objective}-{seed}" / "record.json"
                if not kept.is_file():
                    continue
                record = json.loads(kept.read_text())
                if record.get("identity") != pretraining_identity(args, objective, seed, steps[objective]):
                    continue
            else:
                record = pretrained(args, objective, folder, seed, steps[objective], vocab_size, data, windows)
                score_downstream(args, record, folder / f"{objective}-{seed}", tasks)
            runs.append(record)
            print(describe_run(name, record), flush=True)
    summary, differences = summarise(runs, args.objectives, tasks)
    # runs kept (--work) from other code do not reproduce seed by seed: say so, keep them
    code_versions = sorted({run.get("code", "unrecorded") for run in runs})
    if len(code_versions) > 1:
        print(f"{name}: these runs were trained by {len(code_versions)} versions of bertpre's code "
              f"({', '.join(code_versions)}); a rerun differs seed by seed", flush=True)
    return {"documents": {"train": len(data.train), "validation": len(data.validation)},
            "code_versions": code_versions,
            "tokens_train": int(sum(len(sentence) for document in data.train["input_ids"] for sentence in document)),
            "vocab_size": vocab_size, "fill_in_windows": len(windows["input_ids"]),
            "fill_in_predictions_per_window": int(windows["positions"].shape[1]),
            "flops_budget": budget, "steps": steps, "per_run": runs, "summary": summary, "differences": differences}


def print_table(results: dict, tasks: list[Task]) -> None:
    shown = [*((f"{task.name}_{scoring}", f"{task.name[:8]} {scoring}", "{:.3f}")
               for task in tasks for scoring in task.scorings),
             ("fill_in_loss", "fill-in loss", "{:.3f}"), ("own_loss", "own loss*", "{:.3f}"),
             ("xlnet_clm_loss", "L-to-R loss", "{:.3f}"), ("train_s", "train s", "{:.0f}"),
             ("tokens_per_s", "tokens/s", "{:.0f}"), ("flops", "FLOPs", "{:.3g}")]
    for corpus, result in results.items():
        print(f"\n{corpus}: mean ± std over seeds (steps {result['steps']}, equal FLOPs {result['flops_budget']:.3g})")
        print(f"  {'':<9}" + "".join(f"{label:>20}" for _, label, _ in shown))
        for objective, by_name in result["summary"].items():
            cells = []
            for name, _, form in shown:
                value = by_name.get(name)
                cells.append(f"{form.format(value['mean'])} ± {form.format(value['std'])}" if value else "-")
            print(f"  {objective:<9}" + "".join(f"{cell:>20}" for cell in cells))
        for pair, by_name in result["differences"].items():
            for name, entry in by_name.items():
                interval = entry["interval"]
                shown_interval = f"[{interval[0]:+.4f}, {interval[1]:+.4f}]" if interval else "(one seed: no interval)"
                print(f"  {pair} {name}: {entry['difference']:+.4f} {shown_interval}")
    print("  * each objective's own loss: not comparable across objectives (other tokens, other contexts)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", default=None,
                        help="wikitext, shakespeare or NAME=FILE (repeatable; default wikitext and shakespeare)")
    parser.add_argument("--objectives", nargs="+", choices=OBJECTIVES, default=list(OBJECTIVES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400, help="MLM's steps; the others get its FLOPs")
    parser.add_argument("--warmup-share", type=float, default=0.1)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-documents", type=int, default=None, help="read only a corpus's first N documents")
    parser.add_argument("--set", action="append", default=[], help="a bertpre config override for every run")
    parser.add_argument("--rtd-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a bertpre config override for the replaced-token runs alone (objective.generator_size=0.125)")
    parser.add_argument("--positions", choices=("absolute", "rope"), default="absolute",
                        help="BERT-shaped runs' positions (rope: RTD trains the bert row)")
    parser.add_argument("--task", action="append", default=None, metavar="NAME=DIR",
                        help="a labelled task every final model is fine-tuned on: DIR with train.csv and "
                             "validation.csv (test.csv), or SQuAD-layout train.json, dev.json, test.json (repeatable; "
                             f"default {', '.join(DEFAULT_TASKS)})")
    parser.add_argument("--no-downstream", action="store_true")
    parser.add_argument("--probe-seeds", type=int, default=3)
    parser.add_argument("--full-seeds", type=int, default=3, help="full fine-tuning seeds a model and task (0: none)")
    parser.add_argument("--full-lr", type=float, default=3e-4, help="full fine-tuning's peak lr (ELECTRA-Small's)")
    parser.add_argument("--full-epochs", type=int, default=3)
    parser.add_argument("--report", action="store_true",
                        help="train and score nothing: summarise the finished runs --work holds (a result marked "
                             "incomplete where runs are missing)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the tokenized corpora, runs and their scores here; a later invocation reuses "
                             "what it finds (default: a temporary folder)")
    parser.add_argument("--quick", action="store_true",
                        help="about a minute: hidden 64, 1 layer, 20 MLM steps, 2 seeds, 60 documents a corpus, 1 probe seed")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: on a shared machine, 2 threads busy-wait for each other's core)")
    parser.add_argument("--name", default="objectives")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.hidden, args.layers, args.steps, args.seeds, args.probe_seeds, args.full_seeds = 64, 1, 20, 2, 1, 1
        args.max_documents = args.max_documents or 60
        args.name = args.name if args.name != "objectives" else "objectives-quick"
    specs = args.corpus or ["wikitext", "shakespeare"]
    missing = [str(path) for spec in specs for path in corpus_files(spec) if not path.is_file()]
    if missing:
        print(f"no corpus: {', '.join(missing)} absent; pass --corpus NAME=FILE")
        return 0
    if args.report and args.work is None:
        parser.error("--report summarises what --work holds: name the folder")
    tasks = [] if args.no_downstream else [read_task(spec, full=args.full_seeds > 0) for spec in args.task or DEFAULT_TASKS]
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    results: dict[str, dict] = {}

    def record(complete: bool) -> Path:
        return write_result(args.name, {
            "complete": complete,
            "settings": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()
                         if key not in ("out", "task", "corpus")} | {"corpora": specs},
            "equalised_by": "training FLOPs (bertpre.model.cost.training_flops_per_token x batch x length x steps): "
                            "MLM runs --steps steps, each other objective the steps that buy the same FLOPs",
            "comparable": {"fill_in": "all objectives: the same held-out tokens, each predicted from the same "
                                      "visible rest of its window and nothing else",
                           "xlnet_plm, xlnet_clm": "between the XLNet models only",
                           "own": "not across objectives: each objective predicts other tokens from other contexts"},
            "downstream": {task.name: {"folder": str(task.folder), "kind": task.kind, "metric": task.metric,
                                       "files_sha256": task.files_sha256} for task in tasks}
            | {"scorings": "bertpre finetune on the test split, fp32, windows of the pretraining length: probe "
                           "(--preset probe, frozen encoder, a linear head; classification by mean and cls pooling; "
                           "--probe-seeds) and full (--preset bert, --full-lr, --full-epochs, --full-seeds)"},
            "wall_s": round(time.perf_counter() - started, 1),
            "corpora": results,
        }, args.out, argv, versions=("torch",), torch_threads=args.threads)

    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bertpre-objectives-")))
        for spec in specs:
            results[spec.split("=", 1)[0]] = run_corpus(args, spec, tasks, work)
            record(complete=False)  # what has finished survives a later failure
    print_table(results, tasks)
    path = record(complete=not args.report or all(
        len(result["per_run"]) == args.seeds * len(args.objectives) for result in results.values()))
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
