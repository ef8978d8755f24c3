"""A ModernBERT through the CLI as a user runs it: `bertpre pretrain --config tiny-modernbert` for a few
steps, `bertpre export` (transformers' ModernBertForMaskedLM), `bertpre fill-mask`, `bertpre evaluate`;
BERT's keys of tiny.yaml with `--set model.architecture=modernbert` refused in one line."""
from __future__ import annotations

import json

import pytest
import torch
from _in_process import run_main

from bertpre.model.families import load_pretraining_model

transformers = pytest.importorskip("transformers")


@pytest.mark.slow
def test_pretrain_export_fill_mask_and_evaluate_a_modernbert(tiny_data, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    code, out, err = run_main(["pretrain", "--config", "tiny-modernbert", "--data", tiny_data, "--out", run,
                               "--set", "train.max_steps=4", "--set", "train.save_every=4", "--set",
                               "train.batch_size=16", "--set", "train.micro_batch_size=8"], monkeypatch, capsys)
    assert code == 0, err
    assert "ModernBERT of" in out + err and "global attention every 3 layers" in out + err

    code, out, err = run_main(["export", run, "--out", tmp_path / "export"], monkeypatch, capsys)
    assert code == 0, err
    assert "as ModernBertForMaskedLM" in out + err
    assert json.loads((tmp_path / "export" / "config.json").read_text())["layer_types"] == \
        ["full_attention", "sliding_attention", "sliding_attention"]
    # the run's tokenizer as it is, transformers told the length the model is made for
    assert (tmp_path / "export" / "tokenizer.json").read_bytes() == (run / "tokenizer" / "tokenizer.json").read_bytes()
    assert json.loads((tmp_path / "export" / "tokenizer_config.json").read_text())["model_max_length"] == 128
    exported, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "export", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ours = load_pretraining_model(run / "checkpoints" / "step-00000004", strict=True).eval()
    input_ids = torch.randint(5, 100, (2, 64), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 30:] = 0
    with torch.no_grad():
        theirs = exported.eval()(input_ids=input_ids, attention_mask=attention_mask).logits
        mine = ours(input_ids, attention_mask).prediction_logits
    real = attention_mask.bool()
    torch.testing.assert_close(mine[real], theirs[real], rtol=0, atol=1e-4)  # 64 tokens: past the 16-wide window

    code, out, err = run_main(["fill-mask", tmp_path / "export", "the cat [MASK] on the mat ."], monkeypatch, capsys)
    assert code == 0, err
    assert "[MASK] 1:" in out

    code, out, err = run_main(["evaluate", tmp_path / "export", "--data", tiny_data], monkeypatch, capsys)
    assert code == 0, err
    loss = float(next(line.split()[1] for line in out.splitlines() if line.startswith("mlm_loss")))
    assert 0 < loss < 2 * torch.log(torch.tensor(float(ours.config.vocab_size))).item()


def test_berts_keys_with_architecture_modernbert_are_one_line_and_exit_2(tiny_data, tmp_path, monkeypatch, capsys):
    code, out, err = run_main(["pretrain", "--config", "tiny", "--data", tiny_data, "--out", tmp_path / "run",
                               "--set", "model.architecture=modernbert"], monkeypatch, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "model.hidden_act is BERT's, which model.architecture modernbert does not read" in err
    assert "model.hidden_activation" in err


@pytest.mark.slow
def test_a_resumed_modernbert_run_trains_as_the_straight_one(tiny_data, tmp_path):
    from bertpre.config import load_config
    from bertpre.train.trainer import pretrain

    def config(out: str, steps: int):
        # in warmup the learning rate does not depend on max_steps: 3 + 3 steps are the 6 straight ones
        return load_config("tiny-modernbert", [f"data.path={tiny_data}", f"train.out={tmp_path / out}",
                                               f"train.max_steps={steps}", "train.save_every=3",
                                               "train.batch_size=16", "train.micro_batch_size=8"])

    straight = pretrain(config("straight", 6))
    pretrain(config("resumed", 3))
    resumed = pretrain(config("resumed", 6))
    assert resumed.step == 6
    a = (straight.run_dir / "checkpoints" / "step-00000006" / "model.safetensors").read_bytes()
    b = (resumed.run_dir / "checkpoints" / "step-00000006" / "model.safetensors").read_bytes()
    assert a == b
