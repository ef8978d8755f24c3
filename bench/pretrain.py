"""End-to-end pretraining throughput: bertpre's Trainer next to a plain transformers loop.

Both train the same model shape on the same DATA folder, with the same pair instances, batch
size, accumulation, AdamW settings, warmup and clipping. The peer is the loop a transformers
user writes by hand: `transformers.BertForPreTraining`, `DataCollatorForLanguageModeling`, a
torch DataLoader, `get_linear_schedule_with_warmup` (and fp16 autocast + GradScaler on a GPU).
Tokens/s are non-padding tokens; the medians over steps after the warmup are compared.

    .venv/bin/python -m bench.pretrain                          # tiny config, sample corpus, CPU
    .venv/bin/python -m bench.pretrain --steps 10 --data DATA    # shorter, your DATA folder
    .venv/bin/python -m bench.pretrain --config configs/base.yaml --set train.micro_batch_size=32  # GPU
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from bench.common import RESULTS, ROOT, median, transformers_bert_tokenizer, write_result
from bertpre.batches import PretrainingInstances
from bertpre.config import check_world_size, load_config, resolve
from bertpre.data import load_data
from bertpre.tokenizer.wordpiece import tokenizer_lowercases
from bertpre.train import pretrain


def sample_data(folder: Path) -> Path:
    """A DATA folder from the built-in sample corpus (vocab 8000)."""
    from bertpre.data.build import tokenize_corpus
    from data_prep.sample_corpus import write_sample_corpus

    corpus = write_sample_corpus(folder / "corpus")
    tokenize_corpus([corpus], folder / "data", vocab_size=8000, show_progress=False)
    return folder / "data"


def run_bertpre(config) -> list[float]:
    """Tokens/s of each step of `bertpre.trainer.pretrain`, read back from metrics.jsonl."""
    pretrain(config, resume=False)
    rows = [json.loads(line) for line in (Path(config.train.out) / "metrics.jsonl").read_text().splitlines()]
    return [row["perf/tokens_per_s"] for row in rows if "perf/tokens_per_s" in row]


def run_peer(config, data_path: Path, device: torch.device) -> list[float]:
    """Tokens/s of each step of a hand-written transformers loop with the same settings."""
    data = load_data(data_path)
    tokenizer = transformers_bert_tokenizer(data_path / "tokenizer" / "vocab.txt",
                                            tokenizer_lowercases(data.tokenizer))
    collate_mlm = transformers.DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=config.data.mlm_probability, return_tensors="pt")
    instances = PretrainingInstances.from_config(data.train, data.tokenizer, config.data,
                                                 seed=config.train.seed)

    def collate(items) -> dict:  # a DataLoader over the instances hands over one InstanceBatch
        keys = ("input_ids", "token_type_ids", "next_sentence_label")
        items = [items.instance(k) for k in range(len(items))]
        return collate_mlm([{k: item[k] for k in keys if k in item} for item in items])

    model_config = config.model
    torch.manual_seed(config.train.seed)
    model = transformers.BertForPreTraining(transformers.BertConfig(**{
        k: getattr(model_config, k) for k in (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob",
            "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "initializer_range",
            "pad_token_id")})).to(device).train()
    if config.train.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.optim.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=config.optim.lr, betas=tuple(config.optim.betas), eps=config.optim.eps)
    schedule = transformers.get_linear_schedule_with_warmup(
        optimizer, config.optim.warmup_steps, config.train.max_steps)
    fp16 = device.type == "cuda" and config.train.precision == "fp16"
    scaler = torch.amp.GradScaler("cuda") if fp16 else None
    accumulation = check_world_size(config, 1)
    loader = torch.utils.data.DataLoader(instances, batch_size=config.train.micro_batch_size,
                                         collate_fn=collate, drop_last=True,
                                         num_workers=config.data.num_workers,
                                         pin_memory=device.type == "cuda")
    batches = iter(loader)
    rates = []
    for _ in range(config.train.max_steps):
        start, tokens = time.perf_counter(), 0
        for _ in range(accumulation):
            batch = next(batches, None)
            if batch is None:
                batches = iter(loader)
                batch = next(batches)
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            tokens += int(batch["attention_mask"].sum())
            with torch.autocast(device.type, dtype=torch.float16, enabled=fp16):
                loss = model(**batch).loss / accumulation
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.optim.max_grad_norm)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = loss.item()  # waits for the step to finish, like bertpre's logging does
        assert loss_value == loss_value
        rates.append(tokens / (time.perf_counter() - start))
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "tiny.yaml")
    parser.add_argument("--data", type=Path, default=None, help="DATA folder (default: sample corpus)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5, help="first steps left out of the median")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    load_before = os.getloadavg()  # other processes on a shared machine skew both figures

    with tempfile.TemporaryDirectory() as scratch:
        data_path = args.data or sample_data(Path(scratch))
        config = load_config(args.config, [
            *args.overrides, f"train.max_steps={args.steps}", "train.log_every=1",
            f"train.eval_every={10**9}", f"train.save_every={10**9}", f"data.path={data_path}",
            f"train.out={Path(scratch) / 'run'}"])
        resolve(config, load_data(data_path).tokenizer)
        ours = run_bertpre(config)
        peer = run_peer(config, data_path, device)

    median_rate = {"bertpre": median(ours[args.warmup:]),
                   "transformers loop": median(peer[args.warmup:])}
    ratio = median_rate["bertpre"] / median_rate["transformers loop"]
    print(f"{'trainer':<20}{'median tokens/s':>16}")
    for name, value in median_rate.items():
        print(f"{name:<20}{value:>16,.0f}")
    print(f"ratio bertpre / transformers loop: {ratio:.2f}x")

    result = {
        "settings": {"config": str(args.config), "overrides": args.overrides, "steps": args.steps,
                     "warmup": args.warmup, "batch_size": config.train.batch_size,
                     "micro_batch_size": config.train.micro_batch_size,
                     "max_seq_length": config.data.max_seq_length,
                     "precision": config.train.precision if device.type == "cuda" else "fp32",
                     "data": str(args.data) if args.data else "built-in sample corpus, vocab 8000"},
        "bertpre": {"median_tokens_per_s": median_rate["bertpre"], "tokens_per_s": ours},
        "peer": {"name": "hand-written transformers.BertForPreTraining loop",
                 "median_tokens_per_s": median_rate["transformers loop"], "tokens_per_s": peer},
        "ratio": ratio,
    }
    if device.type == "cuda":
        result["bertpre"]["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    suffix = "" if device.type == "cpu" else "-cuda"
    path = write_result(
        f"pretrain{suffix}", result, args.out, argv, versions=("torch", "transformers"),
        torch_threads=args.threads,
        benchmark="pretraining throughput, whole loop (data, forward, backward, AdamW, logging)",
        machine={"load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()},
                 "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
