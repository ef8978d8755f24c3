"""The pretraining config: YAML → typed, validated sections (model, data, optim, train)."""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

import bertpre
from bertpre.configs import preset_file, preset_names
from bertpre.errors import UserError
from bertpre.labels import MASK_COUNTS, PAIR_TASKS
from bertpre.model.config import ARCHITECTURES, BertConfig
from bertpre.tokenizer.wordpiece import PAD_TOKEN

MAX_CONFIG_BYTES = 1_000_000
# A config has no use for many aliases; refusing them stops "billion laughs" expansion.
MAX_YAML_ALIASES = 16

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "cosine", "constant")
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
DEVICES = ("auto", "cpu", "cuda")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
NULLABLE = ("warmup_steps", "warmup_ratio", "max_predictions_per_seq", "embedding_size", "reuse_length")
# What the model learns to predict: BERT's masked tokens, or (model.architecture xlnet) XLNet's
# permutation LM or Transformer-XL's left-to-right LM over segments carried by memory.
OBJECTIVES = ("mlm", "plm", "clm")
PLM_PLANS = ("xlnet", "hf")
# `model.init_from` names the weights a run starts from; it is not a field of the model's shape.
INIT_FROM = "init_from"
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
        """Whether rows are read as consecutive segments carrying memory (plm, clm)."""
        return self.objective != "mlm"

    @property
    def segment_step(self) -> int:
        """Tokens from one segment's start to the next's (`reuse_length` resolved)."""
        if self.reuse_length is not None:
            return self.reuse_length
        return self.max_seq_length // 2 if self.objective == "plm" else self.max_seq_length

    @property
    def sources(self) -> list[tuple[str, float]]:
        """(DATA folder, share) pairs: one folder with share 1, or the mixture's normalised weights."""
        if isinstance(self.path, str):
            return [(self.path, 1.0)]
        total = sum(entry["weight"] for entry in self.path)
        return [(entry["path"], entry["weight"] / total) for entry in self.path]

    @property
    def predicted_share(self) -> float:
        """The share of tokens the head predicts: the mask rate capped per sequence (mlm), the
        query rows (plm: 1/K, or every row for the hf plan; clm: every row)."""
        if self.objective == "clm" or (self.objective == "plm" and self.plm_plan == "hf"):
            return 1.0
        if self.objective == "plm":
            return self.plm_probability
        if self.max_predictions_per_seq is None:
            return self.mlm_probability
        return min(self.mlm_probability, self.max_predictions_per_seq / self.max_seq_length)


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
    compile: bool = False
    seed: int = 42
    log_every: int = 50
    eval_every: int = 2000
    save_every: int = 2000
    keep_last: int = 3
    out: str = "runs/base"


# The keys a phase may change, by section; anything else stays one value for the whole run.
PHASE_KEYS = {"data": ("max_seq_length", "max_predictions_per_seq"),
              "train": ("batch_size", "micro_batch_size"),
              "optim": ("lr", "warmup_steps")}
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
    # The `model:` keys the YAML or --set gave; with init_from, a given shape key must match the source.
    model_keys_given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The config as plain data, in the YAML layout."""
        sections = {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}
        sections["model"][INIT_FROM] = self.init_from
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
        """Write the config as YAML (the run's `config.yaml`), headed by the bertpre version."""
        header = f"# written by bertpre {bertpre.__version__}: this run's config, every key resolved\n"
        path.write_text(header + yaml.safe_dump(self.to_dict(), sort_keys=False), encoding="utf-8")


SECTIONS: dict[str, type] = {
    "model": BertConfig,
    "data": DataConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
}


def _check_aliases(text: str) -> None:
    """Refuse more than MAX_YAML_ALIASES aliases; the event stream never expands them."""
    aliases = sum(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader))
    if aliases > MAX_YAML_ALIASES:
        raise UserError(
            f"the config uses more than {MAX_YAML_ALIASES} YAML aliases; write the values out instead"
        )


def resolve_config_path(path: str | Path) -> Path:
    """A config file: `path` itself when it exists, else the shipped preset it names.

    `base`, `base.yaml` and `configs/base.yaml` all name the preset `base` when no such file is
    in the working directory; a file the user has always wins.
    """
    path = Path(path)
    if path.is_file():
        return path
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    if path.parent in (Path("."), Path("configs")) and name in preset_names():
        return Path(str(preset_file(name)))
    return path


def _read_yaml(path: Path) -> dict:
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"config file {path} {what}; pass --config with a YAML file or a preset "
                        f"({', '.join(preset_names())})")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise UserError(f"config file {path} is over {MAX_CONFIG_BYTES} bytes; is it a config?")
    try:
        text = path.read_text(encoding="utf-8")
        _check_aliases(text)
        raw = yaml.safe_load(text)
    except UnicodeDecodeError as error:
        raise UserError(f"config file {path} is not UTF-8 text ({error.reason})") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise UserError(f"config file {path} is not valid YAML{line}: {getattr(error, 'problem', error)}") from None
    except RecursionError:
        raise UserError(f"config file {path} is nested too deeply to be a config") from None
    except ValueError as error:  # a scalar YAML cannot turn into a value: 5,000 digits, a 13th month
        raise UserError(f"config file {path} holds a value YAML cannot read: {error}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(
            f"config file {path} must be a mapping with sections model, data, optim, train; "
            f"it holds a {type(raw).__name__}"
        )
    return raw


def _unknown(kind: str, name: str, valid: list[str]) -> UserError:
    close = difflib.get_close_matches(str(name), valid, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(valid)}"
    return UserError(f"unknown {kind} {name!r}{hint}")


def _key_names(section: str) -> list[str]:
    names = [f.name for f in fields(SECTIONS[section])]
    return [*names, INIT_FROM] if section == "model" else names


def _apply_override(raw: dict, override: str) -> None:
    """Apply one `section.key=value` override (value parsed as a YAML scalar) to `raw`."""
    dotted, sep, text = override.partition("=")
    if not sep or "." not in dotted:
        raise UserError(f"override {override!r} must look like section.key=value, e.g. train.max_steps=10")
    section, key = dotted.strip().split(".", 1)
    if section not in SECTIONS:
        raise _unknown("config section", section, list(SECTIONS))
    if key not in _key_names(section):
        raise _unknown(f"key in {section}", key, _key_names(section))
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except (yaml.YAMLError, ValueError):
        shown = override if len(override) <= 80 else override[:77] + "..."
        raise UserError(f"override {shown!r}: the value is not a YAML scalar") from None
    current = raw.setdefault(section, {})
    if not isinstance(current, dict):
        raise UserError(f"config section {section!r} must be a mapping")
    current[key] = value


@dataclass(frozen=True)
class Range:
    """The values one numeric key may take: `low` to `high`, an end excluded where it is open."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self) -> str:
        """The range in words: 'a positive integer of at most 4,096', 'in (0, 1]'."""
        if self.integer:
            if self.low == 1:
                return f"a positive integer of at most {self.high:,}"
            return f"an integer from {self.low:,} to {self.high:,}"
        if self.high == math.inf:
            return f"a finite number {'above' if self.low_open else 'of at least'} {self.low:g}"
        return (f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                f"{')' if self.high_open else ']'}")


def integers(low: int, high: int) -> Range:
    return Range(low, high, integer=True)


def numbers(interval: str) -> Range:
    """A range of reals written as an interval: '[0, 1)', '(0, inf)'."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    return Range(low, high, low_open=interval[0] == "(", high_open=interval[-1] == ")")


# Bounds that no real run comes near, chosen so that no arithmetic on a config can overflow
# (an ETA, an int64 tensor, a padded batch): steps, widths and lengths beyond them are typos.
MAX_STEPS = 10**12  # a million steps a second for 30 years
MAX_SIZE = 10**15  # a model dimension; whether the model fits is checked from its memory estimate
MAX_SEQ_LENGTH = 2**20  # tokens a sequence; one padded micro-batch of them is already GiBs
MAX_BATCH = 2**24  # sequences a step: 256× the largest BERT batch published (65,536)
MAX_SEED = 2**32 - 1  # what every random generator (Python, NumPy, PyTorch) accepts
MAX_WORKERS = 256  # DataLoader processes
MAX_WEIGHT = 1e15  # a mixture weight; token counts as weights fit, and their sum stays finite

# One rule per numeric key. A float key must also be finite (YAML's .nan, .inf are refused);
# an integer key takes an integral number however written (1e6, 1.0e+6), never true/false.
RULES: dict[str, Range] = {
    "model.vocab_size": integers(1, MAX_SIZE),
    "model.hidden_size": integers(1, MAX_SIZE),
    "model.num_hidden_layers": integers(1, MAX_SIZE),
    "model.num_attention_heads": integers(1, MAX_SIZE),
    "model.intermediate_size": integers(1, MAX_SIZE),
    "model.max_position_embeddings": integers(1, MAX_SIZE),
    "model.type_vocab_size": integers(1, MAX_SIZE),
    "model.pad_token_id": integers(0, MAX_SIZE),
    "model.embedding_size": integers(1, MAX_SIZE),
    "model.hidden_dropout_prob": numbers("[0, 1)"),
    "model.attention_probs_dropout_prob": numbers("[0, 1)"),
    "model.layer_norm_eps": numbers("(0, 1]"),
    "model.initializer_range": numbers("(0, 1]"),
    "model.rope_theta": numbers("(1, 1e12]"),  # 20,000× Llama 3's 5e5; the angles are computed in fp32
    "data.max_seq_length": integers(8, MAX_SEQ_LENGTH),
    "data.short_seq_prob": numbers("[0, 1]"),
    "data.mlm_probability": numbers("(0, 1]"),
    "data.mask_replace_prob": numbers("[0, 1]"),
    "data.random_replace_prob": numbers("[0, 1]"),
    "data.max_predictions_per_seq": integers(1, MAX_SEQ_LENGTH),
    "data.num_workers": integers(0, MAX_WORKERS),
    "data.plm_probability": numbers("(0, 1)"),
    "data.max_span_length": integers(1, MAX_SEQ_LENGTH),
    "data.reuse_length": integers(1, MAX_SEQ_LENGTH),
    "model.mem_len": integers(0, MAX_SEQ_LENGTH),
    "model.clamp_len": integers(-1, MAX_SEQ_LENGTH),
    "data.path[].weight": numbers(f"(0, {MAX_WEIGHT:g}]"),
    "optim.lr": numbers("(0, 1]"),
    "optim.betas[]": numbers("[0, 1)"),
    "optim.eps": numbers("(0, 1]"),
    "optim.weight_decay": numbers("[0, 1]"),
    "optim.warmup_steps": integers(0, MAX_STEPS),
    "optim.warmup_ratio": numbers("[0, 1]"),
    "optim.max_grad_norm": numbers("[0, inf)"),  # 0: no clipping
    "optim.label_smoothing": numbers("[0, 1)"),
    "train.batch_size": integers(1, MAX_BATCH),
    "train.micro_batch_size": integers(1, MAX_BATCH),
    "train.max_steps": integers(1, MAX_STEPS),
    "train.seed": integers(0, MAX_SEED),
    "train.log_every": integers(1, MAX_STEPS),
    "train.eval_every": integers(1, MAX_STEPS),
    "train.save_every": integers(1, MAX_STEPS),
    "train.keep_last": integers(1, MAX_STEPS),
    "phases[].steps": integers(1, MAX_STEPS),
}


def _shown(value: Any) -> str:
    """A value as the user wrote it: 1e23 and nan bare, other strings quoted."""
    if isinstance(value, str) and _FLOAT.fullmatch(value.strip()) and len(value.strip()) <= 40:
        return value.strip()
    if isinstance(value, int) and len(str(abs(value))) > 40:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."


def check_number(where: str, rule: str | Range, value: Any) -> int | float:
    """`value` as the number RULES[rule] (or the Range `rule`) allows, or UserError naming `where`
    and the range.

    PyYAML reads 1e-4 and 1e6 (no dot) as strings; they are taken as the numbers they spell.
    """
    allowed = RULES[rule] if isinstance(rule, str) else rule
    number = float(value) if isinstance(value, str) and _FLOAT.fullmatch(value.strip()) else value
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        kind = "an integer" if allowed.integer else "a number"
        raise UserError(f"{where} must be {kind}, got {_shown(value)}")
    if allowed.integer:
        if isinstance(number, float):
            if math.isfinite(number) and not number.is_integer():
                raise UserError(f"{where} must be an integer, got {_shown(value)}")
            number = int(number) if math.isfinite(number) else number
    else:
        try:
            number = float(number)
        except OverflowError:  # an integer of hundreds of digits
            number = math.inf
        if not math.isfinite(number):  # YAML's .nan and .inf
            raise UserError(f"{where} must be a finite number, got {_shown(value)}")
    if number not in allowed:
        raise UserError(f"{where} must be {allowed.describe()}, got {_shown(value)}")
    return number


def _check_type(section: str, name: str, value: Any, default: Any, where: str | None = None) -> Any:
    """Return `value` converted to the type the field's default implies, or raise UserError."""
    where = where or f"{section}.{name}"
    if value is None:
        if default is None or name in NULLABLE:
            return None
        raise UserError(f"{where} must not be null")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UserError(f"{where} must be true or false, got {_shown(value)}")
        return value
    if name == "vocab_size" and isinstance(value, str) and not _FLOAT.fullmatch(value.strip()):
        if value != "auto":
            raise UserError(f"{where} must be an integer or 'auto', got {value!r}")
        return value
    if section == "data" and name == "path":
        return _check_data_path(value)
    if name == "betas":
        if not isinstance(value, list) or len(value) != 2:
            raise UserError(f"{where} must be a list of two numbers, e.g. [0.9, 0.999], got {value!r}")
        return [check_number(f"{where}[{index}]", "optim.betas[]", beta) for index, beta in enumerate(value)]
    if f"{section}.{name}" in RULES:
        return check_number(where, f"{section}.{name}", value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise UserError(f"{where} must be a string, got {value!r}")
        return value
    return value


def _check_data_path(value: Any) -> str | list[dict[str, Any]]:
    """`data.path`: a DATA folder, or a non-empty list of {path, weight} with positive weights."""
    example = "e.g. [{path: data/wiki, weight: 0.7}, {path: data/books, weight: 0.3}]"
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise UserError(f"data.path must be a DATA folder or a list of {{path, weight}}, {example}; "
                        f"got {value!r}")
    entries, seen = [], set()
    for index, entry in enumerate(value):
        where = f"data.path[{index}]"
        if not isinstance(entry, dict):
            raise UserError(f"{where} must be a mapping {{path, weight}}, {example}; got {entry!r}")
        for key in entry:
            if key not in MIXTURE_KEYS:
                raise _unknown(f"key in {where}", key, list(MIXTURE_KEYS))
        for key in MIXTURE_KEYS:
            if key not in entry:
                raise UserError(f"{where} has no {key}; give every source a path and a weight, {example}")
        path, weight = entry["path"], entry["weight"]
        if not isinstance(path, str) or not path:
            raise UserError(f"{where}.path must be a DATA folder, got {path!r}")
        weight = check_number(f"{where}.weight", "data.path[].weight", weight)
        if path in seen:
            raise UserError(f"{where}.path {path} is listed twice; give it one entry with the summed weight")
        seen.add(path)
        entries.append({"path": path, "weight": float(weight)})
    return entries


def _build_section(section: str, values: Any) -> Any:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise UserError(f"config section {section!r} must be a mapping of keys to values")
    cls = SECTIONS[section]
    defaults = cls(vocab_size="auto") if cls is BertConfig else cls()
    names = _key_names(section)
    converted = {}
    for name, value in values.items():
        if name not in names:
            raise _unknown(f"key in {section}", name, names)
        if name != INIT_FROM:
            converted[name] = _check_type(section, name, value, getattr(defaults, name))
    return dataclasses.replace(defaults, **converted)


def _check_choice(where: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(f"{where} is {value!r}; use one of {', '.join(choices)}")


def _validate(config: Config, warmup_given: bool, ratio_given: bool) -> None:
    """Every choice and contradiction that can be checked without data or devices (each key's
    own range, RULES, was checked as it was read)."""
    model, data, optim, train = config.model, config.data, config.optim, config.train
    placeholder_vocab = model.pad_token_id + 1 if model.vocab_size == "auto" else model.vocab_size
    dataclasses.replace(model, vocab_size=placeholder_vocab).validate()

    if data.max_seq_length > model.max_position_embeddings and not model.relative_positions:
        raise UserError(
            f"data.max_seq_length ({data.max_seq_length}) is larger than "
            f"model.max_position_embeddings ({model.max_position_embeddings}); lower one or raise the other"
        )
    _check_choice("data.pair_task", data.pair_task, PAIR_TASKS)
    if data.pair_task != "none" and model.type_vocab_size < 2:
        raise UserError(f"data.pair_task {data.pair_task!r} needs model.type_vocab_size >= 2")
    _check_choice("data.mask_count", data.mask_count, MASK_COUNTS)
    if data.mask_replace_prob + data.random_replace_prob > 1.0 + 1e-9:
        raise UserError(
            "data.mask_replace_prob + data.random_replace_prob must be at most 1 "
            f"(got {data.mask_replace_prob} + {data.random_replace_prob})"
        )

    _validate_objective(config)

    _check_choice("optim.name", optim.name, OPTIMIZERS)
    _check_choice("optim.schedule", optim.schedule, SCHEDULES)
    if warmup_given and ratio_given:
        raise UserError("set optim.warmup_steps or optim.warmup_ratio, not both")
    if optim.warmup_ratio is not None:
        optim.warmup_steps = round(optim.warmup_ratio * train.max_steps)
        optim.warmup_ratio = None
    if optim.warmup_steps is None:
        optim.warmup_steps = 0

    if train.batch_size % train.micro_batch_size != 0:
        raise UserError(
            f"train.batch_size ({train.batch_size}) is not divisible by "
            f"train.micro_batch_size ({train.micro_batch_size})"
        )
    _check_choice("train.precision", train.precision, PRECISIONS)
    _check_choice("train.device", train.device, DEVICES)


def _validate_objective(config: Config) -> None:
    """The objective against the architecture, and plm/clm's own keys."""
    model, data = config.model, config.data
    _check_choice("model.architecture", model.architecture, ARCHITECTURES)
    _check_choice("data.objective", data.objective, OBJECTIVES)
    if model.is_xlnet and data.objective == "mlm":
        raise UserError("model.architecture xlnet trains with data.objective plm (XLNet's permutation LM) "
                        "or clm (Transformer-XL's left-to-right LM); set one of them")
    if not model.is_xlnet and data.objective != "mlm":
        raise UserError(f"data.objective {data.objective} needs XLNet's two-stream attention: set "
                        "model.architecture: xlnet (BERT's layout trains with mlm)")
    if not data.recurrent:
        return
    if data.pair_task != "none":
        raise UserError(f"data.objective {data.objective} reads documents as consecutive segments, "
                        f"with no sentence pairs; set data.pair_task: none (it is {data.pair_task!r})")
    _check_choice("data.plm_plan", data.plm_plan, PLM_PLANS)
    if data.max_span_length > 1 / data.plm_probability + 1e-9:
        raise UserError(f"data.max_span_length ({data.max_span_length}) must be at most "
                        f"1 / data.plm_probability ({1 / data.plm_probability:g}): each span needs its context")
    if data.objective == "plm" and data.plm_plan == "hf" and data.max_seq_length % 2:
        raise UserError(f"data.plm_plan hf orders each half of a row apart, so data.max_seq_length must be "
                        f"even (it is {data.max_seq_length})")
    if data.objective == "plm" and data.plm_plan == "xlnet" and data.max_seq_length % data.segment_step:
        raise UserError(f"data.max_seq_length ({data.max_seq_length}) must be a multiple of data.reuse_length "
                        f"({data.segment_step}): XLNet draws each row's order within blocks of reuse_length "
                        "tokens, so that the part kept as memory never depends on the rest")
    if data.reuse_length is not None and data.reuse_length > data.max_seq_length:
        raise UserError(f"data.reuse_length ({data.reuse_length}) is longer than a segment "
                        f"(data.max_seq_length {data.max_seq_length}); segments would skip text")


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config, apply `section.key=value` overrides and validate everything.

    Precedence: overrides > YAML > defaults. `path=None` starts from the defaults.
    `optim.warmup_ratio` is turned into `optim.warmup_steps` here.
    """
    raw = _read_yaml(resolve_config_path(path)) if path is not None else {}
    for name in raw:
        if name not in SECTIONS and name != "phases":
            raise _unknown("config section", name, [*SECTIONS, "phases"])
    for override in overrides:
        _apply_override(raw, override)
    optim_raw = raw.get("optim") if isinstance(raw.get("optim"), dict) else {}
    warmup_given = optim_raw.get("warmup_steps") is not None
    ratio_given = optim_raw.get("warmup_ratio") is not None
    config = Config(**{name: _build_section(name, raw.get(name)) for name in SECTIONS})
    model_raw = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    config.init_from = _init_from(model_raw.get(INIT_FROM))
    config.model_keys_given = frozenset(model_raw) - {INIT_FROM}
    if ratio_given and not warmup_given:
        config.optim.warmup_steps = None
    if raw.get("phases") is not None:
        train_raw = raw.get("train") if isinstance(raw.get("train"), dict) else {}
        _set_phases(config, raw["phases"], max_steps_given="max_steps" in train_raw,
                    ratio_given=ratio_given)
    _validate(config, warmup_given, ratio_given)
    for index in range(len(config.phases)):
        try:
            _validate(config.for_phase(index), warmup_given=True, ratio_given=False)
        except UserError as error:
            raise UserError(f"phases[{index}]: {error}") from None
    return config


def _build_phase(index: int, values: Any) -> PhaseConfig:
    where = f"phases[{index}]"
    if not isinstance(values, dict):
        raise UserError(f"{where} must be a mapping with steps and the sections it changes, got {values!r}")
    keys = ["steps", "lr_schedule", *PHASE_KEYS]
    for name in values:
        if name not in keys:
            raise _unknown(f"key in {where}", name, keys)
    if "steps" not in values:
        raise UserError(f"{where} has no steps; give every phase its optimizer steps, e.g. {{steps: 1000}}")
    steps = check_number(f"{where}.steps", "phases[].steps", values["steps"])
    schedule = values.get("lr_schedule", "restart")
    _check_choice(f"{where}.lr_schedule", schedule, LR_SCHEDULES)
    changes: dict[str, dict[str, Any]] = {}
    for section, allowed in PHASE_KEYS.items():
        given = values.get(section) or {}
        if not isinstance(given, dict):
            raise UserError(f"{where}.{section} must be a mapping of keys to values")
        defaults = SECTIONS[section]()
        for name, value in given.items():
            if name not in allowed:
                raise _unknown(f"key in {where}.{section} (a phase changes only "
                               f"{', '.join(allowed)})", name, list(allowed))
            changes.setdefault(section, {})[name] = _check_type(section, name, value, getattr(defaults, name),
                                                                where=f"{where}.{section}.{name}")
    if schedule == "continue" and changes.get("optim"):
        raise UserError(f"{where} continues the previous phase's schedule, so it cannot set "
                        f"optim.{next(iter(changes['optim']))}; remove it or use lr_schedule: restart")
    return PhaseConfig(steps=steps, lr_schedule=schedule, **changes)


def _set_phases(config: Config, raw: Any, *, max_steps_given: bool, ratio_given: bool) -> None:
    """Read `phases:`; train.max_steps becomes their total unless given (then at most that)."""
    if not isinstance(raw, list) or not raw:
        raise UserError("phases must be a list of phases, each with its steps, e.g. "
                        "[{steps: 900000}, {steps: 100000, data: {max_seq_length: 512}}]")
    config.phases = [_build_phase(index, values) for index, values in enumerate(raw)]
    if config.phases[0].lr_schedule == "continue":
        raise UserError("phases[0] has no previous phase to continue; use lr_schedule: restart")
    if ratio_given:
        raise UserError("optim.warmup_ratio cannot be used with phases; give optim.warmup_steps "
                        "(at the top or in each phase)")
    total = sum(phase.steps for phase in config.phases)
    if total > MAX_STEPS:
        raise UserError(f"phases must add up to {RULES['train.max_steps'].describe()} steps, got {total:,}")
    if not max_steps_given:
        config.train.max_steps = total
    elif config.train.max_steps > total:
        raise UserError(f"train.max_steps ({config.train.max_steps}) is more than the phases' "
                        f"{total} steps; add the steps to a phase, or leave train.max_steps out")


def _init_from(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"model.{INIT_FROM} must be the path of a model folder, export, run or "
                        f"checkpoint, got {value!r}")
    return value


def check_world_size(config: Config, world_size: int) -> int:
    """Return the gradient-accumulation steps for `world_size` processes, or raise UserError."""
    per_step = config.train.micro_batch_size * world_size
    if config.train.batch_size % per_step != 0:
        raise UserError(
            f"train.batch_size ({config.train.batch_size}) is not divisible by "
            f"micro_batch_size × world size ({config.train.micro_batch_size} × {world_size})"
        )
    return config.train.batch_size // per_step


def resolve(config: Config, tokenizer: Any) -> Config:
    """Fill `model.vocab_size: auto` and `pad_token_id` from the tokenizer; check they fit.

    Args:
        tokenizer: a `tokenizers.Tokenizer`.
    """
    tokenizer_vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    model = config.model
    if model.vocab_size == "auto":
        model.vocab_size = tokenizer_vocab
    else:
        model.check_vocab_fits(tokenizer_vocab, "the DATA folder's tokenizer")
    pad_id = tokenizer.token_to_id(PAD_TOKEN)
    if pad_id is not None:
        model.pad_token_id = pad_id
    model.validate()
    return config
