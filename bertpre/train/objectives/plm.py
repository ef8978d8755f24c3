"""XLNet's permutation LM (`data.objective: plm`) and Transformer-XL's left-to-right LM (`clm`):
the segments and their targets, the step module, the recurrent memory it carries from one
segment to the next, and the validation metrics.

Segments come lane by lane (`bertpre.batches.segments`): micro-batch slot j of every step reads
the same rows, so slot j's memory, the last `mem_len` hidden states of its rows, is what the
next step's slot j attends to. A row whose segment begins a document (`memory_reset`) attends
to none of it: its part of the memory mask is cleared, which the model treats as no memory.
The memory is detached (no gradient crosses segments) and is part of a run's exact-resume
state: `RecurrentMemory.state_dict` gives plain tensors to save beside the weights.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from bertpre.batches.plm import PermutationCollator, expand_plm
from bertpre.batches.segments import MixedSegments, SegmentInstances
from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX, query_rows
from bertpre.model.xlnet import XLNetLMHeadModel
from bertpre.train.checkpoint import MEMORY_FILE, USE_ANOTHER_CHECKPOINT, read_rank_tensors
from bertpre.train.objectives.base import Objective, copy_inputs, perplexity, summed_over_processes

if TYPE_CHECKING:
    from bertpre.config import Config, DataConfig
    from bertpre.data import DataFolder, DataMixture
# What the model reads of a PLM batch (the rest stays on the host).
PLM_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "perm_rank", "perm_hidden", "perm_target",
              "target_positions", "labels", "memory_reset")


def plm_predictions(batch: dict[str, torch.Tensor]) -> int:
    """The targets a host batch predicts (counted before it is copied: no device read)."""
    return int((batch["labels"] != IGNORE_INDEX).sum())


def plm_host_counts(batch: dict[str, torch.Tensor]) -> list[int]:
    """A PLM micro-batch's targets and real tokens, counted on the CPU."""
    return [plm_predictions(batch), int(batch["attention_mask"].sum())]


def plm_device_batch(batch: dict[str, torch.Tensor], device: torch.device, *,
                     keep_attention_mask: bool) -> dict[str, torch.Tensor]:
    """What the model reads of a host PLM batch, copied without waiting; a batch without padding
    drops its attention mask unless the step is compiled (one graph for every batch)."""
    return copy_inputs(batch, PLM_INPUTS, device, keep_attention_mask=keep_attention_mask)


@dataclass(frozen=True)
class MemoryShape:
    """What a run's memory holds per slot: `layers` states of (rows, ≤mem_len, hidden_size)."""

    rows: int  # train.micro_batch_size
    mem_len: int
    hidden_size: int
    layers: int

    @classmethod
    def of(cls, config: Config) -> MemoryShape:
        return cls(config.train.micro_batch_size, config.model.mem_len, config.model.hidden_size,
                   config.model.num_hidden_layers)


class RecurrentMemory:
    """Each micro-batch slot's memory: per layer (B, M, C) states, and the (B, M) mask of which
    of them are real. With `shape`, a memory restored from a checkpoint is checked against it."""

    def __init__(self, slots: int, shape: MemoryShape | None = None) -> None:
        self.states: list[list[torch.Tensor] | None] = [None] * slots
        self.masks: list[torch.Tensor | None] = [None] * slots
        self.shape = shape

    def read(self, slot: int, reset: torch.Tensor | None) -> tuple[list[torch.Tensor] | None, torch.Tensor | None]:
        """Slot `slot`'s memory for its next segment; rows where `reset` (B,) is set see none."""
        states, mask = self.states[slot], self.masks[slot]
        if states is None or mask is None:
            return None, None
        if reset is not None:
            mask = mask & ~reset.to(mask.device, torch.bool).unsqueeze(1)
        return states, mask

    def write(self, slot: int, states: list[torch.Tensor] | None, mask: torch.Tensor | None) -> None:
        if states is None:
            return
        self.states[slot] = [state.detach() for state in states]
        if mask is None:
            mask = torch.ones(states[0].shape[:2], dtype=torch.bool, device=states[0].device)
        self.masks[slot] = mask.bool()

    def take(self, slot: int, batch: dict[str, torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor] | None:
        """The carry slot `slot`'s next micro-batch steps with (None before the first segment)."""
        states, mask = self.read(slot, batch.get("memory_reset"))
        return None if states is None else (states, mask)

    def keep(self, slot: int, carry: tuple[list[torch.Tensor] | None, torch.Tensor | None]) -> None:
        self.write(slot, *carry)

    def rank_tensors(self) -> dict[str, dict[str, torch.Tensor]]:
        """What each process saves in a checkpoint: its memory, `MEMORY_FILE`."""
        return {MEMORY_FILE: self.state_dict()}

    def restore(self, checkpoint: Path, rank: int, device: torch.device) -> None:
        """This process's memory as `checkpoint` left it: the next segment of every lane attends
        to it as it would have without the restart."""
        tensors = read_rank_tensors(checkpoint, MEMORY_FILE, rank)
        if tensors is None:
            raise UserError(f"checkpoint {checkpoint} has no {MEMORY_FILE.format(rank=rank)}, the "
                            "recurrent memory a resumed run continues from; resume from another checkpoint")
        if self.shape is not None:
            check_memory(tensors, self.shape, len(self.states), checkpoint / MEMORY_FILE.format(rank=rank))
        self.load_state_dict(tensors, device)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Plain tensors (safetensors-ready): `slot{j}.mask` and `slot{j}.layer{i}` for each held slot."""
        tensors = {}
        for slot, (states, mask) in enumerate(zip(self.states, self.masks, strict=True)):
            if states is None or mask is None:
                continue
            tensors[f"slot{slot}.mask"] = mask.cpu().contiguous()
            tensors.update({f"slot{slot}.layer{layer}": state.cpu().contiguous()
                            for layer, state in enumerate(states)})
        return tensors

    def load_state_dict(self, tensors: dict[str, torch.Tensor], device: torch.device) -> None:
        """Restore what `state_dict` gave (slots it lacks start empty)."""
        for slot in range(len(self.states)):
            mask = tensors.get(f"slot{slot}.mask")
            layers = []
            while f"slot{slot}.layer{len(layers)}" in tensors:
                layers.append(tensors[f"slot{slot}.layer{len(layers)}"].to(device))
            self.states[slot] = layers or None
            self.masks[slot] = None if mask is None or not layers else mask.to(device, torch.bool)


def check_memory(tensors: dict[str, torch.Tensor], shape: MemoryShape, slots: int, path: Path) -> None:
    """Refuse a saved memory this run cannot continue from: a held slot's states not `shape.layers`
    of (rows, M, hidden_size) with 1 ≤ M ≤ mem_len and a (rows, M) mask, or a value not finite.
    (A checkpoint with checksums.json was checked whole before; this is what those without get.)"""
    expected = (f"{shape.layers} layer(s) of ({shape.rows}, M, {shape.hidden_size}) with M from 1 to "
                f"{shape.mem_len}, and a ({shape.rows}, M) mask (train.micro_batch_size, model.mem_len, "
                "model.hidden_size, model.num_hidden_layers)")

    def misfit(found: str) -> UserError:
        return UserError(f"checkpoint file {path} does not hold this run's recurrent memory ({found}; "
                         f"expected {expected}); it is damaged or from another run, {USE_ANOTHER_CHECKPOINT}")

    for slot in range(slots):
        names = [f"slot{slot}.layer{layer}" for layer in range(shape.layers + 1)]
        mask = tensors.get(f"slot{slot}.mask")
        if mask is None and names[0] not in tensors:
            continue  # a slot that held no memory yet
        held = sum(name in tensors for name in names)
        if held != shape.layers or names[-1] in tensors or mask is None:
            raise misfit(f"slot {slot} has {held} layer(s){'' if mask is not None else ' and no mask'}")
        first = tensors[names[0]]
        length = first.shape[1] if first.dim() == 3 else 0
        for name in names[:-1]:
            state = tensors[name]
            if tuple(state.shape) != (shape.rows, length, shape.hidden_size) or not 1 <= length <= shape.mem_len:
                raise misfit(f"{name} has shape {tuple(state.shape)}")
            if not state.is_floating_point():
                raise misfit(f"{name} holds {state.dtype}")
            if not bool(torch.isfinite(state).all()):
                raise UserError(f"checkpoint file {path} is damaged ({name} holds a value that is not "
                                f"finite, NaN or inf); {USE_ANOTHER_CHECKPOINT}")
        if tuple(mask.shape) != (shape.rows, length):
            raise misfit(f"slot{slot}.mask has shape {tuple(mask.shape)}")


class PermutationLMStep(nn.Module):
    """The permutation-LM (and left-to-right LM) step: the XLNet model, its loss sum and its
    accuracy count for one micro-batch with its slot's memory, as one module (what DDP wraps;
    fixed shapes for a compiled step)."""

    def __init__(self, model: XLNetLMHeadModel, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, batch: dict[str, torch.Tensor],
                carry: tuple[list[torch.Tensor], torch.Tensor | None] | None = None):
        """Returns the loss sum (one term, in the graph), the sums [loss, correct] (float64) and
        the memory to keep (states, mask)."""
        mems, mems_attention_mask = carry if carry is not None else (None, None)
        perm_mask, target_mapping = expand_plm(batch)
        labels = batch["labels"]
        out = self.model(batch["input_ids"], token_type_ids=batch.get("token_type_ids"),
                         attention_mask=batch.get("attention_mask"), perm_mask=perm_mask,
                         target_mapping=target_mapping, mems=mems, mems_attention_mask=mems_attention_mask,
                         labels=labels, label_smoothing=self.label_smoothing)
        with torch.no_grad():
            correct = (out.logits.argmax(-1) == labels).sum()  # an unused slot's -100 never matches
            sums = torch.stack([out.loss_sum.detach().double(), correct.double()])
        return (out.loss_sum,), sums, (out.mems, out.mems_attention_mask)


class PermutationLanguageModel(Objective):
    """`data.objective: plm` or `clm`: documents read as consecutive segments in lanes, each
    micro-batch slot carrying its rows' memory to the next step's. Its one loss term is named
    for it: `train/plm_loss`, `train/clm_acc`."""

    audit = "segments"

    def predicted_share(self, data_config: DataConfig) -> float:
        """The query rows: 1/K of a row for plm's xlnet plan; every row for its hf plan and for clm."""
        if self.name == "plm" and data_config.plm_plan == "xlnet":
            return data_config.plm_probability
        return 1.0

    def build_batches(self, mixture: DataMixture, config: Config, *, accumulation: int, rank: int,
                      world_size: int) -> tuple[SegmentInstances | MixedSegments, Callable]:
        # Slot j of every step reads the same rows (lanes), so its memory is their context.
        lanes = config.train.micro_batch_size * accumulation
        seed = config.train.seed
        if mixture.is_mixture:
            instances = MixedSegments.from_mixture(mixture, config.data, lanes=lanes, seed=seed, rank=rank,
                                                   world_size=world_size)
        else:
            instances = SegmentInstances.from_config(mixture.folders[0].train, mixture.tokenizer, config.data,
                                                     lanes=lanes, seed=seed, rank=rank, world_size=world_size)
        collate = PermutationCollator.from_config(mixture.tokenizer, config.data, seed,
                                                  fixed_shapes=config.train.compile is True)
        return instances, collate

    def host_counts(self, batch: dict[str, torch.Tensor]) -> list[int]:
        return plm_host_counts(batch)

    def to_device(self, batch: dict[str, torch.Tensor], device: torch.device, *,
                  keep_attention_mask: bool) -> dict[str, torch.Tensor]:
        return plm_device_batch(batch, device, keep_attention_mask=keep_attention_mask)

    def step_module(self, model: nn.Module, label_smoothing: float = 0.0) -> nn.Module:
        return PermutationLMStep(model, label_smoothing)

    def new_carry(self, slots: int, config: Config) -> RecurrentMemory:
        return RecurrentMemory(slots, MemoryShape.of(config))

    def prepare_model(self, model: nn.Module, config: Config) -> None:
        # The states a segment leaves as memory: its first segment_step tokens', the context
        # of the next segment, which starts that far on (this phase's length and step).
        step = config.data.segment_step  # XLNet's reuse_len: None for the whole row
        model.config.reuse_len = step if step < config.data.max_seq_length else None

    def source_evaluator(self, folder: DataFolder, data_config: DataConfig, **options: Any) -> SegmentEvaluator:
        return SegmentEvaluator(folder, data_config, **options)

    def cost_options(self, config: Config) -> dict[str, int]:
        """The memory length, the query stream's rows P (as the collator sizes them) and the
        micro-batch (what shares one projection of the distances)."""
        data = config.data
        length = data.max_seq_length
        share = self.predicted_share(data)
        rows = query_rows(length, share)  # share 1: every row
        return {"memory_length": config.model.mem_len, "query_rows": rows,
                "micro_batch_size": config.train.micro_batch_size}

    def describe(self, data_config: DataConfig) -> str:
        return f"reuse_length {data_config.segment_step}"

    def summary(self, data_config: DataConfig) -> str:
        if self.name != "plm":
            return f"; {self.name}"
        return (f"; plm ({data_config.plm_plan} plan, 1/{1 / data_config.plm_probability:.3g} "
                "predicted)")


class SegmentEvaluator:
    """Validation for plm/clm: the validation documents read as the run reads its data, one
    segment after the next in `micro_batch_size` lanes, each batch attending to the memory the
    previous one left; epoch 0's segments and targets for `seed`, planned once.

    Under DDP each process reads its own lanes and the sums are all-reduced.
    """

    def __init__(self, data: DataFolder, data_config: DataConfig, *, micro_batch_size: int = 32,
                 seed: int = 42, rank: int = 0, world_size: int = 1) -> None:
        self.objective = data_config.objective
        self.rank, self.world_size = rank, world_size
        self.instances, self.lanes = None, 0
        if len(data.validation):
            whole = SegmentInstances.from_config(data.validation, data.tokenizer, data_config, lanes=1, seed=seed)
            self.lanes = min(micro_batch_size, whole.segment_count() // world_size)
        if self.lanes:  # else the validation split has too few segments: nothing to score
            self.instances = whole.with_lanes(self.lanes, rank=rank, world_size=world_size)
        self.collate = PermutationCollator.from_config(data.tokenizer, data_config, seed=seed)

    @torch.no_grad()
    def __call__(self, model: torch.nn.Module, *, device: torch.device | None = None,
                 autocast: contextlib.AbstractContextManager | None = None,
                 max_batches: int | None = None) -> dict[str, float]:
        """`{objective}_loss`, perplexity, `{objective}_acc`, predictions, sequences (NaN where
        nothing was predicted). The model is put back in its previous train/eval mode."""
        device = device or next(model.parameters()).device
        was_training = model.training
        model.eval()
        device_sums = torch.zeros(2, dtype=torch.float64, device=device)  # loss, correct
        host_counts = torch.zeros(2, dtype=torch.float64)  # predictions, sequences
        steps = 0 if self.instances is None else len(self.instances) // self.lanes
        if max_batches is not None:
            steps = min(steps, max_batches)
        memory = RecurrentMemory(1)
        step_module = PermutationLMStep(model)  # the training step's module, run under no_grad
        for step in range(steps):
            batch = self.collate(self.instances.__getitems__(range(step * self.lanes, (step + 1) * self.lanes)))
            host_counts += torch.tensor([plm_predictions(batch), self.lanes], dtype=torch.float64)
            inputs = plm_device_batch(batch, device, keep_attention_mask=False)
            with autocast or contextlib.nullcontext():
                _, sums, carry = step_module(inputs, memory.take(0, inputs))
            memory.keep(0, carry)
            device_sums += sums
        model.train(was_training)
        (loss, correct), (predictions, sequences) = summed_over_processes(device_sums, host_counts, self.world_size)
        loss = loss / predictions if predictions else float("nan")
        return {f"{self.objective}_loss": loss,
                "perplexity": perplexity(loss),
                f"{self.objective}_acc": correct / predictions if predictions else float("nan"),
                "predictions": int(predictions), "sequences": int(sequences)}
