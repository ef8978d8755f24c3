"""The `bertpre tokenize` pipeline: raw corpus → WordPiece vocab → tokenized DATA folder, atomically."""
from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from tokenizers import Tokenizer

import bertpre
from bertpre.data.folder import (
    DATASET_DIR,
    FILES,
    MANIFEST_FILE,
    SELF_DIGEST,
    TOKENIZER_DIR,
    TRAIN_SPLIT,
    VALIDATION_SPLIT,
    manifest_digest,
    record_files,
)
from bertpre.errors import UserError, raise_if_stopped
from bertpre.folders import (
    MARKERS,
    check_out,
    claimed_out,
    is_data_folder,
    is_run_folder,
    is_run_without_config,
)
from bertpre.tokenizer.alphabet import CharacterCounts, alphabet_coverage
from bertpre.tokenizer.bpe_unigram import (
    TOKENIZER_TYPES,
    copy_source_tokenizer,
    save_bpe_or_unigram,
    train_bpe_or_unigram,
)
from bertpre.tokenizer.roles import token_roles
from bertpre.tokenizer.vocab_extension import extend_vocab, vocab_sha256
from bertpre.tokenizer.word_boundaries import WordStarts, read_user_dict
from bertpre.tokenizer.wordpiece import (
    SPECIAL_TOKENS,
    TOKENIZER_FILE,
    build_tokenizer,
    is_bert_wordpiece,
    load_tokenizer,
    save_tokenizer,
    tokenizer_lowercases,
    train_tokenizer,
)
from data_prep import (
    CorpusStats,
    Shard,
    is_stream,
    read_documents,
    resolve_paths,
    sample_documents,
    skipped_folders_note,
    skipped_note,
)

DEFAULT_MIN_FREQUENCY = 2  # --min-frequency when not given
DEFAULT_VOCAB_SIZE = 30522  # --vocab-size when not given: BERT's
# Beyond this the embedding table alone (vocab × hidden) outgrows a GPU at BERT sizes.
MAX_VOCAB_SIZE = 1_000_000


@dataclass
class TokenizeOptions:
    """Everything that decides the contents of a DATA folder (recorded in its manifest).

    The number of processes is not among them: DATA is the same for any --num-proc.
    """

    vocab_size: int = DEFAULT_VOCAB_SIZE
    lowercase: bool | None = None  # None: True when training, the tokenizer's own when reusing
    tokenizer_path: str | None = None
    add_vocab: int | None = None  # append up to this many corpus words to the --tokenizer's vocab
    text_field: str = "text"
    split_sentences: bool = True
    validation_share: float = 0.01
    min_frequency: int = DEFAULT_MIN_FREQUENCY
    limit_alphabet: int | None = None
    vocab_sample_bytes: int | None = None  # train the vocab on a sample of this many bytes
    word_boundaries: str | None = None  # "jieba": store each token's word-start flag
    user_dict: str | None = None  # the segmenter's extra words (a jieba user dictionary)
    seed: int = 42
    tokenizer_type: str | None = None  # the kind to train: None is wordpiece; bpe, unigram


def recorded_options(options: TokenizeOptions) -> dict:
    """The options as the manifest and the dataset's fingerprint record them: `tokenizer_type`
    only when set, so that a WordPiece DATA folder is byte for byte what it was before kinds."""
    return {name: value for name, value in vars(options).items()
            if not (name == "tokenizer_type" and value is None)}


def train_vocabulary(texts, options: TokenizeOptions, *, length: int, character_counts: CharacterCounts | None,
                     show_progress: bool = False) -> Tokenizer:
    """A vocab of `options.tokenizer_type` trained on batches of sentences (re-iterable)."""
    if options.tokenizer_type in (None, "wordpiece"):
        return train_tokenizer(texts, vocab_size=options.vocab_size,
                               lowercase=True if options.lowercase is None else options.lowercase,
                               min_frequency=options.min_frequency, limit_alphabet=options.limit_alphabet,
                               length=length, character_counts=character_counts)
    return train_bpe_or_unigram(texts, options.tokenizer_type, options.vocab_size,
                                lowercase=bool(options.lowercase), min_frequency=options.min_frequency,
                                show_progress=show_progress, length=length)


def save_vocabulary(tokenizer: Tokenizer, folder: Path, source: str | Path | None = None) -> None:
    """Write the tokenizer files of DATA/tokenizer (or VOCAB): a released tokenizer's own files as
    they are, unless it is a BERT WordPiece one (written in bertpre's layout, as always)."""
    if is_bert_wordpiece(tokenizer):
        save_tokenizer(tokenizer, folder)
    elif source is not None:
        copy_source_tokenizer(Path(source), tokenizer, folder)
    else:
        save_bpe_or_unigram(tokenizer, folder)


def tokenize_corpus(
    corpus_paths: Sequence[str | Path],
    out: str | Path,
    *,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    lowercase: bool | None = None,
    tokenizer_path: str | Path | None = None,
    add_vocab: int | None = None,
    text_field: str = "text",
    split_sentences: bool = True,
    validation_share: float = 0.01,
    num_proc: int = 1,
    min_frequency: int | None = None,
    limit_alphabet: int | None = None,
    vocab_sample_bytes: int | None = None,
    word_boundaries: str | None = None,
    user_dict: str | Path | None = None,
    shard: Shard | None = None,
    overwrite: bool = False,
    seed: int = 42,
    show_progress: bool = True,
    tokenizer_type: str | None = None,
) -> dict:
    """Read a corpus, train (or load) a tokenizer, encode every sentence, write DATA.

    DATA is built in a temporary folder beside `out` and renamed into place when complete, so
    an interrupted run leaves nothing that looks like a DATA folder.

    Args:
        add_vocab: with `tokenizer_path`, append up to this many of the corpus's frequent words
            that the reused vocab lacks after its ids (`bertpre.tokenizer.extend_vocab`).
        vocab_sample_bytes: train the vocab on a sample of the corpus's documents this many
            UTF-8 bytes large (`data_prep.sample_documents`), then encode the whole corpus.
        shard: encode only this shard's documents (with `tokenizer_path`): DATA is then one
            shard of a corpus, its manifest says which.
        word_boundaries: "jieba": segment each sentence into words and store a `word_starts`
            column for whole-word masking (`bertpre.tokenizer.word_boundaries`), with the extra
            words of the jieba dictionary `user_dict`.
        tokenizer_type: the kind of vocab to train (without `tokenizer_path`): "wordpiece" (the
            default, BERT's), "bpe" (byte-level, RoBERTa's) or "unigram" (XLM-R's). A reused
            tokenizer has its own kind, and DATA/tokenizer keeps its files as they are.

    Returns:
        The manifest written to DATA/manifest.json.

    Raises:
        UserError, CorpusError: bad options or corpus, reported before the slow work where possible.
    """
    options = TokenizeOptions(
        vocab_size=vocab_size,
        lowercase=lowercase,
        tokenizer_path=None if tokenizer_path is None else str(tokenizer_path),
        add_vocab=add_vocab,
        text_field=text_field,
        split_sentences=split_sentences,
        validation_share=validation_share,
        min_frequency=typed_min_frequency(min_frequency, tokenizer_type),
        limit_alphabet=limit_alphabet,
        vocab_sample_bytes=vocab_sample_bytes,
        word_boundaries=word_boundaries,
        user_dict=None if user_dict is None else str(user_dict),
        seed=seed,
        tokenizer_type=None if tokenizer_type in (None, "wordpiece") else tokenizer_type,
    )
    check_options(options)
    _check_shard(options, shard)
    word_starts = _word_starts(options)
    if num_proc < 1:
        raise UserError(f"--num-proc {num_proc} must be 1 or more")
    out = Path(out)
    files = corpus_files(corpus_paths)
    if vocab_sample_bytes is not None and any(map(is_stream, files)):
        raise UserError("--vocab-sample-bytes reads the corpus twice (the sample, then every "
                        "document), and a pipe can be read once: write it to a file, or train the "
                        "vocab first with --vocab-only --vocab-sample-bytes, then --tokenizer VOCAB")
    sources = [*files, *([Path(tokenizer_path)] if tokenizer_path is not None else [])]
    check_out(out, "tokenize", overwrite=overwrite, sources=sources)  # before the tokenizer loads
    tokenizer = source = None
    if tokenizer_path is not None:
        tokenizer = source = load_tokenizer(tokenizer_path, lowercase=lowercase)
        if lowercase is not None and lowercase != tokenizer_lowercases(tokenizer):
            own = "lowercases" if tokenizer_lowercases(tokenizer) else "keeps case"
            raise UserError(f"--{'lowercase' if lowercase else 'cased'}: the tokenizer at {tokenizer_path} {own}, "
                            "as its own files say, and a reused tokenizer encodes as it was trained: leave out "
                            f"--{'lowercase' if lowercase else 'cased'}, or train a new vocab (no --tokenizer)")
        _check_source_kind(options, tokenizer)
        if add_vocab is not None and tokenizer.get_vocab_size() + add_vocab > MAX_VOCAB_SIZE:
            raise UserError(f"--add-vocab {add_vocab:,} would grow the vocab beyond {MAX_VOCAB_SIZE:,} "
                            "tokens; choose a smaller --add-vocab")

    with claimed_out(out, "tokenize", overwrite=overwrite, sources=sources) as output:
        building = output.staging
        stats = CorpusStats()
        sample = None
        if tokenizer is None and vocab_sample_bytes is not None:
            tokenizer, sample, _ = train_on_sample(files, options, show_progress)
        documents = read_documents(
            files, text_field=text_field, split_sentences=split_sentences, stats=stats, shard=shard
        )
        # Reading up to the first document finds an empty, binary or malformed corpus before the
        # slow stages, and before importing `datasets` (seconds), so such errors come at once.
        first_document = next(documents, None)
        if first_document is None:
            if shard is not None:
                raise UserError(f"shard {shard.index} of {shard.count} holds no documents of the "
                                f"corpus {files[0]}; use fewer --num-shards")
            raise UserError(f"the corpus {files[0]} holds no documents; check the corpus files")
        from bertpre.data import encode as encoding

        with encoding.progress_bars(show_progress):
            raw, character_counts = encoding.spool_documents(
                chain([first_document], documents), building / "documents.arrow", show_progress,
                # a trained WordPiece vocab's alphabet is reported
                count_characters=tokenizer_path is None and options.tokenizer_type is None,
            )
            if tokenizer is None:
                tokenizer = train_vocabulary(encoding.SentenceBatches(raw, show_progress), options,
                                             length=len(raw), character_counts=character_counts)
                # A signal inside training's callbacks only shortened the input: stop before
                # encoding (commit checks again before anything is kept).
                raise_if_stopped()
            elif add_vocab is not None:
                tokenizer = extend_vocab(
                    tokenizer, encoding.SentenceBatches(raw, show_progress, desc="Counting words"),
                    add_vocab, min_frequency=options.min_frequency,
                )
                raise_if_stopped()
            save_vocabulary(tokenizer, building / TOKENIZER_DIR, tokenizer_path)
            fingerprint = _fingerprint(options, stats, building / TOKENIZER_DIR / TOKENIZER_FILE, shard)
            if word_starts is not None:
                word_starts.prefix = getattr(tokenizer.model, "continuing_subword_prefix", "##") or "##"
            encoded, counts = encoding.encode_corpus(raw, tokenizer, num_proc, fingerprint, word_starts)
            if shard is not None and len(encoded) < 2:
                raise UserError(f"shard {shard.index} of {shard.count} holds {len(encoded)} document "
                                "with tokens, but DATA needs one for training and one for "
                                "validation; use fewer --num-shards")
            splits = encoding.split_by_document(encoded, validation_share, seed, fingerprint)
            splits.save_to_disk(str(building / DATASET_DIR))
        split_sizes = {name: len(split) for name, split in splits.items()}
        manifest = _manifest(options, stats, tokenizer, building / TOKENIZER_DIR, split_sizes, counts,
                             source if add_vocab is not None else None)
        if character_counts is not None:
            manifest["tokenizer"]["alphabet"] = alphabet_coverage(tokenizer, character_counts)
        if sample is not None:
            manifest["tokenizer"]["sample"] = sample
        if shard is not None:
            manifest["shard"] = {"index": shard.index, "count": shard.count}
        if word_starts is not None:
            manifest["word_boundaries"] = _describe_word_boundaries(options, word_starts)
        manifest[FILES] = record_files(building)  # load_data checks each file's size and sha256
        manifest[SELF_DIGEST] = manifest_digest(manifest)  # and the manifest's own content
        (building / MANIFEST_FILE).write_text(
            json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        # The spooled documents and datasets' map caches are not part of DATA.
        del raw, encoded, splits
        for scratch in building.glob("*.arrow"):
            scratch.unlink()
        output.commit(known=manifest[FILES])
    if stats.invalid_utf8_replacements:
        print(invalid_utf8_warning(stats), file=sys.stderr)
    return manifest


def invalid_utf8_warning(stats: CorpusStats, shown: int = 3) -> str:
    """The warning for bytes that were no UTF-8, naming the files they were in: text in another
    encoding (Latin-1, cp1252) loses those characters, and WordPiece drops the U+FFFD."""
    files = stats.invalid_utf8_files
    names = ", ".join(files[:shown]) + (f" and {len(files) - shown} more" if len(files) > shown else "")
    return (f"warning: {stats.invalid_utf8_replacements:,} invalid UTF-8 byte sequence(s) were replaced with "
            f"U+FFFD (counted in the manifest), in {len(files)} file{'s' if len(files) != 1 else ''}: {names}; "
            "convert a file in another encoding to UTF-8 first (e.g. iconv -f latin1 -t utf-8)")


def corpus_files(corpus_paths: Sequence[str | Path]) -> list[Path]:
    """The files to read; the files a folder or a pattern holds beside the corpus (LICENSE,
    README.md) are left out, named in one note on stderr, and so are the folders bertpre made
    there (a DATA folder's tokenizer/vocab.txt and JSON files, a RUN's metrics.jsonl: no corpus)."""
    skipped: list[Path] = []
    skipped_folders: list[tuple[Path, str]] = []
    files = resolve_paths(corpus_paths, skipped, skip_folder=bertpre_output, skipped_folders=skipped_folders)
    for note in (skipped_note(skipped), skipped_folders_note(skipped_folders)):
        if note is not None:
            print(note, file=sys.stderr)
    return files


def bertpre_output(folder: Path) -> str | None:
    """What `folder` is where bertpre made it (a RUN, DATA, export, demo or finetune folder), else
    None. A DATA folder needs its manifest beside its dataset or tokenizer: a corpus's own
    manifest.json alone does not make one."""
    if is_run_folder(folder) or is_run_without_config(folder):
        return "a RUN folder"
    if is_data_folder(folder):
        return "a DATA folder"
    for command, (marker, kind) in MARKERS.items():
        if command != "tokenize" and (folder / marker).is_file():
            return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    return None


def train_on_sample(files: list[Path], options: TokenizeOptions, show_progress: bool,
                    stats: CorpusStats | None = None) -> tuple[Tokenizer, dict, CharacterCounts | None]:
    """A vocab trained on a `vocab_sample_bytes` sample of the corpus (one streaming pass).

    Returns:
        The tokenizer; what the sample held, for the manifest: documents, sentences, bytes; and
        the sample's character counts (None for a BPE or Unigram vocab). `stats` gets the corpus's files and the sample's counts.
    """
    assert options.vocab_sample_bytes is not None
    stats = stats if stats is not None else CorpusStats()
    if show_progress:
        print(f"Sampling {options.vocab_sample_bytes:,} bytes of documents for the vocab", file=sys.stderr)
    documents = sample_documents(files, options.vocab_sample_bytes, text_field=options.text_field,
                                 split_sentences=options.split_sentences, stats=stats)
    character_counts = None
    if options.tokenizer_type is None:  # WordPiece plans its alphabet from the counts
        character_counts = CharacterCounts(build_tokenizer(None, lowercase=True))
        for start in range(0, len(documents), 1000):  # numpy's cost is per call: many texts a call
            character_counts.update(sentence for document in documents[start:start + 1000]
                                    for sentence in document)
    tokenizer = train_vocabulary(documents, options, length=len(documents), character_counts=character_counts)
    raise_if_stopped()
    sample = {
        "documents": stats.documents,
        "sentences": stats.sentences,
        "bytes": sum(len(sentence.encode("utf-8", errors="surrogatepass"))
                     for document in documents for sentence in document),
    }
    return tokenizer, sample, character_counts


def _word_starts(options: TokenizeOptions) -> WordStarts | None:
    """The word-start marker --word-boundaries asks for, its segmenter checked installed."""
    if options.word_boundaries is None:
        if options.user_dict is not None:
            raise UserError("--user-dict adds words to the segmenter of --word-boundaries jieba; "
                            "pass that too")
        return None
    WordStarts.check_installed()
    entries = read_user_dict(options.user_dict) if options.user_dict is not None else []
    return WordStarts(options.word_boundaries, entries)


def _describe_word_boundaries(options: TokenizeOptions, word_starts: WordStarts) -> dict:
    """The segmenter and its user dictionary, for the manifest."""
    from importlib.metadata import version

    entry = {"segmenter": f"rjieba {version('rjieba')}", "user_dict_words": len(word_starts.user_dict)}
    if options.user_dict is not None:
        entry["user_dict_sha256"] = _sha256(Path(options.user_dict))
    return entry


def _check_shard(options: TokenizeOptions, shard: Shard | None) -> None:
    if shard is None:
        return
    if options.tokenizer_path is None:
        raise UserError("--num-shards needs --tokenizer VOCAB: every shard must encode with one "
                        "vocabulary; train it first with `bertpre tokenize CORPUS --vocab-only "
                        "--out VOCAB` (--vocab-sample-bytes for a sample)")
    if options.add_vocab is not None:
        raise UserError("--add-vocab cannot be split into shards (each would add other words); "
                        "extend the vocab once with --vocab-only, then shard with --tokenizer")


def _check_source_kind(options: TokenizeOptions, tokenizer: Tokenizer) -> None:
    """What a reused byte-level BPE or Unigram tokenizer cannot do here (yet)."""
    kind = token_roles(tokenizer).kind
    if kind == "wordpiece":
        return
    if options.add_vocab is not None:
        raise UserError(f"--add-vocab extends WordPiece vocabularies; {options.tokenizer_path} is a {kind} "
                        "tokenizer: leave out --add-vocab")
    if options.word_boundaries is not None:
        raise UserError(f"--word-boundaries marks word starts for WordPiece vocabularies; {options.tokenizer_path} "
                        f"is a {kind} tokenizer, whose pieces mark their own word starts: leave it out")


def typed_min_frequency(min_frequency: int | None, tokenizer_type: str | None) -> int:
    """`--min-frequency` as the options record it (None: not given, the default). Refused where
    it was given for a Unigram vocab: SentencePiece's Unigram trainer has no minimum frequency,
    so the value would be silently ignored."""
    if min_frequency is None:
        return DEFAULT_MIN_FREQUENCY
    if tokenizer_type == "unigram":
        raise UserError(f"--min-frequency {min_frequency} has no effect on a unigram vocab (its trainer "
                        "prunes pieces by likelihood, not by count): leave it out, or use --tokenizer-type "
                        "bpe or wordpiece")
    return min_frequency


def check_options(options: TokenizeOptions) -> None:
    """Refuse options that contradict each other or make no vocabulary, before any reading."""
    if options.tokenizer_type is not None:
        if options.tokenizer_type not in TOKENIZER_TYPES:
            raise UserError(f"--tokenizer-type {options.tokenizer_type!r} is not known; use one of "
                            f"{', '.join(TOKENIZER_TYPES)}")
        if options.tokenizer_path is not None:
            raise UserError(f"--tokenizer-type {options.tokenizer_type} trains a new vocab, but --tokenizer "
                            "reuses one (of its own kind); drop one of them")
        if options.limit_alphabet is not None:
            raise UserError(f"--limit-alphabet limits a WordPiece alphabet; a {options.tokenizer_type} vocab "
                            "chooses its own: leave it out")
        if options.word_boundaries is not None:
            raise UserError("--word-boundaries marks word starts for WordPiece vocabularies; a "
                            f"{options.tokenizer_type} vocab's pieces mark their own: leave it out")
    if options.tokenizer_path is None and options.vocab_size > MAX_VOCAB_SIZE:
        raise UserError(
            f"--vocab-size {options.vocab_size:,} is beyond any BERT vocabulary (at most "
            f"{MAX_VOCAB_SIZE:,} here; BERT uses 30,522, multilingual BERT 119,547): its embedding "
            "table alone would not fit a GPU; choose a smaller --vocab-size")
    if options.tokenizer_path is not None and options.limit_alphabet is not None:
        raise UserError(f"--limit-alphabet {options.limit_alphabet} limits the alphabet of a vocab being trained; "
                        "--tokenizer reuses one, whose alphabet is its own: leave it out")
    if options.add_vocab is not None and options.tokenizer_path is None:
        raise UserError("--add-vocab needs --tokenizer SOURCE, the vocab to extend; without it "
                        "a new vocab of --vocab-size is trained")
    if options.add_vocab is not None and options.add_vocab < 1:
        raise UserError(f"--add-vocab {options.add_vocab} must be 1 or more")
    if options.seed < 0:
        raise UserError(f"--seed {options.seed} must be 0 or more")
    if options.tokenizer_path is None and options.vocab_size <= len(SPECIAL_TOKENS):
        raise UserError(
            f"--vocab-size {options.vocab_size} is too small: it must exceed the "
            f"{len(SPECIAL_TOKENS)} special tokens plus the corpus alphabet"
        )
    if not 0.0 <= options.validation_share < 1.0:
        raise UserError(
            f"--validation-share {options.validation_share} must be at least 0 and below 1 (e.g. 0.01)"
        )
    if options.min_frequency < 0:
        raise UserError(f"--min-frequency {options.min_frequency} must be 0 or more")
    if options.limit_alphabet is not None and options.limit_alphabet < 1:
        raise UserError(f"--limit-alphabet {options.limit_alphabet} must be 1 or more")
    if not options.text_field:
        raise UserError("--text-field must name a field, e.g. --text-field text")
    if options.vocab_sample_bytes is not None:
        if options.tokenizer_path is not None:
            raise UserError("--vocab-sample-bytes samples the corpus to train a vocab, but "
                            "--tokenizer reuses one; drop one of them")
        if options.vocab_sample_bytes < 1:
            raise UserError(f"--vocab-sample-bytes {options.vocab_sample_bytes} must be 1 or more "
                            "(e.g. 1000000000 for 1 GB)")


def _fingerprint(options: TokenizeOptions, stats: CorpusStats, tokenizer_file: Path,
                 shard: Shard | None) -> str:
    """A hash of everything that decides the dataset, standing in for datasets' own fingerprints
    (which would hash the temporary folder's path and so differ from run to run)."""
    recipe = {
        "options": recorded_options(options),
        "shard": None if shard is None else [shard.index, shard.count],
        "sources": [source["sha256"] for source in stats.as_dict()["files"]],
        "tokenizer": _sha256(tokenizer_file),
        "bertpre": bertpre.__version__,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(
    options: TokenizeOptions,
    stats: CorpusStats,
    tokenizer: Tokenizer,
    tokenizer_dir: Path,
    split_sizes: dict[str, int],
    counts: dict[str, int],
    extended_from: Tokenizer | None = None,
) -> dict:
    """What DATA holds and how it was made; no timestamps or paths of the run, so it is
    byte-identical for the same inputs and options.

    Args:
        extended_from: the --tokenizer that --add-vocab grew into `tokenizer`; its size and
            vocab sha256 are recorded with the number of tokens appended.
    """
    corpus = stats.as_dict()
    documents = sum(split_sizes.values())
    tokenizer_entry = {
        "trained": options.tokenizer_path is None,
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "lowercase": tokenizer_lowercases(tokenizer),
        "sha256": _sha256(tokenizer_dir / TOKENIZER_FILE),
    }
    roles = token_roles(tokenizer)
    if not is_bert_wordpiece(tokenizer):  # absent: BERT's WordPiece roles (and DATA made before kinds)
        tokenizer_entry |= {"kind": roles.kind, "roles": roles.as_dict()}
    if extended_from is not None:
        source_size = extended_from.get_vocab_size(with_added_tokens=True)
        tokenizer_entry |= {
            "source_vocab_size": source_size,
            "source_vocab_sha256": vocab_sha256(extended_from),
            "added_pieces": tokenizer_entry["vocab_size"] - source_size,
        }
    return {
        "bertpre_version": bertpre.__version__,
        "sources": corpus["files"],
        "options": recorded_options(options),
        "counts": {
            "documents": documents,
            "train_documents": split_sizes[TRAIN_SPLIT],
            "validation_documents": split_sizes[VALIDATION_SPLIT],
            "sentences": counts["num_sentences"],
            "tokens": counts["num_tokens"],
            "unk_tokens": counts["num_unk_tokens"],
            "unk_share": counts["num_unk_tokens"] / max(counts["num_tokens"], 1),
            "long_words": counts["num_long_words"],
            "characters": corpus["characters"],
            "empty_documents_dropped": corpus["empty_documents_dropped"],
            "duplicate_documents_dropped": corpus["duplicate_documents_dropped"],
            "documents_without_tokens_dropped": corpus["documents"] - documents,
            "sentences_without_tokens_dropped": corpus["sentences"] - counts["num_sentences"],
            "invalid_utf8_replacements": corpus["invalid_utf8_replacements"],
        },
        "tokenizer": tokenizer_entry,
    }
