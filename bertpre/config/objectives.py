"""What the run config knows of each objective: how it reads rows and which of `data`'s keys it
checks, one row per `data.objective`.

The objectives themselves (their batches, step modules, loss terms) live in
`bertpre.train.objectives`, above the config, so the config cannot ask them; each one's
config-side rules are a row here instead, and `Objective.rules` is that row, so the Trainer and
the config read one answer. A new objective is its module in `train/objectives/`, its row in
`train.objectives.OBJECTIVES`, and its row here.
"""
from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bertpre.config.rules import Range, check_number, numbers
from bertpre.errors import UserError
from bertpre.model.electra_generator import EMBEDDING_SHARING
from bertpre.model.replaced_token import pair_generator_config

if TYPE_CHECKING:  # the sections import this table
    from bertpre.config.sections import Config, DataConfig

PLM_PLANS = ("xlnet", "hf")
# The section of the YAML that holds an objective's own keys (`ObjectiveRules.keys`).
OBJECTIVE_SECTION = "objective"


def no_checks(data: DataConfig) -> None:
    """An objective with no keys of its own to check."""


def no_model_checks(config: Config) -> None:
    """An objective that asks nothing of the model's keys."""


@dataclass
class ReplacedTokenKeys:
    """`data.objective: rtd`'s own keys (ELECTRA's), under `objective:`."""

    # The generator's hidden size, heads and intermediate size as a fraction of the
    # discriminator's: ELECTRA-Base's generator is a quarter of it.
    generator_size: float = 0.25
    # λ, the discriminator's loss weight beside the generator's masked LM (ELECTRA's 50).
    rtd_weight: float = 50.0
    # How the two networks share their embeddings: tied (one set of tables, ELECTRA's) or gdes
    # (DeBERTa-v3's gradient-disentangled sharing: the discriminator reads stop-gradient(the
    # generator's word table) + a residual table of its own).
    embedding_sharing: str = "tied"
# The numeric keys' ranges, as `rules.RULES` states the sections' (a generator is at most the
# discriminator's size; λ may be 0, the generator alone).
KEY_RULES: dict[str, Range] = {
    "objective.generator_size": numbers("(0, 1]"),
    "objective.rtd_weight": numbers("[0, inf)"),
}


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
    # Its own keys under `objective:` (a dataclass of them with their defaults), if it has any.
    keys: type | None = None
    # Its keys against the model's and the run's (after every key is read).
    check_model: Callable[[Config], None] = no_model_checks
    # Whether it trains a generator beside the model, which a run from `model.init_from` starts
    # from released weights too (`model.init_generator_from`, else the source's `generator/`).
    trains_generator: bool = False

    def default_keys(self) -> Any:
        """Its keys at their defaults (None: it has none)."""
        return None if self.keys is None else self.keys()

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


def check_replaced_token_keys(data: DataConfig) -> None:
    """rtd: ELECTRA trains no sentence-pair task."""
    if data.pair_task != "none":
        raise UserError(f"data.objective rtd trains no sentence-pair task; set data.pair_task: none "
                        f"(it is {data.pair_task!r})")


def check_replaced_token_model(config: Config) -> None:
    """rtd: the generator's shape is whole numbers of the discriminator's (asked again once
    `model.init_from`'s shape is adopted), its embedding sharing is built, and what the pair does
    not take is refused."""
    keys, model = config.objective, config.model
    if keys.embedding_sharing not in EMBEDDING_SHARING:
        raise UserError(f"objective.embedding_sharing is {keys.embedding_sharing!r}; use one of "
                        f"{', '.join(EMBEDDING_SHARING)}")
    try:
        pair_generator_config(model, keys.generator_size)
    except ValueError as error:
        raise UserError(f"objective.generator_size {keys.generator_size:g}: {error}") from None
    if model.unpad:
        raise UserError("data.objective rtd reads every token of a padded batch; set model.unpad: false")


OBJECTIVE_RULES: dict[str, ObjectiveRules] = {
    # BERT's masked tokens (and the sentence-pair task, where the family has a pair head)
    "mlm": ObjectiveRules("mlm"),
    # XLNet's permutation LM over segments carried by memory
    "plm": ObjectiveRules("plm", recurrent=True, segment_divisor=2, check_keys=check_permutation_keys,
                          check_lengths=check_permutation_lengths),
    # Transformer-XL: left to right over segments carried by memory
    "clm": ObjectiveRules("clm", recurrent=True, check_keys=check_segment_keys,
                          check_lengths=check_segment_lengths),
    # ELECTRA's replaced-token detection: a small generator's masked LM, a discriminator over every token
    "rtd": ObjectiveRules("rtd", keys=ReplacedTokenKeys, check_keys=check_replaced_token_keys,
                          check_model=check_replaced_token_model, trains_generator=True),
}


def generator_objectives() -> list[str]:
    """The objectives that train a generator (`ObjectiveRules.trains_generator`)."""
    return [name for name, row in OBJECTIVE_RULES.items() if row.trains_generator]


def objective_rules(name: str) -> ObjectiveRules:
    """The row of `data.objective` `name` (checked against the table before it is asked)."""
    return OBJECTIVE_RULES[name]


def key_owners(key: str) -> list[str]:
    """The objectives that have `key` under `objective:`."""
    return [name for name, row in OBJECTIVE_RULES.items()
            if row.keys is not None and key in {item.name for item in dataclasses.fields(row.keys)}]


def build_objective_keys(objective: str, values: Any) -> Any:
    """The `objective:` section of a config whose `data.objective` is `objective`: its row's keys
    with their defaults where not given, each checked (None for an objective without keys).
    A key of another objective is refused naming that objective."""
    row = objective_rules(objective)
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise UserError(f"config section {OBJECTIVE_SECTION!r} must be a mapping of keys to values")
    names = [] if row.keys is None else [item.name for item in dataclasses.fields(row.keys)]
    for key in values:
        if key in names:
            continue
        owners = key_owners(key)
        if owners:
            raise UserError(f"objective.{key} is data.objective {' or '.join(owners)}'s key, and this config's "
                            f"objective is {objective}; remove it, or set data.objective: {owners[0]}")
        every = sorted({name for owner in OBJECTIVE_RULES.values() if owner.keys is not None
                        for name in (item.name for item in dataclasses.fields(owner.keys))})
        close = difflib.get_close_matches(str(key), every, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(every)}"
        raise UserError(f"unknown key in {OBJECTIVE_SECTION} {key!r}{hint}")
    if row.keys is None:
        return None
    converted = {}
    for key, value in values.items():
        where = f"{OBJECTIVE_SECTION}.{key}"
        if where in KEY_RULES:
            converted[key] = check_number(where, KEY_RULES[where], value)
        elif not isinstance(value, str):
            raise UserError(f"{where} must be a string, got {value!r}")
        else:
            converted[key] = value
    return row.keys(**converted)
