"""The pretraining config's sections as typed dataclasses, and each field's value checked
against its annotation (`X | None` may be null) and its rule."""
from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import bertpre
from bertpre.config.objectives import OBJECTIVE_RULES, OBJECTIVE_SECTION, objective_rules
from bertpre.config.rules import FLOAT_TEXT, LENGTHS, RULES, SWITCH_WORDS, check_number, shown
from bertpre.errors import UserError
from bertpre.model.config import FAMILIES, BertConfig

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "cosine", "constant", "wsd")
# wsd (warmup-stable-decay) alone reads optim.decay_fraction and optim.decay_shape; these fill
# the ones a wsd config leaves null. A fifth of the steps: the cooldown length Hägele et al.
# (2024) found to match a cosine schedule's result with the 1-sqrt shape, which beat linear there.
WSD_DEFAULTS = {"decay_fraction": 0.2, "decay_shape": "1-sqrt"}
DECAY_SHAPES = ("1-sqrt", "linear")
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda")
# What the model learns to predict (each family's row lists those it trains with): BERT's masked
# tokens, or (model.architecture xlnet) XLNet's permutation LM or Transformer-XL's left-to-right LM.
OBJECTIVES = tuple(OBJECTIVE_RULES)
# `model.init_from` names the weights a run starts from; it is not a field of the model's shape.
INIT_FROM = "init_from"
# `model.init_generator_from` names the generator an rtd run from `model.init_from` starts from.
INIT_GENERATOR_FROM = "init_generator_from"
# The `model:` keys that name weights a run starts from, not the model's shape.
SOURCE_KEYS = (INIT_FROM, INIT_GENERATOR_FROM)
MIXTURE_KEYS = ("path", "weight")


@dataclass
class DataConfig:
    """Which DATA folder (or weighted mixture of folders), and how pairs and masks are drawn."""

    # One DATA folder, or a mixture: a list of {path, weight} (weights are normalised).
    path: str | list[dict[str, Any]] = "data/corpus"
    max_seq_length: int = 128
    short_seq_prob: float = 0.1
    pair_task: str = "nsp"
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_mask: bool = False
    pack_documents: bool = True  # pair_task none: top up a document's last chunk from another
    mask_count: str = "exact"  # exact: round(p·n) a sequence; sampled: each token (word) with probability p
    max_predictions_per_seq: int | None = 20
    num_workers: int = 2
    # plm / clm (model.architecture xlnet): see `bertpre.batches.plm` and `bertpre.batches.segments`.
    objective: str = "mlm"
    plm_probability: float = 1 / 6  # XLNet's 1/K: the share of each row predicted
    plm_plan: str = "xlnet"  # xlnet: the original's spans and order; hf: DataCollatorForPermutationLanguageModeling's
    max_span_length: int = 5  # xlnet: words; hf: tokens
    reuse_length: int | None = None  # tokens between segment starts (null: half the length for plm, all for clm)

    @property
    def recurrent(self) -> bool:
        """Whether rows are read as consecutive segments carrying memory (the objective's row says)."""
        return objective_rules(self.objective).recurrent

    @property
    def segment_step(self) -> int:
        """Tokens from one segment's start to the next's (`reuse_length` resolved by the objective)."""
        return objective_rules(self.objective).segment_step(self)

    @property
    def sources(self) -> list[tuple[str, float]]:
        """(DATA folder, share) pairs: one folder with share 1, or the mixture's normalised weights."""
        if isinstance(self.path, str):
            return [(self.path, 1.0)]
        total = sum(entry["weight"] for entry in self.path)
        return [(entry["path"], entry["weight"] / total) for entry in self.path]


@dataclass
class OptimConfig:
    """The optimisation recipe: AdamW or LAMB, warmup then decay, clipping."""

    name: str = "adamw"
    lr: float = 1.0e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1.0e-6
    weight_decay: float = 0.01
    warmup_steps: int | None = 10000
    warmup_ratio: float | None = None
    schedule: str = "linear"
    decay_fraction: float | None = None  # wsd: the share of the steps that decays (null: 0.2)
    decay_shape: str | None = None  # wsd: 1-sqrt or linear (null: 1-sqrt)
    max_grad_norm: float = 1.0
    label_smoothing: float = 0.0


@dataclass
class TrainConfig:
    """How to execute: batch sizes, length, precision, logging and checkpoint cadence."""

    batch_size: int = 256
    micro_batch_size: int = 32
    max_steps: int = 1000000
    precision: str = "auto"
    device: str = "auto"
    deterministic: bool = False
    gradient_checkpointing: bool = False
    compile: bool | str = "auto"  # auto: compiled on a CUDA GPU, eager on a CPU (settled with the device)
    seed: int = 42
    log_every: int = 50
    eval_every: int = 2000
    save_every: int = 2000
    keep_last: int = 3
    out: str = "runs/base"


# The keys a phase may change, by section; anything else stays one value for the whole run.
# model: ModernBERT's rotary thetas, which a context extension raises with the length (the
# weights do not depend on them; the model reads them at each forward).
PHASE_KEYS = {"data": ("max_seq_length", "max_predictions_per_seq"),
              "train": ("batch_size", "micro_batch_size"),
              "optim": ("lr", "warmup_steps"),
              "model": ("global_rope_theta", "local_rope_theta")}
LR_SCHEDULES = ("restart", "continue")


@dataclass
class PhaseConfig:
    """One phase of a run: `steps` optimizer steps with some of PHASE_KEYS changed.

    `lr_schedule: restart` warms up and decays afresh over the phase; `continue` carries on
    the previous phase's warmup and decay as if the two were one (it cannot change optim.lr
    or optim.warmup_steps).
    """

    steps: int
    lr_schedule: str = "restart"
    data: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    optim: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The phase as written in YAML (sections it leaves alone omitted)."""
        return {"steps": self.steps, "lr_schedule": self.lr_schedule,
                **{name: dict(getattr(self, name)) for name in PHASE_KEYS if getattr(self, name)}}


@dataclass
class Config:
    """A whole pretraining config; `model` is the model's own `BertConfig`."""

    model: BertConfig = field(default_factory=lambda: BertConfig(vocab_size="auto"))
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # `phases:`, in order; none: the run is one phase of train.max_steps with the sections above.
    phases: list[PhaseConfig] = field(default_factory=list)
    # `model.init_from`: a model folder, export, run or checkpoint whose weights the run starts from.
    init_from: str | None = None
    # `model.init_generator_from`: an ELECTRA generator's folder (`ElectraForMaskedLM`) that an rtd
    # run from `init_from` starts its generator from, instead of the `generator/` beside the source.
    init_generator_from: str | None = None
    # The `model:` keys the YAML or --set gave; with init_from, a given shape key must match the source.
    model_keys_given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    # The `data:` keys they gave: a family without a pair head drops a default pair task, never a given one.
    data_keys_given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    # The `objective:` keys they gave: a released generator's shape fits a size never given.
    objective_keys_given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)
    # `objective:`, the keys of `data.objective`'s own (`ObjectiveRules.keys`); None for an objective
    # that has none (mlm, plm, clm), whose config.yaml has no such section.
    objective: Any = None

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The config as plain data, in the YAML layout."""
        sections = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS if name != "model"}
        # the model keys of its architecture alone (a BERT run's config.yaml has no ModernBERT keys), flat
        model = self.model.to_dict()
        sections = {"model": {name: model[name] for name in self.model.architecture_fields()}, **sections}
        sections["model"][INIT_FROM] = self.init_from
        if self.init_generator_from is not None:  # where given: a config.yaml from before the key reads back the same
            sections["model"][INIT_GENERATOR_FROM] = self.init_generator_from
        if self.objective is not None:
            sections[OBJECTIVE_SECTION] = dataclasses.asdict(self.objective)
        if self.phases:
            sections["phases"] = [phase.to_dict() for phase in self.phases]
        return sections

    def phase_ends(self) -> list[int]:
        """The step each phase ends at (one past its last); one phase of max_steps when none."""
        if not self.phases:
            return [self.train.max_steps]
        ends, total = [], 0
        for phase in self.phases:
            total += phase.steps
            ends.append(total)
        return ends

    def phase_at(self, step: int) -> int:
        """The index of the phase that runs 0-based `step` (the last phase from its end on)."""
        ends = self.phase_ends()
        return next((index for index, end in enumerate(ends) if step < end), len(ends) - 1)

    def for_phase(self, index: int) -> Config:
        """This config as phase `index` runs it: its PHASE_KEYS applied, no `phases` left.

        A phase that continues the previous one's schedule keeps that phase's lr and warmup.
        """
        if not self.phases:
            return self
        config = dataclasses.replace(self, phases=[], data=dataclasses.replace(self.data),
                                     train=dataclasses.replace(self.train),
                                     optim=dataclasses.replace(self.optim),
                                     model=dataclasses.replace(self.model))
        for phase in self.phases[: index + 1]:
            for section in PHASE_KEYS:
                for key, value in getattr(phase, section).items():
                    setattr(getattr(config, section), key, value)
        return config

    def schedule_span(self, index: int) -> tuple[int, int]:
        """The steps [start, end) over which phase `index`'s learning rate warms up and decays."""
        ends = self.phase_ends()
        first = index
        while first > 0 and self.phases[first].lr_schedule == "continue":
            first -= 1
        last = index
        while last + 1 < len(self.phases) and self.phases[last + 1].lr_schedule == "continue":
            last += 1
        return (ends[first - 1] if first > 0 else 0), ends[last]

    def warnings(self) -> list[str]:
        """Legal but suspicious settings, said to the user before training starts."""
        said = []
        if self.optim.warmup_steps and self.optim.warmup_steps >= self.train.max_steps:
            said.append(f"optim.warmup_steps ({self.optim.warmup_steps}) is not shorter than the "
                        f"run (train.max_steps {self.train.max_steps}): the learning rate never "
                        f"reaches optim.lr ({self.optim.lr:g}) and never decays")
        if self.optim.schedule == "wsd":
            spans = {self.schedule_span(index) for index in range(max(1, len(self.phases)))}
            shortest = min(end - start for start, end in spans)
            fraction = self.optim.decay_fraction or WSD_DEFAULTS["decay_fraction"]
            if round(fraction * shortest) == 0:  # as bertpre.train.optim.wsd_decay_start rounds
                said.append(f"optim.decay_fraction ({fraction:g}) of {shortest} steps rounds to "
                            "none: the WSD schedule never decays; raise optim.decay_fraction")
        for index in range(max(1, len(self.phases))):
            data = self.for_phase(index).data
            cap, wanted = data.max_predictions_per_seq, round(data.mlm_probability * (data.max_seq_length - 2))
            if cap is not None and cap < wanted and not data.recurrent:
                where = f"phase {index + 1}: " if self.phases else ""
                said.append(f"{where}data.max_predictions_per_seq ({cap}) caps a full sequence's predictions "
                            f"below data.mlm_probability ({data.mlm_probability:g} of "
                            f"{data.max_seq_length - 2} tokens is {wanted}): the run predicts "
                            f"{cap / (data.max_seq_length - 2):.1%} of tokens; raise the cap or set it to null")
        return said

    def save(self, path: Path) -> None:
        """Write the config as YAML (the run's `config.yaml`), headed by the bertpre version and the
        fingerprint of the keys it knows (`run_config_header`)."""
        header = f"{run_config_header()} this run's config, every key resolved\n"
        path.write_text(header + yaml.safe_dump(self.to_dict(), sort_keys=False), encoding="utf-8")


def run_config_header() -> str:
    """How a run's config.yaml begins: the bertpre version and a fingerprint of every key its
    sections take. A file headed so was written with all of today's keys (one it lacks was cut
    out); a file headed otherwise comes from a bertpre that knew other keys, whose missing ones
    take their defaults. (The version alone does not tell: keys are added between releases.)"""
    return _header(tuple(sorted(f"{section}.{name}" for section in SECTIONS for name in key_names(section))))


@functools.cache
def _header(names: tuple[str, ...]) -> str:
    fingerprint = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    return f"# written by bertpre {bertpre.__version__} (config keys {fingerprint}):"


SECTIONS: dict[str, type] = {
    "model": BertConfig,
    "data": DataConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
}



def unknown(kind: str, name: str, valid: list[str]) -> UserError:
    """An unknown key's error, naming the closest valid one."""
    close = difflib.get_close_matches(str(name), valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(valid)}"
    return UserError(f"unknown {kind} {name!r}{hint}")


def key_names(section: str) -> list[str]:
    """The keys a section takes (model's shape: the shared keys and every family's own, and the
    weights a run starts from: `init_from`, `init_generator_from`)."""
    if section == "model":
        return [*BertConfig.model_keys(), *SOURCE_KEYS]
    return [item.name for item in dataclasses.fields(SECTIONS[section])]


def section_defaults(section: str) -> Any:
    """A section's defaults; `model.vocab_size` is `auto` until the tokenizer resolves it."""
    cls = SECTIONS[section]
    return cls(vocab_size="auto") if cls is BertConfig else cls()


def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's fields and their annotations, evaluated; BertConfig's are its keys: the
    shared ones and each family's own (their records' fields, `FamilyConfig.fields`)."""
    if cls is not BertConfig:
        return _hints(cls)
    hints = {name: annotation for name, annotation in _hints(cls).items() if name != "family_fields"}
    for row in FAMILIES.values():
        if row.config.fields is not None:
            hints.update({name: annotation for name, annotation in _hints(row.config.fields).items()
                          if name not in hints})
    return hints


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def may_be_null(annotation: Any) -> bool:
    """Whether a field annotated so takes null (`X | None`)."""
    return type(None) in _kinds(annotation)


def _kinds(annotation: Any) -> tuple[Any, ...]:
    """The members of a union (`int | None` → int, NoneType), or the annotation itself."""
    return typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)


def check_field(where: str, key: str, annotation: Any, value: Any) -> Any:
    """`value` as a field annotated `annotation` takes it, or UserError naming `where`.

    A number is checked against RULES[key]; a `str` beside `int` takes the rule's words (auto);
    `list[float]` each item against RULES[key[]] and its length against LENGTHS; a list of
    mappings is the data mixture.
    """
    kinds = _kinds(annotation)
    if value is None:
        if type(None) in kinds:
            return None
        raise UserError(f"{where} must not be null")
    if bool in kinds:
        if isinstance(value, bool) or (str in kinds and value in SWITCH_WORDS.get(key, ())):
            return value
        choices = ["true", "false", *SWITCH_WORDS.get(key, ())]
        raise UserError(f"{where} must be {', '.join(choices[:-1])} or {choices[-1]}, got {shown(value)}")
    numeric = int in kinds or float in kinds
    if str in kinds and isinstance(value, str) and not (numeric and FLOAT_TEXT.fullmatch(value.strip())):
        words = RULES[key].words if numeric else ()
        if numeric and value not in words:
            raise UserError(f"{where} must be an integer or {' or '.join(map(repr, words))}, got {value!r}")
        return value
    for kind in kinds:
        if typing.get_origin(kind) is list and typing.get_args(kind) == (float,):
            return _check_numbers(where, key, value)
        if typing.get_origin(kind) is list:
            return _check_mixture(where, key, value)
    if numeric:
        return check_number(where, key, value)
    if str in kinds:
        raise UserError(f"{where} must be a string, got {value!r}")
    return value


def _check_numbers(where: str, key: str, value: Any) -> list[float]:
    """A list of numbers (optim.betas): its length, and each item against RULES[key[]]."""
    length = LENGTHS.get(key)
    if not isinstance(value, list) or (length is not None and len(value) != length):
        count = {2: "two"}.get(length, length) if length is not None else "some"
        raise UserError(f"{where} must be a list of {count} numbers, e.g. [0.9, 0.999], got {value!r}")
    return [check_number(f"{where}[{index}]", f"{key}[]", item) for index, item in enumerate(value)]


def _check_mixture(where: str, key: str, value: Any) -> list[dict[str, Any]]:
    """`data.path` as a mixture: a non-empty list of {path, weight} with positive weights."""
    example = "e.g. [{path: data/wiki, weight: 0.7}, {path: data/books, weight: 0.3}]"
    if not isinstance(value, list) or not value:
        raise UserError(f"{where} must be a DATA folder or a list of {{path, weight}}, {example}; "
                        f"got {value!r}")
    entries, seen = [], set()
    for index, entry in enumerate(value):
        here = f"{where}[{index}]"
        if not isinstance(entry, dict):
            raise UserError(f"{here} must be a mapping {{path, weight}}, {example}; got {entry!r}")
        for name in entry:
            if name not in MIXTURE_KEYS:
                raise unknown(f"key in {here}", name, list(MIXTURE_KEYS))
        for name in MIXTURE_KEYS:
            if name not in entry:
                raise UserError(f"{here} has no {name}; give every source a path and a weight, {example}")
        path, weight = entry["path"], entry["weight"]
        if not isinstance(path, str) or not path:
            raise UserError(f"{here}.path must be a DATA folder, got {path!r}")
        weight = check_number(f"{here}.weight", f"{key}[].weight", weight)
        if path in seen:
            raise UserError(f"{here}.path {path} is listed twice; give it one entry with the summed weight")
        seen.add(path)
        entries.append({"path": path, "weight": float(weight)})
    return entries


def build_section(section: str, values: Any) -> Any:
    """A section's dataclass from its YAML mapping: every key known, every value checked."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise UserError(f"config section {section!r} must be a mapping of keys to values")
    defaults, names = section_defaults(section), key_names(section)
    types_ = field_types(SECTIONS[section])
    converted = {}
    for name, value in values.items():
        if name not in names:
            raise unknown(f"key in {section}", name, names)
        if name not in SOURCE_KEYS:
            converted[name] = check_field(f"{section}.{name}", f"{section}.{name}", types_[name], value)
    return dataclasses.replace(defaults, **converted)
