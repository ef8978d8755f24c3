"""Sequences/s per core at length 128: bertpre's pair sampling + masking next to transformers'
`DataCollatorForLanguageModeling` (masking only) on the same token ids, in the same run.

bertpre's side times everything a training epoch needs from the data: planning the epoch's
NSP instances (`set_epoch`), fetching each instance (`PretrainingInstances[i]`) and collating
batches with `MaskingCollator` (80/10/10, max 20 predictions). transformers' side gets the very
same [CLS] A [SEP] B [SEP] id lists, pre-built, and only pads and masks them (mlm 0.15). Rounds
of the two alternate so that machine noise hits both alike; medians are compared.

    .venv/bin/python -m bench.collate                  # wikitext-2 valid if present
    .venv/bin/python -m bench.collate --rounds 3       # shorter
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import tokenizers
import torch
import transformers

from bench.common import (
    CORPORA,
    RESULTS,
    median,
    read_wikitext,
    transformers_bert_tokenizer,
    write_result,
)
from bertpre.batches import MaskingCollator, PretrainingInstances
from bertpre.tokenizer import save_tokenizer, train_tokenizer
from bertpre.tokenizer.wordpiece import tokenizer_lowercases

CORPUS = CORPORA / "wikitext2-valid.txt"
SEQ_LENGTH = 128
BATCH_SIZE = 32


def synthetic_documents(count: int, seed: int = 0) -> list[list[str]]:
    """Random-word prose, when the shared corpus is absent."""
    rng = np.random.default_rng(seed)
    words = [f"word{i}" for i in range(3000)]
    return [
        [
            " ".join(rng.choice(words, size=int(rng.integers(8, 30)))) + " ."
            for _ in range(int(rng.integers(5, 40)))
        ]
        for _ in range(count)
    ]


def bertpre_round(
    instances: PretrainingInstances, collate: MaskingCollator, epoch: int
) -> tuple[int, float]:
    """(sequences, seconds) for one epoch: plan, fetch every instance, collate every batch."""
    start = time.perf_counter()
    instances.set_epoch(epoch)
    for first in range(0, len(instances), BATCH_SIZE):
        collate(instances.__getitems__(range(first, min(first + BATCH_SIZE, len(instances)))))
    return len(instances), time.perf_counter() - start


def peer_round(examples: list[dict], collate) -> tuple[int, float]:
    """(sequences, seconds) for transformers' collator over the pre-built examples."""
    start = time.perf_counter()
    for first in range(0, len(examples), BATCH_SIZE):
        collate(examples[first : first + BATCH_SIZE])
    return len(examples), time.perf_counter() - start


def synthetic_arrow_documents(count: int, seed: int = 0) -> datasets.Dataset:
    """`count` documents of 1-15 sentences of 5-39 random ids, built straight in Arrow."""
    rng = np.random.default_rng(seed)
    sentences = rng.integers(1, 16, size=count)
    lengths = rng.integers(5, 40, size=int(sentences.sum()))
    ids = pa.array(rng.integers(5, 8000, size=int(lengths.sum()), dtype=np.int32))
    offsets = [
        pa.array(np.concatenate([[0], np.cumsum(n)]).astype(np.int64)) for n in (lengths, sentences)
    ]
    column = pa.LargeListArray.from_arrays(
        offsets[1], pa.LargeListArray.from_arrays(offsets[0], ids)
    )
    return datasets.Dataset(pa.table({"input_ids": column}))


def time_planning(documents: int, tokenizer: tokenizers.Tokenizer) -> dict:
    """Seconds to index a synthetic corpus of `documents` and to plan one NSP epoch of it."""
    dataset = synthetic_arrow_documents(documents)
    start = time.perf_counter()
    instances = PretrainingInstances(
        dataset, tokenizer, max_seq_length=SEQ_LENGTH, pair_task="nsp", seed=1
    )
    first = time.perf_counter() - start
    start = time.perf_counter()
    instances.set_epoch(1)
    return {
        "documents": documents,
        "instances": len(instances),
        "tokens": int(instances.index.sentence_token_offsets[-1]),
        "construct_and_plan_epoch_0_s": first,
        "set_epoch_1_s": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternating timed epochs per side")
    parser.add_argument(
        "--corpus", type=Path, default=CORPUS, help="WikiText-style file (synthetic if absent)"
    )
    parser.add_argument(
        "--plan-documents",
        type=int,
        default=0,
        help="also time planning an epoch of a synthetic corpus this large (e.g. 1000000)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    if args.corpus.exists():
        documents, corpus_name = read_wikitext(args.corpus), args.corpus.name
    else:
        documents, corpus_name = synthetic_documents(400), "synthetic"
    tokenizer = train_tokenizer(documents, vocab_size=8000, lowercase=True)
    rows = [
        [encoding.ids for encoding in tokenizer.encode_batch(d, add_special_tokens=False)]
        for d in documents
    ]
    dataset = datasets.Dataset.from_dict({"input_ids": rows})
    instances = PretrainingInstances(
        dataset, tokenizer, max_seq_length=SEQ_LENGTH, pair_task="nsp", seed=1
    )
    collate = MaskingCollator(tokenizer, max_predictions_per_seq=20, seed=1)

    with tempfile.TemporaryDirectory() as folder:
        save_tokenizer(tokenizer, folder)
        hf_tokenizer = transformers_bert_tokenizer(Path(folder) / "vocab.txt", tokenizer_lowercases(tokenizer))
    peer_collate = transformers.DataCollatorForLanguageModeling(hf_tokenizer, mlm_probability=0.15)
    examples = [{"input_ids": instances[i]["input_ids"]} for i in range(len(instances))]

    bertpre_rates, peer_rates = [], []
    bertpre_round(instances, collate, epoch=100)  # warm-up: page in the data, first-call costs
    peer_round(examples[:256], peer_collate)
    for round_index in range(args.rounds):
        sequences, seconds = bertpre_round(instances, collate, epoch=round_index)
        bertpre_rates.append(sequences / seconds)
        sequences, seconds = peer_round(examples, peer_collate)
        peer_rates.append(sequences / seconds)
    ours, peer = median(bertpre_rates), median(peer_rates)

    print(
        f"corpus {corpus_name}: {len(documents):,} documents, {len(instances):,} NSP instances of <= {SEQ_LENGTH} tokens"
    )
    print(f"{'sequences/s (1 thread)':<40}{'bertpre':>12}{'transformers':>14}{'ratio':>8}")
    print(f"{'pairs + masking vs masking only':<40}{ours:>12,.0f}{peer:>14,.0f}{ours / peer:>8.2f}")

    planning = time_planning(args.plan_documents, tokenizer) if args.plan_documents else None
    if planning:
        print(
            f"planning {planning['documents']:,} documents ({planning['tokens']:,} tokens, {planning['instances']:,} "
            f"instances): first epoch {planning['construct_and_plan_epoch_0_s']:.2f} s incl. indexing, "
            f"next epoch {planning['set_epoch_1_s']:.2f} s"
        )

    path = write_result("collate", {
        "settings": {
            "corpus": corpus_name,
            "documents": len(documents),
            "instances": len(instances),
            "max_seq_length": SEQ_LENGTH,
            "batch_size": BATCH_SIZE,
            "pair_task": "nsp",
            "mlm_probability": 0.15,
            "max_predictions_per_seq": 20,
            "rounds": args.rounds,
        },
        "bertpre": {
            "what": "set_epoch + PretrainingInstances[i] + MaskingCollator",
            "sequences_per_second": ours,
            "rounds": bertpre_rates,
        },
        "peer": {
            "what": "transformers.DataCollatorForLanguageModeling on pre-built id lists",
            "sequences_per_second": peer,
            "rounds": peer_rates,
        },
        "ratio": ours / peer,
        "planning": planning,
        "target_ratio": 2.0,
    }, args.out, argv, versions=("torch", "numpy", "tokenizers", "datasets", "transformers"),
        torch_threads=torch.get_num_threads())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
