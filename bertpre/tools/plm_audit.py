"""`bertpre inspect` for `data.objective: plm | clm`: what the permutation-LM batches hold, measured
on batches drawn as training draws them (segments lane by lane, the run's collator).

It answers what the MLM audit answers for BERT: is the predicted share what was asked for, are the
spans as long as the plan says, how much of a row is padding, how often a row starts a document
(its memory is reset there), and how many of the P query slots a batch fills; for a mixture of
DATA folders, each source's realised share of the tokens sampled and of the epoch against its weight.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bertpre.batches.plm import PermutationCollator
from bertpre.batches.segments import MixedSegments, SegmentInstances
from bertpre.config import DataConfig
from bertpre.data import DataFolder, DataMixture
from bertpre.errors import UserError
from bertpre.tools.audit import as_mixture, check_sampling, format_table, source_rows

MAX_BATCHES = 100_000


@dataclass
class PermutationReport:
    """Counts over the sampled batches, and the plan's expectations."""

    split: str
    objective: str
    plan: str
    segments_per_epoch: int
    rows: int
    real_tokens: int
    padded_positions: int
    eligible_tokens: int  # real tokens that may be predicted (not [CLS], [SEP] or other specials)
    predicted_tokens: int
    query_slots: int  # P × rows: the query stream's rows
    memory_resets: int
    span_lengths: dict[int, int] = field(default_factory=dict)  # runs of consecutive targets, in tokens
    plm_probability: float = 1 / 6
    max_span_length: int = 5
    # A mixture's sources: (name, weight, share of the epoch's tokens, share of the sampled tokens).
    sources: list[tuple[str, float, float, float]] = field(default_factory=list)

    def expected_share(self) -> str:
        if self.objective == "clm":
            return "100% (every token, left to right)"
        if self.plan == "xlnet":
            return f"{self.plm_probability:.2%} (round(n·p) a row, exactly)"
        return f"about {self.plm_probability:.2%} (one span a window; specials dropped)"

    def expected_span(self) -> str:
        if self.objective == "clm":
            return "the whole row"
        if self.plan == "xlnet":
            sizes = np.arange(1, self.max_span_length + 1)
            mean_words = float((sizes / sizes).sum() / (1.0 / sizes).sum())
            return (f"spans of 1-{self.max_span_length} words, P(n) ∝ 1/n (mean {mean_words:.2f} words), "
                    "then single tokens up to the count")
        return f"1-{self.max_span_length} tokens, uniform (mean {(1 + self.max_span_length) / 2:.1f})"

    def rows_table(self) -> list[tuple[str, str, str]]:
        def share(part: int, whole: int) -> str:
            return f"{part / whole:.2%}" if whole else "n/a"

        runs = sum(self.span_lengths.values())
        mean_run = sum(length * count for length, count in self.span_lengths.items()) / runs if runs else 0.0
        table = [
            ("segments an epoch", f"{self.segments_per_epoch:,}", ""),
            ("rows sampled", f"{self.rows:,}", ""),
            *source_rows(self.sources, " (tokens)"),
            ("predicted share of eligible tokens", share(self.predicted_tokens, self.eligible_tokens),
             self.expected_share()),
            ("query slots used (predicted / P·rows)", share(self.predicted_tokens, self.query_slots),
             "P = round(T·p) (xlnet plan), T (hf plan, clm)"),
            ("mean run of consecutive targets", f"{mean_run:.2f} tokens", self.expected_span()),
        ]
        longest = max(self.span_lengths, default=0)
        for length in range(1, min(longest, self.max_span_length + 1) + 1):
            label = f"  runs of {length} token{'s' if length > 1 else ''}"
            if length == self.max_span_length + 1:
                label = f"  runs of {length}+ tokens (merged spans, words of several pieces)"
                count = sum(c for n, c in self.span_lengths.items() if n >= length)
            else:
                count = self.span_lengths.get(length, 0)
            table.append((label, share(count, runs), ""))
        table += [
            ("rows that begin a document (memory reset)", share(self.memory_resets, self.rows), ""),
            ("padding share of positions", share(self.padded_positions, self.padded_positions + self.real_tokens),
             ""),
        ]
        return table


def consecutive_runs(target: np.ndarray) -> np.ndarray:
    """Lengths of the runs of True in each row of a (B, T) bool array, all rows together."""
    padded = np.pad(target.astype(np.int8), ((0, 0), (1, 1)))
    edges = np.diff(padded, axis=1)
    starts, ends = np.nonzero(edges == 1), np.nonzero(edges == -1)
    return ends[1] - starts[1]


def inspect_segments(data: DataFolder | DataMixture, data_config: DataConfig, *, batches: int = 20,
                     batch_size: int = 32, seed: int = 42, split: str = "train") -> PermutationReport:
    """Sample `batches` batches of epoch 0 as a plm/clm run would (one lane per row) and measure them
    (of one DATA folder, or of a mixture's folders interleaved as training interleaves them)."""
    check_sampling(split, batches, batch_size, max_batches=MAX_BATCHES)
    mixture = as_mixture(data)
    for folder in mixture.folders:
        if not len(getattr(folder, split)):
            raise UserError(f"DATA folder {folder.path} has no {split} documents to inspect")
    if mixture.is_mixture:
        whole: SegmentInstances = MixedSegments.from_mixture(mixture, data_config, lanes=1, seed=seed, split=split)
    else:
        whole = SegmentInstances.from_config(getattr(mixture.folders[0], split), mixture.tokenizer, data_config,
                                             lanes=1, seed=seed)
    lanes = min(batch_size, whole.segment_count())
    instances = whole.with_lanes(lanes)
    collate = PermutationCollator.from_config(mixture.tokenizer, data_config, seed)
    report = PermutationReport(split=split, objective=data_config.objective, plan=data_config.plm_plan,
                               segments_per_epoch=whole.segment_count(), rows=0, real_tokens=0,
                               padded_positions=0, eligible_tokens=0, predicted_tokens=0, query_slots=0,
                               memory_resets=0, plm_probability=data_config.plm_probability,
                               max_span_length=data_config.max_span_length)
    sampled_tokens = np.zeros(len(mixture.folders), np.int64)  # real tokens of the sampled rows, by source
    runs: list[np.ndarray] = []
    for step in range(min(batches, len(instances) // lanes)):
        rows = instances.__getitems__(range(step * lanes, (step + 1) * lanes))
        batch = collate(rows)
        real = batch["attention_mask"].numpy().astype(bool)
        target = batch["perm_target"].numpy()
        report.rows += lanes
        report.real_tokens += int(real.sum())
        report.padded_positions += int((~real).sum())
        report.eligible_tokens += int((real & ~collate.functional[batch["input_ids"].numpy()]).sum())
        report.predicted_tokens += int(target.sum())
        report.query_slots += int(batch["labels"].numel())
        report.memory_resets += int(batch["memory_reset"].sum())
        runs.append(consecutive_runs(target))
        if mixture.is_mixture:  # a segment lies inside one document, so inside one source
            sampled_tokens += np.bincount(whole.source_of(rows.document_index), weights=real.sum(axis=1),
                                          minlength=len(sampled_tokens)).astype(np.int64)
    lengths = np.concatenate(runs) if runs else np.zeros(0, np.int64)
    report.span_lengths = {int(n): int(c) for n, c in zip(*np.unique(lengths, return_counts=True), strict=True)}
    if mixture.is_mixture:
        epoch_tokens = epoch_tokens_by_source(whole)
        report.sources = [(name, weight, epoch / max(int(epoch_tokens.sum()), 1), sampled / max(report.real_tokens, 1))
                          for name, weight, epoch, sampled in zip(mixture.names, mixture.weights,
                                                                  epoch_tokens.tolist(), sampled_tokens.tolist(),
                                                                  strict=True)]
    return report


def epoch_tokens_by_source(segments: MixedSegments) -> np.ndarray:
    """(sources,) the tokens (each document with its [SEP]) of each source in the current epoch's
    documents: what the mixture's weights share out."""
    documents = segments.epoch_order(segments.epoch)
    return np.bincount(segments.source_of(documents), weights=segments.document_length[documents] + 1,
                       minlength=len(segments.weights)).astype(np.int64)


def format_permutation_report(report: PermutationReport) -> str:
    """The report as an aligned text table."""
    what = f"{report.objective}, {report.plan} plan" if report.objective == "plm" else report.objective
    return format_table(f"{report.split} split, {what}, epoch 0", report.rows_table())
