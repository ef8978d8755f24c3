"""The config: shipped YAMLs load, every key is validated, overrides win, contradictions fail."""
import math
import re
import types
import typing
from pathlib import Path

import pytest
import yaml

from bertpre.config import RULES, SECTIONS, check_world_size, load_config, resolve
from bertpre.config.sections import field_types
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


def test_wsd_fills_its_decay_keys_and_other_schedules_leave_them_null(tmp_path):
    wsd = load_config(None, ["optim.schedule=wsd"]).optim
    assert (wsd.decay_fraction, wsd.decay_shape) == (0.2, "1-sqrt")
    given = load_config(None, ["optim.schedule=wsd", "optim.decay_fraction=0.1", "optim.decay_shape=linear"])
    assert (given.optim.decay_fraction, given.optim.decay_shape) == (0.1, "linear")
    assert (load_config(None).optim.decay_fraction, load_config(None).optim.decay_shape) == (None, None)
    given.save(tmp_path / "config.yaml")  # a run's config.yaml, resolved, loads back the same
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["optim"]["decay_shape"] == "linear"
    assert load_config(tmp_path / "config.yaml") == given


@pytest.mark.parametrize("overrides, expected", [
    (["optim.decay_fraction=0.1"],
     "optim.decay_fraction shapes the decay of optim.schedule wsd, and this config's schedule is linear; "
     "remove optim.decay_fraction (or set it to null), or set optim.schedule: wsd"),
    (["optim.schedule=cosine", "optim.decay_shape=linear"],
     "optim.decay_shape shapes the decay of optim.schedule wsd, and this config's schedule is cosine; "
     "remove optim.decay_shape (or set it to null), or set optim.schedule: wsd"),
    (["optim.schedule=wsd", "optim.decay_shape=sqrt"], "optim.decay_shape is 'sqrt'; use one of 1-sqrt, linear"),
    (["optim.schedule=wsd", "optim.decay_shape=1"], "optim.decay_shape must be a string, got 1"),
    (["optim.schedule=wsd", "optim.decay_fraction=0"], "optim.decay_fraction must be in (0, 1], got 0"),
    (["optim.schedule=wsd", "optim.decay_fraction=1.5"], "optim.decay_fraction must be in (0, 1], got 1.5"),
    (["optim.schedule=wsd", "optim.decay_fraction=.nan"], "optim.decay_fraction must be a finite number, got nan"),
    (["optim.schedule=step"], "optim.schedule is 'step'; use one of linear, cosine, constant, wsd"),
])
def test_wsd_keys_are_checked_in_one_line(overrides, expected):
    with pytest.raises(UserError) as raised:
        load_config(None, overrides)
    assert str(raised.value) == expected


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


def test_a_wsd_decay_of_no_steps_is_warned_about():
    assert load_config("tiny", ["optim.schedule=wsd", "optim.decay_fraction=0.001"]).warnings() == []  # 0.6: 1
    said = load_config("tiny", ["optim.schedule=wsd", "optim.decay_fraction=0.0008"]).warnings()  # 0.48 of 600
    assert said == ["optim.decay_fraction (0.0008) of 600 steps rounds to none: the WSD schedule never decays; "
                    "raise optim.decay_fraction"]


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
    from bertpre.config import preset_names

    # the installed presets, every one named (a worktree's shared editable install reads the main checkout's)
    assert {"albert-base", "base", "large", "large-batch", "mini", "modernbert-base", "tiny",
            "tiny-modernbert"} <= set(preset_names())
    with pytest.raises(UserError, match=re.escape(f"a preset ({', '.join(preset_names())})")):
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
    ("[{path: a, weight: 0}]", r"data.path\[0\].weight must be in \(0, 1e\+15\], got 0"),
    ("[{path: a, weight: -1.5}]", r"must be in \(0, 1e\+15\], got -1.5"),
    ("[{path: a, weight: heavy}]", "weight must be a number, got 'heavy'"),
    ("[{path: a, weight: .inf}]", "weight must be a finite number, got inf"),
    ("[{path: a, weight: 1}, {path: a, weight: 2}]", "listed twice"),
    ("[]", "a DATA folder or a list of {path, weight}"),
    ("[data/a]", r"data.path\[0\] must be a mapping"),
    ("3", "a DATA folder or a list"),
])
def test_bad_mixtures_fail_with_the_entry_named(value, expected):
    with pytest.raises(UserError, match=expected):
        load_config(None, [f"data.path={value}"])


# --- every number finite and in range (issue 29): one rule per key, in the file and in --set ---
KEYED_RULES = sorted(key for key in RULES if "[]" not in key and key.split(".")[0] in SECTIONS)


def test_every_numeric_key_has_a_rule():
    """A field annotated with int or float (`int | None`, `int | str` too) has its rule; no rule
    names a field that is not there."""
    numeric = {f"{section}.{name}" for section, cls in SECTIONS.items()
               for name, annotation in field_types(cls).items()
               if {int, float} & set(typing.get_args(annotation) if isinstance(annotation, types.UnionType)
                                     else (annotation,))}
    assert numeric == set(KEYED_RULES)


@pytest.mark.parametrize("value, shown", [
    (".nan", "nan"), (".inf", "inf"), ("-.inf", "-inf"), ("1e23", "1e23"), ("-1", "-1"),
    ("true", "True"), ("false", "False"), ("1" + "0" * 400, "an integer of 401 digits"),
])
@pytest.mark.parametrize("key", KEYED_RULES)
def test_bad_numbers_are_refused_naming_key_and_value(key, value, shown, tmp_path):
    rule = RULES[key]
    if value == "-1" and -1 in rule:  # model.clamp_len: -1 means no clamp
        assert load_config(None, [f"{key}={value}"]).model.clamp_len == -1
        return
    if value == "1e23" and rule.high == math.inf:  # any finite number from its low end up
        assert getattr(getattr(load_config(None, [f"{key}={value}"]), key.split(".")[0]),
                       key.split(".")[1]) == 1e23
        return
    kind = "an integer" if rule.integer else "a number"
    if value in ("true", "false"):
        expected = f"{key} must be {kind}, got {shown}"
    elif not rule.integer and value in (".nan", ".inf", "-.inf") or value.startswith("1000"):
        expected = (f"{key} must be a finite number, got {shown}" if not rule.integer
                    else f"{key} must be {rule.describe()}, got {shown}")
    else:
        expected = f"{key} must be {rule.describe()}, got {shown}"
    section, name = key.split(".")
    for attempt in ([f"{key}={value}"], write(tmp_path, f"{section}:\n  {name}: {value}\n")):
        with pytest.raises(UserError) as raised:
            load_config(None, attempt) if isinstance(attempt, list) else load_config(attempt)
        assert str(raised.value) == expected


@pytest.mark.parametrize("key", sorted(RULES))
def test_each_rule_holds_its_ends_exactly(key):
    rule = RULES[key]
    assert (rule.low in rule) is not rule.low_open
    if rule.high != math.inf:
        assert (rule.high in rule) is not rule.high_open
        assert (rule.high + (1 if rule.integer else 1e-9 * rule.high)) not in rule
    assert rule.low - (1 if rule.integer else 1e-9) not in rule


@pytest.mark.parametrize("written, expected", [("1e6", 10**6), ("1.0e+3", 1000), ("256.0", 256), ("1_000", 1000)])
def test_integer_keys_take_integral_numbers_however_written(written, expected):
    assert load_config(None, [f"train.max_steps={written}"]).train.max_steps == expected


@pytest.mark.parametrize("override, expected", [
    ("train.max_steps=1.5", "train.max_steps must be an integer, got 1.5"),
    ("model.vocab_size=1e23", "model.vocab_size must be a positive integer of at most "
                              "1,000,000,000,000,000, got 1e23"),
    ("train.seed=4294967296", "train.seed must be an integer from 0 to 4,294,967,295, got 4294967296"),
    ("data.num_workers=1000", "data.num_workers must be an integer from 0 to 256, got 1000"),
    ("data.max_predictions_per_seq=1e15", "data.max_predictions_per_seq must be a positive integer "
                                          "of at most 1,048,576, got 1e15"),
    ("optim.max_grad_norm=-1", "optim.max_grad_norm must be a finite number of at least 0, got -1"),
    ("model.rope_theta=1", "model.rope_theta must be in (1, 1e+12], got 1"),
    ("optim.max_grad_norm=1e23", None),
    ("optim.betas=[.nan, 0.999]", "optim.betas[0] must be a finite number, got nan"),
    ("optim.betas=[0.9, 1]", "optim.betas[1] must be in [0, 1), got 1"),
    ("optim.betas=[true, 0.9]", "optim.betas[0] must be a number, got True"),
    ("data.path=[{path: a, weight: .nan}]", "data.path[0].weight must be a finite number, got nan"),
    ("data.path=[{path: a, weight: 1}, {path: b, weight: 1e23}]",
     "data.path[1].weight must be in (0, 1e+15], got 1e23"),
    ("data.path=[{path: a, weight: true}]", "data.path[0].weight must be a number, got True"),
    ("train.compile=1", "train.compile must be true, false or auto, got 1"),
])
def test_special_numbers_are_refused_in_one_line(override, expected):
    if expected is None:  # legal: a clipping threshold no gradient reaches
        load_config(None, [override])
        return
    with pytest.raises(UserError) as raised:
        load_config(None, [override])
    assert str(raised.value) == expected


@pytest.mark.parametrize("phase, expected", [
    ("{steps: 1e23}", "phases[0].steps must be a positive integer of at most 1,000,000,000,000, got 1e23"),
    ("{steps: .nan}", "phases[0].steps must be a positive integer of at most 1,000,000,000,000, got nan"),
    ("{steps: true}", "phases[0].steps must be an integer, got True"),
    ("{steps: 10, data: {max_seq_length: .inf}}",
     "phases[0].data.max_seq_length must be an integer from 8 to 1,048,576, got inf"),
    ("{steps: 10, optim: {lr: .nan}}", "phases[0].optim.lr must be a finite number, got nan"),
    ("{steps: 10, train: {batch_size: 1e23}}",
     "phases[0].train.batch_size must be a positive integer of at most 16,777,216, got 1e23"),
    ("{lr_schedule: restart}", "phases[0] has no steps"),
])
def test_phase_numbers_follow_the_same_rules(tmp_path, phase, expected):
    with pytest.raises(UserError) as raised:
        load_config(write(tmp_path, f"phases:\n  - {phase}\n"))
    assert str(raised.value).startswith(expected)


def test_phases_add_up_to_at_most_max_steps(tmp_path):
    with pytest.raises(UserError, match="phases must add up to a positive integer of at most 1,000,000,000,000 "
                                        "steps, got 1,500,000,000,000"):
        load_config(write(tmp_path, "phases:\n  - {steps: 1e12}\n  - {steps: 5e11}\n"))


def test_numbers_yaml_cannot_read_are_one_line(tmp_path):
    with pytest.raises(UserError, match="holds a value YAML cannot read: Exceeds the limit"):
        load_config(write(tmp_path, "train:\n  max_steps: 1" + "0" * 5000 + "\n"))
    with pytest.raises(UserError, match="the value is not a YAML scalar"):
        load_config(None, ["train.max_steps=1" + "0" * 5000])


# --- fine-tuning's settings: the same loader, the same RULES (finetune.NAME) ---
def test_every_numeric_finetuning_setting_has_a_rule():
    from bertpre.config.finetune import Hyperparameters

    numeric = {f"finetune.{name}" for name, annotation in field_types(Hyperparameters).items()
               if annotation in (int, float)}
    assert numeric == {key for key in RULES if key.startswith("finetune.")}


@pytest.mark.parametrize("overrides, given, expected", [
    (["lr=2e-5"], {}, None),
    (["lr=.nan"], {}, "lr must be a finite number, got nan"),
    ([], {"lr": 0.0}, "lr must be in (0, 10], got 0.0"),
    (["epochs=1.5"], {}, "epochs must be an integer, got 1.5"),
    (["epoch=3"], {}, "unknown fine-tuning setting 'epoch'; did you mean 'epochs'?"),
    (["lr"], {}, "override 'lr' must look like key=value, e.g. --set lr=3e-5"),
    (["lr=[1"], {}, "override 'lr=[1': the value is not a YAML scalar"),
    (["pooling=max"], {}, "pooling must be cls or mean, got 'max'"),
    (["mode=3"], {}, "mode must be a string, got 3"),
])
def test_finetuning_settings_are_checked_in_one_line(overrides, given, expected):
    from bertpre.config.finetune import load_hyperparameters

    if expected is None:
        assert load_hyperparameters(None, None, overrides, given).lr == 2e-5
        return
    with pytest.raises(UserError) as raised:
        load_hyperparameters(None, None, overrides, given)
    assert str(raised.value) == expected


def test_finetuning_yaml_goes_through_the_one_loader(tmp_path):
    from bertpre.config.finetune import load_hyperparameters

    hp = load_hyperparameters(None, write(tmp_path, "finetune:\n  preset: small-data\n  lr: 3e-5\n"), [],
                              {"epochs": 4})
    assert (hp.lr, hp.epochs, hp.mode) == (3e-5, 4, "full")
    with pytest.raises(UserError, match="must be a mapping with settings"):
        load_hyperparameters(None, write(tmp_path, "- lr\n"), [])
    with pytest.raises(UserError, match="does not exist"):
        load_hyperparameters(None, tmp_path / "missing.yaml", [])
    with pytest.raises(UserError, match="aliases"):
        load_hyperparameters(None, write(tmp_path, "a: &a [1]\n" + "".join(f"b{i}: *a\n" for i in range(20))), [])


# --- a default the user never wrote is no error: plm and clm read no sentence pairs (step 7) ---
XLNET_TEXT = "model:\n  architecture: xlnet\ndata:\n  objective: {objective}\n"
PAIRS_REFUSED = ("data.objective plm reads documents as consecutive segments, with no sentence pairs; "
                 "set data.pair_task: none (it is '{pair_task}')")


@pytest.mark.parametrize("objective", ["plm", "clm"])
def test_an_objective_without_pairs_takes_pair_task_none_when_it_is_not_written(tmp_path, objective):
    assert load_config(write(tmp_path, XLNET_TEXT.format(objective=objective))).data.pair_task == "none"
    sets = ["model.architecture=xlnet", f"data.objective={objective}"]
    config = load_config(None, sets)
    assert config.data.pair_task == "none"
    config.save(tmp_path / "saved.yaml")
    assert yaml.safe_load((tmp_path / "saved.yaml").read_text())["data"]["pair_task"] == "none"
    assert load_config(tmp_path / "saved.yaml") == config
    assert load_config(None).data.pair_task == "nsp"  # mlm keeps BERT's default


@pytest.mark.parametrize("pair_task", ["nsp", "sop"])
def test_a_pair_task_written_beside_plm_is_still_refused(tmp_path, pair_task):
    written = write(tmp_path, XLNET_TEXT.format(objective="plm") + f"  pair_task: {pair_task}\n")
    attempts = [lambda: load_config(written),
                lambda: load_config(None, ["model.architecture=xlnet", "data.objective=plm",
                                           f"data.pair_task={pair_task}"])]
    for attempt in attempts:
        with pytest.raises(UserError) as raised:
            attempt()
        assert str(raised.value) == PAIRS_REFUSED.format(pair_task=pair_task)


@pytest.mark.parametrize("architecture", ["roberta", "xlm-roberta"])
def test_a_pair_task_for_a_family_without_a_pair_head_names_that_first(architecture):
    """The report: RoBERTa with pair_task nsp was refused for type_vocab_size (RoBERTa's 1) before
    the real problem, that RoBERTa has no next-sentence task at all."""
    with pytest.raises(UserError) as raised:
        load_config(None, [f"model.architecture={architecture}", "data.pair_task=nsp"])
    assert str(raised.value).startswith(
        f"data.pair_task nsp trains a sentence-pair head, which model.architecture {architecture} (")
    assert str(raised.value).endswith("set data.pair_task: none")
    with pytest.raises(UserError, match=r"data.pair_task 'sop' needs model.type_vocab_size >= 2"):
        load_config(None, ["model.type_vocab_size=1", "data.pair_task=sop"])  # BERT's own case stays
