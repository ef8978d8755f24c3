"""A ModernBERT context extension in one run: a phase raises the global rotary theta with the
length; the model reads the phase's theta from the switch on (as a fresh model with that theta
would), its checkpoints say it, and a resume inside the second phase is bit-identical."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model.modernbert import ModernBertForMaskedLM
from bertpre.train.trainer import Trainer, pretrain

ROOT = Path(__file__).parents[2]
TINY_MODERNBERT = ROOT / "configs" / "tiny-modernbert.yaml"
EXTENSION = [
    {"steps": 3, "data": {"max_seq_length": 32, "max_predictions_per_seq": 10}},
    {"steps": 3, "lr_schedule": "continue", "data": {"max_seq_length": 64, "max_predictions_per_seq": 20},
     "train": {"batch_size": 4, "micro_batch_size": 4}, "model": {"global_rope_theta": 1.0e6}},
]


def extension_file(tmp_path: Path, phases: list, **model) -> Path:
    raw = yaml.safe_load(TINY_MODERNBERT.read_text())
    raw["model"].update({"global_rope_theta": 10000.0, **model})
    raw["train"].pop("max_steps")
    raw["train"].update({"batch_size": 8, "micro_batch_size": 8})
    raw["phases"] = phases
    path = tmp_path / "extension.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def settings(data: Path, out: Path, *more: str) -> list[str]:
    return [f"data.path={data}", f"train.out={out}", "train.log_every=1", "train.eval_every=1000",
            "train.save_every=1", "train.keep_last=10", "data.num_workers=0", *more]


def test_a_phase_sets_the_rotary_thetas_and_the_config_reads_back(tmp_path):
    config = load_config(extension_file(tmp_path, EXTENSION))
    assert config.for_phase(0).model.global_rope_theta == 10000.0
    assert config.for_phase(1).model.global_rope_theta == 1.0e6
    assert config.model.global_rope_theta == 10000.0  # the run's own value is left as given
    assert config.for_phase(1).model.local_rope_theta == config.model.local_rope_theta
    config.save(tmp_path / "saved.yaml")
    assert "global_rope_theta: 1000000.0" in (tmp_path / "saved.yaml").read_text()
    assert load_config(tmp_path / "saved.yaml") == config


@pytest.mark.parametrize(("phases", "message"), [
    ([{"steps": 2, "model": {"hidden_size": 32}}],
     r"unknown key in phases\[0\].model \(a phase changes only global_rope_theta, local_rope_theta\)"),
    ([{"steps": 2, "model": {"global_rope_theta": 1.0}}],
     r"phases\[0\].model.global_rope_theta must be"),
])
def test_bad_model_keys_in_a_phase_are_refused(tmp_path, phases, message):
    with pytest.raises(UserError, match=message):
        load_config(extension_file(tmp_path, phases))


def test_a_bert_run_refuses_a_phases_modernbert_key(tmp_path):
    raw = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    raw["train"].pop("max_steps")
    raw["phases"] = [{"steps": 2}, {"steps": 2, "model": {"global_rope_theta": 1.0e6}}]
    path = tmp_path / "bert.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError, match=r"phases\[1\]: model.global_rope_theta is ModernBERT's, which "
                                        r"model.architecture bert does not have"):
        load_config(path)


def test_after_the_switch_the_model_is_a_fresh_one_with_the_phases_theta(tiny_data, tmp_path, capsys):
    config = load_config(extension_file(tmp_path, EXTENSION), settings(tiny_data, tmp_path / "run"))
    with Trainer(config) as trainer:
        for _ in range(3):
            trainer.train_step()
            trainer.step += 1
        model = trainer.model.eval()
        with torch.no_grad():  # sharper attention than a nearly untrained model's, where positions tell
            for layer in model.model.layers:
                layer.attn.Wqkv.weight.mul_(30.0)
        input_ids = torch.randint(5, 100, (2, 64), generator=torch.Generator().manual_seed(0))
        attention_mask = torch.ones_like(input_ids)
        attention_mask[1, 40:] = 0
        with torch.no_grad():
            before = model(input_ids, attention_mask).prediction_logits
        trainer.next_phase()
        assert "phase 2 of 2 from step 3: max_seq_length 64, max_predictions_per_seq 20, batch 4 (micro-batch 4), " \
               "lr 0.002, global_rope_theta 1e+06, until step 6" in capsys.readouterr().err
        assert trainer.config.model.global_rope_theta == 10000.0  # the run's config is untouched
        with torch.no_grad():
            after = model(input_ids, attention_mask).prediction_logits
        fresh_config = load_config(extension_file(tmp_path, EXTENSION), settings(tiny_data, tmp_path / "run"))
        fresh_config.model.vocab_size = model.config.vocab_size
        fresh_config.model.pad_token_id = model.config.pad_token_id
        fresh_config.model.global_rope_theta = 1.0e6
        fresh = ModernBertForMaskedLM(fresh_config.model).eval()
        fresh.load_state_dict(model.state_dict())
        with torch.no_grad():
            expected = fresh(input_ids, attention_mask).prediction_logits
    real = attention_mask.bool()
    assert torch.equal(after[real], expected[real])
    assert not torch.allclose(before[real], after[real], atol=1e-4)  # 64 tokens: the theta matters


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_an_extension_resumed_inside_its_second_phase_is_bit_identical(tiny_data, tmp_path, one_thread):
    path = extension_file(tmp_path, EXTENSION)
    straight = pretrain(load_config(path, settings(tiny_data, tmp_path / "straight")))
    stopped = pretrain(load_config(path, settings(tiny_data, tmp_path / "resumed", "train.max_steps=5")))
    assert stopped.step == 5
    resumed = pretrain(load_config(path, settings(tiny_data, tmp_path / "resumed")))
    assert resumed.step == 6
    losses = [[row["train/loss"] for row in rows(run.run_dir) if "train/loss" in row] for run in (straight, resumed)]
    assert losses[0] == losses[1] and len(losses[0]) == 6
    checkpoints = straight.run_dir / "checkpoints"
    thetas = [json.loads((checkpoints / f"step-{step:08d}" / "config.json").read_text())
              ["rope_parameters"]["full_attention"]["rope_theta"] for step in (3, 4, 6)]
    assert thetas == [10000.0, 1.0e6, 1.0e6]  # each checkpoint says the theta it was trained with
    a = load_file(checkpoints / "step-00000006" / "model.safetensors")
    b = load_file(resumed.run_dir / "checkpoints" / "step-00000006" / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_an_extension_of_a_released_modernbert_resumes_inside_its_second_phase(tiny_data, tmp_path):
    """With model.init_from, the checkpoint's config.json holds phase 2's theta; a resume takes the
    run's own thetas from its config, not the checkpoint's, and goes on as if never stopped."""
    transformers = pytest.importorskip("transformers")
    from bertpre.tokenizer import load_tokenizer
    from bertpre.tokenizer.roles import token_roles

    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    torch.manual_seed(7)
    released = transformers.ModernBertConfig(
        vocab_size=tokenizer.get_vocab_size(), pad_token_id=token_roles(tokenizer).pad_token_id, bos_token_id=None,
        eos_token_id=None, cls_token_id=None, sep_token_id=None, hidden_size=32, num_hidden_layers=3,
        num_attention_heads=4, intermediate_size=48, max_position_embeddings=64, local_attention=8)
    transformers.ModernBertForMaskedLM(released).save_pretrained(tmp_path / "released")
    shutil.copy(tiny_data / "tokenizer" / "tokenizer.json", tmp_path / "released")
    path = tmp_path / "extend.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"init_from": str(tmp_path / "released")},
        "data": {"max_predictions_per_seq": 10, "num_workers": 0},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "train": {"batch_size": 4, "micro_batch_size": 4, "precision": "fp32"},
        "phases": [{"steps": 2, "data": {"max_seq_length": 32}},
                   {"steps": 2, "data": {"max_seq_length": 64}, "model": {"global_rope_theta": 1.0e6}}]}))
    straight = pretrain(load_config(path, settings(tiny_data, tmp_path / "straight")))
    stopped = pretrain(load_config(path, settings(tiny_data, tmp_path / "resumed", "train.max_steps=3")))
    assert stopped.step == 3
    resumed = pretrain(load_config(path, settings(tiny_data, tmp_path / "resumed")))
    assert resumed.step == 4
    saved = yaml.safe_load((resumed.run_dir / "config.yaml").read_text())
    assert saved["model"]["global_rope_theta"] == 160000.0  # the released model's, phase 1's
    losses = [[row["train/loss"] for row in rows(run.run_dir) if "train/loss" in row] for run in (straight, resumed)]
    assert losses[0] == losses[1] and len(losses[0]) == 4
