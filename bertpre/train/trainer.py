"""The pretraining loop: AdamW, accumulation, mixed precision, eval, checkpoints, resume, DDP."""
from __future__ import annotations

import contextlib
import errno
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

from bertpre.batches.stream import BatchStream
from bertpre.config import Config, check_world_size, resolve
from bertpre.data.folder import load_data
from bertpre.errors import UserError
from bertpre.model.bert import BertForPreTraining
from bertpre.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    remove_partial_checkpoints,
    save_checkpoint,
)
from bertpre.train.evaluation import build_collator, build_instances, evaluate
from bertpre.train.metrics import MetricsWriter, ProgressBar
from bertpre.train.optim import learning_rate
from bertpre.train.runtime import (
    Runtime,
    all_reduce_sum,
    barrier,
    init_runtime,
    seed_everything,
    shutdown,
)

# Write failures that mean the disk, not the program, is at fault: the run stops with one line.
DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
               errno.EFBIG}
MAX_CONSECUTIVE_SKIPS = 20  # fp16 overflow skips in a row before the run is declared diverged
SIGNAL_EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
# Per-step sums reduced over micro-batches and processes, in this order.
STATS = ("mlm_loss", "predictions", "mlm_correct", "pair_loss", "pairs", "pair_correct", "tokens")


class TrainingDiverged(UserError):
    """The loss or gradients stopped being finite; the last good checkpoint is kept."""


@dataclass
class TrainResult:
    """What a `pretrain` call did."""

    run_dir: Path
    step: int  # optimizer steps done, in total
    losses: list[float] = field(default_factory=list)  # loss of each step this call ran
    skipped_steps: int = 0
    exit_code: int = 0  # 130 after SIGINT, 143 after SIGTERM
    notes: list[str] = field(default_factory=list)


def build_optimizer(model: torch.nn.Module, config: Config, device: torch.device) -> torch.optim.AdamW:
    """AdamW with decoupled weight decay on matrices only: biases and LayerNorm weights are 1-D."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": config.optim.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.optim.lr, betas=tuple(config.optim.betas),
                             eps=config.optim.eps, fused=device.type == "cuda" or None)


def check_tokenizer_matches(run_dir: Path, tokenizer: Any, data_path: Path, manifest: dict) -> None:
    """DATA's dataset must come from DATA's tokenizer, and a resumed run must keep its vocabulary."""
    from bertpre.tokenizer.wordpiece import load_tokenizer

    recorded = (manifest.get("tokenizer") or {}).get("sha256") if isinstance(manifest, dict) else None
    tokenizer_file = data_path / "tokenizer" / "tokenizer.json"
    if recorded and tokenizer_file.is_file():
        if hashlib.sha256(tokenizer_file.read_bytes()).hexdigest() != recorded:
            raise UserError(f"DATA folder {data_path} holds a tokenizer other than the one its dataset "
                            "was made with (tokenizer.json changed); run `bertpre tokenize` again")
    saved = run_dir / "tokenizer"
    if saved.is_dir() and load_tokenizer(saved).get_vocab() != tokenizer.get_vocab():
        raise UserError(f"DATA folder {data_path} was made by another tokenizer than run {run_dir}; "
                        "use the DATA folder the run started with, or a new --out")


def flops_per_token(model: BertForPreTraining, seq_length: int) -> float:
    """Training FLOPs per token: 6 per parameter plus attention scores (PaLM appendix B)."""
    config = model.config
    return 6 * model.num_parameters() + 12 * config.num_hidden_layers * config.hidden_size * seq_length


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
        return _pretrain(config, runtime, resume)
    except OSError as error:  # a log or config write on a full or read-only disk
        if error.errno not in DISK_ERRNOS:
            raise
        raise write_failed(error, "to the run folder", Path(config.train.out)) from None
    finally:
        shutdown(runtime)


def _pretrain(config: Config, runtime: Runtime, resume: bool) -> TrainResult:
    train, optim = config.train, config.optim
    accumulation = check_world_size(config, runtime.world_size)
    data = load_data(config.data.path)
    resolve(config, data.tokenizer)
    run_dir = Path(train.out)
    latest = latest_checkpoint(run_dir) if resume else None
    if not resume and (run_dir / "checkpoints" / "latest").exists():
        raise UserError(f"run folder {run_dir} already holds checkpoints; resume it (--resume), or "
                        "choose a new --out")
    check_tokenizer_matches(run_dir, data.tokenizer, data.path, data.manifest)
    result = TrainResult(run_dir=run_dir, step=0)
    if runtime.note:
        result.notes.append(runtime.note)
        if runtime.is_main:
            print(f"note: {runtime.note}", file=sys.stderr)

    seed_everything(train.seed)
    model = BertForPreTraining(config.model).to(runtime.device)
    model.set_gradient_checkpointing(train.gradient_checkpointing)
    optimizer = build_optimizer(model, config, runtime.device)
    scaler = runtime.grad_scaler()
    seed_everything(train.seed + runtime.rank)  # dropout differs across processes
    state = {"epoch": 0, "position": 0, "skipped_steps": 0, "step": 0}
    if latest is not None:
        state = load_checkpoint(latest, model=model, optimizer=optimizer, scaler=scaler, runtime=runtime)
        if state["world_size"] != runtime.world_size:
            raise UserError(f"checkpoint {latest} was written by {state['world_size']} processes; "
                            f"resume it with the same number (now {runtime.world_size})")
    step, result.step, result.skipped_steps = state["step"], state["step"], state["skipped_steps"]
    if latest is not None and runtime.is_main:
        print(f"resuming from {latest} (step {step}, epoch {state['epoch']})", file=sys.stderr)

    if runtime.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        remove_partial_checkpoints(run_dir)
        config.save(run_dir / "config.yaml")
        if not (run_dir / "tokenizer").exists():
            # Copied aside and renamed: a kill mid-copy must not leave a torn tokenizer that
            # every later resume would refuse.
            staging = run_dir / ".tokenizer.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(data.path / "tokenizer", staging)
            staging.replace(run_dir / "tokenizer")
    trained_model = model
    if train.compile:
        trained_model = torch.compile(trained_model)
    if runtime.distributed:
        trained_model = DistributedDataParallel(
            trained_model, device_ids=[runtime.local_rank] if runtime.device.type == "cuda" else None)

    instances = build_instances(data.train, data.tokenizer, config.data, seed=train.seed,
                                rank=runtime.rank, world_size=runtime.world_size)
    collate = build_collator(data.tokenizer, config.data, seed=train.seed)
    stream = BatchStream(instances, collate, micro_batch_size=train.micro_batch_size,
                         num_workers=config.data.num_workers,
                         pin_memory=runtime.device.type == "cuda", seed=train.seed,
                         epoch=state["epoch"], position=state["position"])
    metrics = MetricsWriter(run_dir, enabled=runtime.is_main,
                            purge_after=step if latest is not None else None)
    progress = ProgressBar(start_step=step, max_steps=train.max_steps, enabled=runtime.is_main)
    token_flops = flops_per_token(model, config.data.max_seq_length)
    window = torch.zeros(len(STATS), dtype=torch.float64)
    window_start, consecutive_skips, logged_step = time.perf_counter(), 0, step

    def save() -> None:
        try:
            save_checkpoint(run_dir, step, model=model, optimizer=optimizer, scaler=scaler,
                            runtime=runtime, keep_last=train.keep_last,
                            trainer_state={"epoch": stream.epoch, "position": stream.position,
                                           "skipped_steps": result.skipped_steps})
        # On a full disk torch.save raises RuntimeError and safetensors SafetensorError.
        except (OSError, RuntimeError, SafetensorError) as error:
            if isinstance(error, OSError) and error.errno not in DISK_ERRNOS:
                raise
            raise write_failed(error, f"checkpoint step-{step:08d}", run_dir) from None

    with StopSignals() as signals, contextlib.closing(metrics), contextlib.closing(progress):
        while step < train.max_steps:
            lr = learning_rate(step, lr=optim.lr, warmup_steps=optim.warmup_steps,
                               max_steps=train.max_steps, schedule=optim.schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr

            # Each micro-batch's mean loss is weighted by its share of the step's predictions
            # (over all processes), so any split of the batch gives the same gradient.
            micro_batches = [stream.next() for _ in range(accumulation)]
            totals = count_targets(micro_batches, runtime)
            stats = torch.zeros(len(STATS), dtype=torch.float64, device=runtime.device)
            for index, batch in enumerate(micro_batches):
                batch = {k: v.to(runtime.device, non_blocking=True) for k, v in batch.items()
                         if isinstance(v, torch.Tensor)}
                final_micro = index == accumulation - 1
                no_sync = (trained_model.no_sync() if runtime.distributed and not final_micro
                           else contextlib.nullcontext())
                with no_sync:
                    with runtime.autocast():
                        out = trained_model(batch["input_ids"], attention_mask=batch["attention_mask"],
                                            token_type_ids=batch["token_type_ids"], labels=batch["labels"],
                                            next_sentence_label=batch.get("next_sentence_label"),
                                            label_smoothing=optim.label_smoothing)
                    loss, micro_stats = weigh_losses(out, batch, totals)
                    loss = loss * runtime.world_size  # DDP averages gradients over processes
                    (scaler.scale(loss) if scaler is not None else loss).backward()
                stats += micro_stats

            if scaler is not None:
                scaler.unscale_(optimizer)
            max_norm = optim.max_grad_norm if optim.max_grad_norm > 0 else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
            all_reduce_sum(stats, runtime)
            step_loss = float(stats[0] / max(stats[1], 1) + stats[3] / max(stats[4], 1))
            skipped = False
            if scaler is None:
                if not (math.isfinite(step_loss) and math.isfinite(grad_norm)):
                    raise TrainingDiverged(diverged_message(step, step_loss, grad_norm, run_dir))
                optimizer.step()
            else:
                scale_before = scaler.get_scale()
                scaler.step(optimizer)
                scaler.update()
                skipped = scaler.get_scale() < scale_before
            optimizer.zero_grad(set_to_none=True)
            if skipped:  # fp16 overflow: the schedule does not advance
                result.skipped_steps += 1
                consecutive_skips += 1
                if consecutive_skips >= MAX_CONSECUTIVE_SKIPS:
                    raise TrainingDiverged(diverged_message(step, step_loss, grad_norm, run_dir,
                                                            skips=consecutive_skips))
                continue
            consecutive_skips = 0
            step += 1
            result.step = step
            result.losses.append(step_loss)
            window += stats.cpu()

            if step % train.log_every == 0 or step == train.max_steps:
                elapsed = time.perf_counter() - window_start
                scalars = step_scalars(window, lr=lr, grad_norm=grad_norm, scaler=scaler,
                                       skipped_steps=result.skipped_steps, elapsed=elapsed)
                scalars.update(gpu_scalars(runtime, scalars["perf/tokens_per_s"], token_flops))
                metrics.log(step, scalars)
                progress.update(loss=scalars["train/loss"], lr=lr,
                                tokens_per_s=scalars["perf/tokens_per_s"], steps=step - logged_step)
                window.zero_()
                window_start, logged_step = time.perf_counter(), step
            pause_start = time.perf_counter()  # eval and saving are not counted in tokens/s
            if step % train.eval_every == 0 or step == train.max_steps:
                if runtime.is_main:
                    results = evaluate(model, data, config.data, micro_batch_size=train.micro_batch_size,
                                       seed=train.seed, device=runtime.device, autocast=runtime.autocast())
                    metrics.log(step, {f"eval/{k}": float(v) for k, v in results.items()
                                       if v == v})  # NaN: nothing to measure (no pairs)
                barrier(runtime)
            stop = torch.tensor([signals.received or 0], device=runtime.device)
            if runtime.distributed:
                torch.distributed.all_reduce(stop, op=torch.distributed.ReduceOp.MAX)
            if step % train.save_every == 0 or step == train.max_steps or int(stop):
                metrics.flush()  # logs reach the checkpoint's step before the checkpoint exists
                save()
            if int(stop):
                result.exit_code = SIGNAL_EXIT_CODES.get(int(stop), 130)
                break
            window_start += time.perf_counter() - pause_start
    return result


def count_targets(micro_batches: list[dict[str, torch.Tensor]], runtime: Runtime) -> list[float]:
    """The step's [MLM predictions, pair labels], summed over micro-batches and processes."""
    predictions = sum(int((batch["labels"] != -100).sum()) for batch in micro_batches)
    pairs = sum(int((batch["next_sentence_label"] != -100).sum()) for batch in micro_batches
                if "next_sentence_label" in batch)  # absent under pair_task none
    totals = torch.tensor([predictions, pairs], dtype=torch.float64, device=runtime.device)
    return all_reduce_sum(totals, runtime).tolist()


def gpu_scalars(runtime: Runtime, tokens_per_s: float, token_flops: float) -> dict[str, float]:
    """`perf/mfu` (on a GPU of known peak) and `perf/peak_memory_gib` (on any GPU)."""
    if runtime.device.type != "cuda":
        return {}
    scalars = {"perf/peak_memory_gib": torch.cuda.max_memory_allocated(runtime.device) / 2**30}
    peak_flops = runtime.peak_flops()
    if peak_flops is not None:
        scalars["perf/mfu"] = tokens_per_s * token_flops / (peak_flops * runtime.world_size)
    return scalars


def weigh_losses(out: Any, batch: dict[str, torch.Tensor],
                 totals: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """This micro-batch's share of the step loss, and its sums for logging (STATS order).

    Args:
        totals: the step's [predictions, pairs] over all micro-batches and processes.
    """
    predicted = batch["labels"] != -100
    targets = batch["labels"][predicted]
    pair_labels = batch.get("next_sentence_label")
    if pair_labels is None:  # pair_task none
        pair_labels = torch.full_like(batch["labels"][:, 0], -100)
    paired = pair_labels != -100
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


def step_scalars(window: torch.Tensor, *, lr: float, grad_norm: float,
                 scaler: torch.amp.GradScaler | None, skipped_steps: int,
                 elapsed: float) -> dict[str, float]:
    """The `train/*` and `perf/*` scalars for a logging window of summed STATS."""
    sums = dict(zip(STATS, window.tolist(), strict=True))
    mlm_loss = sums["mlm_loss"] / max(sums["predictions"], 1)
    pair_loss = sums["pair_loss"] / max(sums["pairs"], 1)
    scalars = {
        "train/loss": mlm_loss + pair_loss,
        "train/mlm_loss": mlm_loss,
        "train/pair_loss": pair_loss,
        "train/mlm_acc": sums["mlm_correct"] / max(sums["predictions"], 1),
        "train/pair_acc": sums["pair_correct"] / max(sums["pairs"], 1),
        "train/lr": lr,
        "train/grad_norm": grad_norm,
        "train/loss_scale": scaler.get_scale() if scaler is not None else 1.0,
        "train/skipped_steps": float(skipped_steps),
        "perf/tokens_per_s": sums["tokens"] / max(elapsed, 1e-9),
    }
    if not sums["pairs"]:  # pair_task none
        del scalars["train/pair_loss"], scalars["train/pair_acc"]
    return scalars


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
