"""Resolving a run: the caller's config is never changed, and `info`, `inspect` and the Trainer
see one resolved run."""
from __future__ import annotations

from bertpre.config import load_config
from bertpre.data import open_data
from bertpre.tools.info import info_report
from bertpre.train.setup import resolve_run, resolved_config


def tiny(data, out, *more: str):
    return load_config("tiny", [f"data.path={data}", f"train.out={out}", "train.max_steps=2", *more])


def test_resolving_a_run_leaves_the_given_config_as_it_was(tiny_data, tmp_path):
    config = tiny(tiny_data, tmp_path / "run")
    before = config.to_dict()
    run = resolve_run(config)
    assert config.to_dict() == before and config.model.vocab_size == "auto"
    vocabulary = open_data(tiny_data).tokenizer.get_vocab_size(with_added_tokens=True)
    assert run.config.model.vocab_size == vocabulary and run.config is not config
    assert not (tmp_path / "run").exists()  # resolving writes nothing


def test_info_inspect_and_the_trainer_resolve_the_same_model(tiny_data, tmp_path):
    config = tiny(tiny_data, tmp_path / "run")
    trained = resolve_run(config).config.model
    assert resolved_config(config).model == trained
    assert resolved_config(config, open_data(tiny_data)).model == trained
    text = info_report(config)
    assert f"vocab {trained.vocab_size}" in text and "assumed 30522" not in text
    # Before the corpus is tokenized, info still answers, with BERT's vocabulary assumed.
    assert "vocab 30522 (auto: assumed 30522)" in info_report(tiny(tmp_path / "not yet", tmp_path / "run"))


def test_low_precision_layernorm_auto_is_on_under_bf16_only_where_the_family_builds_it(tiny_data, tmp_path):
    """The first H200 run: a bf16 XLNet run was refused ("not built for XLNet's layers") because
    "auto" became true before the family was asked."""
    settle = {precision: resolve_run(tiny(tiny_data, tmp_path / "run", *more), precision=precision).config.model
              for precision, more in (("bf16", ()), ("fp16", ()))}
    assert settle["bf16"].low_precision_layernorm is True and settle["fp16"].low_precision_layernorm is False
    xlnet = tiny(tiny_data, tmp_path / "run", "model.architecture=xlnet", "data.objective=plm", "data.pair_task=none")
    assert resolve_run(xlnet, precision="bf16").config.model.low_precision_layernorm is False
