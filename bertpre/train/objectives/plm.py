"""The permutation-LM micro-batch on the device (XLNet, or Transformer-XL's left-to-right LM):
what the step computes, and the recurrent memory it carries from one segment to the next.

Segments come lane by lane (`bertpre.batches.segments`): micro-batch slot j of every step reads
the same rows, so slot j's memory, the last `mem_len` hidden states of its rows, is what the
next step's slot j attends to. A row whose segment begins a document (`memory_reset`) attends
to none of it: its part of the memory mask is cleared, which the model treats as no memory.
The memory is detached (no gradient crosses segments) and is part of a run's exact-resume
state: `RecurrentMemory.state_dict` gives plain tensors to save beside the weights.
"""
from __future__ import annotations

import torch
from torch import nn

from bertpre.batches.plm import expand_plm
from bertpre.labels import IGNORE_INDEX
from bertpre.model.xlnet import XLNetLMHeadModel
from bertpre.train.objectives.mlm import HostCounts

# Each process's recurrent memory in a checkpoint (`RecurrentMemory.state_dict`).
MEMORY_FILE = "memory_{rank}.safetensors"
# What the model reads of a PLM batch (the rest stays on the host).
PLM_INPUTS = ("input_ids", "token_type_ids", "attention_mask", "perm_rank", "perm_hidden", "perm_target",
              "target_positions", "labels", "memory_reset")


def plm_predictions(batch: dict[str, torch.Tensor]) -> int:
    """The targets a host batch predicts (counted before it is copied: no device read)."""
    return int((batch["labels"] != IGNORE_INDEX).sum())


def plm_host_counts(batch: dict[str, torch.Tensor]) -> HostCounts:
    """A PLM micro-batch's targets and real tokens, counted on the CPU (no pairs)."""
    return HostCounts(predictions=plm_predictions(batch), pairs=0, tokens=int(batch["attention_mask"].sum()))


def plm_device_batch(batch: dict[str, torch.Tensor], device: torch.device, *,
                     keep_attention_mask: bool) -> dict[str, torch.Tensor]:
    """What the model reads of a host PLM batch, copied without waiting; a batch without padding
    drops its attention mask unless the step is compiled (one graph for every batch)."""
    names = [name for name in PLM_INPUTS if name in batch]
    if not keep_attention_mask and bool(batch["attention_mask"].all()):
        names.remove("attention_mask")
    return {name: batch[name].to(device, non_blocking=True) for name in names}


class RecurrentMemory:
    """Each micro-batch slot's memory: per layer (B, M, C) states, and the (B, M) mask of which
    of them are real."""

    def __init__(self, slots: int) -> None:
        self.states: list[list[torch.Tensor] | None] = [None] * slots
        self.masks: list[torch.Tensor | None] = [None] * slots

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


class PermutationObjective(nn.Module):
    """The XLNet model, its PLM loss sum and its accuracy count for one micro-batch with its
    slot's memory, as one module (what DDP wraps; fixed shapes for a compiled step)."""

    def __init__(self, model: XLNetLMHeadModel, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing

    def forward(self, batch: dict[str, torch.Tensor], mems: list[torch.Tensor] | None = None,
                mems_attention_mask: torch.Tensor | None = None):
        """Returns the loss sum (in the graph), the sums [loss, correct, 0, 0] (float64, as the
        MLM step's DEVICE_STATS lay them out) and the memory to keep (states, mask)."""
        perm_mask, target_mapping = expand_plm(batch)
        labels = batch["labels"]
        out = self.model(batch["input_ids"], token_type_ids=batch.get("token_type_ids"),
                         attention_mask=batch.get("attention_mask"), perm_mask=perm_mask,
                         target_mapping=target_mapping, mems=mems, mems_attention_mask=mems_attention_mask,
                         labels=labels, label_smoothing=self.label_smoothing)
        with torch.no_grad():
            correct = (out.logits.argmax(-1) == labels).sum()  # an unused slot's -100 never matches
            zero = correct.new_zeros(()).double()
            sums = torch.stack([out.loss_sum.detach().double(), correct.double(), zero, zero])
        return out.loss_sum, sums, (out.mems, out.mems_attention_mask)
