"""The permutation-LM step with its recurrent memory: segments read lane by lane, each
micro-batch slot carrying its rows' memory; a reset row sees no memory; the memory saved as
safetensors and restored continues a run bit for bit (the exact-resume state)."""
from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from bertpre.batches.plm import PermutationCollator, expand_plm
from bertpre.batches.segments import SegmentInstances
from bertpre.model.xlnet import XLNetConfig, XLNetLMHeadModel
from bertpre.train.objectives.plm import PermutationLMStep, RecurrentMemory, plm_predictions

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MICRO, SLOTS = 2, 2


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS + [f"w{i}" for i in range(40)])}
    return Tokenizer(WordPiece(vocab, unk_token="[UNK]"))


@pytest.fixture(scope="module")
def instances(tokenizer) -> SegmentInstances:
    rng = np.random.default_rng(0)
    documents = [[rng.integers(5, 45, size=int(rng.integers(3, 12))).tolist() for _ in range(int(rng.integers(1, 6)))]
                 for _ in range(30)]
    dataset = datasets.Dataset.from_dict({"input_ids": documents})
    return SegmentInstances(dataset, tokenizer, segment_length=16, reuse_length=8, lanes=MICRO * SLOTS, seed=0)


def objective() -> PermutationLMStep:
    torch.manual_seed(0)
    config = XLNetConfig(vocab_size=45, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, dropout=0.0, mem_len=16, reuse_len=8)
    return PermutationLMStep(XLNetLMHeadModel(config))


def train(tokenizer, instances, steps: int, *, start: dict | None = None, use_memory: bool = True):
    """`steps` optimizer steps of SLOTS micro-batches; returns the losses and the state to resume."""
    step_module = objective()
    optimizer = torch.optim.AdamW(step_module.parameters(), lr=1e-3)
    memory = RecurrentMemory(SLOTS)
    first = 0
    if start is not None:
        step_module.load_state_dict(start["model"])
        optimizer.load_state_dict(start["optimizer"])
        memory.load_state_dict(load_file(start["memory"]), torch.device("cpu"))
        first = start["step"]
    collator = PermutationCollator(tokenizer, perm_size=8, pad_to_length=16, seed=0)
    losses = []
    for step in range(first, first + steps):
        total = 0.0
        for slot in range(SLOTS):
            item = (step * SLOTS + slot) * MICRO
            batch = collator(instances.__getitems__(list(range(item, item + MICRO))))
            mems, mask = memory.read(slot, batch["memory_reset"]) if use_memory else (None, None)
            (loss_sum,), sums, (new_mems, new_mask) = step_module(batch, (mems, mask))
            (loss_sum / max(plm_predictions(batch), 1)).backward()
            memory.write(slot, new_mems, new_mask)
            total += float(sums[0])
        optimizer.step()
        optimizer.zero_grad()
        losses.append(total)
    return losses, step_module, optimizer, memory


def test_memory_restored_from_safetensors_continues_the_run_exactly(tokenizer, instances, tmp_path):
    steps = len(instances) // (MICRO * SLOTS)
    assert steps >= 6
    whole, whole_module, _, _ = train(tokenizer, instances, 6)
    head, module, optimizer, memory = train(tokenizer, instances, 3)
    tensors = memory.state_dict()
    assert {f"slot{slot}.layer{layer}" for slot in range(SLOTS) for layer in range(2)} <= set(tensors)
    save_file(tensors, str(tmp_path / "memory.safetensors"))
    start = {"model": module.state_dict(), "optimizer": optimizer.state_dict(),
             "memory": str(tmp_path / "memory.safetensors"), "step": 3}
    tail, resumed, _, _ = train(tokenizer, instances, 3, start=start)
    assert head + tail == whole
    for (name, expected), actual in zip(whole_module.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(expected, actual), name
    forgetful, _, _, _ = train(tokenizer, instances, 6, use_memory=False)
    assert forgetful[0] == whole[0] and forgetful[1:] != whole[1:]  # the memory is used from step 2 on


def test_a_reset_row_sees_no_memory(tokenizer, instances):
    step_module = objective().eval()
    collator = PermutationCollator(tokenizer, perm_size=8, pad_to_length=16, seed=0)
    memory = RecurrentMemory(1)
    first = collator(instances.__getitems__([0, 1]))
    _, _, (mems, mask) = step_module(first, None)
    memory.write(0, mems, mask)
    second = collator(instances.__getitems__([4, 5]))  # the same two lanes, one step on
    second["memory_reset"] = torch.tensor([True, False])
    with torch.no_grad():
        perm_mask, target_mapping = expand_plm(second)
        states, held = memory.read(0, second["memory_reset"])
        both = step_module.model(second["input_ids"], perm_mask=perm_mask, target_mapping=target_mapping,
                                 mems=states, mems_attention_mask=held).logits
        alone = step_module.model(second["input_ids"][:1], perm_mask=perm_mask[:1],
                                  target_mapping=target_mapping[:1]).logits
        remembered = step_module.model(second["input_ids"][1:], perm_mask=perm_mask[1:],
                                       target_mapping=target_mapping[1:]).logits
    torch.testing.assert_close(both[0], alone[0], rtol=0, atol=1e-5)  # row 0: as if no memory
    assert (both[1] - remembered[0]).abs().max() > 1e-4  # row 1 uses its memory
