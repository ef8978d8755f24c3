"""The `bertpre` command line: each command parses its options and calls one library function."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

try:  # recent typer vendors its own Click
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # older typer runs on Click itself
    from click.exceptions import NoArgsIsHelpError, UsageError

from bertpre.configs import preset_names
from bertpre.errors import (
    WRITE_ERRNOS,
    Stopped,
    UserError,
    handle_stop_signals,
    nondeterministic_op,
    stop_signal,
)
from bertpre.heartbeat import Heartbeat
from data_prep.errors import CorpusError

if TYPE_CHECKING:  # imported where used: `bertpre --help` loads no torch
    from bertpre.finetune.qa_data import QASettings

app = typer.Typer(
    name="bertpre",
    help="Pretrain BERT-style encoders from scratch on your own corpus.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    # Plain Click help: rich markup would eat "[zh]" in "bertpre[zh]" and label flags <bool>.
    rich_markup_mode=None,
    context_settings={"max_content_width": 120},
)

EXIT_BAD_INPUT = 2
EXIT_INTERNAL_ERROR = 1


def _print_version(value: bool) -> None:
    if value:
        from bertpre import __version__

        typer.echo(f"bertpre {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Pretrain BERT-style encoders from scratch on your own corpus."""
PRESETS = ", ".join(preset_names())
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process the signal ended


# Each command is a thin wrapper: parse options, call one library function, print a summary.
# Library code raises UserError (or CorpusError) for bad input; main() turns it into one line.


# --- tokenize ---
@app.command()
def tokenize(
    corpus: list[str] | None = typer.Argument(
        None, metavar="CORPUS", help="Corpus files, folders or globs (.txt, .jsonl, .json, .parquet, also .gz/.bz2/.xz)."),
    out: Path | None = typer.Option(
        None, "--out", help="DATA folder to write (VOCAB folder with --vocab-only; with --num-shards "
                            "{shard} in it becomes the shard index)."),
    vocab_size: int | None = typer.Option(
        None, "--vocab-size", help="Vocab size to train (default 30522; not with --tokenizer)."),
    tokenizer_type: str = typer.Option(
        "wordpiece", "--tokenizer-type", metavar="KIND",
        help="The vocab to train: wordpiece (BERT's), bpe (byte-level, RoBERTa's) or unigram (XLM-R's)."),
    lowercase: bool | None = typer.Option(
        None, "--lowercase/--cased",
        help="Lowercase (and, for WordPiece, strip accents) or not. Default: lowercase when training "
             "WordPiece, cased for bpe and unigram; a reused vocab.txt follows its tokenizer_config.json "
             "or its own tokens."),
    tokenizer_path: Path | None = typer.Option(
        None, "--tokenizer", metavar="SOURCE",
        help="Reuse a tokenizer instead of training: a Hugging Face model or tokenizer folder with a "
             "tokenizer.json (WordPiece, byte-level BPE or Unigram; its files are kept as they are), "
             "a tokenizer.json, a BERT vocab.txt, or a VOCAB folder."),
    add_vocab: int | None = typer.Option(
        None, "--add-vocab", metavar="N",
        help="With --tokenizer: append up to N frequent corpus words it lacks, after its ids "
             "(continued pretraining of a released BERT on a domain corpus)."),
    vocab_only: bool = typer.Option(
        False, "--vocab-only", help="Train and write only the tokenizer (a VOCAB folder for --tokenizer)."),
    vocab_sample_bytes: int | None = typer.Option(
        None, "--vocab-sample-bytes", metavar="N",
        help="Train the vocab on an evenly spread sample of the documents, N bytes of text "
             "(default: the whole corpus)."),
    num_shards: int | None = typer.Option(
        None, "--num-shards", metavar="N", help="Encode one of N shards of the corpus (with --tokenizer)."),
    shard_index: int | None = typer.Option(
        None, "--shard-index", metavar="I",
        help="Which shard, 0 to N-1. Default: $SLURM_ARRAY_TASK_ID, else $RANK."),
    merge_manifests: Path | None = typer.Option(
        None, "--merge-manifests", metavar="DATA",
        help="Check the shards in DATA and write DATA/manifest.json for the whole set (no CORPUS)."),
    word_boundaries: str | None = typer.Option(
        None, "--word-boundaries", metavar="SEGMENTER",
        help="jieba: store where Chinese words begin, for whole-word masking (needs bertpre[zh])."),
    user_dict: Path | None = typer.Option(
        None, "--user-dict", help="With --word-boundaries: extra words, one a line (a jieba user dictionary)."),
    text_field: str = typer.Option("text", "--text-field", help="JSON field / Parquet column holding the text."),
    validation_share: float = typer.Option(
        0.01, "--validation-share", help="Share of documents held out for validation (at least one)."),
    num_proc: int = typer.Option(1, "--num-proc", help="Processes encoding the corpus (raise for large corpora)."),
    min_frequency: int | None = typer.Option(
        None, "--min-frequency", metavar="N",
        help="Fewest occurrences for a merged subword (with --add-vocab: an appended word). Default: 2; "
             "a unigram vocab has no such limit."),
    limit_alphabet: int | None = typer.Option(
        None, "--limit-alphabet", metavar="N",
        help="Keep the N most frequent characters in the vocab. Default: every character seen at "
             "least as often as the rarest subword kept (all of them when they fit)."),
    no_sentence_split: bool = typer.Option(
        False, "--no-sentence-split", help="Take each line as one sentence (no sentence splitting)."),
    seed: int = typer.Option(42, "--seed", help="Seed of the train/validation split."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out if it is already a DATA folder."),
) -> None:
    """Train a vocab (or reuse one) and write a tokenized DATA folder.

    \b
    Example: bertpre tokenize corpus/ more/*.jsonl.gz --out data/corpus --vocab-size 30522
    A released RoBERTa's or XLM-R's own tokenizer: --tokenizer path/to/roberta-base

    A corpus bigger than one machine: train the vocab once on a sample, then encode one
    shard in every task of an array:

    \b
      bertpre tokenize CORPUS --vocab-only --vocab-sample-bytes 1000000000 --out vocab
      bertpre tokenize CORPUS --tokenizer vocab --num-shards 64 --out data/shard-{shard}
    """
    from bertpre.data.build import DEFAULT_VOCAB_SIZE, tokenize_corpus
    from bertpre.data.shards import resolve_shard
    from bertpre.data.summary import format_summary, unk_warning
    from bertpre.data.vocab import format_vocab_summary, peak_memory_line, train_vocab

    if merge_manifests is not None:
        _merge_shard_manifests(merge_manifests, corpus, out)
        return
    if vocab_size is not None and tokenizer_path is not None:
        raise UserError(f"--vocab-size {vocab_size} sizes a vocab being trained; --tokenizer reuses one of its own "
                        "size: leave it out (--add-vocab N appends words to it)")
    if min_frequency is not None and tokenizer_path is not None and add_vocab is None:
        raise UserError(f"--min-frequency {min_frequency} applies to a vocab being trained or to the words "
                        "--add-vocab appends; --tokenizer without --add-vocab uses it nowhere: leave it out")
    vocab_size = DEFAULT_VOCAB_SIZE if vocab_size is None else vocab_size
    if not corpus:
        raise UserError("give the CORPUS to tokenize (files, folders or globs), e.g. "
                        "bertpre tokenize corpus/ --out data/corpus")
    if out is None:
        raise UserError("give --out, the folder to write, e.g. --out data/corpus")
    if vocab_only:
        if num_shards is not None or shard_index is not None:
            raise UserError("--vocab-only trains one vocab for the whole corpus; shard the "
                            "encoding instead: --tokenizer VOCAB --num-shards N")
        if tokenizer_path is not None or add_vocab is not None:
            raise UserError("--vocab-only trains a new vocab; --tokenizer and --add-vocab reuse one")
        if word_boundaries is not None or user_dict is not None:
            raise UserError("--word-boundaries marks words in DATA; a VOCAB folder has none: pass it "
                            "when encoding with --tokenizer VOCAB")
        with Heartbeat("tokenize --vocab-only"):
            manifest = train_vocab(
                corpus, out, vocab_size=vocab_size, lowercase=lowercase, text_field=text_field,
                split_sentences=not no_sentence_split, vocab_sample_bytes=vocab_sample_bytes,
                min_frequency=min_frequency, limit_alphabet=limit_alphabet, overwrite=overwrite,
                show_progress=sys.stderr.isatty(), tokenizer_type=tokenizer_type)
        typer.echo(format_vocab_summary(manifest, out))
        return
    shard, out = resolve_shard(num_shards, shard_index, out)
    with Heartbeat("tokenize"):  # bars for people watching; a line every 30 s in a log
        manifest = tokenize_corpus(
            corpus, out,
            vocab_size=vocab_size, lowercase=lowercase, tokenizer_path=tokenizer_path,
            add_vocab=add_vocab, text_field=text_field, split_sentences=not no_sentence_split,
            validation_share=validation_share, num_proc=num_proc, min_frequency=min_frequency,
            limit_alphabet=limit_alphabet, vocab_sample_bytes=vocab_sample_bytes,
            word_boundaries=word_boundaries, user_dict=user_dict, shard=shard,
            overwrite=overwrite, seed=seed,
            show_progress=sys.stderr.isatty(),
            tokenizer_type=tokenizer_type,
        )
    typer.echo(format_summary(manifest, out, [("peak memory", peak_memory_line())]))
    warning = unk_warning(manifest)
    if warning is not None:
        typer.echo(warning, err=True)


def _merge_shard_manifests(folder: Path, corpus: list[str] | None, out: Path | None) -> None:
    from bertpre.data.shards import write_merged_manifest
    from bertpre.data.summary import format_summary

    if corpus or out is not None:
        raise UserError("--merge-manifests DATA reads the shards already in DATA; it takes no "
                        "CORPUS and no --out")
    manifest, written = write_merged_manifest(folder)
    typer.echo(format_summary(manifest, folder))
    typer.echo(f"wrote {written} for {manifest['shards']['count']} shards")


# --- pretrain ---
@app.command()
def pretrain(
    config: Path = typer.Option(..., "--config", help=f"YAML config file, or a shipped preset: {PRESETS}."),
    data: Path | None = typer.Option(None, "--data", help="DATA folder; overrides data.path."),
    out: Path | None = typer.Option(None, "--out", help="RUN folder; overrides train.out."),
    overrides: list[str] | None = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a config key, e.g. --set train.max_steps=10 (repeatable)."),
    resume: bool = typer.Option(True, "--resume/--no-resume",
                                help="Continue from RUN/checkpoints/latest when there is one."),
    init_from: Path | None = typer.Option(
        None, "--init-from", help="Start from these weights (a Hugging Face BERT folder, an export, "
                                  "a RUN or a checkpoint); overrides model.init_from."),
    init_generator_from: Path | None = typer.Option(
        None, "--init-generator-from", help="With data.objective rtd and --init-from a released ELECTRA "
                                            "discriminator: its generator's folder (ElectraForMaskedLM); "
                                            "overrides model.init_generator_from."),
) -> None:
    """Pretrain a BERT encoder; resumes from RUN/checkpoints/latest by default.

    \b
    Example: bertpre pretrain --config configs/base.yaml --data data/corpus --out runs/base

    Exit codes: 0 done, 2 bad input or a diverged run, 130 after SIGINT and 143 after SIGTERM
    (both once a checkpoint is saved). SIGUSR1 saves a checkpoint and training goes on.
    """
    from bertpre.config import load_config
    from bertpre.config.sections import INIT_FROM, INIT_GENERATOR_FROM
    from bertpre.train.trainer import pretrain as run_pretraining

    given = {"data.path": data, "train.out": out, f"model.{INIT_FROM}": init_from,
             f"model.{INIT_GENERATOR_FROM}": init_generator_from}
    cfg = load_config(config, list(overrides or []),
                      {key: str(path) for key, path in given.items() if path is not None})
    result = run_pretraining(cfg, resume=resume)
    state = "stopped by signal" if result.exit_code else "done"
    typer.echo(f"{state} at step {result.step}; skipped steps: {result.skipped_steps}; "
               f"run folder: {result.run_dir}")
    if result.exit_code:
        raise typer.Exit(result.exit_code)


# --- export ---
@app.command()
def export(
    source: Path = typer.Argument(..., metavar="SOURCE", help="RUN folder (uses checkpoints/latest) or a checkpoints/step-N folder."),
    out: Path = typer.Option(..., "--out", help="Folder to write the Hugging Face layout to."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out if it already exists."),
) -> None:
    """Write a checkpoint and the run's tokenizer in the Hugging Face layout.

    \b
    Example: bertpre export runs/base --out my-bert
    """
    from bertpre.tools.export import export as export_checkpoint

    with Heartbeat("export"):
        summary = export_checkpoint(source, out, overwrite=overwrite)
    typer.echo(f"exported {summary.checkpoint} as {summary.architecture} "
               f"({summary.parameters:,} parameters) with {', '.join(summary.tokenizer_files)} "
               f"to {summary.out}")
    if summary.note:
        typer.echo(summary.note)


# --- demo ---
@app.command()
def demo(
    out: Path = typer.Option(Path("demo"), "--out", help="Folder for everything the demo makes."),
    config: Path | None = typer.Option(None, "--config", help=f"Config file or preset to train ({PRESETS}; default: tiny)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Override the config's train.max_steps."),
) -> None:
    """The whole flow on the built-in sample corpus, on CPU: tokenize, pretrain, export, fill-mask.

    \b
    Example: bertpre demo --out demo
    """
    from bertpre.tools.demo import format_result, run_demo

    result = run_demo(out, config_path=config, max_steps=max_steps,
                      say=lambda line: typer.echo(line, err=True))
    typer.echo(format_result(result))


# --- info ---
@app.command()
def info(
    config: Path = typer.Option(..., "--config", help=f"YAML config file, or a shipped preset: {PRESETS}."),
    overrides: list[str] | None = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a config key, e.g. --set model.num_hidden_layers=6 (repeatable)."),
) -> None:
    """Parameters by part, training FLOPs per token and a memory estimate for a config.

    \b
    Example: bertpre info --config configs/base.yaml --set model.num_hidden_layers=6
    """
    from bertpre.config import load_config
    from bertpre.tools.info import info_report

    loaded = load_config(config, list(overrides or []))
    typer.echo(info_report(loaded))
    for warning in loaded.warnings():  # what `pretrain` would say first, before a GPU hour is spent
        typer.echo(f"warning: {warning}", err=True)


# --- inspect ---
@app.command("inspect")
def inspect_command(
    data: Path | None = typer.Argument(
        None, metavar="DATA", help="DATA folder written by `bertpre tokenize` (default: the --config's data.path, "
                   "a folder or a mixture)."),
    config: Path | None = typer.Option(
        None, "--config", help="YAML config: its data: settings, train.micro_batch_size and train.seed (default: built-in defaults)."),
    overrides: list[str] | None = typer.Option(
        None, "--set", metavar="KEY=VALUE",
        help="Override a config key, e.g. --set data.mlm_probability=0.3 (repeatable)."),
    batches: int = typer.Option(20, "--batches", help="How many batches to sample."),
    split: str = typer.Option("train", "--split", help="train or validation."),
) -> None:
    """Masking audit: realized mask rate and 80/10/10 split, pair label balance, truncation,
    padding and [UNK] share over batches sampled as training would (for data.objective plm or
    clm: predicted share, span lengths, query slots used, memory resets and padding).

    With no DATA, the config's data.path is inspected; for a mixture the table adds each
    source's realised share.

    \b
    Example: bertpre inspect data/corpus --config configs/base.yaml --set data.max_seq_length=512
    """
    from bertpre.config import load_config
    from bertpre.data import DataMixture, load_mixture, open_data
    from bertpre.tools.audits import audit_report
    from bertpre.train.objectives import objective_for
    from bertpre.train.setup import resolved_config

    if data is None and config is None:
        raise UserError("give a DATA folder to inspect, or --config CFG to inspect its data.path")
    given = load_config(config, list(overrides or []))
    inspected = open_data(data) if data is not None else load_mixture(given.data.sources)
    cfg = resolved_config(given, inspected.folders[0] if isinstance(inspected, DataMixture) else inspected)
    typer.echo(audit_report(objective_for(cfg.data.objective).audit, inspected, cfg.data, batches=batches,
                            batch_size=cfg.train.micro_batch_size, seed=cfg.train.seed, split=split))


# --- fill-mask ---
@app.command("fill-mask")
def fill_mask_command(
    source: Path = typer.Argument(..., metavar="SOURCE", help="EXPORT folder, RUN folder or checkpoints/step-N folder."),
    texts: list[str] = typer.Argument(..., metavar="TEXT", help="Text(s) with one or more [MASK] tokens."),
    top_k: int = typer.Option(5, "--top-k", help="How many candidates to show for each [MASK]."),
) -> None:
    """Top-k predictions for each [MASK] in a text.

    \b
    Example: bertpre fill-mask my-bert "The capital of France is [MASK]."
    """
    from bertpre.tools.inference import (
        fill_in,
        fill_mask,
        format_predictions,
        load_model_and_tokenizer,
    )

    model, tokenizer = load_model_and_tokenizer(source)
    for text in texts:
        predictions = fill_mask(model, tokenizer, text, top_k=top_k)
        typer.echo(f"{text}\n  → {fill_in(tokenizer, text, predictions)}")
        for line in format_predictions(tokenizer, predictions):
            typer.echo(line)


# --- evaluate ---
@app.command()
def evaluate(
    source: Path = typer.Argument(..., metavar="SOURCE", help="RUN folder, checkpoints/step-N folder or EXPORT folder."),
    data: Path | None = typer.Option(
        None, "--data", help="DATA folder whose validation split to score (default: the config's "
                             "data.path; a mixture is scored source by source)."),
    config: Path | None = typer.Option(
        None, "--config",
        help="Config whose data: settings to use (default: the run's config.yaml, else defaults)."),
    micro_batch_size: int = typer.Option(32, "--micro-batch-size", max=2**24, help="Sequences per forward pass."),
    seed: int = typer.Option(42, "--seed", max=2**32 - 1, help="Seed of the fixed validation pairs and masks."),
    max_seq_length: int | None = typer.Option(
        None, "--max-seq-length", max=2**20,  # the bounds of bertpre.config.RULES
        help="Score at this length (default: the config's data.max_seq_length); past training "
             "length only with relative positions (rope, transformer_xl)."),
) -> None:
    """MLM loss, perplexity, MLM accuracy and pair accuracy on DATA's validation split.

    \b
    Example: bertpre evaluate runs/base --data data/corpus
    """
    from bertpre.tools.inference import evaluate_saved_model

    with Heartbeat("evaluate"):
        metrics = evaluate_saved_model(source, data, config_path=config,
                                       micro_batch_size=micro_batch_size, seed=seed,
                                       max_seq_length=max_seq_length)
    width = max(16, *(len(name) + 1 for name in metrics))
    for name, value in metrics.items():
        typer.echo(f"{name:<{width}} {value:.4f}" if isinstance(value, float) else f"{name:<{width}} {value}")


# --- finetune ---
@app.command()
def finetune(
    source: Path = typer.Argument(..., metavar="SOURCE",
                                  help="EXPORT, RUN (its latest checkpoint), checkpoints/step-N, or a Hugging Face BERT or XLNet folder."),
    train: Path | None = typer.Option(None, "--train", help="Training file: CSV, TSV, JSONL, JSON or Parquet (tagging: CoNLL or JSONL)."),
    validation: Path | None = typer.Option(None, "--validation", help="Validation file, same layout."),
    test: Path | None = typer.Option(None, "--test", help="Test file: scored instead of validation when given."),
    out: Path = typer.Option(..., "--out", help="Folder for results.json (new, empty, or an earlier finetune --out)."),
    task: str = typer.Option("classification", "--task", help="classification, regression (float labels), tagging, "
                                                              "or qa (extractive question answering: SQuAD-layout files)."),
    text_column: str | None = typer.Option(None, "--text-column", help="Text column (default: text; tagging: tokens)."),
    text_pair_column: str | None = typer.Option(None, "--text-pair-column", help="Second text of a pair: [CLS] a [SEP] b [SEP] (XLNet: a [SEP] b [SEP] [CLS])."),
    label_column: str | None = typer.Option(None, "--label-column", help="Label column (default: label; tagging: tags)."),
    mode: str | None = typer.Option(None, "--mode", help="full (train encoder and head) or probe (frozen encoder, linear head)."),
    preset: str | None = typer.Option(None, "--preset", help="bert (default: lr 2e-5, batch 32, 3 epochs), small-data or probe."),
    seeds: int | None = typer.Option(None, "--seeds", metavar="N", help="Run seeds 0 to N-1 (default 3)."),
    seed: list[int] | None = typer.Option(None, "--seed", metavar="S", help="Run these seeds (repeatable)."),
    epochs: int | None = typer.Option(None, "--epochs", help="Passes over the training file."),
    lr: float | None = typer.Option(None, "--lr", help="Peak learning rate."),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Examples a step."),
    max_seq_length: int | None = typer.Option(None, "--max-seq-length", help="Tokens an example, [CLS] and [SEP] included."),
    warmup_ratio: float | None = typer.Option(None, "--warmup-ratio", help="Share of steps warming up."),
    weight_decay: float | None = typer.Option(None, "--weight-decay", help="AdamW weight decay (never on biases and LayerNorm)."),
    config: Path | None = typer.Option(None, "--config", help="YAML file of settings (lr, epochs, batch_size, ..., preset)."),
    overrides: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE", help="Override a setting, e.g. --set pooling=mean (repeatable)."),
    precision: str = typer.Option("auto", "--precision", help="auto, fp32, bf16 or fp16 (auto: bf16 on GPUs that have it, else fp32)."),
    checkpoints: str | None = typer.Option(
        None, "--checkpoints", metavar="WHICH",
        help="With a RUN as SOURCE: latest, all or every:N of its checkpoints, each scored and logged "
             "to the RUN's TensorBoard (downstream/TASK/METRIC)."),
    watch: bool = typer.Option(False, "--watch", help="Score a RUN's checkpoints as they land, until its pretraining ends."),
    save_model: bool = typer.Option(
        False, "--save-model",
        help="Keep the best seed's model (by the validation score) in OUT/model as a Hugging Face folder "
             "(AutoModelFor*Classification; --task qa: AutoModelForQuestionAnswering)."),
    select_by: str = typer.Option(
        "last", "--select-by",
        help="last: report each seed's last epoch (and a sweep's last checkpoint), as BERT's recipe does. "
             "dev: choose the epoch (and the checkpoint) by the --validation score, and report --test."),
    glue_dir: Path | None = typer.Option(
        None, "--glue-dir", help="GLUE as its download script lays it out (CoLA/, SST-2/, MRPC/, ...): "
                                 "each task's dev scores and the GLUE score, instead of --train/--validation."),
    clue_dir: Path | None = typer.Option(
        None, "--clue-dir", help="CLUE's JSON files (afqmc_public/, tnews_public/, ...): each task's dev "
                                 "accuracy and the CLUE score."),
    tasks: str | None = typer.Option(
        None, "--tasks", help="With --glue-dir or --clue-dir: the tasks to run, e.g. sst2,mrpc,mnli "
                              "(default: every task there; GLUE without WNLI)."),
    doc_stride: int | None = typer.Option(None, "--doc-stride", help="--task qa: context tokens a window shares with the one before (default 128; a third of a window shorter than 384 tokens)."),
    max_answer_length: int | None = typer.Option(None, "--max-answer-length", help="--task qa: the most tokens an answer may have (default 30)."),
    version_2: bool = typer.Option(False, "--version-2", help="--task qa: SQuAD v2.0, unanswerable questions; the null threshold is chosen on --validation (and applied to --test)."),
    answer_language: str | None = typer.Option(None, "--answer-language", help="--task qa: en (SQuAD's EM/F1), zh (CMRC 2018's character F1) or auto (by the contexts' script; the default)."),
) -> None:
    """Fine-tune (or probe) a pretrained BERT or XLNet on a labelled task over several seeds; report each
    seed's scores, their mean and std, and the majority-class baseline.

    \b
    Example: bertpre finetune my-bert --train sst2/train.tsv --validation sst2/dev.tsv
             --text-column sentence --out results/sst2
             bertpre finetune my-bert --glue-dir glue_data --tasks sst2,mrpc,stsb --out results/glue
             bertpre finetune my-bert --task qa --train train-v1.1.json --validation dev-v1.1.json --out results/squad
    """
    from bertpre.config.finetune import load_hyperparameters
    from bertpre.finetune.kinds import task_kind
    from bertpre.finetune.report import format_benchmark, format_curve, format_table
    from bertpre.finetune.run import TaskFiles, choose_seeds, reported_result
    from bertpre.finetune.run import finetune as run_finetune

    # The options' values go on typed: written back as `lr=2e-05` text, YAML would read a string.
    given = {name: value for name, value in [
        ("mode", mode), ("epochs", epochs), ("lr", lr), ("batch_size", batch_size),
        ("max_seq_length", max_seq_length), ("warmup_ratio", warmup_ratio), ("weight_decay", weight_decay)]
        if value is not None}
    chosen_preset = preset if preset is not None else (
        "probe" if mode == "probe" else task_kind(task).preset)
    hp = load_hyperparameters(chosen_preset, config, list(overrides or []), given)
    benchmark = finetune_benchmark(glue_dir, clue_dir, tasks, [
        ("--train", train), ("--validation", validation), ("--test", test), ("--text-column", text_column),
        ("--text-pair-column", text_pair_column), ("--label-column", label_column)])
    files = None
    if benchmark is None:
        if train is None or validation is None:
            raise UserError("give --train and --validation (or --glue-dir / --clue-dir with their task folders)")
        files = TaskFiles(task=task, train=train, validation=validation, test=test, text_column=text_column,
                          text_pair_column=text_pair_column, label_column=label_column,
                          qa=question_answering_settings(task, doc_stride, max_answer_length, version_2,
                                                         answer_language))
    with Heartbeat("finetune"):
        results = run_finetune(source, files, out, hp=hp, seeds=choose_seeds(seeds, seed), precision=precision,
                               checkpoints=checkpoints, watch=watch, save_model=save_model, benchmark=benchmark,
                               select_by=select_by, say=lambda line: typer.echo(line, err=True))
    report = reported_result(results)
    if len(results) > 1:
        typer.echo(format_curve(results))
        typer.echo("")
    typer.echo(format_benchmark(report) if benchmark else format_table(report))
    typer.echo(f"results: {out / 'results.json'} (every checkpoint: {out / 'results.jsonl'})")
    predictions = [split["predictions"] for result in report.get("tasks", {"": report}).values()
                   for split in result.get("splits", {}).values() if split.get("predictions")]
    if predictions:
        typer.echo("predictions: " + ", ".join(str(out / path) for path in predictions))
    n_best = [split["n_best"] for split in report.get("splits", {}).values() if split.get("n_best")]
    if n_best:  # --task qa: each seed's best spans a question
        typer.echo("n-best: " + ", ".join(str(out / path) for path in n_best))


def question_answering_settings(task: str, doc_stride: int | None, max_answer_length: int | None,
                                version_2: bool, answer_language: str | None) -> QASettings | None:
    """`--task qa`'s settings from its options (None for another task, which refuses them)."""
    from bertpre.finetune.kinds import task_kind
    from bertpre.finetune.qa_data import QASettings

    given = {"--doc-stride": doc_stride, "--max-answer-length": max_answer_length,
             "--version-2": version_2 or None, "--answer-language": answer_language}
    if task_kind(task).options is not QASettings:  # the options below are question answering's
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise UserError(f"{named[0]} is an option of --task qa; leave it out for --task {task}")
        return None
    defaults = QASettings()
    # an untyped --doc-stride stays None: fitted to the run's windows once the model is known
    return QASettings(doc_stride=doc_stride,
                      max_answer_length=defaults.max_answer_length if max_answer_length is None else max_answer_length,
                      version_2_with_negative=version_2, language=answer_language or defaults.language)


def finetune_benchmark(glue_dir: Path | None, clue_dir: Path | None, tasks: str | None,
                       task_options: list[tuple[str, object]]) -> tuple[str, Path, str | None] | None:
    """(glue|clue, folder, tasks) when a benchmark folder is given; its files come from there, so
    the single-task options are refused beside it."""
    if glue_dir is not None and clue_dir is not None:
        raise UserError("give --glue-dir or --clue-dir, not both (run finetune once for each)")
    folder = glue_dir if glue_dir is not None else clue_dir
    if folder is None:
        if tasks is not None:
            raise UserError("--tasks chooses tasks of --glue-dir or --clue-dir; give one of them")
        return None
    option = "--glue-dir" if glue_dir is not None else "--clue-dir"
    given = [name for name, value in task_options if value is not None]
    if given:
        raise UserError(f"{option} reads each task's own files and columns; leave out {given[0]}")
    return ("glue" if glue_dir is not None else "clue"), folder, tasks


def main() -> None:
    """Console-script entry point: usage and user errors become one line on stderr, exit code 2."""
    command = typer.main.get_command(app)
    # SIGINT and SIGTERM unwind, so every command's temporary folders are removed on the way
    # out; pretrain replaces these handlers with its own while it trains (it checkpoints first).
    handle_stop_signals()
    try:
        # Not standalone: Click hands usage errors back instead of printing its usage box.
        try:
            code = command.main(prog_name="bertpre", standalone_mode=False)
        except NoArgsIsHelpError:
            code = command.main(["--help"], prog_name="bertpre", standalone_mode=False)
    except (Exception, KeyboardInterrupt, Stopped) as error:
        code = report_error(error)
    else:
        signum = stop_signal()  # one that came as the work ended still decides the exit code
        if signum is not None:
            code = report_stop(signum)
    sys.exit(code if isinstance(code, int) else 0)


def report_stop(signum: int) -> int:
    """Say that SIGINT or SIGTERM stopped the command, and return its exit code (128 + signal)."""
    terminated = signum == signal.SIGTERM
    typer.echo("terminated" if terminated else "interrupted", err=True)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def report_error(error: BaseException) -> int:
    """Say in one line on stderr why the command stopped early, and return its exit code.

    A stop signal decides the exit whatever exception the unwinding ended in (see
    `bertpre.errors.stop_signal`): a library's cleanup raising its own is no bug of the command.
    """
    signum = stop_signal()
    if signum is None and isinstance(error, Stopped):
        signum = error.signum
    if signum is not None:
        return report_stop(signum)
    if isinstance(error, UsageError):
        hint = f" (see: {error.ctx.command_path} --help)" if error.ctx else ""
        typer.echo(f"error: {error.format_message()}{hint}", err=True)
        return EXIT_BAD_INPUT
    if isinstance(error, (UserError, CorpusError)):
        typer.echo(f"error: {one_line(str(error))}", err=True)
        return EXIT_BAD_INPUT
    if (message := nondeterministic_op(error)) is not None:
        typer.echo(f"error: {message}", err=True)
        return EXIT_BAD_INPUT
    if isinstance(error, OSError):  # a full or read-only disk, a path that cannot be written
        if error.errno in WRITE_ERRNOS:
            where = f" {error.filename}" if error.filename else ""
            typer.echo(f"error: cannot write{where}: {error.strerror}; free disk space or choose a "
                       "folder you can write to (temporary files were removed)", err=True)
        elif error.filename:  # the system refused a named path: the machine's state, not a bug
            typer.echo(f"error: {one_line(str(error.filename))[:300]}: {error.strerror or error}; check "
                       "that path and run the command again", err=True)
        else:
            return report_internal_error(error)
        return EXIT_BAD_INPUT
    if isinstance(error, (KeyboardInterrupt, typer.Abort)):
        typer.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    return report_internal_error(error)  # a bug: one line for the user, the traceback in a file for us


def one_line(message: str) -> str:
    """A message as one line: whatever a damaged file put in it, the user reads one line."""
    return " ".join(message.split("\n")).replace("\r", " ")


def report_internal_error(error: BaseException) -> int:
    """Write `error`'s traceback to a file, say where in one line, and return exit code 1."""
    import tempfile
    import time
    import traceback

    text = "".join(traceback.format_exception(error))
    try:
        descriptor, path = tempfile.mkstemp(prefix=f"bertpre-error-{time.strftime('%Y%m%d-%H%M%S')}-",
                                            suffix=".txt")
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(f"bertpre {' '.join(sys.argv[1:])}\n\n{text}")
        where = f"the traceback is in {path}"
    except OSError:  # no temporary folder either: the traceback goes to stderr after all
        where = f"the traceback follows\n{text}"
    summary = " ".join(f"{type(error).__name__}: {error}".split())[:300]
    typer.echo(f"error: internal error ({summary}); this is a bug in bertpre, not in your input: "
               f"{where}; please include it in a report", err=True)
    return EXIT_INTERNAL_ERROR
