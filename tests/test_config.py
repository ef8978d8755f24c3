"""The config: shipped YAMLs load, every key is validated, overrides win, contradictions fail."""
from pathlib import Path

import pytest
import yaml

from bertpre.config import check_world_size, load_config, resolve
from bertpre.errors import UserError
from bertpre.tokenizer.wordpiece import train_tokenizer

ROOT = Path(__file__).parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    config = load_config(path)
    assert config.model.hidden_size % config.model.num_attention_heads == 0


def test_tiny_config_values():
    config = load_config(CONFIGS[0].parent / "tiny.yaml")
    assert (config.model.hidden_size, config.model.num_hidden_layers) == (64, 2)
    assert config.model.vocab_size == "auto"
    assert config.train.precision == "fp32"


def test_defaults_are_the_design_defaults():
    config = load_config(None)
    assert config.optim.lr == 1e-4 and config.optim.betas == [0.9, 0.999]
    assert config.optim.warmup_steps == 10000 and config.optim.warmup_ratio is None
    assert config.train.batch_size == 256 and config.train.micro_batch_size == 32
    assert config.data.max_predictions_per_seq == 20


def test_overrides_win_over_yaml_and_are_parsed_as_yaml(tmp_path):
    path = write(tmp_path, "train:\n  max_steps: 50\n  batch_size: 16\n  micro_batch_size: 8\n")
    config = load_config(path, ["train.max_steps=7", "optim.lr=3e-4", "data.whole_word_mask=true",
                                "data.max_predictions_per_seq=null", "optim.warmup_steps=2"])
    assert config.train.max_steps == 7
    assert config.train.batch_size == 16
    assert config.optim.lr == 3e-4
    assert config.data.whole_word_mask is True
    assert config.data.max_predictions_per_seq is None


@pytest.mark.parametrize("text, expected", [
    ("train:\n  max_step: 5\n", "did you mean 'max_steps'"),
    ("optimm:\n  lr: 1.0\n", "did you mean 'optim'"),
    ("model:\n  hiden_size: 5\n", "did you mean 'hidden_size'"),
])
def test_unknown_keys_name_the_closest_valid_one(tmp_path, text, expected):
    with pytest.raises(UserError, match=expected):
        load_config(write(tmp_path, text))


def test_unknown_override_key_is_refused():
    with pytest.raises(UserError, match="did you mean 'micro_batch_size'"):
        load_config(None, ["train.micro_batch=4"])
    with pytest.raises(UserError, match="section.key=value"):
        load_config(None, ["max_steps"])


@pytest.mark.parametrize("text, expected", [
    ("train:\n  max_steps: ten\n", "train.max_steps must be an integer"),
    ("train:\n  gradient_checkpointing: 1\n", "must be true or false"),
    ("optim:\n  schedule: step\n", "use one of linear, cosine, constant"),
    ("optim:\n  name: sgd\n", "optim.name is 'sgd'; use one of adamw, lamb"),
    ("optim:\n  name: LAMB\n", "optim.name is 'LAMB'; use one of adamw, lamb"),
    ("train:\n  precision: fp8\n", "use one of auto, fp32, fp16, bf16"),
    ("data:\n  pair_task: mlm\n", "use one of nsp, sop, none"),
    ("optim:\n  lr: -1.0\n", "optim.lr must be in"),
    ("optim:\n  betas: [0.9]\n", "list of two numbers"),
    ("data:\n  mlm_probability: 0\n", "data.mlm_probability"),
    ("model:\n  vocab_size: many\n", "integer or 'auto'"),
    ("- a\n- b\n", "must be a mapping"),
    ("train: [1, 2]\n", "section 'train' must be a mapping"),
    ("train:\n  max_steps: [1\n", "not valid YAML"),
])
def test_bad_values_fail_with_the_key_named(tmp_path, text, expected):
    with pytest.raises(UserError, match=expected):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("overrides, expected", [
    (["data.max_seq_length=128", "model.max_position_embeddings=64"], "larger than model.max_position_embeddings"),
    (["train.batch_size=20", "train.micro_batch_size=8"], "not divisible"),
    (["model.hidden_size=30", "model.num_attention_heads=4"], "divisible by"),
    (["optim.warmup_steps=5", "optim.warmup_ratio=0.1"], "not both"),
    (["data.mask_replace_prob=0.9", "data.random_replace_prob=0.2"], "at most 1"),
])
def test_contradictions_fail_before_any_work(overrides, expected):
    with pytest.raises(UserError, match=expected):
        load_config(None, overrides)


def test_warmup_ratio_becomes_warmup_steps():
    config = load_config(None, ["train.max_steps=200", "optim.warmup_ratio=0.05"])
    assert config.optim.warmup_steps == 10 and config.optim.warmup_ratio is None


def test_batch_must_divide_by_micro_batch_times_world():
    config = load_config(None, ["train.batch_size=32", "train.micro_batch_size=8"])
    assert check_world_size(config, 1) == 4
    assert check_world_size(config, 4) == 1
    with pytest.raises(UserError, match="micro_batch_size × world size"):
        check_world_size(config, 3)


def test_yaml_bomb_is_refused(tmp_path):
    lines = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in range(1, 9):
        refs = ", ".join([f"*{chr(96 + level)}"] * 9)
        lines.append(f"{chr(97 + level)}: &{chr(97 + level)} [{refs}]")
    with pytest.raises(UserError, match="aliases"):
        load_config(write(tmp_path, "\n".join(lines) + "\n"))


def test_oversized_file_is_refused(tmp_path):
    with pytest.raises(UserError, match="over"):
        load_config(write(tmp_path, "# " + "x" * 1_100_000 + "\n"))


def test_vocab_auto_resolves_from_the_tokenizer_and_smaller_vocab_fails():
    tokenizer = train_tokenizer([["the cat sat on the mat", "a dog ran"]] * 3, vocab_size=60,
                                min_frequency=1)
    size = tokenizer.get_vocab_size()
    config = resolve(load_config(None), tokenizer)
    assert config.model.vocab_size == size
    assert config.model.pad_token_id == tokenizer.token_to_id("[PAD]")
    with pytest.raises(UserError, match="smaller than the tokenizer"):
        resolve(load_config(None, [f"model.vocab_size={size - 1}"]), tokenizer)


def test_saved_config_loads_back_identically(tmp_path):
    config = load_config(None, ["optim.warmup_ratio=0.1", "train.max_steps=100"])
    config.save(tmp_path / "config.yaml")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["optim"]["warmup_steps"] == 10
    assert load_config(tmp_path / "config.yaml") == config


def test_a_warmup_as_long_as_the_run_is_warned_about():
    assert load_config("tiny").warnings() == []
    said = load_config("tiny", ["train.max_steps=20"]).warnings()  # warmup_steps is 30
    assert said == ["optim.warmup_steps (30) is not shorter than the run (train.max_steps 20): the "
                    "learning rate never reaches optim.lr (0.002) and never decays"]


def test_a_prediction_cap_below_the_mask_rate_is_warned_about():
    from bertpre.config import preset_names

    for preset in preset_names():  # Google's caps fit 15% at every length
        assert load_config(preset).warnings() == [], preset
    said = load_config("tiny", ["data.mlm_probability=0.3"]).warnings()  # 64 tokens, cap 10
    assert said == ["data.max_predictions_per_seq (10) caps a full sequence's predictions below "
                    "data.mlm_probability (0.3 of 62 tokens is 19): the run predicts 16.1% of tokens; "
                    "raise the cap or set it to null"]
    assert load_config("tiny", ["data.mlm_probability=0.3", "data.max_predictions_per_seq=null"]).warnings() == []
    assert load_config("tiny", ["data.mlm_probability=0.3", "data.max_predictions_per_seq=19"]).warnings() == []


def test_presets_resolve_by_name_and_a_file_wins(tmp_path, monkeypatch):
    from bertpre.config import resolve_config_path

    monkeypatch.chdir(tmp_path)
    for name in ("base", "base.yaml", "configs/base.yaml"):
        assert resolve_config_path(name).read_text() == (ROOT / "configs" / "base.yaml").read_text()
    (tmp_path / "base.yaml").write_text("train:\n  max_steps: 7\n")
    assert resolve_config_path("base.yaml") == Path("base.yaml")
    assert load_config("base.yaml").train.max_steps == 7
    with pytest.raises(UserError, match="a preset \\(albert-base, base, large, large-batch, mini, tiny\\)"):
        load_config("nope")


def test_data_path_is_a_folder_or_a_weighted_mixture(tmp_path):
    text = ("data:\n  path:\n    - {path: data/pubmed, weight: 0.7}\n"
            "    - {path: data/wiki, weight: 3.0e-1}\n")
    config = load_config(write(tmp_path, text))
    assert config.data.path == [{"path": "data/pubmed", "weight": 0.7}, {"path": "data/wiki", "weight": 0.3}]
    assert config.data.sources == [("data/pubmed", 0.7), ("data/wiki", 0.3)]
    assert load_config(None, ["data.path=[{path: a, weight: 1}, {path: b, weight: 3}]"]).data.sources == [
        ("a", 0.25), ("b", 0.75)]
    single = load_config(write(tmp_path, text), ["data.path=data/other"])
    assert single.data.path == "data/other" and single.data.sources == [("data/other", 1.0)]
    config.save(tmp_path / "saved.yaml")
    assert load_config(tmp_path / "saved.yaml").data.path == config.data.path


@pytest.mark.parametrize("value, expected", [
    ("[{path: a}]", r"data.path\[0\] has no weight"),
    ("[{path: a, weight: 1}, {weight: 1}]", r"data.path\[1\] has no path"),
    ("[{path: a, weight: 1, wieght: 2}]", r"unknown key in data.path\[0\] 'wieght'; did you mean 'weight'"),
    ("[{path: a, weight: 0}]", r"data.path\[0\].weight must be a positive number, got 0"),
    ("[{path: a, weight: -1.5}]", "must be a positive number"),
    ("[{path: a, weight: heavy}]", "must be a positive number"),
    ("[{path: a, weight: .inf}]", "must be a positive number"),
    ("[{path: a, weight: 1}, {path: a, weight: 2}]", "listed twice"),
    ("[]", "a DATA folder or a list of {path, weight}"),
    ("[data/a]", r"data.path\[0\] must be a mapping"),
    ("3", "a DATA folder or a list"),
])
def test_bad_mixtures_fail_with_the_entry_named(value, expected):
    with pytest.raises(UserError, match=expected):
        load_config(None, [f"data.path={value}"])
