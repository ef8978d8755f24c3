"""What `bertpre finetune` tells its user, from the outside: what a tagging seed trains on, in
sentences and tokens; which lr a stuck seed should try."""
from __future__ import annotations

import json

import pytest
from test_finetune import run_main, write_task

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest


def test_a_small_model_stuck_at_the_bert_presets_lr_is_told_which_lr_to_try(
        run_folder, tmp_path, monkeypatch, capsys):
    train = write_task(tmp_path, 40, 0, "train.jsonl")
    validation = write_task(tmp_path, 20, 1, "dev.jsonl")
    code, stdout, stderr = run_main(["finetune", run_folder, "--train", train, "--validation", validation,
                                     "--out", tmp_path / "out", "--seeds", "1", "--epochs", "1"],
                                    monkeypatch, capsys)
    assert code == 0, stderr
    flags = json.loads((tmp_path / "out" / "results.json").read_text())["flags"]
    assert len(flags) == 1 and flags[0].endswith(
        "(stuck at one class: lr 2e-05 is a rate for BERT-base (hidden 768) and barely moves a hidden-32 "
        "model: try --lr 0.001, and more epochs with --preset small-data)"), flags
    assert f"warning: {flags[0]}" in stdout


def test_a_tagging_seed_says_how_many_sentences_and_tokens_it_trains_on(run_folder, tmp_path, monkeypatch, capsys):
    """A probe trains on one feature a tagged token, not one a sentence."""
    from test_finetune import write_conll

    train, validation = write_conll(tmp_path / "train.conll", 12, 0), write_conll(tmp_path / "dev.conll", 4, 1)
    tokens = sum(1 for line in train.read_text().splitlines() if line.strip() and not line.startswith("-DOCSTART-"))
    code, _, stderr = run_main(["finetune", run_folder, "--task", "tagging", "--train", train, "--validation",
                                validation, "--out", tmp_path / "out", "--mode", "probe", "--seeds", "1",
                                "--epochs", "1"], monkeypatch, capsys)
    assert code == 0, stderr
    assert f"seed 0: probing on 12 sentences ({tokens} tagged tokens)" in stderr.splitlines()
