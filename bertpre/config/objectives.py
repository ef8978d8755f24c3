"""What the run config knows of each objective: how it reads rows and which of `data`'s keys it
checks, one row per `data.objective`.

The objectives themselves (their batches, step modules, loss terms) live in
`bertpre.train.objectives`, above the config, so the config cannot ask them; each one's
config-side rules are a row here instead, and `Objective.rules` is that row, so the Trainer and
the config read one answer. A new objective is its module in `train/objectives/`, its row in
`train.objectives.OBJECTIVES`, and its row here.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bertpre.errors import UserError

if TYPE_CHECKING:  # the sections import this table
    from bertpre.config.sections import DataConfig

PLM_PLANS = ("xlnet", "hf")


def no_checks(data: DataConfig) -> None:
    """An objective with no keys of its own to check."""


@dataclass(frozen=True)
class ObjectiveRules:
    """One objective as the config sees it."""

    name: str
    # Whether rows are read as consecutive segments, each carrying memory to the next (no sentence
    # pairs then: `data.pair_task` must be none).
    recurrent: bool = False
    # Tokens from one segment's start to the next's when `data.reuse_length` is null:
    # `data.max_seq_length` divided by this (XLNet's reuse_len is half a segment; Transformer-XL's all of it).
    segment_divisor: int = 1
    # Its own keys against each other, once they are read (each key's range is RULES's).
    check_keys: Callable[[DataConfig], None] = no_checks
    # Its keys against the row length, for the length a run (or each phase) reads.
    check_lengths: Callable[[DataConfig], None] = no_checks

    def segment_step(self, data: DataConfig) -> int:
        """Tokens from one segment's start to the next's (`data.reuse_length` resolved)."""
        if data.reuse_length is not None:
            return data.reuse_length
        return data.max_seq_length // self.segment_divisor


def check_segment_keys(data: DataConfig) -> None:
    """plm and clm: rows are segments of one document, with no sentence pairs."""
    if data.pair_task != "none":
        raise UserError(f"data.objective {data.objective} reads documents as consecutive segments, "
                        f"with no sentence pairs; set data.pair_task: none (it is {data.pair_task!r})")


def check_permutation_keys(data: DataConfig) -> None:
    """plm: the segment keys, its plan, and spans short enough to leave each its context."""
    check_segment_keys(data)
    if data.plm_plan not in PLM_PLANS:
        raise UserError(f"data.plm_plan is {data.plm_plan!r}; use one of {', '.join(PLM_PLANS)}")
    if data.max_span_length > 1 / data.plm_probability + 1e-9:
        raise UserError(f"data.max_span_length ({data.max_span_length}) must be at most "
                        f"1 / data.plm_probability ({1 / data.plm_probability:g}): each span needs its context")


def check_segment_lengths(data: DataConfig) -> None:
    """plm and clm: a segment start never skips text."""
    if data.reuse_length is not None and data.reuse_length > data.max_seq_length:
        raise UserError(f"data.reuse_length ({data.reuse_length}) is longer than a segment "
                        f"(data.max_seq_length {data.max_seq_length}); segments would skip text")


def check_permutation_lengths(data: DataConfig) -> None:
    """plm: the plan's own constraint on the row length, then the segments'."""
    if data.plm_plan == "hf" and data.max_seq_length % 2:
        raise UserError(f"data.plm_plan hf orders each half of a row apart, so data.max_seq_length must be "
                        f"even (it is {data.max_seq_length})")
    if data.plm_plan == "xlnet" and data.max_seq_length % data.segment_step:
        raise UserError(f"data.max_seq_length ({data.max_seq_length}) must be a multiple of data.reuse_length "
                        f"({data.segment_step}): XLNet draws each row's order within blocks of reuse_length "
                        "tokens, so that the part kept as memory never depends on the rest")
    check_segment_lengths(data)


OBJECTIVE_RULES: dict[str, ObjectiveRules] = {
    # BERT's masked tokens (and the sentence-pair task, where the family has a pair head)
    "mlm": ObjectiveRules("mlm"),
    # XLNet's permutation LM over segments carried by memory
    "plm": ObjectiveRules("plm", recurrent=True, segment_divisor=2, check_keys=check_permutation_keys,
                          check_lengths=check_permutation_lengths),
    # Transformer-XL: left to right over segments carried by memory
    "clm": ObjectiveRules("clm", recurrent=True, check_keys=check_segment_keys,
                          check_lengths=check_segment_lengths),
}


def objective_rules(name: str) -> ObjectiveRules:
    """The row of `data.objective` `name` (checked against the table before it is asked)."""
    return OBJECTIVE_RULES[name]
