"""Memory bounded before allocation, as a user meets it: `bertpre fill-mask` reads any length of text
on an XLNet export in windows with memory; a forward the cost model says would not fit the
machine's memory (fill-mask, evaluate, finetune) is refused in one line that gives the figure and
the machine's memory, before anything is allocated; `bertpre info` shows the figure evaluate checks."""
from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from _in_process import run_main

from bertpre.model import BertConfig
from bertpre.model import xlnet as xlnet_module
from bertpre.model.bert import BertForPreTraining
from bertpre.model.cost import ForwardShape, estimate_inference_memory, estimate_memory, readable
from bertpre.model.xlnet import XLNetRelativeAttention
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.wordpiece import save_tokenizer
from bertpre.tools.export import export
from bertpre.train import memory

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["the", "cat", "sees", "river", "a", "dog", "farmer", "apple", "red", "."]
SMALL_MACHINE = 64 * 2**20




def machine_of(size: int, monkeypatch) -> None:
    """This machine has `size` bytes, as every memory check reads it."""
    monkeypatch.setattr(memory, "device_memory", lambda device: (size, "this machine has"))


def long_text(words: int, masks: tuple[int, ...] = (3,)) -> str:
    rng = random.Random(0)
    text = [rng.choice(WORDS) for _ in range(words)]
    for position in masks:
        text[position] = "[MASK]"
    return " ".join(text)


@pytest.fixture(scope="module")
def xlnet_export(tiny_data, tmp_path_factory) -> Path:
    """A tiny XLNet (memory of 8 states) exported as `bertpre export` writes it."""
    from _xlnet_run import xlnet_run

    root = tmp_path_factory.mktemp("xlnet-memory")
    export(xlnet_run(root / "run", tiny_data), root / "export")
    return root / "export"


@pytest.fixture(scope="module")
def relative_bert(tiny_data, tmp_path_factory) -> Path:
    """A tiny BERT with Transformer-XL relative positions (any length, attention bias T × T)."""
    folder = tmp_path_factory.mktemp("bert-relative")
    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    BertForPreTraining(BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64,
                                  position_embedding_type="transformer_xl")).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    return folder


def test_fill_mask_reads_a_very_long_text_on_xlnet_in_windows_of_bounded_attention(
        xlnet_export, monkeypatch, capsys):
    monkeypatch.setattr(xlnet_module, "MASK_WINDOW", 32)  # the length an export declares is 512: see the slow test
    monkeypatch.setattr(xlnet_module, "MASK_WINDOW_STEP", 16)
    sizes = []
    attend = XLNetRelativeAttention.attend
    monkeypatch.setattr(XLNetRelativeAttention, "attend",
                        lambda self, query, key, *rest: sizes.append(query.shape[2] * key.shape[2])
                        or attend(self, query, key, *rest))
    code, stdout, stderr = run_main(["fill-mask", xlnet_export, long_text(1000, (3, 500, 997))],
                                    monkeypatch, capsys)
    assert code == 0, stderr
    assert [line.split(":")[0].strip() for line in stdout.splitlines()[2:]] == [
        "[MASK] 1", "[MASK] 2", "[MASK] 3"]
    assert max(sizes) == 32 * (32 + 8)  # a window's queries over the window and the 8 memory states


@pytest.mark.slow
def test_the_reported_text_of_17000_words_reads_in_bounded_memory(xlnet_export, tmp_path):
    """The report: 17,000 words took 23.6 GB in 58 s and were killed. With windows of 512, a
    process that may hold no more than 3 GiB of data reads them."""
    limit = 3 * 2**30

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))

    done = subprocess.run([sys.executable, "-m", "bertpre", "fill-mask", str(xlnet_export),
                           long_text(17_000, (3, 8_500, 16_990))],
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
                          preexec_fn=limited, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert sum(line.startswith("  [MASK]") for line in done.stdout.splitlines()) == 3


@pytest.mark.parametrize("short_fits", [True, False])
def test_fill_mask_refuses_a_text_whose_forward_would_not_fit_with_the_figure(
        short_fits, relative_bert, monkeypatch, capsys):
    config = json.loads((relative_bert / "config.json").read_text())
    shape = BertConfig(**{key: config[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                       "num_attention_heads", "intermediate_size",
                                                       "position_embedding_type")})
    text = long_text(2000) if not short_fits else "the [MASK] sees the river ."
    length = len(load_tokenizer(relative_bert).encode(text).ids)
    need = estimate_inference_memory(shape, ForwardShape(1, length, 1))
    machine_of(SMALL_MACHINE, monkeypatch)
    code, stdout, stderr = run_main(["fill-mask", relative_bert, text], monkeypatch, capsys)
    if short_fits:
        assert need.total < SMALL_MACHINE and code == 0, stderr
        return
    assert need.total > SMALL_MACHINE
    assert code == 2 and stdout == "" and stderr.splitlines() == [
        f"error: reading the text ({length:,} tokens at once) needs about {readable(need.total)} "
        f"({readable(need.weights)} of weights, {readable(need.activations)} of activations), but this "
        f"machine has 64.0 MiB; shorten the text"]


def test_fill_mask_on_xlnet_refuses_a_window_that_would_not_fit(xlnet_export, monkeypatch, capsys):
    machine_of(2**20, monkeypatch)
    code, _, stderr = run_main(["fill-mask", xlnet_export, long_text(2000)], monkeypatch, capsys)
    assert code == 2 and len(stderr.splitlines()) == 1
    assert stderr.startswith("error: reading the text (512 tokens at once) needs about ")
    assert stderr.rstrip().endswith("but this machine has 1.0 MiB; shorten the text")


def test_evaluate_refuses_a_micro_batch_that_would_not_fit_with_the_figure_info_shows(
        xlnet_export, tiny_data, tmp_path, monkeypatch, capsys):
    machine_of(SMALL_MACHINE, monkeypatch)
    code, _, stderr = run_main(["evaluate", xlnet_export, "--data", tiny_data, "--micro-batch-size", "64"],
                               monkeypatch, capsys)
    assert code == 2 and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("error: scoring 64 sequences of 128 tokens at once needs about ")
    assert stderr.rstrip().endswith("but this machine has 64.0 MiB; lower --micro-batch-size or --max-seq-length")
    figure = stderr.split("needs about ")[1].split(" (")[0]

    # `bertpre info` on the same model and data settings shows the figure evaluate compared.
    config = tmp_path / "xlnet.yaml"
    config.write_text(f"model: {{architecture: xlnet, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 4, "
                      f"intermediate_size: 64, mem_len: 8}}\ndata: {{path: {tiny_data}, objective: plm}}\n"
                      "train: {micro_batch_size: 64}\n", encoding="utf-8")
    code, stdout, stderr = run_main(["info", "--config", config], monkeypatch, capsys)
    assert code == 0, stderr
    assert f"  evaluate (no gradients, fp32, 64 sequences of 128 tokens): {figure} at its peak" in stdout


def test_finetune_refuses_a_batch_that_would_not_fit_and_writes_nothing(relative_bert, tmp_path, monkeypatch,
                                                                        capsys):
    text = "the cat sees the river . " * 10
    for name in ("train.jsonl", "dev.jsonl"):
        (tmp_path / name).write_text("".join(json.dumps({"text": text, "label": label}) + "\n"
                                             for label in ("a", "b") * 8), encoding="utf-8")
    length = len(load_tokenizer(relative_bert).encode(text).ids)
    config = json.loads((relative_bert / "config.json").read_text())
    shape = BertConfig(**{key: config[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                       "num_attention_heads", "intermediate_size",
                                                       "position_embedding_type")})
    cost = estimate_memory(shape, length, 0.0, "fp32", memory_length=0, query_rows=0)
    model = cost.weights + cost.gradients + cost.adamw_state
    need = model + 16 * cost.activations_per_sequence
    machine_of(need - 1, monkeypatch)
    code, stdout, stderr = run_main(["finetune", relative_bert, "--train", tmp_path / "train.jsonl",
                                     "--validation", tmp_path / "dev.jsonl", "--out", tmp_path / "out",
                                     "--batch-size", "16", "--precision", "fp32", "--seeds", "1"],
                                    monkeypatch, capsys)
    assert code == 2 and stdout == "", stderr
    assert stderr.splitlines()[-1] == (
        f"error: fine-tuning a batch of 16 examples of {length} tokens needs at least {readable(need)} "
        f"({readable(model)} of weights, gradients and AdamW state, "
        f"{readable(16 * cost.activations_per_sequence)} of activations in fp32), but this machine has "
        f"{readable(need - 1)}; lower --batch-size or --max-seq-length")
    assert not (tmp_path / "out").exists()
