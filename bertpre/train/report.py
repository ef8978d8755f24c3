"""What a run tells its user: the block it starts with, the time it expects to take, the block it
ends with, the lines it stops with (a full disk, a diverged loss), and the TensorBoard layout."""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bertpre.config import PHASE_KEYS, Config
from bertpre.data import DataMixture
from bertpre.errors import UserError
from bertpre.model.families import family
from bertpre.train.cpu_note import slow_cpu_note
from bertpre.train.optim import scheduled_learning_rate, wsd_decay_start
from bertpre.train.runtime import Runtime

# TensorBoard's Custom Scalars tab: one chart per question, train and eval on the same axes, so
# a run with a single evaluation shows it as a point on the loss curve. Tags are regexes.
CUSTOM_SCALARS_LAYOUT = {
    "1. loss": {
        "loss (train and eval)": ["Multiline", [r"^train/loss$", r"^eval/loss$"]],
        "MLM loss (train and eval, each source)": ["Multiline", [r"^train/mlm_loss$", r"^eval/(.+/)?mlm_loss$"]],
        "PLM / CLM loss (XLNet; train and eval)": ["Multiline", [r"^train/[pc]lm_loss$", r"^eval/(.+/)?[pc]lm_loss$"]],
        "pair loss (train and eval)": ["Multiline", [r"^train/pair_loss$", r"^eval/(.+/)?pair_loss$"]],
    },
    "1b. downstream (bertpre finetune)": {
        "downstream scores by pretraining step (mean over seeds)": ["Multiline", [r"^downstream/"]],
        "their std over seeds": ["Multiline", [r"^downstream_std/"]],
    },
    "2. accuracy": {
        "MLM accuracy (train and eval)": ["Multiline", [r"^train/mlm_acc$", r"^eval/(.+/)?mlm_acc$"]],
        "PLM / CLM accuracy (XLNet; train and eval)": ["Multiline", [r"^train/[pc]lm_acc$", r"^eval/(.+/)?[pc]lm_acc$"]],
        "MLM accuracy by action ([MASK], random, kept; eval)": ["Multiline", [r"^eval/mlm_acc_(mask|random|kept)$"]],
        "pair accuracy (train and eval)": ["Multiline", [r"^train/pair_acc$", r"^eval/(.+/)?pair_acc$"]],
    },
    "3. optimization": {
        "learning rate": ["Multiline", [r"^train/lr$"]],
        "gradient norm": ["Multiline", [r"^train/grad_norm$"]],
    },
    "4. speed": {
        "tokens/s": ["Multiline", [r"^perf/tokens_per_s$"]],
        "MFU (GPU)": ["Multiline", [r"^perf/mfu$"]],
    },
}


@dataclass
class RunPlan:
    """The numbers of the start block."""

    run_dir: str
    parameters: int
    shape: str  # e.g. "12 layers, hidden 768, absolute positions"
    start_step: int
    max_steps: int
    batch_size: int
    seq_length: int
    precision: str
    devices: str  # e.g. "1 process on cpu", "8 processes on cuda (NVIDIA H100)"
    documents: int
    corpus_tokens: int
    steps_per_epoch: float
    phases: int = 1
    architecture: str = "BERT"
    schedule: str = ""  # the learning rate's schedule in words (`schedule_words`)

    @property
    def tokens_per_step(self) -> int:
        """Tokens an optimizer step reads at most (sequences × length; padding included)."""
        return self.batch_size * self.seq_length


def plan_run(config: Config, phase: Config, *, run_dir: Path, runtime: Runtime, mixture: DataMixture,
             parameters: int, step: int, instances: int, objective_words: str) -> RunPlan:
    """The start block's numbers for a run at `step` in `phase`, from its config, model, runtime
    and data (`instances`: this process's in an epoch); the model's family says its shape."""
    row = family(config.model)
    device = runtime.device.type
    if device == "cuda":
        device += f" ({torch.cuda.get_device_name(runtime.device)})"
    counts = [folder.manifest.get("counts", {}) if isinstance(folder.manifest, dict) else {}
              for folder in mixture.folders]
    return RunPlan(
        run_dir=str(run_dir), parameters=parameters, shape=row.shape_words(config.model) + objective_words,
        start_step=step,
        max_steps=config.train.max_steps, batch_size=phase.train.batch_size,
        seq_length=phase.data.max_seq_length,
        precision=runtime.precision_line or f"precision {runtime.precision}",
        devices=f"{runtime.world_size} process{'es' if runtime.world_size > 1 else ''} on {device}"
                + ("; the step compiled (train.compile: its first step compiles it)"
                   if config.train.compile is True else ""),
        documents=sum(len(folder.train) for folder in mixture.folders),
        corpus_tokens=sum(int(count.get("tokens", 0)) for count in counts),
        steps_per_epoch=instances * runtime.world_size / phase.train.batch_size,
        phases=len(config.phases), architecture=row.display_name, schedule=schedule_words(config, step),
    )


def start_block(plan: RunPlan) -> str:
    """The lines a run opens with: what it trains, on what, for how long."""
    remaining = plan.max_steps - plan.start_step
    epochs = plan.max_steps / plan.steps_per_epoch if plan.steps_per_epoch else math.inf
    steps = (f"{plan.max_steps:,} steps" if not plan.start_step
             else f"steps {plan.start_step:,} to {plan.max_steps:,} ({remaining:,} to go)")
    phases = f" in {plan.phases} phases (the figures are phase 1's)" if plan.phases > 1 else ""
    epochs_text = f"{epochs:,.2f}" if epochs < 10 else f"{epochs:,.1f}"
    return "\n".join([
        f"run {plan.run_dir}: {plan.architecture} of {plan.parameters / 1e6:,.1f}M parameters ({plan.shape})",
        f"  {steps}{phases}, {plan.batch_size:,} sequences of {plan.seq_length} tokens a step: "
        f"{plan.tokens_per_step:,} tokens a step, {plan.tokens_per_step * plan.max_steps:,} in all",
        f"  {plan.precision}; {plan.devices}",
        f"  data: {plan.documents:,} documents, {plan.corpus_tokens:,} tokens; an epoch is "
        f"{plan.steps_per_epoch:,.0f} steps, so the run reads {epochs_text} epochs",
        *([f"  {plan.schedule}"] if plan.schedule else []),
    ])


def schedule_words(config: Config, step: int) -> str:
    """The learning-rate schedule that runs `step` (its phase's span) with its steps, e.g.
    `learning rate 0.002 (wsd): warmup to step 30, stable until step 480, then 1-sqrt decay to
    0 at step 600 (the last 120 steps)`."""
    index = config.phase_at(step)
    start, end = config.schedule_span(index)
    optim = config.for_phase(index).optim
    warmup_end = start + optim.warmup_steps
    parts = [f"warmup to step {warmup_end:,}"] if optim.warmup_steps else []
    name = " (wsd)" if optim.schedule == "wsd" else ""
    if warmup_end >= end:  # warned about: the rate never reaches lr
        return f"learning rate {optim.lr:g}{name}: warmup to step {warmup_end:,}, past the schedule's end at step {end:,}"
    if optim.schedule == "constant":
        parts.append("constant")
    elif optim.schedule == "wsd":
        decay_start = start + wsd_decay_start(optim.warmup_steps, end - start, optim.decay_fraction)
        if decay_start > warmup_end:
            parts.append(f"stable until step {decay_start:,}")
        parts.append(f"{optim.decay_shape} decay to 0 at step {end:,} (the last {end - decay_start:,} steps)")
    else:
        parts.append(f"{optim.schedule} decay to 0 at step {end:,}")
    steps = parts[-1] if len(parts) == 1 else f"{', '.join(parts[:-1])}, then {parts[-1]}"
    return f"learning rate {optim.lr:g}{name}: {steps}"


def format_duration(seconds: float) -> str:
    """2 h 05 min, 4 min 10 s, 12 s; 19,617,567 h 30 min (a typo'd max_steps); 'an unknown time'."""
    if not math.isfinite(seconds):
        return "an unknown time"
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours:,} h {minutes:02d} min"
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def eta_line(*, step: int, max_steps: int, seconds_per_step: float, tokens_per_s: float,
             now: datetime.datetime | None = None) -> str:
    """The time to finish at the measured rate, said once after the first logging window."""
    remaining = (max_steps - step) * seconds_per_step
    try:
        finish = f"around {(now or datetime.datetime.now()) + datetime.timedelta(seconds=remaining):%Y-%m-%d %H:%M}"
    except (OverflowError, ValueError):  # past the year 9999 (or a rate that is not a number)
        finish = "past the year 9999" if remaining > 0 else "at an unknown time"
    return (f"at {tokens_per_s:,.0f} tokens/s ({seconds_per_step:.3g} s a step): about "
            f"{format_duration(remaining)} to step {max_steps:,} ({finish})")


def first_window_lines(*, step: int, max_steps: int, clock: tuple[float, int], window: tuple[float, int],
                       tokens_per_s: float, token_flops: float | None) -> tuple[str, str | None]:
    """After the first logging window: the ETA line, and on a CPU (`token_flops` given) the note
    for a step far below the machine's measured rate (or None).

    Args:
        clock: (perf_counter, step) after the session's first step, whose start-up the ETA leaves out.
        window: (perf_counter, step) at the window's start, the measure of a window of one step.
    """
    start, start_step = clock if step > clock[1] else window
    seconds_per_step = (time.perf_counter() - start) / (step - start_step)
    note = slow_cpu_note(tokens_per_s * token_flops) if token_flops is not None else None
    return (eta_line(step=step, max_steps=max_steps, seconds_per_step=seconds_per_step, tokens_per_s=tokens_per_s),
            note)


def phase_line(config: Config, phase: Config, objective_words: str, phase_end: int) -> str:
    """What a phase reads and runs, said as it starts: lengths, the objective's words, batch, lr,
    the model keys a phase changes, and its last step."""
    phased = [name for name in PHASE_KEYS["model"] if any(name in each.model for each in config.phases)]
    return (f"max_seq_length {phase.data.max_seq_length}, {objective_words}, batch {phase.train.batch_size} "
            f"(micro-batch {phase.train.micro_batch_size}), lr {phase.optim.lr:g}, "
            + "".join(f"{name} {getattr(phase.model, name):g}, " for name in phased)
            + f"until step {phase_end}")


@dataclass
class TrainResult:
    """What a `pretrain` call did."""

    run_dir: Path
    step: int  # optimizer steps done, in total
    skipped_steps: int = 0
    exit_code: int = 0  # 130 after SIGINT, 143 after SIGTERM
    notes: list[str] = field(default_factory=list)


def end_block(*, run_dir: str, start_step: int, step: int, tokens_seen: int, wall_seconds: float,
              train: dict[str, float], evaluation: dict[str, float], checkpoint: str | None,
              stopped: bool, metric_names: tuple[str, ...] = ("loss",), export_to: str | None = None) -> str:
    """The lines a run closes with: what it did, where it left things, what to run next.

    `metric_names`: what it shows of the last window and evaluation, those they have (the
    objective's `summary_metrics`). `export_to`: where the caller exports the run itself (the
    demo), said instead of the command."""

    def metrics(values: dict[str, float], names: tuple[str, ...]) -> str:
        shown = [f"{name} {values[name]:.4f}" for name in names if name in values]
        return ", ".join(shown) if shown else "none yet"

    state = "stopped" if stopped else "finished"
    return "\n".join([
        f"run {run_dir} {state} at step {step:,} ({step - start_step:,} steps this session, "
        f"{tokens_seen:,} tokens, {format_duration(wall_seconds)})",
        f"  last train window: {metrics(train, metric_names)}",
        f"  last evaluation:   {metrics(evaluation, metric_names)}",
        f"  checkpoint: {checkpoint or 'none saved'}",
        f"  TensorBoard: tensorboard --logdir {shlex.quote(f'{run_dir}/tensorboard')} "
        "(open the Custom Scalars tab)",
        f"  export: {export_to} (written next)" if export_to else
        f"  export: bertpre export {shlex.quote(run_dir)} --out {shlex.quote(f'{run_dir}-export')}",
    ])


def finished_run_note(config: Config, step: int) -> str:
    """What a run started again at `train.max_steps` says: nothing to do, and how to go on."""
    run_dir = config.train.out
    lines = [f"run folder {run_dir} is already at step {step:,} = train.max_steps; nothing to do"]
    longer = config.phase_ends()[-1] if config.phases else 2 * step  # phases cap max_steps
    if longer > step:
        lines.append(f"  to train longer: bertpre pretrain --config "
                     f"{shlex.quote(f'{run_dir}/config.yaml')} --out {shlex.quote(run_dir)} "
                     f"--set train.max_steps={longer}")
    else:
        lines.append(f"  to train longer: its phases end here; start a new run from its weights "
                     f"with --init-from {shlex.quote(run_dir)}")
    lines.append(f"  to export it: bertpre export {shlex.quote(run_dir)} "
                 f"--out {shlex.quote(f'{run_dir}-export')}")
    return "\n".join(lines)


def schedule_change_note(saved: Config, new: Config, step: int) -> str:
    """What a resume that raises `train.max_steps` does to the learning rate at `step`: the
    schedule is the new config's, so its decay stretches to the new end (see the README)."""
    before, after = scheduled_learning_rate(saved, step), scheduled_learning_rate(new, step)
    old_end, new_end = saved.phase_ends()[-1], new.phase_ends()[-1]
    if old_end == new_end or new.optim.schedule == "constant":
        return f"the learning-rate schedule does not change: {after:.4g} at step {step:,}"
    if new.optim.schedule == "wsd":
        return wsd_change_note(saved, new, step)
    decay = f"the {new.optim.schedule} decay now ends at step {new_end:,} instead of {old_end:,}"
    if before == after:  # still warming up
        return f"the learning rate at step {step:,} stays {after:.4g} (warmup); {decay}"
    return f"the learning rate jumps from {before:.4g} to {after:.4g} at step {step:,}: {decay}"


def wsd_decay(config: Config) -> tuple[int, int]:
    """The steps [start, end) of the decay that ends `config`'s last schedule span (WSD)."""
    index = max(0, len(config.phases) - 1)
    start, end = config.schedule_span(index)
    optim = config.for_phase(index).optim
    return start + wsd_decay_start(optim.warmup_steps, end - start, optim.decay_fraction), end


def wsd_change_note(saved: Config, new: Config, step: int) -> str:
    """`schedule_change_note` for a WSD run: the stable phase runs on to the new decay. A run
    whose decay had begun goes back up to the new schedule's learning rate, the stable one
    where the new decay is still ahead: the schedule is a function of the config alone."""
    before, after = scheduled_learning_rate(saved, step), scheduled_learning_rate(new, step)
    (old_start, old_end), (new_start, new_end) = wsd_decay(saved), wsd_decay(new)
    shape, lr = new.optim.decay_shape, new.for_phase(max(0, len(new.phases) - 1)).optim.lr
    decay = (f"the {shape} decay over the last {new_end - new_start:,} steps starts there and ends "
             f"at step {new_end:,}")
    if before == after:  # warmup or stable: nothing the run did changes
        where = "stable" if after == lr else "warmup"
        return (f"the learning rate at step {step:,} stays {after:.4g} ({where}); the WSD stable phase "
                f"now runs to step {new_start:,} and {decay} (it was to start at step {old_start:,})")
    if step < new_start:
        return (f"the WSD decay had begun at step {old_start:,}, so the learning rate jumps back up from "
                f"{before:.4g} to the stable {after:.4g} at step {step:,} (expect the loss the decay "
                f"brought down to rise again): the stable phase now runs to step {new_start:,} and {decay}; "
                "to lengthen a WSD run without this, resume it with the larger train.max_steps before "
                f"it reaches step {old_start:,}")
    return (f"the WSD decay had begun at step {old_start:,}, so the learning rate jumps back up from "
            f"{before:.4g} to {after:.4g} at step {step:,}: the {shape} decay now runs over the last "
            f"{new_end - new_start:,} steps, from step {new_start:,} to {new_end:,} instead of "
            f"{old_start:,} to {old_end:,}")


def kept_checkpoint(run_dir: Path) -> str:
    """Which checkpoint a stopped run can resume from, said for people."""
    latest = run_dir / "checkpoints" / "latest"
    return (f"the last good checkpoint is {json.dumps(latest.read_text().strip())}" if latest.exists()
            else "no checkpoint was written yet")


def write_failed(error: Exception, what: str, run_dir: Path) -> UserError:
    """The one line for a write the disk refused (full, read-only): what, why, what is kept."""
    reason = (f"{error.strerror}: {error.filename}" if isinstance(error, OSError)
              else (str(error).splitlines() or [type(error).__name__])[0])
    with contextlib.suppress(OSError):  # torch.save's own message does not say "disk full"
        reason += f"; {shutil.disk_usage(run_dir).free / 2**20:.1f} MiB free there"
    return UserError(f"cannot write {what} ({reason}); {kept_checkpoint(run_dir)}; free disk space "
                     f"or make {run_dir} writable, then run the same command again to resume")


def worker_lost(lost: str, run_dir: Path) -> UserError:
    """The one line for a data loading process that died (`bertpre.errors.dataloader_worker_lost`
    says how): what is kept, and how to go on."""
    return UserError(f"{lost}; {kept_checkpoint(run_dir)}; run the same command again to resume "
                     "(with a lower data.num_workers if memory is short)")


def diverged_message(step: int, what: str, run_dir: Path) -> str:
    """The one line for a run that stopped being finite at (1-based) `step`."""
    return (f"training diverged at step {step}: {what}; {kept_checkpoint(run_dir)}; "
            "lower optim.lr, raise optim.warmup_steps or use train.precision=bf16")
