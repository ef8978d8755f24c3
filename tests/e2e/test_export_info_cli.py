"""`bertpre export` and `bertpre info` run as a user runs them: subprocesses, exit codes, output."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bertpre.model.bert import BertConfig, BertForPreTraining

ROOT = Path(__file__).resolve().parents[2]


def bertpre(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bertpre", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_export_writes_a_hugging_face_folder_and_refuses_bad_input(tmp_path: Path) -> None:
    run = tmp_path / "run"
    model = BertForPreTraining(BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=64))
    model.save_pretrained(run / "checkpoints" / "step-00000007")
    (run / "checkpoints" / "latest").write_text("step-00000007\n")
    (run / "tokenizer").mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"t{i}" for i in range(35)]
    (run / "tokenizer" / "vocab.txt").write_text("\n".join(vocab) + "\n")

    done = bertpre("export", str(run), "--out", str(tmp_path / "hf"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "step-00000007" in done.stdout and "BertForPreTraining" in done.stdout
    assert {p.name for p in (tmp_path / "hf").iterdir()} == {".bertpre-export", ".bertpre-inventory.json", "config.json",
                                                           "model.safetensors", "vocab.txt"}

    again = bertpre("export", str(run), "--out", str(tmp_path / "hf"), cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"error: --out {tmp_path / 'hf'} already exists; pass --overwrite to replace it, or choose another --out"
    ]


def test_info_prints_counts_flops_and_memory(tmp_path: Path) -> None:
    done = bertpre("info", "--config", str(ROOT / "configs" / "tiny.yaml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for words in ("total (BertForPreTraining)", "training FLOPs per token", "with gradient checkpointing"):
        assert words in done.stdout


def test_info_takes_an_xlnet_config_that_leaves_pair_task_out(tmp_path: Path) -> None:
    """A default the user never wrote is no error: plm reads no sentence pairs, so pair_task is none."""
    config = tmp_path / "xlnet.yaml"
    config.write_text("model:\n  architecture: xlnet\n  hidden_size: 64\n  num_hidden_layers: 2\n"
                      "  num_attention_heads: 4\n  intermediate_size: 128\n  vocab_size: 1000\n"
                      "data:\n  objective: plm\n")
    done = bertpre("info", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "XLNetLMHeadModel" in done.stdout
    written = bertpre("info", "--config", str(config), "--set", "data.pair_task=nsp", cwd=tmp_path)
    assert written.returncode == 2
    assert written.stderr.strip().splitlines() == [
        "error: data.objective plm reads documents as consecutive segments, with no sentence pairs; "
        "set data.pair_task: none (it is 'nsp')"]
