"""The Trainer: one pretraining run with accumulation, mixed precision, eval, checkpoints, resume, DDP."""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from torch.nn.parallel import DistributedDataParallel

from bertpre.batches import BatchStream, MaskingCollator, PretrainingInstances
from bertpre.config import Config, check_world_size, load_config, resolve
from bertpre.data import DataFolder, load_data
from bertpre.errors import WRITE_ERRNOS, UserError
from bertpre.labels import IGNORE_INDEX
from bertpre.model import BertForPreTraining
from bertpre.model.cost import training_flops_per_token
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.wordpiece import TOKENIZER_FILE, check_same_vocab
from bertpre.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    remove_partial_checkpoints,
    save_checkpoint,
)
from bertpre.train.evaluation import Evaluator
from bertpre.train.metrics import STATS, MetricsWindow, MetricsWriter, ProgressBar, gpu_scalars
from bertpre.train.optim import build_optimizer, learning_rate
from bertpre.train.run_folder import RunLock, check_resume_config
from bertpre.train.runtime import (
    Runtime,
    all_reduce_sum,
    barrier,
    init_runtime,
    seed_everything,
    shutdown,
)

MAX_CONSECUTIVE_SKIPS = 20  # fp16 overflow skips in a row before the run is declared diverged
SIGNAL_EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class TrainingDiverged(UserError):
    """The loss or gradients stopped being finite; the last good checkpoint is kept."""


@dataclass
class TrainResult:
    """What a `pretrain` call did."""

    run_dir: Path
    step: int  # optimizer steps done, in total
    skipped_steps: int = 0
    exit_code: int = 0  # 130 after SIGINT, 143 after SIGTERM
    notes: list[str] = field(default_factory=list)


@dataclass
class StepStats:
    """One optimizer step, summed over its micro-batches and all processes."""

    sums: torch.Tensor  # float64, in STATS order: the loss and accuracy numerators and counts
    lr: float
    grad_norm: float
    skipped: bool  # an fp16 overflow: no update was made and the schedule does not advance

    @property
    def loss(self) -> float:
        """Mean MLM loss over the step's predictions plus mean pair loss over its pairs."""
        sums = dict(zip(STATS, self.sums.tolist(), strict=True))
        return sums["mlm_loss"] / max(sums["predictions"], 1) + sums["pair_loss"] / max(sums["pairs"], 1)


class StopSignals:
    """Turns SIGINT/SIGTERM into a request to stop after the current step."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNAL_EXIT_CODES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def pretrain(config: Config, *, resume: bool = True) -> TrainResult:
    """Train `BertForPreTraining` as `config` says, into the run folder `config.train.out`.

    Resumes from `RUN/checkpoints/latest` when `resume` and a checkpoint exist.
    """
    runtime = init_runtime(config.train.precision)
    try:
        with Trainer(config, runtime, resume=resume) as trainer:
            return trainer.train()
    except OSError as error:  # a log or config write on a full or read-only disk
        if error.errno not in WRITE_ERRNOS:
            raise
        raise write_failed(error, "to the run folder", Path(config.train.out)) from None
    finally:
        shutdown(runtime)


class Trainer:
    """One pretraining run: built from a config, trained step by step, saved and resumed whole.

    `__init__` builds the data, model, optimizer, scaler, batch stream, metrics and evaluator
    and restores the latest checkpoint; `train()` is the loop; `train_step()` is one optimizer
    step. What must survive a restart is in `state_dict()` (the trainer's counters and the
    stream's position) and in the model, optimizer and scaler, saved together by `save()`.
    """

    def __init__(self, config: Config, runtime: Runtime | None = None, *, resume: bool = True) -> None:
        runtime = runtime or init_runtime(config.train.precision)
        self.config, self.runtime = config, runtime
        train = config.train
        self.accumulation = check_world_size(config, runtime.world_size)
        self.data = load_data(config.data.path)
        resolve(config, self.data.tokenizer)
        self.run_dir = Path(train.out)
        latest = latest_checkpoint(self.run_dir) if resume else None
        if not resume and (self.run_dir / "checkpoints" / "latest").exists():
            raise UserError(f"run folder {self.run_dir} already holds checkpoints; resume it "
                            "(--resume), or choose a new --out")
        check_tokenizer_matches(self.run_dir, self.data)
        self.lock = RunLock(self.run_dir)
        if runtime.is_main:
            self.lock.check_free()  # before reading a checkpoint another process may be pruning
        self.notes = [runtime.note] if runtime.note else []
        if runtime.note and runtime.is_main:
            print(f"note: {runtime.note}", file=sys.stderr)
        if runtime.is_main:
            for warning in config.warnings():
                print(f"warning: {warning}", file=sys.stderr)

        seed_everything(train.seed)
        self.model = BertForPreTraining(config.model).to(runtime.device)
        self.model.set_gradient_checkpointing(train.gradient_checkpointing)
        self.optimizer = build_optimizer(self.model, config.optim, runtime.device)
        self.scaler = runtime.grad_scaler()
        seed_everything(train.seed + runtime.rank)  # dropout differs across processes
        instances = PretrainingInstances.from_config(
            self.data.train, self.data.tokenizer, config.data, seed=train.seed, rank=runtime.rank,
            world_size=runtime.world_size)
        self.stream = BatchStream(instances, MaskingCollator.from_config(self.data.tokenizer, config.data, train.seed),
                                  micro_batch_size=train.micro_batch_size,
                                  num_workers=config.data.num_workers,
                                  pin_memory=runtime.device.type == "cuda", seed=train.seed)
        self.step, self.skipped_steps, self.consecutive_skips = 0, 0, 0
        if latest is not None:
            self.load_state_dict(load_checkpoint(latest, model=self.model, optimizer=self.optimizer,
                                                 scaler=self.scaler, runtime=runtime), latest)
            self.check_resumed_config()
            if runtime.is_main:
                print(f"resuming from {latest} (step {self.step}, epoch {self.stream.epoch})",
                      file=sys.stderr)
        if runtime.is_main:
            self.lock.acquire()
        try:
            self.start_run(resumed=latest is not None)
        except BaseException:
            self.lock.release()
            raise

    def start_run(self, *, resumed: bool) -> None:
        """Write the run folder's config and tokenizer; set up the model wrapper, evaluator and logs."""
        config, runtime, train = self.config, self.runtime, self.config.train
        if runtime.is_main:
            self.prepare_run_folder()
        self.trained_model = self.wrap_model()
        self.evaluator = Evaluator(self.data, config.data, micro_batch_size=train.micro_batch_size,
                                   seed=train.seed) if runtime.is_main else None
        self.metrics = MetricsWriter(self.run_dir, enabled=runtime.is_main,
                                     purge_after=self.step if resumed else None)
        self.progress = ProgressBar(start_step=self.step, max_steps=train.max_steps,
                                    enabled=runtime.is_main)
        self.window = MetricsWindow(self.step)
        self.token_flops = training_flops_per_token(config.model, config.data.max_seq_length,
                                                    config.data.predicted_share)

    def close(self) -> None:
        """Release the run folder for the next process."""
        self.lock.release()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def train(self) -> TrainResult:
        """Run steps until `train.max_steps` or a stop signal; log, evaluate and save on schedule."""
        train = self.config.train
        exit_code = 0
        with StopSignals() as signals, contextlib.closing(self.metrics), \
                contextlib.closing(self.progress):
            while self.step < train.max_steps:
                stats = self.train_step()
                if stats.skipped:
                    continue
                self.step += 1
                self.window.add(stats.sums)
                finished = self.step == train.max_steps
                if self.step % train.log_every == 0 or finished:
                    self.log(stats)
                pause_start = time.perf_counter()  # eval and saving are not counted in tokens/s
                if self.step % train.eval_every == 0 or finished:
                    self.evaluate()
                stop = self.stop_requested(signals)
                if self.step % train.save_every == 0 or finished or stop:
                    self.metrics.flush()  # logs reach the checkpoint's step before it exists
                    self.save()
                if stop:
                    exit_code = SIGNAL_EXIT_CODES.get(stop, 130)
                    break
                self.window.pause(time.perf_counter() - pause_start)
        return TrainResult(run_dir=self.run_dir, step=self.step, skipped_steps=self.skipped_steps,
                           exit_code=exit_code, notes=self.notes)

    def train_step(self) -> StepStats:
        """One optimizer step: lr, micro-batches forward and backward, unscale and clip, update."""
        optim, runtime = self.config.optim, self.runtime
        lr = learning_rate(self.step, lr=optim.lr, warmup_steps=optim.warmup_steps,
                           max_steps=self.config.train.max_steps, schedule=optim.schedule)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # Each micro-batch's mean loss is weighted by its share of the step's predictions
        # (over all processes), so any split of the batch gives the same gradient.
        micro_batches = [self.stream.next() for _ in range(self.accumulation)]
        totals = count_targets(micro_batches, runtime)
        sums = torch.zeros(len(STATS), dtype=torch.float64, device=runtime.device)
        for index, batch in enumerate(micro_batches):
            batch = {k: v.to(runtime.device, non_blocking=True) for k, v in batch.items()
                     if isinstance(v, torch.Tensor)}
            final_micro = index == self.accumulation - 1
            no_sync = (self.trained_model.no_sync() if runtime.distributed and not final_micro
                       else contextlib.nullcontext())
            with no_sync:
                with runtime.autocast():
                    out = self.trained_model(
                        batch["input_ids"], attention_mask=batch["attention_mask"],
                        token_type_ids=batch["token_type_ids"], labels=batch["labels"],
                        next_sentence_label=batch.get("next_sentence_label"),
                        label_smoothing=optim.label_smoothing)
                loss, micro_sums = weigh_losses(out, batch, totals)
                loss = loss * runtime.world_size  # DDP averages gradients over processes
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            sums += micro_sums

        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        max_norm = optim.max_grad_norm if optim.max_grad_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        all_reduce_sum(sums, runtime)
        stats = StepStats(sums=sums.cpu(), lr=lr, grad_norm=grad_norm, skipped=False)
        if self.scaler is None:
            if not (math.isfinite(stats.loss) and math.isfinite(grad_norm)):
                raise TrainingDiverged(diverged_message(self.step, stats.loss, grad_norm, self.run_dir))
            self.optimizer.step()
        else:
            scale_before = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            stats.skipped = self.scaler.get_scale() < scale_before
        self.optimizer.zero_grad(set_to_none=True)
        self.count_skip(stats)
        return stats

    def count_skip(self, stats: StepStats) -> None:
        """Count fp16 overflow skips; too many in a row means the run diverged."""
        if not stats.skipped:
            self.consecutive_skips = 0
            return
        self.skipped_steps += 1
        self.consecutive_skips += 1
        if self.consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
            raise TrainingDiverged(diverged_message(self.step, stats.loss, stats.grad_norm,
                                                    self.run_dir, skips=self.consecutive_skips))

    def log(self, stats: StepStats) -> None:
        """Write the logging window's scalars (TensorBoard, metrics.jsonl, progress bar)."""
        scalars = self.window.scalars(lr=stats.lr, grad_norm=stats.grad_norm, scaler=self.scaler,
                                      skipped_steps=self.skipped_steps)
        scalars.update(gpu_scalars(self.runtime, scalars["perf/tokens_per_s"], self.token_flops))
        self.metrics.log(self.step, scalars)
        self.progress.update(loss=scalars["train/loss"], lr=stats.lr,
                             tokens_per_s=scalars["perf/tokens_per_s"],
                             steps=self.step - self.window.start_step)
        self.window.reset(self.step)

    def evaluate(self) -> None:
        """Score the validation split (main process) and log it as `eval/*`."""
        if self.evaluator is not None:
            results = self.evaluator(self.model, device=self.runtime.device,
                                     autocast=self.runtime.autocast())
            self.metrics.log(self.step, {f"eval/{k}": float(v) for k, v in results.items()
                                         if v == v})  # NaN: nothing to measure (no pairs)
        barrier(self.runtime)

    def stop_requested(self, signals: StopSignals) -> int:
        """The signal number any process received (0 for none), agreed by all processes."""
        stop = torch.tensor([signals.received or 0], device=self.runtime.device)
        if self.runtime.distributed:
            torch.distributed.all_reduce(stop, op=torch.distributed.ReduceOp.MAX)
        return int(stop)

    def state_dict(self) -> dict[str, int]:
        """The trainer's own state: step, skipped steps and the batch stream's position."""
        return {"step": self.step, "skipped_steps": self.skipped_steps, **self.stream.state_dict()}

    def load_state_dict(self, state: dict[str, Any], source: Path | None = None) -> None:
        """Continue from `state_dict()` as saved in a checkpoint's trainer_state.json."""
        if state.get("world_size", self.runtime.world_size) != self.runtime.world_size:
            raise UserError(f"checkpoint {source} was written by {state['world_size']} processes; "
                            f"resume it with the same number (now {self.runtime.world_size})")
        self.step, self.skipped_steps = int(state["step"]), int(state["skipped_steps"])
        self.stream.load_state_dict(state)

    def save(self) -> None:
        """Checkpoint model, optimizer, scaler, RNG and `state_dict()` as `step-N/`."""
        try:
            save_checkpoint(self.run_dir, self.step, model=self.model, optimizer=self.optimizer,
                            scaler=self.scaler, runtime=self.runtime,
                            keep_last=self.config.train.keep_last, trainer_state=self.state_dict())
        # On a full disk torch.save raises RuntimeError and safetensors SafetensorError.
        except (OSError, RuntimeError, SafetensorError) as error:
            if isinstance(error, OSError) and error.errno not in WRITE_ERRNOS:
                raise
            raise write_failed(error, f"checkpoint step-{self.step:08d}", self.run_dir) from None

    def check_resumed_config(self) -> None:
        """A resumed run keeps its config, but for the keys that may change (each one noted)."""
        saved = self.run_dir / "config.yaml"
        if not saved.is_file():
            return
        for change in check_resume_config(load_config(saved), self.config, self.step, self.run_dir):
            self.notes.append(f"resuming with {change}")
            if self.runtime.is_main:
                print(f"note: resuming with {change}", file=sys.stderr)

    def prepare_run_folder(self) -> None:
        """Create RUN, drop partial checkpoints, write config.yaml and the tokenizer copy."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        remove_partial_checkpoints(self.run_dir)
        self.config.save(self.run_dir / "config.yaml")
        if not (self.run_dir / "tokenizer").exists():
            # Copied aside and renamed: a kill mid-copy must not leave a torn tokenizer that
            # every later resume would refuse.
            staging = self.run_dir / ".tokenizer.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(self.data.path / "tokenizer", staging)
            staging.replace(self.run_dir / "tokenizer")

    def wrap_model(self) -> torch.nn.Module:
        """The model as the step calls it: compiled and/or DDP-wrapped as configured."""
        model = self.model
        if self.config.train.compile:
            model = torch.compile(model)
        if self.runtime.distributed:
            device_ids = [self.runtime.local_rank] if self.runtime.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=device_ids)
        return model


def check_tokenizer_matches(run_dir: Path, data: DataFolder) -> None:
    """DATA's dataset must come from DATA's tokenizer, and a resumed run must keep its vocabulary."""
    recorded = (data.manifest.get("tokenizer") or {}).get("sha256") if isinstance(data.manifest, dict) else None
    tokenizer_file = data.path / "tokenizer" / TOKENIZER_FILE
    if recorded and tokenizer_file.is_file():
        if hashlib.sha256(tokenizer_file.read_bytes()).hexdigest() != recorded:
            raise UserError(f"DATA folder {data.path} holds a tokenizer other than the one its "
                            "dataset was made with (tokenizer.json changed); run `bertpre "
                            "tokenize` again")
    saved = run_dir / "tokenizer"
    if saved.is_dir():
        check_same_vocab(data.tokenizer, load_tokenizer(saved), data.path, f"run {run_dir}")


def count_targets(micro_batches: list[dict[str, torch.Tensor]], runtime: Runtime) -> list[float]:
    """The step's [MLM predictions, pair labels], summed over micro-batches and processes."""
    predictions = sum(int((batch["labels"] != IGNORE_INDEX).sum()) for batch in micro_batches)
    pairs = sum(int((batch["next_sentence_label"] != IGNORE_INDEX).sum()) for batch in micro_batches
                if "next_sentence_label" in batch)  # absent under pair_task none
    totals = torch.tensor([predictions, pairs], dtype=torch.float64, device=runtime.device)
    return all_reduce_sum(totals, runtime).tolist()


def weigh_losses(out: Any, batch: dict[str, torch.Tensor],
                 totals: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """This micro-batch's share of the step loss, and its sums for logging (STATS order).

    Args:
        totals: the step's [predictions, pairs] over all micro-batches and processes.
    """
    predicted = batch["labels"] != IGNORE_INDEX
    targets = batch["labels"][predicted]
    pair_labels = batch.get("next_sentence_label")
    if pair_labels is None:  # pair_task none
        pair_labels = torch.full_like(batch["labels"][:, 0], IGNORE_INDEX)
    paired = pair_labels != IGNORE_INDEX
    predictions, pairs = int(predicted.sum()), int(paired.sum())
    loss = out.mlm_loss * (predictions / totals[0] if totals[0] else 0.0)
    has_pairs = out.pair_loss is not None and pairs > 0
    if has_pairs:
        loss = loss + out.pair_loss * (pairs / totals[1])
    with torch.no_grad():
        pair_correct = (out.seq_relationship_logits.argmax(-1)[paired] == pair_labels[paired]).sum()
        values = [
            out.mlm_loss.double() * predictions,
            predictions,
            (out.prediction_logits.argmax(-1) == targets).sum(),
            out.pair_loss.double() * pairs if has_pairs else 0.0,
            pairs,
            pair_correct,
            batch["attention_mask"].sum(),
        ]
        stats = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=targets.device)
                             for v in values])
    return loss, stats


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


def diverged_message(step: int, loss: float, grad_norm: float, run_dir: Path, skips: int = 0) -> str:
    kept = kept_checkpoint(run_dir)
    what = (f"{skips} fp16 steps in a row overflowed" if skips
            else f"loss {loss} / gradient norm {grad_norm} is not finite")
    return (f"training diverged at step {step + 1}: {what}; {kept}; "
            "lower optim.lr, raise optim.warmup_steps or use train.precision=bf16")
