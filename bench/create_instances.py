"""Raw text → masked NSP instances for one epoch: bertpre next to Google's create_pretraining_data.py.

Both sides read the same file (one sentence a line, a blank line between documents, the
original BERT format) with the same WordPiece vocab.txt, and make NSP instances of at most 128
tokens with 15% masked (at most 20 a sequence), short_seq_prob 0.1, one pass (dupe_factor 1).

- Google: `create_training_instances` from the `bert-tensorflow` package (its published code),
  with `tensorflow` replaced by a stub (only `tf.gfile.GFile`, `tf.flags` and `tf.logging` are
  touched on this path); FullTokenizer built inside the timing. TFRecord writing is not timed.
- bertpre: `tokenize_corpus` reusing the vocab.txt (DATA folder on disk), then
  `PretrainingInstances` epoch 0 over train and validation, then every instance through
  `MaskingCollator` in batches of 32 (fetched a batch at a time, as the DataLoader does).
  Reported per stage: tokenize, plan, collate. One process; --threads sets tokenizers' threads.

Rounds of the two sides alternate so that other load on the machine hits both alike; medians
are compared. Target: bertpre >= 20x faster.

    .venv/bin/python -m bench.create_instances                # wikitext-2 valid if present, 3 rounds
    .venv/bin/python -m bench.create_instances --rounds 1     # shorter
    .venv/bin/python -m bench.create_instances --threads 2    # bertpre on two threads
    .venv/bin/python -m bench.create_instances --corpus ../shared/corpora/wikitext2-{valid,test}.txt
    .venv/bin/pip install --no-deps bert-tensorflow           # the peer, if missing
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import tempfile
import time
import types
from pathlib import Path

from bench.common import (
    CORPORA,
    RESULTS,
    median,
    print_table,
    read_wikitext,
    write_bert_format,
    write_result,
)

CORPUS = CORPORA / "wikitext2-valid.txt"
SETTINGS = dict(max_seq_length=128, dupe_factor=1, short_seq_prob=0.1, masked_lm_prob=0.15,
                max_predictions_per_seq=20, random_seed=12345)
BATCH_SIZE = 32
INSTALL_HINT = ("the peer needs Google's BERT code: .venv/bin/pip install --no-deps bert-tensorflow "
                "(no TensorFlow needed: this bench stubs it)")


def sample_documents(folder: Path) -> list[list[str]]:
    """The built-in sample corpus, split into sentences by data_prep."""
    from data_prep import read_documents
    from data_prep.sample_corpus import write_sample_corpus

    return list(read_documents([write_sample_corpus(folder)], split_sentences=True))


def import_google_code() -> types.ModuleType | None:
    """`bert.create_pretraining_data` with a stub `tensorflow`, or None when not installed."""
    if importlib.util.find_spec("bert") is None:
        return None
    from absl import flags, logging

    compat_v1 = types.ModuleType("tensorflow.compat.v1")
    compat_v1.flags = flags
    compat_v1.logging = logging
    compat_v1.gfile = types.SimpleNamespace(
        GFile=lambda path, mode="r": open(path, mode, encoding=None if "b" in mode else "utf-8"),
        Glob=lambda pattern: sorted(str(p) for p in Path().glob(pattern)))
    tensorflow = types.ModuleType("tensorflow")
    tensorflow.compat = types.ModuleType("tensorflow.compat")
    tensorflow.compat.v1 = compat_v1
    stubs = {"tensorflow": tensorflow, "tensorflow.compat": tensorflow.compat,
             "tensorflow.compat.v1": compat_v1}
    if importlib.util.find_spec("six") is None:  # tokenization.py only asks six.PY2 / six.PY3
        stubs["six"] = types.SimpleNamespace(PY2=False, PY3=True)
    # Installed for the import only: the Google modules keep their reference, while libraries
    # that probe for TensorFlow later (datasets) find none.
    stubbed = [name for name in stubs if name not in sys.modules]
    sys.modules.update({name: stubs[name] for name in stubbed})
    try:
        module = importlib.import_module("bert.create_pretraining_data")
    finally:
        for name in stubbed:
            del sys.modules[name]
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()  # the flags keep their defaults; the script's main is not run
    return module


def google_round(google: types.ModuleType, corpus: Path, vocab: Path) -> tuple[int, float]:
    """(instances, seconds) of Google's `create_training_instances`, tokenizer load included."""
    start = time.perf_counter()
    tokenizer = google.tokenization.FullTokenizer(vocab_file=str(vocab), do_lower_case=True)
    instances = google.create_training_instances(
        [str(corpus)], tokenizer, SETTINGS["max_seq_length"], SETTINGS["dupe_factor"],
        SETTINGS["short_seq_prob"], SETTINGS["masked_lm_prob"], SETTINGS["max_predictions_per_seq"],
        random.Random(SETTINGS["random_seed"]))
    return len(instances), time.perf_counter() - start


def bertpre_round(corpus: Path, vocab: Path, out: Path, num_proc: int) -> tuple[int, dict[str, float]]:
    """(instances, seconds by stage) of bertpre from the raw file to masked batches."""
    from bertpre.batches import MaskingCollator, PretrainingInstances
    from bertpre.data import load_data
    from bertpre.data.build import tokenize_corpus

    start = time.perf_counter()
    tokenize_corpus([corpus], out, tokenizer_path=vocab, lowercase=True, split_sentences=False,
                    num_proc=num_proc, overwrite=True, show_progress=False)
    tokenized = time.perf_counter()
    data = load_data(out)
    epochs = [PretrainingInstances(split, data.tokenizer, max_seq_length=SETTINGS["max_seq_length"],
                                   short_seq_prob=SETTINGS["short_seq_prob"], pair_task="nsp", seed=1)
              for split in (data.train, data.validation)]
    planned = time.perf_counter()
    collate = MaskingCollator(data.tokenizer, mlm_probability=SETTINGS["masked_lm_prob"],
                              max_predictions_per_seq=SETTINGS["max_predictions_per_seq"], seed=1)
    for instances in epochs:
        for first in range(0, len(instances), BATCH_SIZE):
            collate(instances.__getitems__(range(first, min(first + BATCH_SIZE, len(instances)))))
    collated = time.perf_counter()
    seconds = {"tokenize": tokenized - start, "plan": planned - tokenized,
               "collate": collated - planned, "total": collated - start}
    return sum(len(instances) for instances in epochs), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, nargs="+", default=[CORPUS],
                        help="WikiText-style files, read as one corpus (default wikitext-2 valid; the "
                             "sample corpus if absent)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timed rounds per side")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for tokenizers and torch (Google's code uses one)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    # Before tokenizers starts its thread pool; Google's code is single-threaded Python.
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    import torch

    from bertpre.tokenizer import save_tokenizer, train_tokenizer

    torch.set_num_threads(args.threads)
    google = import_google_code()
    if google is None:
        print(INSTALL_HINT)

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        if all(path.exists() for path in args.corpus):
            documents = [document for path in args.corpus for document in read_wikitext(path)]
            corpus_name = " + ".join(path.name for path in args.corpus)
        else:
            documents, corpus_name = sample_documents(scratch), "built-in sample corpus"
        corpus = write_bert_format(documents, scratch / "corpus.txt")
        save_tokenizer(train_tokenizer(documents, vocab_size=args.vocab_size, lowercase=True),
                       scratch / "tokenizer", lowercase=True)
        vocab = scratch / "tokenizer" / "vocab.txt"

        ours: list[dict[str, float]] = []
        peer: list[float] = []
        counts = {}
        for round_index in range(args.rounds):
            sides = ["bertpre", "google"] if round_index % 2 == 0 else ["google", "bertpre"]
            for side in sides:
                if side == "bertpre":
                    counts["bertpre"], seconds = bertpre_round(corpus, vocab, scratch / "data", num_proc=1)
                    ours.append(seconds)
                elif google is not None:
                    counts["google"], seconds = google_round(google, corpus, vocab)
                    peer.append(seconds)
        corpus_bytes = corpus.stat().st_size

    stages = {stage: median([round_[stage] for round_ in ours]) for stage in ours[0]}
    peer_seconds = median(peer) if peer else None
    ratio = peer_seconds / stages["total"] if peer_seconds else None
    print(f"corpus {corpus_name}: {len(documents):,} documents, {corpus_bytes / 1e6:.2f} MB; "
          f"instances: bertpre {counts['bertpre']:,}, google {counts.get('google', '-')}")
    print("bertpre stages (median s): " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    print_table([("epochs per hour", 3600 / stages["total"], 3600 / peer_seconds if peer_seconds else None)],
                "raw text → masked NSP instances", "google")
    if ratio:
        print(f"speed-up bertpre vs google: {ratio:.1f}x (target >= 20x)")

    name = "create_instances" if args.threads == 1 else f"create_instances-threads{args.threads}"
    if args.corpus != [CORPUS]:
        name += "-" + "-".join(path.stem for path in args.corpus)
    path = write_result(name, {
        "settings": {**SETTINGS, "corpus": corpus_name, "corpus_bytes": corpus_bytes,
                     "documents": len(documents), "vocab_size": args.vocab_size,
                     "rounds": args.rounds, "threads": args.threads, "batch_size": BATCH_SIZE},
        "bertpre": {"what": "tokenize_corpus (vocab reused) + PretrainingInstances + MaskingCollator",
                    "instances": counts["bertpre"], "median_seconds": stages, "rounds": ours},
        "peer": {"name": "bert-tensorflow create_pretraining_data.create_training_instances",
                 "installed": google is not None, "instances": counts.get("google"),
                 "median_seconds": peer_seconds, "rounds": peer},
        "ratio": ratio,
        "ratio_meaning": "google seconds / bertpre seconds",
        "target_ratio": 20.0,
    }, args.out, argv, versions=("torch", "tokenizers", "datasets", "numpy", "bert-tensorflow"),
        torch_threads=args.threads)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
