"""Resolve a pretraining run before anything trains: the config as the run will use it (a new
object; the caller's is never changed), its data, its folder, where its weights start, and every
check that needs the data or the device but allocates nothing."""
from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertpre.config import (
    PHASE_KEYS,
    Config,
    DataConfig,
    check_world_size,
    refuse_phase_model_keys,
    resolve,
)
from bertpre.data import DataFolder, DataMixture, load_mixture
from bertpre.errors import UserError
from bertpre.model.config import BertConfig
from bertpre.model.cost import training_flops_per_token
from bertpre.model.families import family
from bertpre.model.hf_format import read_config
from bertpre.model.layer_norm import resolve_low_precision
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.wordpiece import TOKENIZER_FILE, check_same_vocab
from bertpre.train.checkpoint import latest_checkpoint
from bertpre.train.init_from import (
    GeneratorSource,
    adopt_shape,
    fit_resumed_generator,
    load_source_weights,
    settings_note,
    settle_generator,
    source_vocab_growth,
)
from bertpre.train.memory import pretraining_shortfall
from bertpre.train.model_folders import ModelFolder, resolve_model_folder
from bertpre.train.objectives import objective_for
from bertpre.train.run_config import read_run_config
from bertpre.train.run_folder import check_run_out


@dataclass
class ResolvedRun:
    """A run as it will train: its resolved config and what it reads."""

    config: Config  # vocab_size, pad id and (from model.init_from) the shape filled in
    mixture: DataMixture
    run_dir: Path
    latest: Path | None  # the checkpoint a resume continues from
    source: ModelFolder | None  # the released weights a new run starts from
    new_pieces: list[list[int]] = field(default_factory=list)  # tokens DATA's vocabulary adds to the source's
    generator: GeneratorSource | None = None  # the released generator a new rtd run from `source` starts from
    # the model settings a new run from `source` takes from its config.json (`adopt_settings`), where they differ
    source_settings: dict[str, Any] = field(default_factory=dict)

    @property
    def data(self) -> DataFolder:
        """The first DATA folder: every source shares its tokenizer, which the run copies."""
        return self.mixture.folders[0]


def settle_compile(setting: bool | str, device_type: str, deterministic: bool = False) -> bool:
    """`train.compile` on this device: auto compiles the step on a CUDA GPU, where fusing its
    elementwise kernels paid 18% on an H200 (bench.gpu, 2026-11-28), and keeps the eager step on
    a CPU and under `train.deterministic` (whose bitwise resume no GPU has measured compiled)."""
    if setting == "auto":
        return device_type == "cuda" and not deterministic
    return bool(setting)


def resolve_run(given: Config, *, world_size: int = 1, device: torch.device | None = None,
                resume: bool = True, precision: str | None = None) -> ResolvedRun:
    """`given` resolved against its data, its run folder and its starting weights (a copy:
    `given` is left as it was), every check made that needs no allocation.

    Args:
        device: where it will train; its memory bounds the run (None: no memory check).
        resume: continue from RUN/checkpoints/latest when there is one.
        precision: the precision it trains in (fp32, fp16, bf16), which settles what "auto"
            leaves to it (`model.low_precision_layernorm`); None leaves "auto" as it is.
    """
    config = copy.deepcopy(given)
    for index in range(len(config.phase_ends())):
        check_world_size(config.for_phase(index), world_size)
    mixture = load_mixture(config.data.sources)
    data = mixture.folders[0]
    run_dir = Path(config.train.out)
    check_run_out(run_dir, config.init_from, [folder.path for folder in mixture.folders], config.init_generator_from)
    latest = latest_checkpoint(run_dir) if resume else None
    source, new_pieces, generator, source_settings = settle_model(config, data, latest)
    if precision is not None:  # after settle_model: a source's config.json may name the family
        setting = config.model.low_precision_layernorm
        if setting == "auto" and not family(config.model).low_precision_layernorm:
            setting = False  # auto: on where the family builds it (a typed true is refused there)
        config.model.low_precision_layernorm = resolve_low_precision(setting, precision)
    if device is not None:
        config.train.compile = settle_compile(config.train.compile, device.type, config.train.deterministic)
        check_fits_in_memory(config, device, world_size)
    if not resume and (run_dir / "checkpoints" / "latest").exists():
        raise UserError(f"run folder {run_dir} already holds checkpoints; resume it "
                        "(--resume), or choose a new --out")
    for folder in mixture.folders:
        check_tokenizer_matches(run_dir, folder)
    return ResolvedRun(config=config, mixture=mixture, run_dir=run_dir, latest=latest, source=source,
                       new_pieces=new_pieces, generator=generator, source_settings=source_settings)


def settle_model(config: Config, data: DataFolder | None, latest: Path | None = None
                 ) -> tuple[ModelFolder | None, list[list[int]], GeneratorSource | None, dict[str, Any]]:
    """Fill in `config.model` (in place) as the run will build it: the shape of `model.init_from`
    (a new run) or of the checkpoint `latest` (a resume) and the settings the config does not
    give (dropout, ModernBERT's pooling: `adopt_settings`), the vocabulary grown by the tokens
    DATA adds to the source's, `vocab_size: auto` and the pad id from DATA's tokenizer; and
    rtd's generator size, a released generator's where the config gives none.

    Returns:
        (the released weights a new run starts from, or None; the new tokens' old pieces; the
        released generator it starts its generator from, or None; the settings a new run took
        from the source where they differ from the config's defaults).
    """
    # Weights come from model.init_from only at the start; a resume reads its checkpoint,
    # whose config.json is the shape the run was given.
    source = resolve_model_folder(config.init_from) if config.init_from and latest is None else None
    new_pieces: list[list[int]] = []
    generator = None
    settings: dict[str, Any] = {}
    if source is not None:
        generator = settle_generator(config, source)  # its size first: adopt_shape checks the objective's keys
        settings = adopt_shape(config, source.model_config(), source.path)
        refuse_phase_model_keys(config)
        if data is not None:
            new_pieces = source_vocab_growth(source, data.tokenizer, data.path, config.model.vocab_size)
            config.model.vocab_size += len(new_pieces)
    elif config.init_from and latest is not None:
        fit_resumed_generator(config, latest)
        adopt_shape(config, checkpoint_shape(config, latest), latest)
    if data is not None:
        resolve(config, data.tokenizer)
    return source, new_pieces, generator, settings


def checkpoint_shape(config: Config, checkpoint: Path) -> BertConfig:
    """The shape a run resumed from `checkpoint` (RUN/checkpoints/step-N) started with: its
    config.json, but for the model keys a phase sets (ModernBERT's thetas), which config.json has
    at that phase's values: those are the run's own, from RUN/config.yaml."""
    shape = read_config(checkpoint)
    phased = {name for phase in config.phases for name in phase.model}
    saved = checkpoint.parent.parent / "config.yaml"
    if phased and saved.is_file():
        started = read_run_config(saved).model
        for name in phased:
            setattr(shape, name, getattr(started, name))
    return shape


def resolved_config(given: Config, data: DataFolder | None = None) -> Config:
    """`given` as a run on `data` would resolve it (a copy; `given` is left as it was): what
    `bertpre info` and `bertpre inspect` show, so every command sees the run the trainer sees.
    Without `data`, the config's own first DATA folder where it exists; where none does (not
    tokenized yet), only `model.init_from`'s shape is filled in."""
    config = copy.deepcopy(given)
    if data is None and Path(config.data.sources[0][0]).is_dir():
        data = load_mixture(config.data.sources).folders[0]
    settle_model(config, data)
    return config


def check_fits_in_memory(config: Config, device: torch.device, world_size: int = 1) -> None:
    """Refuse, before anything is allocated, a run that cannot fit in the device's whole memory
    even at its leanest (`bertpre.model.cost.training_memory_floor`, the estimate for the
    device's type, of every network the objective trains: `Objective.cost_parts`), in any of its
    phases."""
    for index in range(max(1, len(config.phases))):
        phase = config.for_phase(index)
        objective = objective_for(phase.data.objective, phase.objective)
        options = objective.cost_options(phase)
        options.pop("micro_batch_size", None)
        if options:  # every row of the device's share of a step keeps its memory
            options["memory_rows"] = phase.train.batch_size // world_size
        main, *beside = objective.cost_parts(phase)
        problem = pretraining_shortfall(main.model, phase.data.max_seq_length, main.predicted_share,
                                        phase.train.micro_batch_size, device,
                                        beside=[(part.model, part.predicted_share) for part in beside], **options)
        if problem:
            where_phase = f"phase {index + 1}: " if config.phases else ""
            raise UserError(f"{where_phase}{problem} (`bertpre info --config CFG` estimates the memory)")


def check_tokenizer_matches(run_dir: Path, data: DataFolder) -> None:
    """DATA's dataset must come from DATA's tokenizer, and a resumed run must keep its vocabulary."""
    recorded = (data.manifest.get("tokenizer") or {}).get("sha256") if isinstance(data.manifest, dict) else None
    tokenizer_file = data.tokenizer_dir / TOKENIZER_FILE
    if recorded and tokenizer_file.is_file():
        if hashlib.sha256(tokenizer_file.read_bytes()).hexdigest() != recorded:
            raise UserError(f"DATA folder {data.path} holds a tokenizer other than the one its "
                            "dataset was made with (tokenizer.json changed); run `bertpre "
                            "tokenize` again")
    saved = run_dir / "tokenizer"
    if saved.is_dir():
        check_same_vocab(data.tokenizer, load_tokenizer(saved), data.path, f"run {run_dir}", "a new --out")


def build_model(run: ResolvedRun, say: Callable[[str], None]) -> nn.Module:
    """The run's pretraining model, drawn from the current seed, its family's as the table says;
    a new run from `model.init_from` takes the source's weights (each thing to know said)."""
    # A copy: a phase changes the model's own (`Trainer.fit_model`), never the run's config.
    objective = objective_for(run.config.data.objective, run.config.objective)
    model = objective.build_model(copy.copy(run.config.model), run.data.tokenizer,
                                  family(run.config.model).build_pretraining)
    if run.source is not None:
        # Loaded before it is announced: a damaged source is refused without a note saying it is used.
        notes = load_source_weights(model, run.source, run.new_pieces, run.generator)
        say(f"starting from the weights of {run.source.path}")
        if run.source_settings:
            say(settings_note(run.source_settings, run.source.path))
        for line in notes:
            say(line)
    return model


def fit_phase_model(model: nn.Module, config: Config) -> None:
    """Give the model a phase's model keys (PHASE_KEYS: ModernBERT's rotary thetas), which it
    reads at each forward, so a checkpoint's config.json says the phase's values. The model's
    config is its own copy (`build_model`): the run's config keeps the values it was given."""
    for name in PHASE_KEYS["model"]:
        if hasattr(model.config, name):
            setattr(model.config, name, getattr(config.model, name))


def predicted_share(data_config: DataConfig) -> float:
    """The share of a row's tokens the objective's head predicts (what the cost model charges)."""
    return objective_for(data_config.objective).predicted_share(data_config)


def token_flops(config: Config) -> float:
    """Training FLOPs per token of one phase's config (what MFU is measured against): every network
    its objective trains (`Objective.cost_parts`), each at its own predicted share."""
    objective = objective_for(config.data.objective, config.objective)
    options = objective.cost_options(config)
    return sum(training_flops_per_token(part.model, config.data.max_seq_length, part.predicted_share, **options)
               + part.head_flops for part in objective.cost_parts(config))
