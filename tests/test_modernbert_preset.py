"""configs/modernbert-base.yaml is ModernBERT-base's recipe: transformers' ModernBertConfig shape,
the published token counts as steps, one WSD schedule over both phases; docs/guides/modernbert.md's recipe block
says what the preset and `bertpre info` say."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from bertpre.cli import app
from bertpre.config import load_config
from bertpre.model.config import BertConfig
from bertpre.train.optim import scheduled_learning_rate, wsd_decay_start

MODERNBERT_GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "modernbert.md"
# The fields the preset sets to ModernBERT-base's values (pad_token_id comes from DATA's tokenizer).
SHAPE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
         "max_position_embeddings", "hidden_activation", "norm_eps", "norm_bias", "local_attention",
         "global_attn_every_n_layers", "global_rope_theta", "local_rope_theta", "attention_bias", "mlp_bias",
         "decoder_bias", "initializer_range", "initializer_cutoff_factor", "embedding_dropout",
         "attention_dropout", "mlp_dropout")


def test_the_extended_model_is_transformers_modernbert_base():
    transformers = pytest.importorskip("transformers")
    theirs = BertConfig.from_hf_dict(transformers.ModernBertConfig().to_dict())
    config = load_config("modernbert-base")
    extended = config.for_phase(1).model  # the released model is the extended one (theta 160,000)
    assert {name: getattr(extended, name) for name in SHAPE} == {name: getattr(theirs, name) for name in SHAPE}
    assert config.for_phase(0).model.global_rope_theta == 10000.0


def test_the_phases_are_the_published_token_counts():
    config = load_config("modernbert-base")
    first, second = config.for_phase(0), config.for_phase(1)
    tokens = [phase.train.batch_size * phase.data.max_seq_length for phase in (first, second)]
    assert tokens[0] == tokens[1] == 4608 * 1024  # the extension keeps the tokens a step
    assert abs(config.phases[0].steps * tokens[0] - 1.719e12) < tokens[0]
    assert abs(config.phases[1].steps * tokens[1] - 300e9) < tokens[1]
    assert abs(config.optim.warmup_steps * tokens[0] - 3e9) < tokens[0]
    total = config.train.max_steps
    decay_steps = total - wsd_decay_start(config.optim.warmup_steps, total, config.optim.decay_fraction)
    assert decay_steps * tokens[1] == pytest.approx(50e9, rel=0.02)
    assert (first.data.mlm_probability, first.data.max_predictions_per_seq, first.data.pair_task) == (0.3, None, "none")
    assert (second.data.max_seq_length, second.data.max_predictions_per_seq) == (8192, None)
    assert (config.optim.betas, config.optim.eps, config.optim.decay_shape) == ([0.9, 0.98], 1e-6, "1-sqrt")
    assert config.optim.weight_decay * config.optim.lr == pytest.approx(1e-5)  # the authors' decay at the peak
    assert config.warnings() == []


def test_one_schedule_runs_over_both_phases():
    config = load_config("modernbert-base")
    total, boundary = config.train.max_steps, config.phase_ends()[0]
    lr = [scheduled_learning_rate(config, step) for step in (0, 635, boundary - 1, boundary, total - 1)]
    assert lr[0] == pytest.approx(8e-4 / 636) and lr[1] == lr[2] == lr[3] == 8e-4
    assert 0 < lr[4] < 8e-4 * 0.01


def guide_recipe() -> str:
    text = MODERNBERT_GUIDE.read_text(encoding="utf-8")
    return text.split("To pretrain ModernBERT-base from scratch", 1)[1]


def test_the_guide_s_recipe_block_is_the_preset_and_its_cost_is_infos():
    text = guide_recipe()
    shown_yaml, shown_info = re.findall(r"^```(?:yaml)?\n(.*?)^```", text, re.M | re.S)[:2]
    config = load_config("modernbert-base")
    shown = yaml.safe_load(shown_yaml)
    assert [(phase["steps"], phase.get("lr_schedule", "restart")) for phase in shown["phases"]] == \
        [(phase.steps, phase.lr_schedule) for phase in config.phases]
    for index, phase in enumerate(shown["phases"]):
        for section in ("data", "train", "model"):
            assert phase.get(section, {}) == getattr(config.phases[index], section), (index, section)
    for key, value in shown["optim"].items():
        assert getattr(config.optim, key) == value, key
    result = CliRunner().invoke(app, ["info", "--config", "modernbert-base"])
    assert result.exit_code == 0, result.output
    for line in shown_info.strip().splitlines():
        if line.strip():
            assert line in result.output.splitlines(), line
