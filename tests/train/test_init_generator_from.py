"""`model.init_generator_from`: an rtd run from a released ELECTRA discriminator (`model.init_from`)
starts its generator from an `ElectraForMaskedLM` folder named apart from it (transformers' own,
made here from tiny configs; the path has a space), its size taken from the generator's shape, and
bad generators and rtd keys refused in one line, exit 2, through the command line."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from _in_process import run_main

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.tokenizer import load_tokenizer
from bertpre.train.setup import build_model, resolve_run

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

# The discriminator: tiny-electra's shape. Its generator at half its size: hidden 32 with one
# head (ELECTRA's one a 64 wide) and intermediate 128, reading the same 32-wide embeddings.
DISCRIMINATOR = dict(embedding_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=256, max_position_embeddings=64)
GENERATOR = {**DISCRIMINATOR, "hidden_size": 32, "num_attention_heads": 1, "intermediate_size": 128}
# a tiny rtd run on CPU: the shape comes from model.init_from
RUN = {"data": {"objective": "rtd", "pair_task": "none", "max_seq_length": 32, "max_predictions_per_seq": 5,
                "num_workers": 0},
       "optim": {"warmup_steps": 0},
       "train": {"batch_size": 4, "micro_batch_size": 4, "max_steps": 1, "precision": "fp32", "log_every": 1,
                 "eval_every": 1000, "save_every": 1, "device": "cpu"}}


def saved(kind: str, folder: Path, tokenizer: Path, seed: int, **shape) -> Path:
    """A transformers model of `kind` from a tiny config, its biases and LayerNorms moved off their
    initial values (so that equal tensors mean copied ones), saved with DATA's tokenizer."""
    config_class = transformers.BertConfig if kind.startswith("Bert") else transformers.ElectraConfig
    torch.manual_seed(seed)
    model = getattr(transformers, kind)(config_class(**shape))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(folder)
    for path in tokenizer.iterdir():
        shutil.copy(path, folder / path.name)
    return folder


@pytest.fixture(scope="module")
def released(tiny_data, tmp_path_factory) -> dict[str, Path]:
    """A released discriminator, and its generator saved elsewhere, under a path with a space."""
    root = tmp_path_factory.mktemp("released")
    tokenizer = tiny_data / "tokenizer"
    vocab_size = load_tokenizer(tokenizer).get_vocab_size()
    return {"discriminator": saved("ElectraForPreTraining", root / "discriminator", tokenizer, 1,
                                   vocab_size=vocab_size, **DISCRIMINATOR),
            "generator": saved("ElectraForMaskedLM", root / "my generator", tokenizer, 2,
                               vocab_size=vocab_size, **GENERATOR),
            "vocab_size": vocab_size, "root": root}


def run_config(folder: Path) -> Path:
    path = folder / "rtd.yaml"
    path.write_text(yaml.safe_dump(RUN), encoding="utf-8")
    return path


def hf_names_in_pair(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """transformers' ELECTRA tensors under the pair's names (`prefix` + bertpre's)."""
    return {prefix + name.replace("electra.embeddings_project.", "electra.encoder.embedding_hidden_mapping_in."): tensor
            for name, tensor in state.items() if name != "generator_lm_head.weight"}


def test_the_generator_comes_from_init_generator_from_and_the_discriminator_from_init_from(
        released, tiny_data, tmp_path):
    config = load_config(run_config(tmp_path), [
        f"model.init_from={released['discriminator']}", f"model.init_generator_from={released['generator']}",
        f"data.path={tiny_data}", f"train.out={tmp_path / 'run'}"])
    said: list[str] = []
    run = resolve_run(config, world_size=1)
    pair = build_model(run, said.append)
    assert run.config.objective.generator_size == 0.5  # the generator's shape, never given
    assert said == [f"starting from the weights of {released['discriminator']}",
                    f"starting the generator from the weights of {released['generator']} (model.init_generator_from; "
                    "objective.generator_size 0.5, from its shape)"]
    ours = pair.state_dict()
    generator = transformers.ElectraForMaskedLM.from_pretrained(released["generator"]).state_dict()
    expected = {name: tensor for name, tensor in hf_names_in_pair(generator, "generator.").items()
                if not name.startswith("generator.electra.embeddings.")}  # the discriminator's, shared
    assert len(expected) == 2 * 16 + 4 + 1  # two layers, the head, the vocabulary bias (as wide as the embeddings)
    for name, tensor in expected.items():
        assert torch.equal(ours[name], tensor), name
    discriminator = transformers.ElectraForPreTraining.from_pretrained(released["discriminator"]).state_dict()
    for name, tensor in hf_names_in_pair(discriminator, "").items():
        if not name.endswith("_ids"):  # transformers' buffers
            assert torch.equal(ours[name], tensor), name
    assert pair.generator.electra.embeddings is pair.electra.embeddings


def test_a_run_names_its_generator_records_the_key_and_resumes_without_it_given_again(
        released, tiny_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    args = ["pretrain", "--config", run_config(tmp_path), "--data", tiny_data, "--out", out,
            "--init-from", released["discriminator"], "--init-generator-from", released["generator"]]
    code, _, stderr = run_main(args, monkeypatch, capsys)
    assert code == 0, stderr
    assert (f"note: starting the generator from the weights of {released['generator']} (model.init_generator_from; "
            "objective.generator_size 0.5, from its shape)") in stderr.splitlines()
    recorded = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
    assert recorded["model"]["init_generator_from"] == str(released["generator"])
    assert recorded["objective"]["generator_size"] == 0.5
    # the same command, one step more: the checkpoint's generator size, nothing read from the folders
    code, _, stderr = run_main([*args, "--set", "train.max_steps=2"], monkeypatch, capsys)
    assert code == 0, stderr
    assert "resuming from" in stderr and "starting the generator" not in stderr
    assert (out / "checkpoints" / "step-00000002" / "model.safetensors").is_file()


@pytest.fixture(scope="module")
def bad_generators(released, tiny_data) -> dict[str, Path]:
    """ELECTRA generators that do not pair with the released discriminator, and folders that hold none."""
    root, tokenizer, vocab_size = released["root"], tiny_data / "tokenizer", released["vocab_size"]
    generator = dict(vocab_size=vocab_size, **GENERATOR)
    return {
        "other vocabulary": saved("ElectraForMaskedLM", root / "vocab", tokenizer, 3,
                                  **{**generator, "vocab_size": vocab_size + 8}),
        "other embeddings": saved("ElectraForMaskedLM", root / "embeddings", tokenizer, 3,
                                  **{**generator, "embedding_size": 16}),
        "larger": saved("ElectraForMaskedLM", root / "larger", tokenizer, 3,
                        **{**generator, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512}),
        "other heads": saved("ElectraForMaskedLM", root / "heads", tokenizer, 3,
                             **{**generator, "num_attention_heads": 2}),
        "a discriminator": saved("ElectraForPreTraining", root / "discriminator shaped", tokenizer, 3, **generator),
        "a BERT": saved("BertForMaskedLM", root / "bert", tokenizer, 3, vocab_size=vocab_size, hidden_size=32,
                        num_hidden_layers=2, num_attention_heads=1, intermediate_size=128,
                        max_position_embeddings=64),
    }


@pytest.mark.parametrize(("overrides", "message"), [
    # model.init_generator_from without what it pairs with
    (["model.init_from=null", "model.init_generator_from={generator}"],
     "model.init_generator_from starts the generator of the discriminator model.init_from starts from, and this "
     "config has no model.init_from; set model.init_from to the discriminator's folder"),
    (["model.init_from=null", "model.init_generator_from={generator}", "data.objective=mlm"],
     "model.init_generator_from starts the generator of data.objective rtd, and this config's objective is mlm; "
     "remove it, or set data.objective: rtd"),
    # a folder that is no generator, or not this discriminator's
    (["model.init_generator_from={root}/no such folder"], "model.init_generator_from {root}/no such folder is no "
     "folder; give the folder of an ELECTRA generator (ElectraForMaskedLM"),
    (["model.init_generator_from={root}/bert"], "model.init_generator_from {root}/bert holds BERT weights, not an "
     "ELECTRA generator"),
    (["model.init_generator_from={root}/discriminator shaped"], "model.init_generator_from {root}/discriminator "
     "shaped holds no ELECTRA generator (no generator_predictions.* weights)"),
    (["model.init_generator_from={root}/vocab"], "model.init_generator_from {root}/vocab has a vocabulary of "
     "{more_vocab} and model.init_from {root}/discriminator {vocab}; they share one embedding table"),
    (["model.init_generator_from={root}/embeddings"], "model.init_generator_from {root}/embeddings has embeddings "
     "16 wide and model.init_from {root}/discriminator 32; they share one embedding table"),
    (["model.init_generator_from={root}/larger"], "model.init_generator_from {root}/larger is larger than "
     "model.init_from {root}/discriminator (hidden size 128 of 64)"),
    (["model.init_generator_from={root}/heads"], "model.init_generator_from {root}/heads is not 0.5 of "
     "model.init_from {root}/discriminator (hidden size 32 of 64; num_attention_heads 2, not 1)"),
    (["model.init_generator_from={generator}", "objective.generator_size=0.25"],
     "model.init_generator_from {generator} is 0.5 of the discriminator, and objective.generator_size is 0.25; "
     "remove objective.generator_size (the generator's shape gives it)"),
    # the rtd keys' own ranges, and a generator whose heads do not divide its width
    (["model.init_from=null", "objective.generator_size=2"], "objective.generator_size must be in (0, 1], got 2"),
    (["model.init_from=null", "objective.rtd_weight=nan"], "objective.rtd_weight must be a number, got 'nan'"),
    (["model.init_from=null", "objective.rtd_weight=.nan"], "objective.rtd_weight must be a finite number, got nan"),
    (["model.init_from=null", "objective.rtd_weight=-1"],
     "objective.rtd_weight must be a finite number of at least 0, got -1"),
    (["model.init_from=null", "model.hidden_size=320", "model.num_attention_heads=4",
      "objective.generator_size=0.625"], "the generator's hidden size 200 is not divisible by its 3 heads"),
    # gdes from another family's export, which holds no ELECTRA discriminator (and no generator)
    (["model.init_from={root}/bert", "objective.embedding_sharing=gdes"],
     "model.init_from {root}/bert holds no ELECTRA discriminator (no electra.* weights)"),
])
def test_bad_generators_and_rtd_keys_are_refused_in_one_line(overrides, message, released, bad_generators, tiny_data,
                                                             tmp_path, monkeypatch, capsys):
    names = {"root": released["root"], "generator": released["generator"], "vocab": released["vocab_size"],
             "more_vocab": released["vocab_size"] + 8}
    args = ["pretrain", "--config", run_config(tmp_path), "--data", tiny_data, "--out", tmp_path / "run",
            "--set", f"model.init_from={released['discriminator']}"]
    for override in overrides:
        args += ["--set", override.format(**names)]
    code, _, stderr = run_main(args, monkeypatch, capsys)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and message.format(**names) in lines[0], stderr


def test_the_generator_beside_init_from_takes_the_same_path_and_the_named_one_wins_over_it(
        released, bad_generators, tiny_data, tmp_path):
    export = tmp_path / "an export"
    shutil.copytree(released["discriminator"], export)
    shutil.copytree(released["generator"], export / "generator")

    def start(*extra: str):
        config = load_config(run_config(tmp_path), [f"model.init_from={export}", f"data.path={tiny_data}",
                                                    f"train.out={tmp_path / 'run'}", *extra])
        said: list[str] = []
        run = resolve_run(config, world_size=1)
        return run, build_model(run, said.append), said

    # the generator/ beside it: half the discriminator, never given, fitted as the named one is
    run, pair, said = start()
    assert run.config.objective.generator_size == 0.5
    assert said[1] == (f"starting the generator from the weights of {export / 'generator'} (the generator/ beside "
                       "model.init_from; objective.generator_size 0.5, from its shape)")
    beside = pair.state_dict()["generator.generator_predictions.dense.weight"]
    # one that cannot pair beside it is never read where model.init_generator_from names another
    shutil.rmtree(export / "generator")
    shutil.copytree(bad_generators["other vocabulary"], export / "generator")
    run, pair, said = start(f"model.init_generator_from={released['generator']}", "objective.generator_size=0.5")
    assert said[1] == (f"starting the generator from the weights of {released['generator']} "
                       "(model.init_generator_from; objective.generator_size 0.5)")
    assert torch.equal(pair.state_dict()["generator.generator_predictions.dense.weight"], beside)
    with pytest.raises(UserError, match="the generator at .* has a vocabulary of"):
        start()
