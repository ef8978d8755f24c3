"""`bertpre tokenize --vocab-only`: a VOCAB folder, the WordPiece tokenizer alone, trained on a
corpus or on a sample of it, for shards on many machines to encode with (`--tokenizer VOCAB`)."""
from __future__ import annotations

import hashlib
import json
import resource
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

import bertpre
from bertpre.data.build import (
    DEFAULT_VOCAB_SIZE,
    TokenizeOptions,
    check_options,
    corpus_files,
    save_vocabulary,
    train_on_sample,
    train_vocabulary,
    typed_min_frequency,
)
from bertpre.data.folder import MANIFEST_FILE, VOCAB_KIND
from bertpre.data.summary import why_vocab_is_short
from bertpre.errors import raise_if_stopped
from bertpre.folders import claimed_out
from bertpre.tokenizer.alphabet import CharacterCounts, alphabet_coverage
from bertpre.tokenizer.roles import token_roles
from bertpre.tokenizer.wordpiece import TOKENIZER_FILE, is_bert_wordpiece, tokenizer_lowercases
from data_prep import CorpusStats, read_documents


def train_vocab(
    corpus_paths: Sequence[str | Path],
    out: str | Path,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    lowercase: bool | None = None,
    text_field: str = "text",
    split_sentences: bool = True,
    vocab_sample_bytes: int | None = None,
    min_frequency: int | None = None,
    limit_alphabet: int | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
    tokenizer_type: str | None = None,
) -> dict:
    """Train a vocab (WordPiece, or the `tokenizer_type` bpe or unigram) on the corpus (or a `vocab_sample_bytes` sample) and write VOCAB:
    the tokenizer files of a DATA folder's tokenizer/, and a manifest.

    Without a sample the documents are spooled to disk, as `bertpre tokenize` does, so memory
    holds the trainer's word counts and not the corpus; with one, memory holds the sample.

    Returns:
        The manifest written to VOCAB/manifest.json.
    """
    options = TokenizeOptions(
        vocab_size=vocab_size, lowercase=lowercase, text_field=text_field,
        split_sentences=split_sentences, min_frequency=typed_min_frequency(min_frequency, tokenizer_type),
        limit_alphabet=limit_alphabet, vocab_sample_bytes=vocab_sample_bytes,
        tokenizer_type=None if tokenizer_type in (None, "wordpiece") else tokenizer_type,
    )
    check_options(options)
    out = Path(out)
    files = corpus_files(corpus_paths)
    with claimed_out(out, "tokenize", overwrite=overwrite, sources=files) as output:
        building = output.staging
        stats = CorpusStats()
        if vocab_sample_bytes is not None:
            tokenizer, sample, character_counts = train_on_sample(files, options, show_progress, stats)
        else:
            tokenizer, character_counts = _train_on_everything(files, options, building, stats,
                                                               show_progress)
            sample = None
        save_vocabulary(tokenizer, building)
        manifest = _vocab_manifest(options, stats, tokenizer, building / TOKENIZER_FILE, sample)
        if character_counts is not None:  # a WordPiece vocab's
            manifest["tokenizer"]["alphabet"] = alphabet_coverage(tokenizer, character_counts)
        (building / MANIFEST_FILE).write_text(
            json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        output.commit()
    return manifest


def _train_on_everything(files: list[Path], options: TokenizeOptions, scratch: Path,
                         stats: CorpusStats, show_progress: bool) -> tuple[Tokenizer, CharacterCounts | None]:
    documents = read_documents(files, text_field=options.text_field,
                               split_sentences=options.split_sentences, stats=stats)
    from bertpre.data import encode as encoding  # datasets takes seconds to import

    with encoding.progress_bars(show_progress):
        raw, character_counts = encoding.spool_documents(documents, scratch / "documents.arrow", show_progress,
                                                         count_characters=options.tokenizer_type is None)
        tokenizer = train_vocabulary(encoding.SentenceBatches(raw, show_progress), options,
                                     length=len(raw), character_counts=character_counts)
    raise_if_stopped()
    del raw
    for spooled in scratch.glob("*.arrow"):
        spooled.unlink()
    return tokenizer, character_counts


def _vocab_manifest(options: TokenizeOptions, stats: CorpusStats, tokenizer: Tokenizer,
                    tokenizer_file: Path, sample: dict | None) -> dict:
    """What VOCAB holds and what it was trained on; like a DATA manifest, no run's paths or times."""
    corpus = stats.as_dict()
    trained_on = sample if sample is not None else {
        "documents": corpus["documents"], "sentences": corpus["sentences"],
        "characters": corpus["characters"]}
    return {
        "bertpre_version": bertpre.__version__,
        "kind": VOCAB_KIND,
        "sources": corpus["files"],
        "options": {name: value for name, value in vars(options).items()
                    if name in ("vocab_size", "lowercase", "text_field", "split_sentences",
                                "min_frequency", "limit_alphabet", "vocab_sample_bytes")
                    or (name == "tokenizer_type" and value is not None)},
        "trained_on": trained_on,
        "tokenizer": {
            "trained": True,
            "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
            "lowercase": tokenizer_lowercases(tokenizer),
            "sha256": hashlib.sha256(tokenizer_file.read_bytes()).hexdigest(),
            **({} if is_bert_wordpiece(tokenizer) else {"kind": token_roles(tokenizer).kind}),
        },
    }


def peak_memory_line() -> str:
    """This process's peak resident memory, and its largest worker's (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes
    line = f"{own * scale / 2**20:,.0f} MiB"
    if workers:
        line += f" (largest worker process {workers * scale / 2**20:,.0f} MiB)"
    return line


def _describe_alphabet(alphabet: dict) -> str:
    """How many of the text's characters the vocab holds, and the share of text in the others."""
    text = f"{alphabet['in_vocab']:,} of the text's {alphabet['characters']:,} in the vocab"
    if alphabet["occurrences_outside"]:
        share = alphabet["occurrences_outside"] / max(alphabet["occurrences"], 1)
        text += f" (the others, {share:.2%} of the text, will be [UNK]: see --limit-alphabet)"
    return text


def format_vocab_summary(manifest: dict, out: str | Path) -> str:
    """The end-of-run table of `--vocab-only`."""
    tokenizer, options, trained_on = manifest["tokenizer"], manifest["options"], manifest["trained_on"]
    total_bytes = sum(source["bytes"] for source in manifest["sources"])
    asked = options["vocab_size"]
    short = f" (asked {asked:,}: {why_vocab_is_short(manifest)})" if tokenizer["vocab_size"] < asked else ""
    if "bytes" in trained_on:
        text = (f"a sample of {trained_on['documents']:,} documents, {trained_on['bytes'] / 1e6:,.2f} MB "
                f"(--vocab-sample-bytes {options['vocab_sample_bytes']:,})")
    else:
        text = f"all {trained_on['documents']:,} documents"
    rows = [
        ("VOCAB folder", str(out)),
        ("sources", f"{len(manifest['sources'])} file(s), {total_bytes / 1e6:,.2f} MB"),
        ("trained on", text),
        ("vocab", f"{tokenizer['vocab_size']:,} tokens{short}, "
                  f"{tokenizer['kind'] + ', ' if 'kind' in tokenizer else ''}"
                  f"{'lowercase' if tokenizer['lowercase'] else 'cased'}"),
        *([("characters", _describe_alphabet(tokenizer["alphabet"]))] if "alphabet" in tokenizer else []),
        ("peak memory", peak_memory_line()),
        ("next", f"bertpre tokenize CORPUS --tokenizer {shlex.quote(str(out))} --out DATA "
                 "(--num-shards N for many machines)"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)
