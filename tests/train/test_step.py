"""The training step as a GPU needs it: no device-to-host read, one compiled graph, frozen pair head."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.train.objectives.mlm import device_batch, mlm_host_counts

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"

# What waits for the device: reading a value into Python, or an op whose output shape depends
# on the data (the host must learn the shape before it can queue the next op).
HOST_READS = {"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__",
              "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive"}


class HostReadGuard(TorchFunctionMode):
    """Fails on any torch call that reads a tensor back to the host (see HOST_READS), and on
    boolean-mask indexing. On a CPU nothing syncs, so this is how the rule is held there; a
    CUDA test can use `torch.cuda.set_sync_debug_mode("error")` instead."""

    paused = False  # set while code the rule does not cover runs

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if self.paused:
            pass
        elif name in HOST_READS:
            raise AssertionError(f"host read in the step: {name}")
        elif name == "__getitem__":
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if any(isinstance(part, torch.Tensor) and part.dtype == torch.bool for part in index):
                raise AssertionError("boolean-mask indexing in the step (a data-dependent shape)")
        return func(*args, **(kwargs or {}))


def tiny_config(data_dir: Path, out: Path, *overrides: str):
    return load_config(TINY, [f"data.path={data_dir}", f"train.out={out}", "train.log_every=1",
                              "train.eval_every=1000", *overrides])


def test_the_guard_catches_what_it_is_for():
    x = torch.randn(4)
    for read in (lambda: x.sum().item(), lambda: bool(x[0] > 0), lambda: x[x > 0],
                 lambda: torch.nonzero(x), lambda: float(x.max()), lambda: x.tolist()):
        with HostReadGuard(), pytest.raises(AssertionError, match="host read|boolean-mask"):
            read()
    with HostReadGuard():
        torch.where(x > 0, x, 0.0).sum()  # fixed shapes, no read: fine


@pytest.mark.parametrize("pair_task", ["nsp", "none"])
def test_the_micro_batch_path_and_the_update_read_nothing_from_the_device(tiny_data, tmp_path,
                                                                          pair_task):
    config = tiny_config(tiny_data, tmp_path / "run", "train.max_steps=4", f"data.pair_task={pair_task}")
    guard = HostReadGuard()
    with trainer.Trainer(config) as run:
        forward_backward, update, optimizer_step = run.forward_backward, run.update, run.optimizer.step

        def guarded_forward_backward(*args, **kwargs):
            with guard:
                return forward_backward(*args, **kwargs)

        def guarded_update(*args, **kwargs):
            with guard:
                return update(*args, **kwargs)

        def unguarded_optimizer_step(*args, **kwargs):
            # AdamW reads its step counters: CPU tensors when not fused; fused (on CUDA) it
            # keeps them on the device and reads nothing.
            guard.paused = True
            try:
                return optimizer_step(*args, **kwargs)
            finally:
                guard.paused = False

        run.forward_backward, run.update = guarded_forward_backward, guarded_update
        run.optimizer.step = unguarded_optimizer_step
        steps = [run.train_step() for _ in range(3)]
    assert all(not step.skipped for step in steps)
    losses = [step.loss for step in steps]  # read afterwards, as the log does
    assert all(4.0 < loss < 7.0 for loss in losses)


def test_counts_come_from_the_host_batch(tiny_data, tmp_path):
    with trainer.Trainer(tiny_config(tiny_data, tmp_path / "run", "train.max_steps=1")) as run:
        batch = run.stream.next()
    counts = mlm_host_counts(batch)
    assert counts.predictions == int((batch["labels"] != -100).sum()) > 0
    assert counts.pairs == len(batch["next_sentence_label"]) and counts.tokens == int(batch["attention_mask"].sum())
    padded = device_batch(batch, torch.device("cpu"), keep_attention_mask=False)
    assert "labels" not in padded and "mask_action" not in padded
    assert ("attention_mask" in padded) == bool((batch["attention_mask"] == 0).any())
    full = dict(batch, attention_mask=torch.ones_like(batch["attention_mask"]))
    assert "attention_mask" not in device_batch(full, torch.device("cpu"), keep_attention_mask=False)
    assert "attention_mask" in device_batch(full, torch.device("cpu"), keep_attention_mask=True)


def test_pair_task_none_freezes_the_pooler_and_pair_head_and_still_saves_them(tiny_data, tmp_path):
    from safetensors.torch import load_file

    run_dir = tmp_path / "run"
    config = tiny_config(tiny_data, run_dir, "train.max_steps=2", "data.pair_task=none")
    with trainer.Trainer(config) as run:
        before = {name: p.detach().clone() for name, p in run.model.named_parameters()}
        frozen = {name for name, p in run.model.named_parameters() if not p.requires_grad}
        run.train()
        after = dict(run.model.named_parameters())
    assert frozen == {"bert.pooler.dense.weight", "bert.pooler.dense.bias",
                      "cls.seq_relationship.weight", "cls.seq_relationship.bias"}
    assert all(torch.equal(before[name], after[name]) for name in frozen)
    assert not torch.equal(before["bert.embeddings.word_embeddings.weight"],
                           after["bert.embeddings.word_embeddings.weight"])
    saved = load_file(run_dir / "checkpoints" / "step-00000002" / "model.safetensors")
    assert frozen <= set(saved)


def test_compiled_step_is_one_graph_without_breaks_or_recompiles(tiny_data, tmp_path):
    """30 steps of the tiny config with train.compile=true: batches of different content and
    real lengths, padded to max_seq_length, go through one graph compiled once."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    # Without dropout: compiled code draws its own random numbers.
    steps = ["train.max_steps=30", "train.save_every=1000", "model.hidden_dropout_prob=0.0",
             "model.attention_probs_dropout_prob=0.0"]
    compiled = trainer.pretrain(tiny_config(tiny_data, tmp_path / "compiled", *steps, "train.compile=true"))
    graph_breaks, stats = dict(counters["graph_break"]), dict(counters["stats"])
    torch._dynamo.reset()
    assert compiled.step == 30
    assert graph_breaks == {}
    assert stats["unique_graphs"] == 1  # compiled at the first step, never again
    eager = trainer.pretrain(tiny_config(tiny_data, tmp_path / "eager", *steps))

    def losses(run_dir: Path) -> list[float]:
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [row["train/loss"] for row in rows if "train/loss" in row]

    # Same data and masks; only the padding (to 64) and the kernels differ.
    assert losses(compiled.run_dir) == pytest.approx(losses(eager.run_dir), abs=2e-3)


@pytest.mark.gpu
def test_on_cuda_the_micro_batches_and_the_update_never_wait_for_the_gpu(tiny_data, tmp_path):
    config = tiny_config(tiny_data, tmp_path / "run", "train.max_steps=4", "train.precision=auto",
                         "train.device=cuda")
    with trainer.Trainer(config) as run:
        forward_backward, update = run.forward_backward, run.update

        def strict(function):
            def call(*args, **kwargs):
                torch.cuda.set_sync_debug_mode("error")  # any synchronizing CUDA call raises
                try:
                    return function(*args, **kwargs)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            return call

        run.train_step()  # first use: allocations, cuBLAS handles
        run.forward_backward = strict(forward_backward)
        if run.scaler is None:  # fp16 reads its loss scale once per step, on purpose
            run.update = strict(update)
        steps = [run.train_step() for _ in range(2)]
    assert run.runtime.precision == ("bf16" if torch.cuda.is_bf16_supported() else "fp16")
    assert all(4.0 < step.loss < 7.0 for step in steps)
