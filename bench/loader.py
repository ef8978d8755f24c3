"""Does data keep up? The training data loader's sequences/s next to the training step's.

The loader is the trainer's own `BatchStream`: `PretrainingInstances` (NSP, length 128) and
`MaskingCollator` (15%, at most 20 predictions) through a torch DataLoader with N worker
processes, started once and kept across epochs as in training, epoch boundaries included in
the timing.
The first batch (worker start-up) is left out. Measured with 0 workers too: the rate of one
core doing nothing else. Batches are fetched whole (`PretrainingInstances.__getitems__`) and
leave a worker as one tensor (`bertpre.batches.stream`). Settings alternate round by round;
medians are compared.

The consumer is one training step of BERT-base (bf16 autocast, fused AdamW, batch 256)
measured on the GPU when there is one, or a figure given with --consumption. Target: loader
>= 3x consumption, with the GPU machine's cores. On a machine without CUDA only the loader
rate and its per-core rate are recorded.

    .venv/bin/python -m bench.loader                       # N = all cores
    .venv/bin/python -m bench.loader --batches 20          # shorter
    .venv/bin/python -m bench.loader --consumption 2400    # compare with a known step rate
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import CORPORA, RESULTS, median, read_wikitext, write_bert_format, write_result

MICRO_BATCH_SIZE = 32
SEQ_LENGTH = 128


def build_data(folder: Path, vocab_size: int) -> tuple[Path, str]:
    """A DATA folder of wikitext-2 valid + test articles if present, else of the sample corpus.

    WikiText separates paragraphs by blank lines, which would make every paragraph a document
    (22% padding at 128 instead of ~4%): articles are written out as documents first.
    """
    from bertpre.data.build import tokenize_corpus

    corpora = [CORPORA / f"wikitext2-{split}.txt" for split in ("valid", "test")]
    corpora = [path for path in corpora if path.exists()]
    if corpora:
        name = " + ".join(path.name for path in corpora) + " (articles as documents)"
        documents = [document for path in corpora for document in read_wikitext(path)]
        corpus = write_bert_format(documents, folder / "corpus.txt")
        tokenize_corpus([corpus], folder / "data", vocab_size=vocab_size, split_sentences=False,
                        show_progress=False)
    else:
        from data_prep.sample_corpus import write_sample_corpus

        name = "built-in sample corpus"
        tokenize_corpus([write_sample_corpus(folder / "corpus")], folder / "data",
                        vocab_size=vocab_size, show_progress=False)
    return folder / "data", name


def loader_rate(data_path: Path, num_workers: int, batches: int, pin_memory: bool,
                micro_batch_size: int = MICRO_BATCH_SIZE) -> dict:
    """Sequences/s of the trainer's batch stream over `batches` micro-batches after the first."""
    from bertpre.batches import BatchStream, MaskingCollator, PretrainingInstances
    from bertpre.data import load_data

    data = load_data(data_path)
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=SEQ_LENGTH,
                                     pair_task="nsp", seed=1)
    # Fixed-shape batches, as a compiled or CUDA-graphed step wants them.
    collate = MaskingCollator(data.tokenizer, max_predictions_per_seq=20, seed=1,
                              pad_to_length=SEQ_LENGTH)
    stream = BatchStream(instances, collate,
                         micro_batch_size=micro_batch_size,
                         num_workers=num_workers, pin_memory=pin_memory, seed=1)
    start = time.perf_counter()
    stream.next()
    first_batch = time.perf_counter() - start
    start = time.perf_counter()
    epochs_before = stream.epoch
    for _ in range(batches):
        stream.next()
    seconds = time.perf_counter() - start
    return {"num_workers": num_workers, "batches": batches, "seconds": seconds,
            "sequences_per_s": batches * micro_batch_size / seconds, "first_batch_s": first_batch,
            "epoch_boundaries_crossed": stream.epoch - epochs_before,
            "instances_per_epoch": len(instances)}


def training_rate(steps: int) -> dict:
    """Sequences/s of BERT-base training steps on the GPU (bf16 autocast, fused AdamW, batch 256)."""
    from bench.gpu import measure_step_rate

    return measure_step_rate("base", seq_length=SEQ_LENGTH, micro_batch_size=256, batch_size=256,
                             steps=steps, peer=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="DATA folder (default: built here)")
    parser.add_argument("--workers", type=int, default=os.cpu_count(),
                        help="DataLoader workers (default: all cores)")
    parser.add_argument("--batches", type=int, default=400,
                        help="timed micro-batches per setting (an epoch of wikitext-2 is ~220)")
    parser.add_argument("--micro-batch-size", type=int, default=MICRO_BATCH_SIZE)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per setting")
    parser.add_argument("--consumption", type=float, default=None,
                        help="training step's sequences/s to compare with (default: measured on GPU)")
    parser.add_argument("--steps", type=int, default=30, help="timed GPU training steps")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # the main process only waits; workers set one thread each
    cuda = torch.cuda.is_available()

    with tempfile.TemporaryDirectory() as scratch:
        data_path, corpus = (args.data, str(args.data)) if args.data else build_data(Path(scratch), args.vocab_size)
        settings = [0, args.workers] if args.workers else [0]  # the trainer's way, 0 and N workers
        runs: dict[int, list[dict]] = {setting: [] for setting in settings}
        for round_index in range(args.rounds):
            for workers in settings if round_index % 2 == 0 else reversed(settings):
                runs[workers].append(loader_rate(data_path, workers, args.batches, pin_memory=cuda,
                                                 micro_batch_size=args.micro_batch_size))

    rates = {setting: median([run["sequences_per_s"] for run in runs[setting]]) for setting in settings}
    labels = {setting: f"{setting} workers" for setting in settings}
    loader = rates[args.workers]
    consumption, consumer = args.consumption, None
    if consumption is None and cuda:
        consumer = training_rate(args.steps)
        consumption = consumer["bertpre"]["sequences_per_s"]
    ratio = loader / consumption if consumption else None

    print(f"corpus {corpus}; micro-batch {args.micro_batch_size}, length {SEQ_LENGTH}, NSP, 15% masked")
    print(f"{'sequences/s':<36}{'value':>12}")
    for setting in settings:
        print(f"{'loader, ' + labels[setting]:<36}{rates[setting]:>12,.1f}")
    per_core = loader / max(args.workers, 1)
    print(f"{'loader per core':<36}{per_core:>12,.1f}")
    if consumption:
        print(f"{'training step consumes':<36}{consumption:>12,.1f}")
        print(f"loader / consumption: {ratio:.2f}x (target >= 3x)")
    else:
        print("no CUDA device and no --consumption: loader rate recorded only")

    name = "loader" if args.workers == os.cpu_count() else f"loader-workers{args.workers}"
    path = write_result(name, {
        "settings": {"corpus": corpus, "micro_batch_size": args.micro_batch_size, "seq_length": SEQ_LENGTH,
                     "pair_task": "nsp", "max_predictions_per_seq": 20, "workers": args.workers,
                     "batches": args.batches, "rounds": args.rounds, "pin_memory": cuda,
                     "one_tensor_batches_from_workers": True},
        "bertpre": {"loader_sequences_per_s": loader, "per_core_sequences_per_s": per_core,
                    "by_setting": {labels[s]: rates[s] for s in settings},
                    "runs": {labels[s]: runs[s] for s in settings}},
        "peer": {"name": "training step consumption (bertpre BERT-base, bf16, batch 256)",
                 "sequences_per_s": consumption,
                 "source": "measured" if consumer else ("given" if consumption else None),
                 "measurement": consumer},
        "ratio": ratio,
        "ratio_meaning": "loader sequences/s / training step sequences/s",
        "target_ratio": 3.0,
    }, args.out, argv, versions=("torch", "datasets", "numpy"), torch_threads=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
