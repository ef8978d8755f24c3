"""The masking audit behind `bertpre inspect`: realized statistics of sampled training batches.

It samples batches exactly as training would (same instances, same collator settings) and
measures what the recipe promises: the mask rate and 80/10/10 split, the pair label balance
(with NSP's skew: a one-sentence chunk always gets a random next segment), truncation, real
length against padding, and the [UNK] share. For a mixture of DATA folders, it also shows each
source's realised share of the sampled sequences and of the epoch against its weight.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from bertpre.batches import MaskingCollator, MixedInstances, build_instances
from bertpre.config import DataConfig
from bertpre.data import DataFolder, DataMixture
from bertpre.data.mixture import unique_names
from bertpre.errors import UserError
from bertpre.labels import KEPT, MASKED, RANDOM_TOKEN
from bertpre.tokenizer.roles import token_roles

# More batches than an audit needs (its rates settle within hundreds); beyond, inspect runs for days.
MAX_BATCHES = 10**6


@dataclass
class InspectReport:
    """Realized statistics over `sequences` sampled instances of one split, epoch 0."""

    split: str
    pair_task: str
    documents: int
    sentences: int
    tokens: int
    corpus_unk_share: float | None  # from the DATA manifest, over the whole corpus
    instances_per_epoch: int
    sequences: int
    eligible_tokens: int
    predicted_tokens: int
    masked_tokens: int
    random_tokens: int
    kept_tokens: int
    label_one: int  # NSP: random next; SOP: swapped
    single_sentence_chunks: int
    label_one_in_single_sentence_chunks: int
    truncated: int
    real_tokens: int
    padded_positions: int
    unknown_tokens: int
    text_tokens: int  # real tokens other than [CLS]/[SEP]
    mlm_probability: float
    mask_replace_prob: float
    random_replace_prob: float
    max_predictions_per_seq: int | None
    # A mixture's sources: (name, weight, share of the epoch, share of the sampled sequences).
    sources: list[tuple[str, float, float, float]] = dataclasses.field(default_factory=list)
    # Whole-word masking: predicted words, their tokens, those of words of 2+ tokens, and the
    # words only partly predicted (None: whole_word_mask is off).
    masked_words: int | None = None
    masked_word_tokens: int = 0
    masked_tokens_in_long_words: int = 0
    partly_masked_words: int = 0
    word_source: str = ""  # "DATA's word_starts", "## pieces", or "Ġ word starts" / "▁ word starts"
    mask_token: str = "[MASK]"  # the tokenizer's own (RoBERTa's <mask>)
    # The shard sets read as one corpus: (name, shard folders in index order).
    shard_sets: list[tuple[str, list[str]]] = dataclasses.field(default_factory=list)

    def rows(self) -> list[tuple[str, str, str]]:
        """(statistic, realized value, what the recipe expects) rows of the table."""

        def share(part: int, whole: int) -> str:
            return f"{part / whole:.2%}" if whole else "-"

        cap = (
            f", at most {self.max_predictions_per_seq} a sequence"
            if self.max_predictions_per_seq
            else ""
        )
        rows = [
            *((f"shards of {name}" if len(self.shard_sets) > 1 else "shards",
               f"{len(folders)}: " + ", ".join(folders if len(folders) <= 4 else [*folders[:2], "…", folders[-1]]),
               "each index once")
              for name, folders in self.shard_sets),
            ("documents in split", f"{self.documents:,}", ""),
            ("sentences in split", f"{self.sentences:,}", ""),
            ("tokens in split", f"{self.tokens:,}", ""),
            ("instances per epoch", f"{self.instances_per_epoch:,}", ""),
            ("sampled sequences", f"{self.sequences:,}", ""),
            *source_rows(self.sources),
            (
                "mask rate (predicted / eligible)",
                share(self.predicted_tokens, self.eligible_tokens),
                f"{self.mlm_probability:.2%}" + cap,
            ),
            (
                f"  predicted as {self.mask_token}",
                share(self.masked_tokens, self.predicted_tokens),
                f"{self.mask_replace_prob:.0%}",
            ),
            (
                "  predicted as random token",
                share(self.random_tokens, self.predicted_tokens),
                f"{self.random_replace_prob:.0%}",
            ),
            (
                "  predicted as kept",
                share(self.kept_tokens, self.predicted_tokens),
                f"{1 - self.mask_replace_prob - self.random_replace_prob:.0%}",
            ),
        ]
        if self.masked_words is not None:
            rows += [
                (f"whole words ({self.word_source})", f"{self.masked_words:,} predicted", ""),
                ("  tokens in words of 2+ tokens", share(self.masked_tokens_in_long_words,
                                                          self.masked_word_tokens), ""),
                ("  mean predicted word length",
                 f"{self.masked_word_tokens / self.masked_words:.2f}" if self.masked_words else "-", ""),
                ("  words predicted only in part", share(self.partly_masked_words, self.masked_words), "0%"),
            ]
        if self.pair_task != "none":
            single = self.single_sentence_chunks / self.sequences if self.sequences else 0.0
            label = "label 1 (random next)" if self.pair_task == "nsp" else "label 1 (swapped)"
            expected = (
                f"{0.5 + single / 2:.2%} (50% + half the one-sentence share)"
                if self.pair_task == "nsp"
                else "50%"
            )
            rows += [
                (label, share(self.label_one, self.sequences), expected),
                ("one-sentence chunks", share(self.single_sentence_chunks, self.sequences), ""),
                (
                    "  of which label 1",
                    share(self.label_one_in_single_sentence_chunks, self.single_sentence_chunks),
                    "100%" if self.pair_task == "nsp" else "50%",
                ),
                (
                    "  label 1 in other chunks",
                    share(
                        self.label_one - self.label_one_in_single_sentence_chunks,
                        self.sequences - self.single_sentence_chunks,
                    ),
                    "50%",
                ),
            ]
        corpus_unk = (
            ""
            if self.corpus_unk_share is None
            else f"{self.corpus_unk_share:.2%} in the whole corpus"
        )
        mean_length = self.real_tokens / self.sequences if self.sequences else 0.0
        rows += [
            ("truncated instances", share(self.truncated, self.sequences), ""),
            ("mean real length", f"{mean_length:.1f}", ""),
            (
                "padding share",
                share(self.padded_positions, self.padded_positions + self.real_tokens),
                "",
            ),
            (
                "[UNK] share of text tokens",
                share(self.unknown_tokens, self.text_tokens),
                corpus_unk,
            ),
        ]
        return rows


def inspect_data(
    data: DataFolder | DataMixture,
    data_config: DataConfig,
    *,
    batches: int = 20,
    batch_size: int = 32,
    seed: int = 42,
    split: str = "train",
) -> InspectReport:
    """Sample `batches` batches of epoch 0 as training would and measure them (of one DATA
    folder, or of a mixture's folders interleaved as training interleaves them)."""
    check_sampling(split, batches, batch_size, max_batches=MAX_BATCHES)
    mixture = as_mixture(data)
    instances = build_instances(mixture, data_config, seed=seed, split=split)
    sources = instances.sources if isinstance(instances, MixedInstances) else [instances]
    tokenizer = mixture.tokenizer
    collate = MaskingCollator.from_config(tokenizer, data_config, seed)
    roles = token_roles(tokenizer)
    unk_id = roles.unk_token_id
    boundary_ids = [roles.cls_token_id, roles.sep_token_id]
    pieces = f"{roles.word_prefix} pieces" if roles.kind == "wordpiece" else f"{roles.word_prefix} word starts"
    counts = dict.fromkeys(  # InspectReport's counts, by their field names
        ("eligible_tokens", "predicted_tokens", "masked_tokens", "random_tokens", "kept_tokens", "label_one",
         "single_sentence_chunks", "label_one_in_single_sentence_chunks", "truncated", "real_tokens",
         "padded_positions", "unknown_tokens", "text_tokens", "masked_words", "masked_word_tokens",
         "masked_tokens_in_long_words", "partly_masked_words"), 0
    )  # fmt: skip
    word_source = ""
    sequences = min(len(instances), batches * batch_size)
    for start in range(0, sequences, batch_size):
        rows = instances.__getitems__(range(start, min(start + batch_size, sequences)))
        batch = collate(rows)
        real = batch["attention_mask"].numpy().astype(bool)
        labels, action = batch["labels"].numpy(), batch["mask_action"].numpy()
        original = np.where(labels >= 0, labels, batch["input_ids"].numpy())
        counts["eligible_tokens"] += int((real & ~collate.never_predicted[original]).sum())
        counts["predicted_tokens"] += int((labels >= 0).sum())
        counts["masked_tokens"] += int((action == MASKED).sum())
        counts["random_tokens"] += int((action == RANDOM_TOKEN).sum())
        counts["kept_tokens"] += int((action == KEPT).sum())
        counts["real_tokens"] += int(real.sum())
        counts["padded_positions"] += int((~real).sum())
        text = real & ~np.isin(original, boundary_ids)
        counts["text_tokens"] += int(text.sum())
        counts["unknown_tokens"] += int((text & (original == unk_id)).sum())
        label = rows.next_sentence_label if rows.next_sentence_label is not None else np.zeros(len(rows), np.int64)
        counts["label_one"] += int(label.sum())
        counts["single_sentence_chunks"] += int(rows.single_sentence_chunk.sum())
        counts["label_one_in_single_sentence_chunks"] += int((label * rows.single_sentence_chunk).sum())
        counts["truncated"] += int(rows.truncated.sum())
        if collate.whole_word_mask:
            eligible = real & ~collate.never_predicted[original]
            starts = collate.word_start_grid(rows, real)
            word_source = "DATA's word_starts" if starts is not None else pieces
            words, tokens, long_tokens, partial = count_masked_words(collate, original, eligible, starts,
                                                                    labels >= 0)
            counts["masked_words"] += words
            counts["masked_word_tokens"] += tokens
            counts["masked_tokens_in_long_words"] += long_tokens
            counts["partly_masked_words"] += partial
    source_shares = []
    if isinstance(instances, MixedInstances):
        sampled = np.bincount(instances.source_of(range(sequences)), minlength=len(sources))
        source_shares = [(name, weight, epoch, count / max(sequences, 1)) for name, weight, epoch, count
                         in zip(mixture.names, mixture.weights, instances.shares.values(), sampled.tolist(),
                                strict=True)]
    unk_shares = [folder.manifest.get("counts", {}).get("unk_share") for folder in mixture.folders]
    return InspectReport(
        split=split,
        pair_task=data_config.pair_task,
        documents=sum(len(source.dataset) for source in sources),
        sentences=sum(len(source.index.sentence_token_offsets) - 1 for source in sources),
        tokens=sum(int(source.index.sentence_token_offsets[-1]) for source in sources),
        corpus_unk_share=unk_shares[0] if len(unk_shares) == 1 else None,
        instances_per_epoch=len(instances),
        sequences=sequences,
        **{**counts, "masked_words": counts["masked_words"] if collate.whole_word_mask else None},
        mlm_probability=data_config.mlm_probability,
        mask_replace_prob=data_config.mask_replace_prob,
        random_replace_prob=data_config.random_replace_prob,
        max_predictions_per_seq=data_config.max_predictions_per_seq,
        sources=source_shares,
        word_source=word_source,
        mask_token=roles.mask_token,
        shard_sets=[(name, [str(path) for path in folder.shards])
                    for name, folder in zip(mixture.names, mixture.folders, strict=True) if folder.shards],
    )


def count_masked_words(collate: MaskingCollator, input_ids: np.ndarray, eligible: np.ndarray,
                       word_starts: np.ndarray | None, predicted: np.ndarray) -> tuple[int, int, int, int]:
    """Over a batch: words with a predicted token, their tokens, the predicted tokens of words
    of 2+ tokens, and the words predicted only in part."""
    start_index, word_length = collate.word_layout(input_ids, eligible, word_starts)
    rows = np.arange(len(input_ids))[:, None]
    word_id = (rows * input_ids.shape[1] + start_index)[eligible]  # one id per word of the batch
    predicted_in_word = np.bincount(word_id, weights=predicted[eligible], minlength=input_ids.size)
    length_of_word = np.zeros(input_ids.size)
    length_of_word[word_id] = word_length[eligible]
    touched = predicted_in_word > 0
    long_words = touched & (length_of_word >= 2)
    return (int(touched.sum()), int(length_of_word[touched].sum()), int(predicted_in_word[long_words].sum()),
            int((touched & (predicted_in_word < length_of_word)).sum()))


def format_report(report: InspectReport) -> str:
    """The report as an aligned text table."""
    return format_table(f"{report.split} split, pair_task {report.pair_task}, epoch 0", report.rows())


def check_sampling(split: str, batches: int, batch_size: int, *, max_batches: int) -> None:
    """One line for a split, batch count or batch size that `inspect` cannot sample."""
    if split not in ("train", "validation"):
        raise UserError(f"split must be train or validation, not {split!r}")
    if not 1 <= batches <= max_batches:
        raise UserError(f"--batches must be a positive integer of at most {max_batches:,}, got {batches}")
    if batch_size < 1:
        raise UserError(f"the batch size must be at least 1, got {batch_size}")


def as_mixture(data: DataFolder | DataMixture) -> DataMixture:
    """A mixture as it is; one DATA folder as the mixture of itself alone."""
    return data if isinstance(data, DataMixture) else DataMixture([data], [1.0], unique_names([data.path]))


def source_rows(sources: list[tuple[str, float, float, float]], unit: str = "") -> list[tuple[str, str, str]]:
    """A table row per source of a mixture, (name, weight, share of the epoch, share sampled):
    the realized shares against the weight; `unit` names what is counted, e.g. " (tokens)"."""
    return [(f"share of {name}{unit}", f"{sampled:.2%} sampled, {epoch:.2%} of the epoch", f"{weight:.2%}")
            for name, weight, epoch, sampled in sources]


def format_table(title: str, rows: list[tuple[str, str, str]]) -> str:
    """`title`, then the (statistic, realized, expected) rows aligned under their header."""
    rows = [("statistic", "realized", "expected"), *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [title]
    for i, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)
