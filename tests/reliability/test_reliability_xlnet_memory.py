"""An XLNet checkpoint's recurrent memory (`memory_<rank>.safetensors`) is training state: only a
resume reads it. A damaged one leaves `export`, `evaluate` and `finetune` of the intact weights
working, and a resume refuses it in one line, with or without the checkpoint's checksums.json."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from _reliability_harness import folder_state
from _xlnet_run import xlnet_run
from safetensors.torch import load_file, save_file
from test_reliability_bad_input import run_in_process

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.train.checkpoint import TOKENIZER_DIR, verify_checkpoint
from bertpre.train.trainer import pretrain

TINY = Path(__file__).parents[2] / "configs" / "tiny.yaml"
XLNET = ["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "model.mem_len=16",
         "data.max_seq_length=32", "data.reuse_length=16", "model.hidden_size=32", "model.intermediate_size=64",
         "train.batch_size=8", "train.micro_batch_size=4", "train.eval_every=1000", "data.num_workers=0"]


def test_a_damaged_memory_leaves_export_evaluate_and_finetune_of_the_weights_working(
        tiny_data, tmp_path, monkeypatch, capsys):
    run = xlnet_run(tmp_path / "run", tiny_data, memory=True)
    checkpoint = run / "checkpoints" / "step-00000020"
    memory = checkpoint / "memory_0.safetensors"
    memory.write_bytes(memory.read_bytes()[:100])  # torn: checksums.json no longer agrees
    task = tmp_path / "task.jsonl"
    task.write_text("".join(json.dumps({"text": f"{who} sees the river .", "label": who})
                            + "\n" for who in ["the cat", "a dog"] * 4))
    monkeypatch.chdir(tmp_path)
    for args in [["export", run, "--out", tmp_path / "export"],
                 ["evaluate", run, "--data", tiny_data, "--micro-batch-size", "4"],
                 ["finetune", run, "--train", task, "--validation", task, "--out", tmp_path / "scores",
                  "--mode", "probe", "--seeds", "1", "--epochs", "1"]]:
        code, stderr = run_in_process(args, monkeypatch, capsys)
        assert code == 0, f"{args[0]}: {stderr[-2000:]}"
    assert (tmp_path / "export" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "scores" / "results.json").read_text())["checkpoint_step"] == 20
    # A resume reads the memory, so it checks it as it checks everything else.
    with pytest.raises(UserError, match="memory_0.safetensors is damaged"):
        verify_checkpoint(checkpoint, tokenizer=run / TOKENIZER_DIR)


def nan_in_a_state(tensors: dict[str, torch.Tensor]) -> None:
    tensors["slot1.layer1"][0, 3, 5] = float("nan")


def a_narrower_state(tensors: dict[str, torch.Tensor]) -> None:
    tensors["slot0.layer0"] = tensors["slot0.layer0"][:, :, :8].contiguous()  # hidden 8, not 32


def a_layer_lost(tensors: dict[str, torch.Tensor]) -> None:
    del tensors["slot0.layer1"]


def test_a_wrong_memory_in_a_checkpoint_without_checksums_is_refused_on_resume(
        tiny_data, tmp_path, monkeypatch, capsys, one_thread):
    """Older checkpoints have no checksums.json: the memory's own shape and values are checked."""
    first = tmp_path / "first"
    pretrain(load_config(TINY, [f"data.path={tiny_data}", f"train.out={first}", *XLNET, "train.max_steps=2",
                                "train.save_every=2"]))
    (first / "checkpoints" / "step-00000002" / "checksums.json").unlink()
    settings = [argument for setting in [*XLNET, "train.max_steps=4", "train.save_every=2"]
                for argument in ("--set", setting)]
    for damage, expected in [(nan_in_a_state, "is damaged (slot1.layer1 holds a value that is not finite"),
                             (a_narrower_state, "(slot0.layer0 has shape (4, 16, 8); expected 2 layer(s) of "
                                                "(4, M, 32) with M from 1 to 16"),
                             (a_layer_lost, "(slot 0 has 1 layer(s); expected 2 layer(s)")]:
        run = shutil.copytree(first, tmp_path / damage.__name__)
        memory = run / "checkpoints" / "step-00000002" / "memory_0.safetensors"
        tensors = load_file(memory)
        damage(tensors)
        save_file(tensors, memory)
        before = folder_state(run)
        code, stderr = run_in_process(["pretrain", "--config", TINY, "--data", tiny_data, "--out", run, *settings],
                                      monkeypatch, capsys)
        lines = stderr.splitlines()
        assert code == 2 and lines[-1].startswith("error: "), stderr[-2000:]
        assert not any(line.startswith("error: ") for line in lines[:-1]) and "Traceback" not in stderr
        assert f"checkpoint file {memory} " in lines[-1] and expected in lines[-1], lines[-1]
        assert lines[-1].endswith("write its step-N name into checkpoints/latest to resume from it")
        assert folder_state(run) == before
