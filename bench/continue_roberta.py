"""Continued pretraining of a released RoBERTa on a second kind of text, scored by transformers.

Issue 37's check on real text, in three acts:

1. **A "released" RoBERTa, made without bertpre.** A byte-level BPE tokenizer trained with
   `tokenizers` directly (RoBERTa's `<s> <pad> </s> <unk> <mask>`, saved as `RobertaTokenizerFast`
   saves it), and a small `RobertaForMaskedLM` (514 positions, one token type) trained by a plain
   torch loop with `DataCollatorForLanguageModeling` on WikiText-2 blocks, as `run_mlm` cuts them;
   `save_pretrained` of both into one folder.
2. **bertpre continues it, as a user would:** `bertpre tokenize` Shakespeare's training part with
   `--tokenizer RELEASED`, `bertpre pretrain` with `model.init_from: RELEASED` (`pair_task: none`),
   `bertpre export`.
3. **The held-out MLM loss on Shakespeare's held-out speeches** (the last tenth, never trained on):
   blocks of the released tokenizer's ids, masks drawn once by a seeded generator (15% of the
   non-special tokens, 80/10/10), the same batches for every score. Scored by transformers for the
   released model and for the export, and by bertpre's own model class on the run's last
   checkpoint: the loss must fall, and the export's score must equal bertpre's.

    .venv/bin/python -m bench.continue_roberta                  # 16 min on 2 busy shared cores
    .venv/bin/python -m bench.continue_roberta --release-steps 100 --continue-steps 50   # shorter
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from tokenizers import ByteLevelBPETokenizer

from bench.common import CORPORA, RESULTS, write_result

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0-4, as roberta-base numbers them
BERTPRE = Path(sys.executable).with_name("bertpre")


def train_byte_level_bpe(texts: list[str], folder: Path, vocab_size: int) -> transformers.PreTrainedTokenizerFast:
    """RoBERTa's tokenizer trained with `tokenizers` alone (vocab.json + merges.txt), loaded and
    saved by `RobertaTokenizerFast` as a released model's folder holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=ROBERTA_SPECIALS,
                            show_progress=False)
    bpe.save_model(str(folder))
    # As Hugging Face's "train a language model from scratch" recipe loads them: the folder's files.
    tokenizer = transformers.RobertaTokenizerFast.from_pretrained(folder, model_max_length=512)
    assert len(tokenizer) == bpe.get_vocab_size(), (len(tokenizer), bpe.get_vocab_size())
    tokenizer.save_pretrained(folder)
    return tokenizer


def blocks(tokenizer: transformers.PreTrainedTokenizerFast, texts: list[str], length: int) -> torch.Tensor:
    """run_mlm's `group_texts`: every text's ids with `<s> … </s>`, concatenated, cut into rows of
    `length` (the remainder dropped)."""
    ids = [token for encoding in tokenizer(texts)["input_ids"] for token in encoding]
    rows = len(ids) // length
    return torch.tensor(ids[: rows * length], dtype=torch.long).view(rows, length)


def small_roberta(vocab_size: int, hidden: int, layers: int, seed: int) -> transformers.RobertaForMaskedLM:
    """A RoBERTa of roberta-base's layout at a small width: 514 positions (512 tokens after the
    padding's), one token type, `<pad>` = 1."""
    torch.manual_seed(seed)
    config = transformers.RobertaConfig(
        vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
        intermediate_size=4 * hidden, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)
    return transformers.RobertaForMaskedLM(config)


def train_with_transformers(model: transformers.RobertaForMaskedLM, tokenizer, rows: torch.Tensor, steps: int,
                            batch_size: int, lr: float, seed: int, progress: int = 0) -> list[float]:
    """A plain loop: `DataCollatorForLanguageModeling` (15%, 80/10/10), AdamW, linear warmup (10%)
    and decay, clipping at 1; no bertpre code. Returns the training losses (printed every
    `progress` steps)."""
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, eps=1e-6)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, max(1, steps // 10), steps)
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the collator draws its masks from torch's global generator
    model.train()
    losses = []
    order = torch.randperm(len(rows), generator=generator)
    for step in range(steps):
        start = (step * batch_size) % max(1, len(rows) - batch_size + 1)
        if start < batch_size and step:
            order = torch.randperm(len(rows), generator=generator)
        batch = collator([{"input_ids": row} for row in rows[order[start:start + batch_size]]])
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if progress and (step + 1) % progress == 0:
            print(f"release step {step + 1}/{steps}: loss {loss.item():.3f}", file=sys.stderr, flush=True)
    return losses


def fixed_masked_batches(rows: torch.Tensor, special_ids: list[int], mask_id: int, vocab_size: int,
                         batch_size: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Held-out MLM batches drawn once: 15% of the non-special tokens predicted, of those 80%
    `<mask>`, 10% a random token, 10% kept; labels -100 elsewhere. Same seed, same batches."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = rows.clone()
    eligible = ~torch.isin(rows, torch.tensor(special_ids))
    predicted = (torch.rand(rows.shape, generator=generator) < 0.15) & eligible
    labels = torch.where(predicted, rows, torch.full_like(rows, -100))
    draw = torch.rand(rows.shape, generator=generator)
    input_ids[predicted & (draw < 0.8)] = mask_id
    randomized = predicted & (draw >= 0.8) & (draw < 0.9)
    input_ids[randomized] = torch.randint(len(ROBERTA_SPECIALS), vocab_size, rows.shape, generator=generator)[randomized]
    return [{"input_ids": input_ids[start:start + batch_size], "labels": labels[start:start + batch_size]}
            for start in range(0, len(rows), batch_size)]


@torch.no_grad()
def mlm_loss(logits_of: Callable[[torch.Tensor], torch.Tensor], batches: list[dict[str, torch.Tensor]]) -> dict:
    """Mean cross-entropy and accuracy over every predicted token of `batches` (tokens weigh alike
    whatever their batch). `logits_of(input_ids)` gives (B, T, V) logits."""
    total, correct, count = 0.0, 0, 0
    for batch in batches:
        logits = logits_of(batch["input_ids"]).float()
        picked = batch["labels"] != -100
        total += F.cross_entropy(logits[picked], batch["labels"][picked], reduction="sum").item()
        correct += int((logits[picked].argmax(-1) == batch["labels"][picked]).sum())
        count += int(picked.sum())
    return {"loss": total / count, "accuracy": correct / count, "predicted_tokens": count}


def transformers_logits(folder: Path) -> Callable[[torch.Tensor], torch.Tensor]:
    model = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    return lambda input_ids: model(input_ids=input_ids).logits


def bertpre_logits(run: Path) -> Callable[[torch.Tensor], torch.Tensor]:
    """bertpre's own model class on the run's last checkpoint (not the export)."""
    from bertpre.model.families import load_pretraining_model
    from bertpre.train.model_folders import find_checkpoint

    checkpoint, _ = find_checkpoint(run)
    model = load_pretraining_model(checkpoint, strict=True).eval()
    return lambda input_ids: model(input_ids).prediction_logits


def split_speeches(text: str, held_out_share: float) -> tuple[list[str], list[str]]:
    """Tiny Shakespeare's speeches (blocks between blank lines), the last `held_out_share` held out."""
    speeches = [block.strip() for block in text.split("\n\n") if block.strip()]
    cut = len(speeches) - max(1, round(held_out_share * len(speeches)))
    return speeches[:cut], speeches[cut:]


def wikitext_paragraphs(paths: list[Path]) -> list[str]:
    """WikiText's paragraph lines (headings and blank lines left out)."""
    return [line.strip() for path in paths for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.strip().startswith("=")]


def bertpre_command(*arguments: str) -> float:
    """Run the bertpre CLI as a user does; its seconds."""
    start = time.perf_counter()
    subprocess.run([str(BERTPRE), *arguments], check=True, env={**os.environ, "BERTPRE_DEVICE": "cpu"})
    return time.perf_counter() - start


def continue_config(released: Path, data: Path, run: Path, *, steps: int, batch_size: int, lr: float,
                    length: int, seed: int) -> str:
    """The pretrain config a user would write to continue `released` on `data` (YAML text)."""
    return f"""\
model:
  init_from: {released}
data:
  path: {data}
  max_seq_length: {length}
  pair_task: none
  mlm_probability: 0.15
  max_predictions_per_seq: {round(0.15 * length) + 2}
  num_workers: 0
optim:
  lr: {lr}
  warmup_steps: {max(1, steps // 10)}
  schedule: linear
train:
  batch_size: {batch_size}
  micro_batch_size: {batch_size}
  max_steps: {steps}
  precision: fp32
  seed: {seed}
  log_every: {max(1, steps // 5)}
  eval_every: {steps}
  save_every: {steps}
  keep_last: 1
  out: {run}
"""


def run_check(work: Path, wikitext: list[str], shakespeare: str, *, vocab_size: int, hidden: int, layers: int,
              length: int, release_steps: int, continue_steps: int, batch_size: int, release_lr: float,
              continue_lr: float, held_out_rows: int, seed: int) -> dict:
    """The three acts in `work`; the figures."""
    seconds = {}
    start = time.perf_counter()
    released = work / "released"
    tokenizer = train_byte_level_bpe(wikitext, released, vocab_size)
    model = small_roberta(len(tokenizer), hidden, layers, seed)
    release_losses = train_with_transformers(model, tokenizer, blocks(tokenizer, wikitext, length), release_steps,
                                             batch_size, release_lr, seed, progress=50)
    model.save_pretrained(released)
    seconds["release (tokenizer + transformers loop)"] = time.perf_counter() - start

    train_speeches, held_out_speeches = split_speeches(shakespeare, 0.1)
    corpus = work / "shakespeare-train.txt"
    corpus.write_text("\n\n".join(train_speeches) + "\n", encoding="utf-8")
    held_out = blocks(tokenizer, held_out_speeches, length)[:held_out_rows]
    batches = fixed_masked_batches(held_out, tokenizer.all_special_ids, tokenizer.mask_token_id, len(tokenizer),
                                   batch_size=16, seed=seed)

    data, run, export = work / "data", work / "run", work / "export"
    config = work / "continue.yaml"
    config.write_text(continue_config(released, data, run, steps=continue_steps, batch_size=batch_size,
                                      lr=continue_lr, length=length, seed=seed), encoding="utf-8")
    seconds["bertpre tokenize"] = bertpre_command("tokenize", str(corpus), "--out", str(data),
                                                  "--tokenizer", str(released), "--num-proc", "1")
    seconds["bertpre pretrain"] = bertpre_command("pretrain", "--config", str(config))
    seconds["bertpre export"] = bertpre_command("export", str(run), "--out", str(export))

    before = mlm_loss(transformers_logits(released), batches)
    after = mlm_loss(transformers_logits(export), batches)
    by_bertpre = mlm_loss(bertpre_logits(run), batches)
    return {
        "released": {"wikitext_paragraphs": len(wikitext), "vocab_size": len(tokenizer), "hidden_size": hidden,
                     "layers": layers, "steps": release_steps, "lr": release_lr,
                     "first_train_loss": release_losses[0], "last_train_loss": release_losses[-1]},
        "continued": {"train_speeches": len(train_speeches), "steps": continue_steps, "lr": continue_lr,
                      "batch_size": batch_size, "max_seq_length": length},
        "held_out": {"speeches": len(held_out_speeches), "rows": len(held_out), "tokens_a_row": length,
                     "predicted_tokens": before["predicted_tokens"], "mask_seed": seed},
        "loss_before_transformers": before,
        "loss_after_transformers_on_export": after,
        "loss_after_bertpre_on_checkpoint": by_bertpre,
        "loss_fell_by": before["loss"] - after["loss"],
        "export_minus_bertpre": after["loss"] - by_bertpre["loss"],
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=5000)
    parser.add_argument("--hidden-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--length", type=int, default=64, help="tokens a row, released and continued")
    parser.add_argument("--release-steps", type=int, default=300)
    parser.add_argument("--continue-steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--release-lr", type=float, default=1e-3)
    parser.add_argument("--continue-lr", type=float, default=5e-4)
    parser.add_argument("--held-out-rows", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2, help="torch threads here and in bertpre")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="keep the folders here (default: a temporary one)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    wikitext_files = sorted(CORPORA.glob("wikitext2-*.txt"))
    shakespeare = CORPORA / "tinyshakespeare.txt"
    if not wikitext_files or not shakespeare.is_file():
        print(f"no corpora: {CORPORA}/wikitext2-*.txt and tinyshakespeare.txt are needed")
        return 0
    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    transformers.logging.set_verbosity_error()
    with _work_folder(args.keep) as work:
        figures = run_check(work, wikitext_paragraphs(wikitext_files), shakespeare.read_text(encoding="utf-8"),
                            vocab_size=args.vocab_size, hidden=args.hidden_size, layers=args.layers,
                            length=args.length, release_steps=args.release_steps,
                            continue_steps=args.continue_steps, batch_size=args.batch_size,
                            release_lr=args.release_lr, continue_lr=args.continue_lr,
                            held_out_rows=args.held_out_rows, seed=args.seed)
    before, after = figures["loss_before_transformers"], figures["loss_after_transformers_on_export"]
    ours = figures["loss_after_bertpre_on_checkpoint"]
    print(f"held-out Shakespeare MLM loss ({figures['held_out']['predicted_tokens']} predicted tokens, "
          f"{figures['held_out']['rows']} rows of {args.length}):")
    print(f"  released, transformers        {before['loss']:.4f}  (accuracy {before['accuracy']:.3f}, "
          f"perplexity {math.exp(before['loss']):.1f})")
    print(f"  continued export, transformers {after['loss']:.4f}  (accuracy {after['accuracy']:.3f}, "
          f"perplexity {math.exp(after['loss']):.1f})")
    print(f"  continued checkpoint, bertpre  {ours['loss']:.4f}  (export - bertpre {figures['export_minus_bertpre']:+.2e})")
    print(f"  fell by {figures['loss_fell_by']:.4f}; seconds {figures['seconds']}")
    ok = figures["loss_fell_by"] > 0 and abs(figures["export_minus_bertpre"]) < 1e-4
    path = write_result("continue_roberta", {
        "corpora": {"released_on": [path.name for path in wikitext_files], "continued_on": shakespeare.name},
        "figures": figures,
        "settings": {name: value for name, value in vars(args).items() if name not in ("keep", "results")},
        "checks": {"loss fell": figures["loss_fell_by"] > 0,
                   "export scores as bertpre within 1e-4": abs(figures["export_minus_bertpre"]) < 1e-4},
    }, args.results, argv, versions=("torch", "transformers", "tokenizers"), torch_threads=args.threads)
    print(f"wrote {path}")
    return 0 if ok else 1


@contextmanager
def _work_folder(keep: Path | None) -> Iterator[Path]:
    """`keep` (created) or a temporary folder removed afterwards."""
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory() as scratch:
        yield Path(scratch)


if __name__ == "__main__":
    sys.exit(main())
