"""An XLNet checkpoint's recurrent memory (`memory_<rank>.safetensors`) is training state: only a
resume reads it. A damaged one leaves `export`, `evaluate` and `finetune` of the intact weights
working; a resume still checks it."""
from __future__ import annotations

import json

import pytest
from _xlnet_run import xlnet_run
from test_reliability_bad_input import run_in_process

from bertpre.errors import UserError
from bertpre.train.checkpoint import TOKENIZER_DIR, verify_checkpoint


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
