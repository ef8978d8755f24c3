"""Resolve a pretraining run before anything trains: the config as the run will use it (a new
object; the caller's is never changed), its data, its folder, where its weights start, and every
check that needs the data or the device but allocates nothing."""
from __future__ import annotations

import copy
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bertpre.config import Config, check_world_size, resolve
from bertpre.data import DataFolder, DataMixture, load_mixture
from bertpre.errors import UserError
from bertpre.model.cost import memory_shortfall
from bertpre.model.hf_format import read_config
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.wordpiece import TOKENIZER_FILE, check_same_vocab
from bertpre.train.checkpoint import ModelFolder, latest_checkpoint, resolve_model_folder
from bertpre.train.init_from import adopt_shape, source_vocab_growth
from bertpre.train.objectives import objective_for
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

    @property
    def data(self) -> DataFolder:
        """The first DATA folder: every source shares its tokenizer, which the run copies."""
        return self.mixture.folders[0]


def resolve_run(given: Config, *, world_size: int = 1, device: torch.device | None = None,
                resume: bool = True) -> ResolvedRun:
    """`given` resolved against its data, its run folder and its starting weights (a copy:
    `given` is left as it was), every check made that needs no allocation.

    Args:
        device: where it will train; its memory bounds the run (None: no memory check).
        resume: continue from RUN/checkpoints/latest when there is one.
    """
    config = copy.deepcopy(given)
    for index in range(len(config.phase_ends())):
        check_world_size(config.for_phase(index), world_size)
    mixture = load_mixture(config.data.sources)
    data = mixture.folders[0]
    run_dir = Path(config.train.out)
    check_run_out(run_dir, config.init_from, [folder.path for folder in mixture.folders])
    latest = latest_checkpoint(run_dir) if resume else None
    # Weights come from model.init_from only at the start; a resume reads its checkpoint,
    # whose config.json is the shape the run was given.
    source = resolve_model_folder(config.init_from) if config.init_from and latest is None else None
    new_pieces: list[list[int]] = []
    if source is not None:
        adopt_shape(config, source.model_config(), source.path)
        new_pieces = source_vocab_growth(source, data.tokenizer, data.path, config.model.vocab_size)
        config.model.vocab_size += len(new_pieces)
    elif config.init_from:
        adopt_shape(config, read_config(latest), latest)
    resolve(config, data.tokenizer)
    if device is not None:
        check_fits_in_memory(config, device, world_size)
    if not resume and (run_dir / "checkpoints" / "latest").exists():
        raise UserError(f"run folder {run_dir} already holds checkpoints; resume it "
                        "(--resume), or choose a new --out")
    for folder in mixture.folders:
        check_tokenizer_matches(run_dir, folder)
    return ResolvedRun(config=config, mixture=mixture, run_dir=run_dir, latest=latest, source=source,
                       new_pieces=new_pieces)


def cost_options(config: Config) -> dict[str, int]:
    """The cost model's objective-specific arguments for one phase's config (none for mlm)."""
    return objective_for(config.data.objective).cost_options(config)


def check_fits_in_memory(config: Config, device: torch.device, world_size: int = 1) -> None:
    """Refuse, before anything is allocated, a run that cannot fit in the device's whole memory
    even at its leanest (`bertpre.model.cost.training_memory_floor`), in any of its phases."""
    if device.type == "cuda":
        available, where = torch.cuda.get_device_properties(device).total_memory, "the GPU has"
    else:
        available, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine has"
    for index in range(max(1, len(config.phases))):
        phase = config.for_phase(index)
        options = cost_options(phase)
        options.pop("micro_batch_size", None)
        if options:  # every row of the device's share of a step keeps its memory
            options["memory_rows"] = phase.train.batch_size // world_size
        problem = memory_shortfall(config.model, phase.data.max_seq_length, phase.data.predicted_share,
                                   phase.train.micro_batch_size, available, where, **options)
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
        check_same_vocab(data.tokenizer, load_tokenizer(saved), data.path, f"run {run_dir}")
