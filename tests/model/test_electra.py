"""ELECTRA (`model.architecture: electra`): an rtd run's export as transformers' `ElectraForPreTraining`
with its generator (`ElectraForMaskedLM`) in `generator/`, fill-mask through the generator, a
released discriminator (made here by transformers from a tiny config) as `model.init_from`, and bad
input refused in one line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from _in_process import run_main

import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.inventory import read_inventory
from bertpre.model import BertConfig
from bertpre.model.families import load_pretraining_model
from bertpre.model.replaced_token import ReplacedTokenDetection
from bertpre.tokenizer import load_tokenizer
from bertpre.tools import inference
from bertpre.tools.export import export

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).parents[2]
TINY_ELECTRA = ROOT / "configs" / "tiny-electra.yaml"


def pretrain(data: Path, out: Path, *extra: str, steps: int = 2) -> Path:
    config = load_config(TINY_ELECTRA, [f"data.path={data}", f"train.out={out}", f"train.max_steps={steps}",
                                        "train.log_every=1", "train.eval_every=1000", "train.save_every=1",
                                        "data.max_seq_length=32", *extra])
    trainer.pretrain(config)
    return out


@pytest.fixture(scope="module")
def electra_run(tiny_data, tmp_path_factory) -> Path:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return pretrain(tiny_data, tmp_path_factory.mktemp("electra") / "run")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def electra_export(electra_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("electra-export") / "export"
    summary = export(electra_run, out)
    assert summary.architecture == "ElectraForPreTraining + generator/ ElectraForMaskedLM"
    return out


def padded_batch(vocab_size: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab_size, (2, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 6:] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def test_an_rtd_export_loads_as_electra_s_discriminator_and_generator_with_equal_logits(electra_run, electra_export):
    pair = ReplacedTokenDetection.from_pretrained(electra_run / "checkpoints" / "step-00000002").eval()
    hf = json.loads((electra_export / "config.json").read_text())
    assert (hf["model_type"], hf["architectures"], hf["embedding_size"], hf["hidden_size"]) == (
        "electra", ["ElectraForPreTraining"], 32, 64)
    generator_hf = json.loads((electra_export / "generator" / "config.json").read_text())
    assert (generator_hf["architectures"], generator_hf["embedding_size"], generator_hf["hidden_size"],
            generator_hf["num_attention_heads"], generator_hf["intermediate_size"]) == (
        ["ElectraForMaskedLM"], 32, 16, 1, 64)
    inputs = padded_batch(pair.config.vocab_size)
    real = inputs["attention_mask"].bool()
    discriminator, loading = transformers.AutoModelForPreTraining.from_pretrained(electra_export,
                                                                                  output_loading_info=True)
    assert type(discriminator).__name__ == "ElectraForPreTraining"
    assert all(len(keys) == 0 for keys in loading.values()), loading
    encoder, loading = transformers.ElectraModel.from_pretrained(electra_export, output_loading_info=True)
    assert not loading["missing_keys"] and not loading["mismatched_keys"]
    generator, loading = transformers.AutoModelForMaskedLM.from_pretrained(electra_export / "generator",
                                                                           output_loading_info=True)
    assert type(generator).__name__ == "ElectraForMaskedLM"
    assert all(len(keys) == 0 for keys in loading.values()), loading
    with torch.no_grad():
        ours = pair.discriminate(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
        theirs = discriminator.eval()(**inputs).logits
        torch.testing.assert_close(theirs[real], ours[real], atol=1e-5, rtol=0)
        states = pair.electra(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]).last_hidden_state
        torch.testing.assert_close(encoder.eval()(**inputs).last_hidden_state[real], states[real], atol=1e-5, rtol=0)
        hidden = pair.generator.electra(inputs["input_ids"], inputs["attention_mask"],
                                        inputs["token_type_ids"]).last_hidden_state
        torch.testing.assert_close(generator.eval()(**inputs).logits[real], pair.generator.predict(hidden)[real],
                                   atol=1e-5, rtol=0)
    # the inventory lists both folders' files; both hold the tokenizer
    listed = set(read_inventory(electra_export, "export", ()).files)
    assert {"config.json", "model.safetensors", "generator/config.json", "generator/model.safetensors",
            "generator/vocab.txt"} <= listed
    assert transformers.AutoTokenizer.from_pretrained(electra_export / "generator") is not None


def test_an_export_reads_back_as_the_run_s_pair_and_fill_mask_asks_its_generator(electra_run, electra_export,
                                                                                 monkeypatch, capsys):
    checkpoint = ReplacedTokenDetection.from_pretrained(electra_run / "checkpoints" / "step-00000002")
    loaded = load_pretraining_model(electra_export)
    assert isinstance(loaded, ReplacedTokenDetection) and loaded.generator.electra.embeddings is loaded.electra.embeddings
    for (name, tensor), other in zip(checkpoint.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(tensor, other), name
    model, tokenizer = inference.load_model_and_tokenizer(electra_export)
    from_export = inference.fill_mask(model, tokenizer, "the [MASK] sees the river .", top_k=3)
    model, tokenizer = inference.load_model_and_tokenizer(electra_run)
    assert inference.fill_mask(model, tokenizer, "the [MASK] sees the river .", top_k=3) == from_export
    # transformers' generator ranks the same tokens first
    generator = transformers.AutoModelForMaskedLM.from_pretrained(electra_export / "generator").eval()
    ids = tokenizer.encode("the [MASK] sees the river .").ids
    with torch.no_grad():
        logits = generator(torch.tensor([ids])).logits[0, ids.index(tokenizer.token_to_id("[MASK]"))]
    assert tokenizer.id_to_token(int(logits.argmax())) == from_export[0][0].token
    code, stdout, stderr = run_main(["fill-mask", electra_export, "the [MASK] sees the river ."], monkeypatch, capsys)
    assert code == 0, stderr
    assert from_export[0][0].token in stdout


def test_fill_mask_of_a_discriminator_alone_says_it_needs_the_generator(electra_export, tmp_path, monkeypatch, capsys):
    alone = tmp_path / "discriminator"
    alone.mkdir()
    for path in electra_export.iterdir():
        if path.is_file() and not path.name.startswith("."):
            (alone / path.name).write_bytes(path.read_bytes())
    code, stdout, stderr = run_main(["fill-mask", alone, "the [MASK] sees the river ."], monkeypatch, capsys)
    assert (code, stdout) == (2, "")
    assert stderr.splitlines() == ["error: this ELECTRA folder holds a discriminator alone, which predicts no tokens; "
                                   "fill-mask reads its generator: pass an export with its generator/ folder, or the run"]


def test_electra_s_config_json_reads_back_both_ways():
    config = BertConfig(architecture="electra", vocab_size=100, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128, embedding_size=32)
    config.validate()
    hf = config.to_hf_dict()
    theirs = transformers.ElectraConfig(**hf)
    assert (theirs.embedding_size, theirs.hidden_size, theirs.model_type) == (32, 64, "electra")
    assert BertConfig.from_hf_dict(hf) == config
    # embeddings as wide as the layers: config.json names the width, bertpre reads no projection
    wide = BertConfig.from_hf_dict({**hf, "embedding_size": 64})
    assert wide.embedding_size is None and wide.to_hf_dict()["embedding_size"] == 64


def released_discriminator(folder: Path, tokenizer_folder: Path, vocab_size: int, **changes) -> Path:
    """A released ELECTRA discriminator as transformers saves it, with the DATA's tokenizer."""
    config = transformers.ElectraConfig(vocab_size=vocab_size, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=256, max_position_embeddings=64,
                                        **changes)
    torch.manual_seed(1)
    transformers.ElectraForPreTraining(config).save_pretrained(folder)
    for path in tokenizer_folder.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


def test_a_run_starts_from_a_released_discriminator_with_a_fresh_generator(tiny_data, tmp_path, one_thread, capsys):
    from bertpre.train.setup import build_model, resolve_run

    vocab_size = load_tokenizer(tiny_data / "tokenizer").get_vocab_size()
    source = released_discriminator(tmp_path / "released", tiny_data / "tokenizer", vocab_size)
    config = load_config(None, [f"model.init_from={source}", "data.objective=rtd", f"data.path={tiny_data}",
                                f"train.out={tmp_path / 'run'}", "train.max_steps=1", "train.save_every=1",
                                "train.eval_every=1000", "data.max_seq_length=32", "train.batch_size=8",
                                "train.micro_batch_size=8", "train.precision=fp32", "data.num_workers=0"])
    assert config.model.architecture == "electra"
    said: list[str] = []
    started = build_model(resolve_run(config, world_size=1, device=torch.device("cpu")), said.append)
    assert said == [f"starting from the weights of {source}", f"{source} has no weights for the generator "
                    "(generator/: drawn at objective.generator_size); newly initialized"]
    assert (started.config.embedding_size, started.generator.config.hidden_size) == (32, 16)
    released = transformers.ElectraForPreTraining.from_pretrained(source).eval()
    inputs = padded_batch(vocab_size)
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        torch.testing.assert_close(started.eval().discriminate(**inputs)[real], released(**inputs).logits[real],
                                   atol=1e-5, rtol=0)
    trainer.pretrain(config)  # and it trains on, a step of both networks
    assert "newly initialized" in capsys.readouterr().err
    assert (tmp_path / "run" / "checkpoints" / "step-00000001" / "model.safetensors").is_file()


@pytest.mark.parametrize(("overrides", "message"), [
    (["objective.generator_size=1.5"], r"objective.generator_size must be in \(0, 1\]"),
    (["objective.generator_size=0.3"], "hidden_size 19.2 .* must be whole numbers"),
    (["objective.rtd_weight=.nan"], "objective.rtd_weight must be a finite number"),
    (["objective.rtd_weight=-1"], "objective.rtd_weight must be a finite number of at least 0"),
    (["model.embedding_size=64"], "model.embedding_size 64 equals model.hidden_size; leave it null"),
    (["model.share_layers=true"], "model.share_layers is ALBERT's; ELECTRA's layers are distinct"),
    (["model.position_embedding_type=rope"], "model.architecture electra has BERT's absolute position table"),
    (["data.objective=mlm"], "objective.generator_size is data.objective rtd's key, and this config's objective is mlm"),
])
def test_bad_electra_settings_are_refused_in_one_line(overrides, message):
    with pytest.raises(UserError, match=message) as error:
        load_config(TINY_ELECTRA, overrides)
    assert "\n" not in str(error.value)



def test_resuming_an_rtd_run_with_another_generator_size_is_one_line(electra_run, tiny_data, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(electra_run, copy)
    with pytest.raises(UserError, match=r"was started with objective.generator_size=0.25 and this config has 0.5; "
                                        "resume with the run's own value") as error:
        pretrain(tiny_data, copy, "objective.generator_size=0.5", steps=3)
    assert "\n" not in str(error.value)


def test_a_run_from_an_electra_export_takes_its_generator_too_and_refuses_one_that_does_not_pair(
        electra_run, electra_export, tiny_data, tmp_path):
    from bertpre.train.setup import build_model, resolve_run

    def start(source: Path, *extra: str):
        config = load_config(None, [f"model.init_from={source}", f"data.path={tiny_data}", "data.objective=rtd",
                                    f"train.out={tmp_path / 'run'}", "data.max_seq_length=32", *extra])
        said: list[str] = []
        return build_model(resolve_run(config, world_size=1), said.append), said

    started, said = start(electra_export)
    assert said == [f"starting from the weights of {electra_export}",  # nothing drawn fresh
                    f"starting the generator from the weights of {electra_export / 'generator'} (the generator/ "
                    "beside model.init_from; objective.generator_size 0.25, from its shape)"]
    trained = ReplacedTokenDetection.from_pretrained(electra_run / "checkpoints" / "step-00000002")
    for (name, tensor), other in zip(trained.state_dict().items(), started.state_dict().values(), strict=True):
        assert torch.equal(tensor, other), name
    with pytest.raises(UserError, match=r"generator is 0.25 of the discriminator, and objective.generator_size is "
                                        r"0.5; remove objective.generator_size \(the generator's shape gives it\)"):
        start(electra_export, "objective.generator_size=0.5")
    # a generator of another vocabulary
    other = tmp_path / "other"
    shutil.copytree(electra_export, other)
    hf = json.loads((other / "generator" / "config.json").read_text())
    (other / "generator" / "config.json").write_text(json.dumps({**hf, "vocab_size": hf["vocab_size"] + 8}))
    with pytest.raises(UserError, match=r"the generator at .* has a vocabulary of \d+ and model.init_from .* \d+; "
                                        "they share one embedding table") as error:
        start(other)
    assert "\n" not in str(error.value)


def test_evaluate_scores_an_electra_run_and_its_export_with_the_rtd_metrics(electra_run, electra_export, tiny_data,
                                                                            monkeypatch, capsys):
    scores = []
    for args in (["evaluate", electra_run], ["evaluate", electra_export, "--data", tiny_data]):
        code, stdout, stderr = run_main(args, monkeypatch, capsys)
        assert code == 0, stderr
        values = dict(line.split() for line in stdout.splitlines() if line.strip())
        assert {"mlm_loss", "rtd_loss", "rtd_acc", "rtd_precision", "rtd_auc", "replaced_share"} <= set(values)
        scores.append(float(values["rtd_loss"]))
        assert 0.0 <= float(values["rtd_auc"]) <= 1.0
    assert all(0.3 < score < 1.5 for score in scores)  # near log 2 after two steps
