"""MB/s of `bertpre tokenize`'s two heavy stages next to `tokenizers` called directly, same run.

- vocab training: bertpre's `train_tokenizer` (character count, fixed alphabet and ## seeds
  for determinism, WordPiece trainer; reading the spooled Arrow documents) next to
  `Tokenizer.train_from_iterator` with a `WordPieceTrainer` on the same sentences in memory.
- encode+write: bertpre's `datasets.map(batched)` encoding (`--num-proc` > 1: one forked
  process per shard, `bertpre.data.process_map`), counting, split by
  document and `save_to_disk`, next to `Tokenizer.encode_batch` over the same sentences (ids
  collected in memory, nothing written).
- end to end (bertpre only): `tokenize_corpus`, i.e. also reading, cleaning and splitting
  sentences with data_prep.
- with `--word-boundaries jieba`: encode+write again with Chinese word starts (segmentation
  in the encoding processes), next to the plain encode+write of the same rounds (results
  named tokenize-word-boundaries-DATE.json).

MB are the corpus files' bytes on disk. Rounds of the two alternate (and which goes first
alternates too) so machine noise hits both alike; medians are compared (and, less sensitive to other load on the machine, the
fastest rounds). Target: bertpre's overhead at most 20% (ratio <= 1.2).

    .venv/bin/python -m bench.tokenize_speed                    # wikitext-2 valid+test, 3 rounds
    .venv/bin/python -m bench.tokenize_speed --rounds 1         # shorter
    .venv/bin/python -m bench.tokenize_speed --corpora ../shared/corpora/zh-fortunes.txt \
        --vocab-size 8000 --word-boundaries jieba             # the cost of word starts
    .venv/bin/python -m bench.tokenize_speed --kinds wordpiece bpe unigram   # each kind, same run

`--kinds bpe unigram` times the other vocab kinds of `bertpre tokenize --tokenizer-type` the same
way: bertpre's `train_bpe_or_unigram` (reading the spooled documents) next to a byte-level BPE
(`BpeTrainer`, ByteLevel pre-tokenizer and alphabet) or Unigram (`UnigramTrainer`, NFKC, `▁`
Metaspace) pipeline built and trained with `tokenizers` directly, with the same options and
special tokens; encode+write and end to end as above. bertpre trains Unigram with SentencePiece's
trainer (deterministic; `tokenizers`' UnigramTrainer is not), so its Unigram training ratio is
what that determinism costs against the trainer bertpre used before. Several kinds are written to
tokenize-kinds-DATE.json, one figures table a kind; the kinds' rounds interleave.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import datasets
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from bench.common import CORPORA, RESULTS, median, write_result
from bertpre.data import encode as encoding
from bertpre.data.build import tokenize_corpus
from bertpre.tokenizer import SPECIAL_TOKENS, build_tokenizer, train_tokenizer
from bertpre.tokenizer.bpe_unigram import (
    MAX_PIECE_LENGTH,
    ROBERTA_SPECIAL_TOKENS,
    TOKENIZER_TYPES,
    train_bpe_or_unigram,
)
from bertpre.tokenizer.sentence_encoder import without_special_tokens
from bertpre.tokenizer.word_boundaries import WORD_BOUNDARIES, WordStarts
from data_prep import CorpusStats, read_documents

BATCH_DOCUMENTS = encoding.BATCH_DOCUMENTS


def train_with_tokenizers(batches: list[list[str]], vocab_size: int, kind: str = "wordpiece") -> Tokenizer:
    """The peer: the same pipeline and trainer options as bertpre's vocab of `kind`, trained directly."""
    if kind == "bpe":  # RoBERTa's byte-level BPE, as `--tokenizer-type bpe` (cased)
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=ROBERTA_SPECIAL_TOKENS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    elif kind == "unigram":  # XLM-R's pipeline, as `--tokenizer-type unigram`, with tokenizers' own trainer
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.normalizer = normalizers.NFKC()
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=ROBERTA_SPECIAL_TOKENS,
                                          unk_token="<unk>", max_piece_length=MAX_PIECE_LENGTH, show_progress=False)
    else:
        tokenizer = build_tokenizer(None, lowercase=True)
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=2, limit_alphabet=1000,
            special_tokens=SPECIAL_TOKENS, continuing_subword_prefix="##", show_progress=False,
        )
    tokenizer.train_from_iterator(batches, trainer)
    return tokenizer


def train_with_bertpre(raw: datasets.Dataset, vocab_size: int, kind: str = "wordpiece") -> Tokenizer:
    """bertpre's vocab training of `kind`, reading the spooled documents as `bertpre tokenize` does."""
    sentences = encoding.SentenceBatches(raw, show_progress=False)
    if kind == "wordpiece":
        return train_tokenizer(sentences, vocab_size=vocab_size)
    return train_bpe_or_unigram(sentences, kind, vocab_size)


def encode_with_tokenizers(tokenizer: Tokenizer, batches: list[list[str]]) -> int:
    tokens = 0
    for batch in batches:
        tokens += sum(len(encoding.ids) for encoding in tokenizer.encode_batch(batch, add_special_tokens=False))
    return tokens


def encode_and_write_with_bertpre(raw: datasets.Dataset, tokenizer: Tokenizer, num_proc: int, out: Path,
                                  word_starts: WordStarts | None = None) -> int:
    encoded, counts = encoding.encode_corpus(raw, tokenizer, num_proc, fingerprint="bench",
                                             word_starts=word_starts)
    splits = encoding.split_by_document(encoded, 0.01, 42, fingerprint="bench")
    splits.save_to_disk(str(out))
    return counts["num_tokens"]


def run_timed(times: dict[str, list[float]], swap: bool, calls: dict[str, Callable[[], object]]) -> dict:
    """Run each call once (in reverse order when `swap`), adding its seconds to `times`."""
    results = {}
    for name in reversed(list(calls)) if swap else list(calls):
        start = time.perf_counter()
        results[name] = calls[name]()
        times[name].append(time.perf_counter() - start)
    return results


STAGES = ("train_bertpre", "train_tokenizers", "encode_bertpre", "encode_tokenizers", "end_to_end_bertpre",
          "encode_words")


def time_round(kind: str, times: dict[str, list[float]], round_index: int, raw: datasets.Dataset,
               batches: list[list[str]], files: list[Path], scratch: Path, args: argparse.Namespace) -> None:
    """One round of every stage for vocab `kind`, its seconds appended to `times`."""
    # Alternate who goes first, so a burst of load elsewhere does not always hit one side.
    swap = round_index % 2 == 1
    results = run_timed(times, swap, {
        "train_bertpre": partial(train_with_bertpre, raw, args.vocab_size, kind),
        "train_tokenizers": partial(train_with_tokenizers, batches, args.vocab_size, kind),
    })
    tokenizer = results["train_bertpre"]
    # bertpre encodes text as text: WikiText's literal "<unk>" is five characters, never the special
    # token of a BPE or Unigram vocab. The peer encodes the same way (its specials dropped, untimed).
    peer_encoder = tokenizer if kind == "wordpiece" else without_special_tokens(tokenizer)
    results = run_timed(times, swap, {
        "encode_bertpre": partial(encode_and_write_with_bertpre, raw, tokenizer, args.num_proc,
                                  scratch / f"dataset-{kind}-{round_index}"),
        "encode_tokenizers": partial(encode_with_tokenizers, peer_encoder, batches),
    })
    assert results["encode_bertpre"] == results["encode_tokenizers"], results
    if args.word_boundaries:
        run_timed(times, False, {"encode_words": partial(
            encode_and_write_with_bertpre, raw, tokenizer, args.num_proc,
            scratch / f"dataset-words-{kind}-{round_index}", WordStarts(args.word_boundaries))})
    run_timed(times, False, {"end_to_end_bertpre": partial(
        tokenize_corpus, files, scratch / f"data-{kind}-{round_index}", vocab_size=args.vocab_size,
        num_proc=args.num_proc, show_progress=False, tokenizer_type=kind)})


def kind_figures(times: dict[str, list[float]], megabytes: float, args: argparse.Namespace) -> dict:
    """The medians of one kind's rounds as MB/s and ratios; printed as a table."""
    median_seconds = {name: median(values) for name, values in times.items() if values}
    fastest = {name: min(values) for name, values in times.items() if values}
    rows = [
        ("vocab training", "train_bertpre", "train_tokenizers"),
        ("encode+write", "encode_bertpre", "encode_tokenizers"),
    ]
    print(f"{'stage':<16}{'bertpre MB/s':>14}{'tokenizers MB/s':>17}{'time ratio':>12}"
          f"{'ratio of fastest':>18}")
    figures = {}
    for name, our_key, peer_key in rows:
        ours, peer = median_seconds[our_key], median_seconds[peer_key]
        ratio_of_fastest = fastest[our_key] / fastest[peer_key]
        print(f"{name:<16}{megabytes / ours:>14.2f}{megabytes / peer:>17.2f}{ours / peer:>12.2f}"
              f"{ratio_of_fastest:>18.2f}")
        figures[name] = {"bertpre_mb_per_s": megabytes / ours, "tokenizers_mb_per_s": megabytes / peer,
                         "bertpre_seconds": ours, "tokenizers_seconds": peer, "ratio": ours / peer,
                         "ratio_of_fastest_rounds": ratio_of_fastest}
    end_to_end = megabytes / median_seconds["end_to_end_bertpre"]
    print(f"{'end to end':<16}{end_to_end:>14.2f}{'-':>17}{'-':>12}   (bertpre tokenize, reading included)")
    figures["end to end"] = {"bertpre_mb_per_s": end_to_end, "bertpre_seconds": median_seconds["end_to_end_bertpre"]}
    if args.word_boundaries:
        with_words = megabytes / median_seconds["encode_words"]
        print(f"{'encode+write, --word-boundaries ' + args.word_boundaries:<16}{with_words:>14.2f}   "
              f"(plain {megabytes / median_seconds['encode_bertpre']:.2f} MB/s, time ratio "
              f"{median_seconds['encode_words'] / median_seconds['encode_bertpre']:.2f})")
        figures["encode+write with word boundaries"] = {
            "bertpre_mb_per_s": with_words, "without_mb_per_s": megabytes / median_seconds["encode_bertpre"],
            "bertpre_seconds": median_seconds["encode_words"],
            "ratio_to_without": median_seconds["encode_words"] / median_seconds["encode_bertpre"]}
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", nargs="*", type=Path, default=None,
                        help="corpus files (default: ../shared/corpora/wikitext2-*.txt)")
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", nargs="+", choices=TOKENIZER_TYPES, default=["wordpiece"],
                        help="vocab kinds to time (default wordpiece; several: results tokenize-kinds-DATE.json)")
    parser.add_argument("--word-boundaries", choices=WORD_BOUNDARIES, default=None,
                        help="also time encode+write with these word starts")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    kinds = list(dict.fromkeys(args.kinds))

    files = args.corpora or sorted(CORPORA.glob("wikitext2-*.txt"))
    if not files or not all(path.is_file() for path in files):
        print(f"no corpus to benchmark: {CORPORA}/wikitext2-*.txt is absent; pass --corpora FILE...")
        return 0
    megabytes = sum(path.stat().st_size for path in files) / 1e6
    datasets.disable_progress_bars()

    documents = list(read_documents(files, stats=CorpusStats()))
    sentences = [sentence for document in documents for sentence in document]
    # The same batches for both: a batch of documents' sentences at a time.
    batches = [
        [sentence for document in documents[start : start + BATCH_DOCUMENTS] for sentence in document]
        for start in range(0, len(documents), BATCH_DOCUMENTS)
    ]
    times = {kind: {name: [] for name in STAGES} for kind in kinds}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        raw, _ = encoding.spool_documents(documents, scratch / "documents.arrow", show_progress=False)
        for round_index in range(args.rounds):
            for kind in kinds:  # the kinds' rounds interleave too
                time_round(kind, times[kind], round_index, raw, batches, files, scratch, args)

    print(f"corpus: {', '.join(path.name for path in files)} ({megabytes:.2f} MB, {len(documents):,} "
          f"documents, {len(sentences):,} sentences); vocab {args.vocab_size}; "
          f"{args.num_proc} processes; median of {args.rounds} round(s)")
    figures = {}
    for kind in kinds:
        if len(kinds) > 1:
            print(f"-- {kind}")
        figures[kind] = kind_figures(times[kind], megabytes, args)

    settings = {"vocab_size": args.vocab_size, "num_proc": args.num_proc, "rounds": args.rounds,
                "word_boundaries": args.word_boundaries}
    if kinds == ["wordpiece"]:  # the record as it was before kinds
        name = "tokenize" if args.word_boundaries is None else "tokenize-word-boundaries"
        figures, times = figures["wordpiece"], times["wordpiece"]
    else:
        name = "tokenize-kinds" if args.word_boundaries is None else "tokenize-kinds-word-boundaries"
        settings["kinds"] = kinds
    path = write_result(name, {
        "corpus": {"files": [path.name for path in files], "megabytes": megabytes,
                   "documents": len(documents), "sentences": len(sentences)},
        "settings": settings,
        "figures": figures,
        "seconds": times,
        "target": "bertpre time / tokenizers time <= 1.2 for vocab training and encode+write",
    }, args.results, argv, versions=("tokenizers", "datasets", "sentencepiece"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
