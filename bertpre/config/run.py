"""The pretraining run's config: `load_config` (YAML or preset < --set, every key checked),
the contradictions between keys, `phases:`, and resolving `model.vocab_size: auto`."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bertpre.config.loading import parse_override, read_yaml, resolve_config_path
from bertpre.config.objectives import (
    OBJECTIVE_RULES,
    OBJECTIVE_SECTION,
    build_objective_keys,
    generator_objectives,
    objective_rules,
)
from bertpre.config.rules import MAX_STEPS, RULES, check_number
from bertpre.config.sections import (
    DECAY_SHAPES,
    DEVICES,
    INIT_FROM,
    INIT_GENERATOR_FROM,
    LR_SCHEDULES,
    OPTIMIZERS,
    PHASE_KEYS,
    PRECISIONS,
    SCHEDULES,
    SECTIONS,
    SOURCE_KEYS,
    WSD_DEFAULTS,
    Config,
    PhaseConfig,
    build_section,
    check_field,
    field_types,
    key_names,
    unknown,
)
from bertpre.configs import preset_names
from bertpre.errors import UserError
from bertpre.labels import MASK_COUNTS, PAIR_TASKS
from bertpre.model.config import refuse_keys_of_other_layouts
from bertpre.model.families import FAMILIES, family
from bertpre.model.hf_format import source_architecture
from bertpre.tokenizer.roles import token_roles

OVERRIDE_FORM = "section.key=value, e.g. train.max_steps=10"


def _apply_override(raw: dict, override: str) -> None:
    """Apply one `section.key=value` override (value parsed as a YAML scalar) to `raw`."""
    dotted, value = parse_override(override, OVERRIDE_FORM)
    if "." not in dotted:
        raise UserError(f"override {override!r} must look like {OVERRIDE_FORM}")
    _set_value(raw, dotted, value)


def _set_value(raw: dict, dotted: str, value: Any) -> None:
    """Set `section.key` in `raw` to `value`, the section and key known."""
    section, key = dotted.split(".", 1)
    if section == OBJECTIVE_SECTION:  # its keys are the objective's, known once data.objective is read
        _objective_values(raw)[key] = value
        return
    if section not in SECTIONS:
        raise unknown("config section", section, [*SECTIONS, OBJECTIVE_SECTION])
    if key not in key_names(section):
        raise unknown(f"key in {section}", key, key_names(section))
    current = raw.setdefault(section, {})
    if not isinstance(current, dict):
        raise UserError(f"config section {section!r} must be a mapping")
    current[key] = value


def _objective_values(raw: dict) -> dict:
    """The `objective:` mapping of `raw` (made where absent)."""
    current = raw.setdefault(OBJECTIVE_SECTION, {})
    if not isinstance(current, dict):
        raise UserError(f"config section {OBJECTIVE_SECTION!r} must be a mapping")
    return current


def _check_choice(where: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(f"{where} is {value!r}; use one of {', '.join(choices)}")


def _validate(config: Config, warmup_given: bool, ratio_given: bool) -> None:
    """Every choice and contradiction that can be checked without data or devices (each key's
    own range, RULES, was checked as it was read)."""
    model, data, optim, train = config.model, config.data, config.optim, config.train
    placeholder_vocab = model.pad_token_id + 1 if model.vocab_size == "auto" else model.vocab_size
    dataclasses.replace(model, vocab_size=placeholder_vocab).validate()

    _check_choice("data.pair_task", data.pair_task, PAIR_TASKS)
    _check_choice("data.mask_count", data.mask_count, MASK_COUNTS)
    if data.mask_replace_prob + data.random_replace_prob > 1.0 + 1e-9:
        raise UserError(
            "data.mask_replace_prob + data.random_replace_prob must be at most 1 "
            f"(got {data.mask_replace_prob} + {data.random_replace_prob})"
        )

    _validate_objective(config)  # first: a family with no pair head is the problem, not its token types
    _check_generator_source(config)
    if data.pair_task != "none" and model.type_vocab_size < 2:
        raise UserError(f"data.pair_task {data.pair_task!r} needs model.type_vocab_size >= 2")
    if not config.phases:  # a phased config's are checked phase by phase (`load_config`), as each reads them
        _check_lengths(config)

    _check_choice("optim.name", optim.name, OPTIMIZERS)
    _check_choice("optim.schedule", optim.schedule, SCHEDULES)
    _resolve_decay(optim)
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


def _resolve_decay(optim: Any) -> None:
    """Fill a wsd schedule's null decay keys with WSD_DEFAULTS; refuse them given with another
    schedule, which would ignore them."""
    if optim.schedule != "wsd":
        for key in WSD_DEFAULTS:
            if getattr(optim, key) is not None:
                raise UserError(f"optim.{key} shapes the decay of optim.schedule wsd, and this config's "
                                f"schedule is {optim.schedule}; remove optim.{key} (or set it to null), "
                                "or set optim.schedule: wsd")
        return
    for key, default in WSD_DEFAULTS.items():
        if getattr(optim, key) is None:
            setattr(optim, key, default)
    _check_choice("optim.decay_shape", optim.decay_shape, DECAY_SHAPES)


def check_sequence_length(length: int, model: Any, source: str | Path | None = None) -> None:
    """Refuse, in one line, a `data.max_seq_length` past the tokens one forward of `model` reads
    (`Family.max_input_tokens`, asked of the row: a position table's, ModernBERT's trained
    length; none for relative positions), naming `source` where the shape is a source's
    (`model.init_from`), whose positions the run cannot raise."""
    limit = family(model).max_input_tokens(model)
    if limit is None or length <= limit:
        return
    positions = model.max_position_embeddings
    if source is None:
        raise UserError(f"data.max_seq_length ({length}) is larger than model.max_position_embeddings "
                        f"({positions}){offset_words(model)}; lower one or raise the other")
    reads = f"{limit} tokens the {positions} positions" if limit != positions else f"{positions} positions"
    raise UserError(f"data.max_seq_length ({length}) is larger than the {reads} of {source} read; lower it")


def check_phase_lengths(config: Config, source: str | Path | None = None) -> None:
    """`check_sequence_length` for every phase's length and model (the top level's only where a
    phase reads it), the phase named where there are phases."""
    for index in range(max(1, len(config.phases))):
        phase = config.for_phase(index)
        try:
            check_sequence_length(phase.data.max_seq_length, phase.model, source)
        except UserError as error:
            raise UserError(f"phases[{index}]: {error}" if config.phases else str(error)) from None


def offset_words(model: Any) -> str:
    """How many of a position table's rows a family keeps before the first token, in words
    (RoBERTa's: the padding's id + 1), or nothing."""
    if not model.position_offset:
        return ""
    rows = "the row" if model.position_offset == 1 else f"the {model.position_offset} rows"
    return (f" less {rows} before the first token (positions start at pad_token_id + 1 = "
            f"{model.position_offset}): {model.max_tokens} tokens")


def _validate_objective(config: Config) -> None:
    """The objective and the pair task against the architecture, and plm/clm's own keys."""
    model, data = config.model, config.data
    _check_choice("model.architecture", model.architecture, tuple(FAMILIES))
    _check_choice("data.objective", data.objective, tuple(OBJECTIVE_RULES))
    row = family(model)
    if data.objective not in row.objectives:
        trained_by = [name for name, other in FAMILIES.items() if data.objective in other.objectives]
        raise UserError(f"model.architecture {model.architecture} trains with data.objective "
                        f"{' or '.join(row.objectives)}, not {data.objective}; set model.architecture: "
                        f"{' or '.join(trained_by)} for {data.objective}, or data.objective: "
                        f"{' or '.join(row.objectives)}")
    if not row.pair_task and data.pair_task != "none" and not data.recurrent:  # a pair task needs a pair head
        raise UserError(no_pair_head(row.display_name, data.pair_task, f"model.architecture {model.architecture}"))
    objective_rules(data.objective).check_keys(data)
    objective_rules(data.objective).check_model(config)


def _check_lengths(config: Config) -> None:
    """`data.max_seq_length` against the model's positions and the objective's segments. Called for
    the config a run (or each of its phases) reads: a top-level length every phase replaces is
    read by none, and is not checked."""
    model, data = config.model, config.data
    if config.init_from is None:  # else the positions are the source's, checked against it (`adopt_shape`)
        check_sequence_length(data.max_seq_length, model)
    objective_rules(data.objective).check_lengths(data)


def no_pair_head(display_name: str, pair_task: str, what: str) -> str:
    """Why a family without a pair head refuses `data.pair_task` nsp or sop."""
    return (f"data.pair_task {pair_task} trains a sentence-pair head, which {what} ({display_name}) does "
            f"not have: {display_name} is pretrained on the masked LM alone, each row full sentences of "
            "one document, with no next-sentence or sentence-order task; set data.pair_task: none")


def _read_pretraining_yaml(path: Path) -> dict[str, Any]:
    return read_yaml(path, instead=f"a YAML file or a preset ({', '.join(preset_names())})",
                     holds="sections model, data, optim, train")


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                values: dict[str, Any] | None = None) -> Config:
    """Read a YAML config, apply `section.key=value` overrides and validate everything.

    Precedence: `values` > overrides > YAML > defaults. `path=None` starts from the defaults.
    `values` are typed, keyed `section.key` (what a command's own options give, e.g. --data as
    `data.path`): never text for YAML to read again.
    `optim.warmup_ratio` is turned into `optim.warmup_steps` here, and a `data.pair_task` that
    neither gives is `none` for the objectives that read no sentence pairs (plm, clm).
    """
    raw = _read_pretraining_yaml(resolve_config_path(path)) if path is not None else {}
    for name in raw:
        if name not in SECTIONS and name not in ("phases", OBJECTIVE_SECTION):
            raise unknown("config section", name, [*SECTIONS, OBJECTIVE_SECTION, "phases"])
    for override in overrides:
        _apply_override(raw, override)
    for dotted, value in (values or {}).items():
        section, key = dotted.split(".", 1)
        written = raw.get(section) if isinstance(raw.get(section), dict) else {}
        if key in written:  # what the file says is checked even where a command's option replaces it
            build_section(section, {key: written[key], **({"architecture": written["architecture"]}
                                                          if section == "model" and "architecture" in written else {})})
        _set_value(raw, dotted, value)
    optim_raw = raw.get("optim") if isinstance(raw.get("optim"), dict) else {}
    warmup_given = optim_raw.get("warmup_steps") is not None
    ratio_given = optim_raw.get("warmup_ratio") is not None
    model_raw = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    init_from = _init_from(model_raw.get(INIT_FROM))
    init_generator_from = _init_from(model_raw.get(INIT_GENERATOR_FROM), INIT_GENERATOR_FROM,
                                     "an ELECTRA generator's folder (ElectraForMaskedLM)")
    # The architecture first (given, or model.init_from's), so that the model section's keys are
    # routed to its family's record and another family's are refused as such.
    source = source_architecture(init_from) if init_from is not None and "architecture" not in model_raw else None
    sections = {name: raw.get(name) for name in SECTIONS}
    if source is not None:
        sections["model"] = {**model_raw, "architecture": source}
    config = Config(**{name: build_section(name, values) for name, values in sections.items()})
    config.init_from, config.init_generator_from = init_from, init_generator_from
    config.model_keys_given = frozenset(model_raw) - set(SOURCE_KEYS)
    data_raw = raw.get("data") if isinstance(raw.get("data"), dict) else {}
    if source is not None:
        _check_source_architecture(config, frozenset(data_raw))
    refuse_keys_of_other_layouts(config.model, config.model_keys_given)
    for name, value in family(config.model).model_defaults.items():
        if name not in config.model_keys_given:  # RoBERTa's one token type, where BERT's default is two
            setattr(config.model, name, value)
    if ratio_given and not warmup_given:
        config.optim.warmup_steps = None
    config.data_keys_given = frozenset(data_raw)
    if config.data.objective in OBJECTIVE_RULES:  # else refused naming the choices (`_validate_objective`)
        config.objective = build_objective_keys(config.data.objective, raw.get(OBJECTIVE_SECTION))
    objective_raw = raw.get(OBJECTIVE_SECTION)
    config.objective_keys_given = frozenset(objective_raw) if isinstance(objective_raw, dict) else frozenset()
    if "pair_task" not in data_raw and not family(config.model).pair_task:
        config.data.pair_task = "none"  # a default never written is no error: XLNet reads no sentence pairs
    if raw.get("phases") is not None:
        train_raw = raw.get("train") if isinstance(raw.get("train"), dict) else {}
        _set_phases(config, raw["phases"], max_steps_given="max_steps" in train_raw,
                    ratio_given=ratio_given)
        if config.init_from is None:  # else the source's architecture decides (`settle_model`)
            refuse_phase_model_keys(config)
    _validate(config, warmup_given, ratio_given)
    for index in range(len(config.phases)):
        try:
            _validate(config.for_phase(index), warmup_given=True, ratio_given=False)
        except UserError as error:
            raise UserError(f"phases[{index}]: {error}") from None
    return config


def refuse_phase_model_keys(config: Config) -> None:
    """Refuse a phase's model key that `config.model`'s architecture does not have."""
    for index, phase in enumerate(config.phases):
        try:
            refuse_keys_of_other_layouts(config.model, set(phase.model))
        except UserError as error:
            raise UserError(f"phases[{index}]: {error}") from None


def _build_phase(index: int, values: Any) -> PhaseConfig:
    where = f"phases[{index}]"
    if not isinstance(values, dict):
        raise UserError(f"{where} must be a mapping with steps and the sections it changes, got {values!r}")
    keys = ["steps", "lr_schedule", *PHASE_KEYS]
    for name in values:
        if name not in keys:
            raise unknown(f"key in {where}", name, keys)
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
        annotations = field_types(SECTIONS[section])
        for name, value in given.items():
            if name not in allowed:
                raise unknown(f"key in {where}.{section} (a phase changes only "
                               f"{', '.join(allowed)})", name, list(allowed))
            changes.setdefault(section, {})[name] = check_field(f"{where}.{section}.{name}", f"{section}.{name}",
                                                                annotations[name], value)
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


def _check_source_architecture(config: Config, data_keys_given: frozenset[str]) -> None:
    """`model.architecture` is `model.init_from`'s (its config.json's), where the config does not
    write it: its keys, defaults and objective are checked as that family's, not as BERT's, and
    what does not fit it is refused naming the source. (A folder that cannot be read keeps BERT's
    default: resolving the run refuses it, saying why.)"""
    row, data = family(config.model), config.data
    if data.objective not in row.objectives:
        raise UserError(f"model.init_from {config.init_from} holds {row.display_name} weights, which train "
                        f"with data.objective {' or '.join(row.objectives)}; set data.objective: "
                        f"{row.objectives[0]}")
    if not row.pair_task and data.pair_task != "none" and "pair_task" in data_keys_given:
        raise UserError(no_pair_head(row.display_name, data.pair_task, f"{config.init_from}'s model"))


def _init_from(value: Any, key: str = INIT_FROM,
               what: str = "a model folder, export, run or checkpoint") -> str | None:
    """A `model:` key naming weights a run starts from (`SOURCE_KEYS`): a path, or None."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"model.{key} must be the path of {what}, got {value!r}")
    return value


def _check_generator_source(config: Config) -> None:
    """`model.init_generator_from` starts the generator an objective trains (rtd's), beside the
    discriminator `model.init_from` starts from: neither is read without the other."""
    if config.init_generator_from is None:
        return
    owners = generator_objectives()
    if not objective_rules(config.data.objective).trains_generator:
        raise UserError(f"model.init_generator_from starts the generator of data.objective {' or '.join(owners)}, "
                        f"and this config's objective is {config.data.objective}; remove it, or set "
                        f"data.objective: {owners[0]}")
    if config.init_from is None:
        raise UserError("model.init_generator_from starts the generator of the discriminator model.init_from "
                        "starts from, and this config has no model.init_from; set model.init_from to the "
                        "discriminator's folder (ElectraForPreTraining), or remove model.init_generator_from")


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
    try:
        pad_id = token_roles(tokenizer).pad_token_id  # by role: BERT's [PAD], RoBERTa's <pad>
    except UserError:
        pad_id = None  # a vocabulary without the roles keeps the model's default
    if pad_id is not None and pad_id != model.pad_token_id and config.init_from and model.position_offset:
        raise UserError(f"model.init_from {config.init_from} pads with id {model.pad_token_id}, but the DATA "
                        f"folder's tokenizer with id {pad_id}; {model.architecture}'s positions count from "
                        "the padding's id, so tokenize with the model's own tokenizer")
    if pad_id is not None:
        model.pad_token_id = pad_id
    model.validate()
    check_phase_lengths(config, config.init_from)  # the padding's id moves RoBERTa's first position
    return config
