"""A Unigram vocab trained from scratch carries an XLM-R through pretraining: `bertpre tokenize
--tokenizer-type unigram`, then a few `bertpre pretrain` steps of `model.architecture: xlm-roberta`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from _in_process import run_main
from _released_tokenizers import sample_lines

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"


@pytest.mark.slow  # about 12 s
def test_a_trained_unigram_vocab_pretrains_an_xlm_roberta(tmp_path, monkeypatch, capsys):
    lines = sample_lines(fuzzed=10) * 3
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(lines[start:start + 6]) for start in range(0, len(lines), 6)) + "\n",
                      encoding="utf-8")
    code, out, err = run_main(["tokenize", corpus, "--out", tmp_path / "data", "--tokenizer-type", "unigram",
                               "--vocab-size", "320", "--no-sentence-split", "--validation-share", "0.1"],
                              monkeypatch, capsys)
    assert code == 0, err
    tokenizer = json.loads((tmp_path / "data" / "manifest.json").read_text())["tokenizer"]
    assert (tokenizer["kind"], tokenizer["vocab_size"]) == ("unigram", 320)

    code, out, err = run_main(["pretrain", "--config", TINY, "--data", tmp_path / "data", "--out", tmp_path / "run",
                               "--set", "model.architecture=xlm-roberta", "--set", "model.max_position_embeddings=66",
                               "--set", "data.pair_task=none", "--set", "train.max_steps=3",
                               "--set", "train.eval_every=3", "--set", "train.save_every=3"], monkeypatch, capsys)
    assert code == 0, err
    assert "done at step 3" in out
    config = json.loads((tmp_path / "run" / "checkpoints" / "step-00000003" / "config.json").read_text())
    assert (config["model_type"], config["architectures"], config["vocab_size"], config["pad_token_id"]) == (
        "xlm-roberta", ["XLMRobertaForMaskedLM"], 320, 1)
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_bytes() == (
        tmp_path / "data" / "tokenizer" / "tokenizer.json").read_bytes()
    evaluation = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
                  if "eval/mlm_loss" in line]
    assert evaluation and 4.0 < evaluation[-1]["eval/mlm_loss"] < 7.0  # about ln(320) = 5.77 at the start
