"""The Trainer: one pretraining run with accumulation, mixed precision, eval, checkpoints, resume, DDP."""
from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from bertpre.config import Config, check_world_size
from bertpre.errors import WRITE_ERRNOS, UserError, dataloader_worker_lost
from bertpre.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from bertpre.train.compiled_step import compile_failure, eager_fallback_note, wrap_step
from bertpre.train.divergence import DivergenceWatch, TrainingDiverged
from bertpre.train.evaluation import build_evaluator
from bertpre.train.metrics import MetricsWindow, MetricsWriter, ProgressBar, StepStats, gpu_scalars
from bertpre.train.objectives import objective_for, step_totals
from bertpre.train.optim import build_optimizer, learning_rate
from bertpre.train.report import (
    CUSTOM_SCALARS_LAYOUT,
    RunPlan,
    TrainResult,
    end_block,
    finished_run_note,
    first_window_lines,
    phase_line,
    plan_run,
    start_block,
    worker_lost,
    write_failed,
)
from bertpre.train.run_folder import RunLock, prepare_run_folder, resume_notes, run_texts
from bertpre.train.runtime import (
    SIGNAL_EXIT_CODES,
    Runtime,
    StopSignals,
    all_reduce_sum,
    init_runtime,
    seed_everything,
    shutdown,
)
from bertpre.train.setup import build_model, fit_phase_model, resolve_run, token_flops

__all__ = ["TrainResult", "Trainer", "TrainingDiverged", "compile_failure", "pretrain"]


def pretrain(config: Config, *, resume: bool = True, export_to: str | None = None) -> TrainResult:
    """Train `BertForPreTraining` as `config` says, into the run folder `config.train.out`.

    Resumes from `RUN/checkpoints/latest` when `resume` and a checkpoint exist. `export_to`: the
    folder the caller exports the run to when it ends, named in the closing lines.
    """
    runtime = init_runtime(config.train.precision, device=config.train.device,
                           deterministic=config.train.deterministic)
    try:
        with Trainer(config, runtime, resume=resume, export_to=export_to) as trainer:
            return trainer.train()
    except OSError as error:  # a log or config write on a full or read-only disk
        if error.errno not in WRITE_ERRNOS:
            raise
        raise write_failed(error, "to the run folder", Path(config.train.out)) from None
    except RuntimeError as error:  # a data loading process killed from outside: not a bug here
        if (lost := dataloader_worker_lost(error)) is None:
            raise
        raise worker_lost(lost, Path(config.train.out)) from None
    finally:
        shutdown(runtime)


class Trainer:
    """One pretraining run: built from a config, trained step by step, saved and resumed whole.

    `__init__` builds the data, model, optimizer, scaler, batch stream, metrics and evaluator
    and restores the latest checkpoint; `train()` is the loop; `train_step()` is one optimizer
    step. What must survive a restart is in `state_dict()` (the trainer's counters and the
    stream's position) and in the model, optimizer and scaler, saved together by `save()`.
    """

    def __init__(self, config: Config, runtime: Runtime | None = None, *, resume: bool = True,
                 export_to: str | None = None) -> None:
        self.export_to = export_to
        runtime = runtime or init_runtime(config.train.precision, device=config.train.device,
                                          deterministic=config.train.deterministic)
        run = resolve_run(config, world_size=runtime.world_size, device=runtime.device, resume=resume,
                          precision=runtime.precision)
        self.config, self.runtime, self.mixture, self.run_dir = run.config, runtime, run.mixture, run.run_dir
        train = self.config.train
        # train.compile as given: auto falls back to the eager step where compiling fails, a typed
        # true is refused in one line; both are settled by the first micro-batch (fixed shapes: no
        # recompile after it)
        self.compile_auto, self.compile_unproven = config.train.compile == "auto", train.compile is True
        self.lock = RunLock(self.run_dir)
        if runtime.is_main:
            self.lock.check_free()  # before reading a checkpoint another process may be pruning
        self.notes = []
        if runtime.note:
            self.say(runtime.note)
        if runtime.is_main:
            print("".join(f"warning: {warning}\n" for warning in self.config.warnings()), end="", file=sys.stderr)
        seed_everything(train.seed)
        self.objective = objective_for(self.config.data.objective, self.config.objective)
        self.model = build_model(run, self.say)
        self.model.to(runtime.device)
        self.model.set_gradient_checkpointing(train.gradient_checkpointing)
        self.optimizer = build_optimizer(self.model, self.config.optim, runtime.device)
        self.scaler = runtime.grad_scaler()
        seed_everything(train.seed + runtime.rank)  # dropout differs across processes
        self.step, self.skipped_steps = 0, 0
        self.tokens_seen = 0  # real tokens trained on, over all sessions of the run
        self.last_train: dict[str, float] = {}  # the last logging window's train/* scalars
        self.last_eval: dict[str, float] = {}  # the last evaluation's results
        self.divergence = DivergenceWatch(runtime.device, self.run_dir)
        self.restore(run.latest)
        if runtime.is_main:
            self.lock.acquire()
        try:
            self.start_run(resumed=run.latest is not None)
        except BaseException:
            self.lock.release()
            raise

    def restore(self, latest: Path | None) -> None:
        """Continue from checkpoint `latest` (its state, stream position and carry), or start the
        first phase."""
        if latest is None:
            self.enter_phase(0)
            return
        resume_notes(self.run_dir, self.config, 0)  # a changed shape (rtd's generator_size): refused before loading
        self.load_state_dict(load_checkpoint(latest, model=self.model, optimizer=self.optimizer,
                                             scaler=self.scaler, runtime=self.runtime), latest)
        if self.stream.state_dict()["position"]:  # a phase's end starts the next with no carry
            self.carry.restore(latest, self.runtime.rank, self.runtime.device)
        for note in resume_notes(self.run_dir, self.config, self.step):
            self.say(note)
        if self.runtime.is_main:
            print(f"resuming from {latest} (step {self.step}, epoch {self.stream.epoch})", file=sys.stderr)

    def say(self, note: str) -> None:
        """Tell the user something about this run (once, from the main process) and keep it."""
        self.notes.append(note)
        if self.runtime.is_main:
            print(f"note: {note}", file=sys.stderr)

    def start_run(self, *, resumed: bool) -> None:
        """Write the run folder's config and tokenizer; set up the model wrapper, evaluator and logs."""
        config, runtime, train = self.config, self.runtime, self.config.train
        self.stream.check_epoch()  # too little data: refused before the run folder is made
        if runtime.is_main:
            prepare_run_folder(self.run_dir, self.config, self.mixture)
        self.trained_model = self.wrap_model()
        # Read after each fp16 step (whether it was skipped); before the first, it needs no read.
        self.loss_scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        self.metrics = MetricsWriter(self.run_dir, enabled=runtime.is_main,
                                     purge_after=self.step if resumed else None)
        self.progress = ProgressBar(start_step=self.step, max_steps=train.max_steps,
                                    enabled=runtime.is_main and self.step < train.max_steps)
        self.window = MetricsWindow(self.step, self.objective)
        self.start_step, self.eta_said = self.step, False
        self.metrics.describe_run(CUSTOM_SCALARS_LAYOUT, run_texts(self.config, self.mixture))
        shares = self.objective.shares(self.stream.instances)
        if shares:  # said once: equal in every epoch
            self.metrics.log(self.step, {f"data/share/{name}": share for name, share in shares.items()})
        if len(config.phases) > 1 and runtime.is_main:
            print(f"phase {self.phase + 1} of {len(config.phases)}: {self.describe_phase()}",
                  file=sys.stderr)

    def run_plan(self) -> RunPlan:
        """The start block's numbers, from the config, the model, the runtime and the data."""
        return plan_run(self.config, self.phase_config, run_dir=self.run_dir, runtime=self.runtime,
                        mixture=self.mixture, parameters=self.model.num_parameters(), step=self.step,
                        instances=len(self.stream.instances),
                        objective_words=self.objective.summary(self.phase_config.data))

    def enter_phase(self, index: int, stream_state: dict[str, int] | None = None) -> None:
        """Build phase `index`'s batches, evaluator and step shape; its stream starts at
        `stream_state` (epoch, position), else at epoch 0."""
        config, runtime = self.config.for_phase(index), self.runtime
        self.phase, self.phase_config = index, config
        self.phase_end = self.config.phase_ends()[index]
        self.accumulation = check_world_size(config, runtime.world_size)
        seed = config.train.seed
        fit_phase_model(self.model, config)
        self.objective.prepare_model(self.model, config)
        self.stream = self.objective.stream(self.mixture, config, accumulation=self.accumulation,
                                            rank=runtime.rank, world_size=runtime.world_size,
                                            pin_memory=runtime.device.type == "cuda", position=stream_state)
        self.carry = self.objective.new_carry(self.accumulation, config)
        # Every process scores its share of the validation batches, at the phase's length.
        self.evaluator = build_evaluator(self.mixture, config.data,
                                         micro_batch_size=config.train.micro_batch_size, seed=seed,
                                         rank=runtime.rank, world_size=runtime.world_size)
        self.token_flops = token_flops(config)

    def next_phase(self) -> None:
        """Cross into the next phase; its data continues from the next epoch, so that its
        pairs and masks are not the previous phase's first epoch again."""
        self.enter_phase(self.phase + 1, {"epoch": self.stream.epoch + 1, "position": 0})
        if self.runtime.is_main:
            print(f"\nphase {self.phase + 1} of {len(self.config.phases)} from step {self.step}: "
                  f"{self.describe_phase()}", file=sys.stderr)

    def describe_phase(self) -> str:
        return phase_line(self.config, self.phase_config, self.objective.describe(self.phase_config.data),
                          self.phase_end)

    def phase_at(self, step: int) -> int:
        """The phase that runs the update at 0-based `step` (the last one past the end)."""
        ends = self.config.phase_ends()
        return next((index for index, end in enumerate(ends) if step < end), len(ends) - 1)

    def close(self) -> None:
        """End the data loading processes now, and release the run folder for the next process."""
        self.stream.close()
        self.lock.release()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def train(self) -> TrainResult:
        """Run steps until `train.max_steps` or a stop signal; log, evaluate and save on schedule."""
        train = self.config.train
        exit_code = 0
        if self.step >= train.max_steps:  # a finished run started again: say so, train nothing
            self.metrics.close()
            self.progress.close()
            if self.runtime.is_main:
                self.progress.write(finished_run_note(self.config, self.step))
            return TrainResult(run_dir=self.run_dir, step=self.step,
                               skipped_steps=self.skipped_steps, notes=self.notes)
        if self.runtime.is_main:
            self.progress.write(start_block(self.run_plan()))
        started = time.perf_counter()
        with StopSignals() as signals, contextlib.closing(self.metrics), \
                contextlib.closing(self.progress):
            while self.step < train.max_steps:
                if self.step >= self.phase_end and self.phase + 1 < len(self.config.phase_ends()):
                    self.next_phase()  # its lengths, batch and schedule from this step on
                stats = self.train_step()
                if stats.skipped:
                    continue
                self.step += 1
                if self.step == self.start_step + 1:  # the ETA leaves out the first step's start-up
                    self.eta_clock = (time.perf_counter(), self.step)
                self.tokens_seen += stats.tokens
                self.window.add(stats.device_sums, stats.host_counts, stats.grad_norm)
                finished = self.step == train.max_steps
                if self.step % train.log_every == 0 or finished:
                    self.log(stats)
                pause_start = time.perf_counter()  # eval and saving are not counted in tokens/s
                if self.step % train.eval_every == 0 or finished:
                    self.evaluate()
                stop, save_asked = signals.agreed(self.runtime)
                if self.step % train.save_every == 0 or finished or stop or save_asked:
                    self.check_finite()  # a diverged model is never saved
                    self.metrics.flush()  # logs reach the checkpoint's step before it exists
                    self.save()
                if save_asked and not stop and self.runtime.is_main:
                    self.progress.write(f"note: saved step {self.step} as SIGUSR1 asked; training goes on")
                if stop:
                    exit_code = SIGNAL_EXIT_CODES.get(stop, 130)
                    break
                self.window.pause(time.perf_counter() - pause_start)
        if self.runtime.is_main:
            latest = latest_checkpoint(self.run_dir)
            self.progress.write(end_block(
                run_dir=str(self.run_dir), start_step=self.start_step, step=self.step,
                tokens_seen=self.tokens_seen, wall_seconds=time.perf_counter() - started,
                train=self.last_train, evaluation=self.last_eval,
                checkpoint=None if latest is None else str(latest), stopped=bool(exit_code),
                metric_names=self.objective.summary_metrics, export_to=self.export_to))
        return TrainResult(run_dir=self.run_dir, step=self.step, skipped_steps=self.skipped_steps,
                           exit_code=exit_code, notes=self.notes)

    def train_step(self) -> StepStats:
        """One optimizer step: lr, micro-batches forward and backward, unscale and clip, update.

        Nothing here reads the device, but the fp16 loss scale (once) and, across processes,
        the step's counts: the CPU queues the whole step ahead of the GPU.
        """
        optim, runtime = self.phase_config.optim, self.runtime
        start, end = self.config.schedule_span(self.phase)
        lr = learning_rate(self.step - start, lr=optim.lr, warmup_steps=optim.warmup_steps,
                           max_steps=end - start, schedule=optim.schedule,
                           decay_fraction=optim.decay_fraction, decay_shape=optim.decay_shape)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        host_batches = [self.stream.next() for _ in range(self.accumulation)]
        totals = step_totals([self.objective.host_counts(batch) for batch in host_batches], runtime)
        # Every copy is queued before the first forward, so the copies overlap the compute.
        keep_mask = self.phase_config.train.compile is True
        batches = [self.objective.to_device(batch, runtime.device, keep_attention_mask=keep_mask)
                   for batch in host_batches]
        weights = self.objective.loss_weights(totals, runtime.world_size)  # over all processes
        device_sums = torch.zeros(len(self.objective.device_stats), dtype=torch.float64, device=runtime.device)
        for index, batch in enumerate(batches):
            device_sums += self.forward_backward(batch, weights, sync=index == len(batches) - 1, slot=index)
        all_reduce_sum(device_sums, runtime)
        grad_norm, skipped = self.update(device_sums)
        stats = StepStats(device_sums=device_sums, host_counts=totals, lr=lr, grad_norm=grad_norm,
                          skipped=skipped, objective=self.objective)
        self.skipped_steps += skipped
        self.divergence.count_skip(skipped, self.step)
        return stats

    def forward_backward(self, batch: dict[str, torch.Tensor], weights: list[float], *,
                         sync: bool, slot: int = 0) -> torch.Tensor:
        """`micro_batch`, where the compiled step's first call (which compiles it) is watched: a
        failure to compile falls back to the eager step under `train.compile: auto` (one line) and
        is refused in one line under a typed true."""
        if not self.compile_unproven:
            return self.micro_batch(batch, weights, sync=sync, slot=slot)
        try:
            sums = self.micro_batch(batch, weights, sync=sync, slot=slot)
        except Exception as error:
            reason = compile_failure(error)
            if reason is None:
                raise
            note = eager_fallback_note(reason, auto=self.compile_auto)  # refused under a typed true
            self.notes.append(note)
            if self.runtime.is_main:
                self.progress.write(f"note: {note}")  # above the bar, which is running
            self.compile_unproven = False
            self.model.zero_grad(set_to_none=True)  # the step's first micro-batch: nothing else to keep
            self.trained_model = self.wrap_model(compiled=False)
            return self.micro_batch(batch, weights, sync=sync, slot=slot)
        self.compile_unproven = False
        return sums

    def micro_batch(self, batch: dict[str, torch.Tensor], weights: list[float], *,
                    sync: bool, slot: int = 0) -> torch.Tensor:
        """One micro-batch on the device; returns its device stats' sums.

        Args:
            weights: what each of the objective's loss sums is multiplied by.
            sync: the step's last micro-batch, whose backward all-reduces the gradients.
            slot: the micro-batch's place in the step, whose carry it reads and leaves.
        """
        no_sync = (self.trained_model.no_sync() if self.runtime.distributed and not sync
                   else contextlib.nullcontext())
        with no_sync:
            with self.runtime.autocast():
                loss_sums, sums, carry = self.trained_model(batch, self.carry.take(slot, batch))
                self.carry.keep(slot, carry)
            loss = self.objective.weighted_loss(loss_sums, weights)
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        return sums

    def update(self, device_sums: torch.Tensor) -> tuple[torch.Tensor, bool]:
        """Unscale, clip and step; returns the gradient norm (on the device) and whether an fp16
        overflow skipped the update."""
        optim = self.config.optim
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        max_norm = optim.max_grad_norm if optim.max_grad_norm > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        skipped = False
        if self.scaler is None:
            self.divergence.record(torch.isfinite(device_sums).all() & torch.isfinite(grad_norm), self.step)
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
            self.scaler.update()
            # The step's one read: a skipped update must not advance the schedule.
            scale = self.scaler.get_scale()
            skipped, self.loss_scale = scale < self.loss_scale, scale
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, skipped

    def check_finite(self) -> None:
        """Stop, keeping the last good checkpoint, if a step since the start went non-finite
        (under fp16 the scaler skips such steps instead)."""
        if self.scaler is None:
            self.divergence.check()

    def log(self, stats: StepStats) -> None:
        """Write the logging window's scalars (TensorBoard, metrics.jsonl, progress bar)."""
        self.check_finite()
        scalars = self.window.scalars(lr=stats.lr, loss_scale=self.loss_scale, skipped_steps=self.skipped_steps)
        scalars.update(gpu_scalars(self.runtime, scalars["perf/tokens_per_s"], self.token_flops))
        self.metrics.log(self.step, scalars)
        self.last_train = {tag.split("/", 1)[1]: value for tag, value in scalars.items()
                           if tag.startswith("train/")}
        if not self.eta_said and self.runtime.is_main and self.step > self.window.start_step:
            self.eta_said = True
            eta, note = first_window_lines(
                step=self.step, max_steps=self.config.train.max_steps, clock=self.eta_clock,
                window=(self.window.start_time, self.window.start_step), tokens_per_s=scalars["perf/tokens_per_s"],
                token_flops=self.token_flops if self.runtime.device.type == "cpu" else None)
            self.progress.write(eta)
            if note:
                self.notes.append(note)
                self.progress.write(f"note: {note}")
        self.progress.update(loss=scalars["train/loss"], lr=stats.lr,
                             tokens_per_s=scalars["perf/tokens_per_s"],
                             steps=self.step - self.window.start_step)
        self.window.reset(self.step)

    def evaluate(self) -> None:
        """Score the validation split (each process its share) and log it as `eval/*`."""
        self.check_finite()
        results = self.evaluator(self.model, device=self.runtime.device,
                                 autocast=self.runtime.autocast())
        results = {name: float(value) for name, value in results.items()
                   if value == value}  # NaN: nothing to measure (no pairs)
        results["loss"] = self.objective.eval_loss(results)  # on the loss chart beside train/loss
        self.metrics.log(self.step, {f"eval/{name}": value for name, value in results.items()})
        self.last_eval = results

    def state_dict(self) -> dict[str, int]:
        """The trainer's own state: step, skipped steps and the batch stream's position."""
        return {"step": self.step, "skipped_steps": self.skipped_steps, "phase": self.phase,
                "tokens_seen": self.tokens_seen, **self.stream.state_dict()}

    def load_state_dict(self, state: dict[str, Any], source: Path | None = None) -> None:
        """Continue from `state_dict()` as saved in a checkpoint's trainer_state.json."""
        if state.get("world_size", self.runtime.world_size) != self.runtime.world_size:
            raise UserError(f"checkpoint {source} was written by {state['world_size']} processes; "
                            f"resume it with the same number (now {self.runtime.world_size})")
        self.step, self.skipped_steps = int(state["step"]), int(state["skipped_steps"])
        self.tokens_seen = int(state.get("tokens_seen", 0))  # older checkpoints did not count
        stream = {"epoch": int(state["epoch"]), "position": int(state["position"])}
        phase = self.phase_at(self.step)
        if phase != int(state.get("phase", 0)):  # saved at a boundary: the stream was the last phase's
            stream = {"epoch": stream["epoch"] + 1, "position": 0}
        self.enter_phase(phase, stream)

    def save(self) -> None:
        """Checkpoint model, optimizer, scaler, RNG and `state_dict()` as `step-N/`."""
        try:
            save_checkpoint(self.run_dir, self.step, model=self.model, optimizer=self.optimizer,
                            scaler=self.scaler, runtime=self.runtime,
                            keep_last=self.config.train.keep_last, trainer_state=self.state_dict(),
                            rank_tensors=self.carry.rank_tensors())
        # On a full disk torch.save raises RuntimeError and safetensors SafetensorError.
        except (OSError, RuntimeError, SafetensorError) as error:
            # Not the disk: torch raises a worker's death wherever the main process is.
            if (isinstance(error, OSError) and error.errno not in WRITE_ERRNOS) or dataloader_worker_lost(error):
                raise
            raise write_failed(error, f"checkpoint step-{self.step:08d}", self.run_dir) from None

    def wrap_model(self, compiled: bool | None = None) -> torch.nn.Module:
        """The objective's step module: compiled whole (`train.compile`, or `compiled`) and/or DDP-wrapped."""
        return wrap_step(self.objective, self.model, self.runtime, label_smoothing=self.config.optim.label_smoothing,
                         compiled=self.config.train.compile is True if compiled is None else compiled)
