"""`model.init_from` keeps the source's model settings (its dropout, the init range of new parts,
ModernBERT's classifier pooling) where the config gives none, in the run and in its export: a
released ModernBERT's classifier_pooling "mean" stayed "mean", not bertpre's "cls". A key the
config gives wins."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from bertpre.config import load_config
from bertpre.model.families import pretraining_config
from bertpre.tokenizer import load_tokenizer
from bertpre.tools.export import export
from bertpre.train.trainer import Trainer, pretrain

transformers = pytest.importorskip("transformers")

BERT_SHAPE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=66)
# Per family: transformers' config and model class, its tiny shape, the settings away from bertpre's
# defaults (bertpre's names: what the run's config holds), and the objective it trains with.
SOURCES = {
    "bert": ("BertConfig", "BertForMaskedLM", BERT_SHAPE,
             dict(hidden_dropout_prob=0.05, attention_probs_dropout_prob=0.0, initializer_range=0.05), "mlm"),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", {**BERT_SHAPE, "type_vocab_size": 1, "pad_token_id": 0},
                dict(hidden_dropout_prob=0.05, attention_probs_dropout_prob=0.0, initializer_range=0.05), "mlm"),
    "electra": ("ElectraConfig", "ElectraForPreTraining", {**BERT_SHAPE, "embedding_size": 32},
                dict(hidden_dropout_prob=0.05, attention_probs_dropout_prob=0.0, initializer_range=0.05), "rtd"),
    "modernbert": ("ModernBertConfig", "ModernBertForMaskedLM",
                   dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                        max_position_embeddings=64, local_attention=8, pad_token_id=0, bos_token_id=None,
                        eos_token_id=None, cls_token_id=None, sep_token_id=None),
                   dict(classifier_pooling="mean", classifier_dropout=0.2, mlp_dropout=0.05, attention_dropout=0.1,
                        embedding_dropout=0.05, initializer_range=0.05, initializer_cutoff_factor=3.0), "mlm"),
    # XLNet's one dropout rate is both of BERT's names in the run's config
    "xlnet": ("XLNetConfig", "XLNetLMHeadModel", dict(d_model=32, n_layer=2, n_head=4, d_inner=64, dropout=0.05),
              dict(hidden_dropout_prob=0.05, attention_probs_dropout_prob=0.05, initializer_range=0.05,
                   layer_norm_eps=1e-6, mem_len=16), "plm"),
}
# config.json's names where they are not the run config's (XLNet's)
EXPORTED_NAMES = {"xlnet": {"hidden_dropout_prob": "dropout", "attention_probs_dropout_prob": "dropout"}}
DATA_KEYS = {"max_seq_length": 32, "max_predictions_per_seq": 5, "num_workers": 0, "pair_task": "none"}


def source_folder(architecture: str, data: Path, folder: Path) -> tuple[Path, dict]:
    """A transformers model of `architecture` with settings away from bertpre's defaults, saved with
    DATA's tokenizer; returns the folder and those settings."""
    config_class, model_class, shape, settings, _ = SOURCES[architecture]
    vocab_size = load_tokenizer(data / "tokenizer").get_vocab_size()
    torch.manual_seed(7)
    transformers_settings = {name: value for name, value in settings.items() if "dropout_prob" not in name} \
        if architecture == "xlnet" else settings
    config = getattr(transformers, config_class)(vocab_size=vocab_size, **shape, **transformers_settings)
    getattr(transformers, model_class)(config).save_pretrained(folder)
    for file in (data / "tokenizer").iterdir():
        shutil.copy(file, folder / file.name)
    return folder, settings


def continue_config(tmp_path: Path, data: Path, source: Path, objective: str, **model):
    """A user's config continuing `source` for two steps: no shape keys, `model`'s keys alone."""
    path = tmp_path / "continue.yaml"
    path.write_text(json.dumps({
        "model": {"init_from": str(source), **model},
        "data": {**DATA_KEYS, "objective": objective, **({"reuse_length": 16} if objective == "plm" else {})},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "train": {"batch_size": 8, "micro_batch_size": 8, "precision": "fp32", "max_steps": 2, "save_every": 2,
                  "eval_every": 1000, "log_every": 1}}))
    return load_config(path, [f"data.path={data}", f"train.out={tmp_path / 'run'}"])


@pytest.mark.parametrize("architecture", list(SOURCES))
def test_the_sources_settings_reach_the_run_and_its_export(architecture, tiny_data, tmp_path, capsys):
    source, settings = source_folder(architecture, tiny_data, tmp_path / "source")
    config = continue_config(tmp_path, tiny_data, source, SOURCES[architecture][4])
    with Trainer(config) as trainer:
        assert {name: getattr(trainer.config.model, name) for name in settings} == settings
        built = pretraining_config(trainer.model)  # the network's own config, under bertpre's names
        assert {name: getattr(built, name) for name in settings} == settings
    said = capsys.readouterr().err
    assert f"from {source}'s config.json (the config does not give them)" in said
    assert "model.initializer_range 0.05" in said
    run = pretrain(config).run_dir
    saved = yaml.safe_load((run / "config.yaml").read_text())["model"]
    assert {name: saved[name] for name in settings} == settings
    export(run, tmp_path / "export")
    exported = json.loads((tmp_path / "export" / "config.json").read_text())
    names = EXPORTED_NAMES.get(architecture, {})
    assert {name: exported[names.get(name, name)] for name in settings} == settings


@pytest.mark.parametrize("architecture", ["roberta", "modernbert"])
def test_a_setting_the_config_gives_wins_over_the_sources(architecture, tiny_data, tmp_path, capsys):
    source, settings = source_folder(architecture, tiny_data, tmp_path / "source")
    given = {"roberta": {"hidden_dropout_prob": 0.1},
             "modernbert": {"classifier_pooling": "cls", "classifier_dropout": 0.0}}[architecture]
    config = continue_config(tmp_path, tiny_data, source, "mlm", **given)
    with Trainer(config) as trainer:
        model = trainer.config.model
        assert {name: getattr(model, name) for name in given} == given
        assert model.initializer_range == 0.05  # the source's, where the config gives none
    said = capsys.readouterr().err
    assert not any(f"model.{name} " in said for name in given)
