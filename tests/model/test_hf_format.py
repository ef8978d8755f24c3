"""bertpre.model.hf_format: Hugging Face folders both ways, BertModel-only folders, refusals, export of a run."""
from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from bertpre.errors import UserError
from bertpre.model.bert import BertConfig, BertForPreTraining
from bertpre.tools.export import export

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(92)]


def hf_config(**changes) -> transformers.BertConfig:
    return transformers.BertConfig(**{**TINY, **changes})


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Perturb every parameter so biases and LayerNorms are not at their init values."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, 97, (2, 10), generator=generator)
    attention_mask = torch.ones(2, 10, dtype=torch.long)
    attention_mask[1, 6:] = 0
    input_ids[1, 6:] = 0
    token_type_ids = torch.zeros(2, 10, dtype=torch.long)
    token_type_ids[:, 4:] = 1
    labels = torch.full((2, 10), -100)
    labels[0, [1, 3, 7]] = torch.tensor([11, 12, 13])
    labels[1, [2, 4]] = torch.tensor([21, 22])
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                labels=labels, next_sentence_label=torch.tensor([1, 0]))


def test_transformers_folder_loads_into_bertpre(tmp_path: Path) -> None:
    theirs = randomize(transformers.BertForPreTraining(hf_config()))
    theirs.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing missing, nothing unexpected
        ours = BertForPreTraining.from_pretrained(tmp_path).eval()
    inputs = batch()
    with torch.no_grad():
        reference = theirs(**inputs)
        out = ours(**inputs)
        dense = ours(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    torch.testing.assert_close(dense.prediction_logits, reference.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.seq_relationship_logits, reference.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss, reference.loss, atol=1e-5, rtol=1e-5)


def test_bertpre_folder_loads_into_transformers(tmp_path: Path) -> None:
    ours = randomize(BertForPreTraining(BertConfig(**TINY)))
    ours.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["model_type"] == "bert"
    theirs, info = transformers.BertForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert all(len(keys) == 0 for keys in info.values()), info
    inputs = batch()
    with torch.no_grad():
        reference = theirs.eval()(**inputs)
        dense = ours(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
        out = ours(**inputs)
    torch.testing.assert_close(dense.prediction_logits, reference.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.seq_relationship_logits, reference.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss, reference.loss, atol=1e-5, rtol=1e-5)
    # and back: bertpre reads its own folder to identical weights
    again = BertForPreTraining.from_pretrained(tmp_path)
    for name, tensor in ours.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name


def test_bertmodel_only_folder_loads_with_a_warning(tmp_path: Path) -> None:
    encoder = randomize(transformers.BertModel(hf_config()))
    encoder.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match=r"cls\.predictions\.transform\.dense\.weight.*newly initialized"):
        ours = BertForPreTraining.from_pretrained(tmp_path).eval()
    inputs = batch()
    with torch.no_grad():
        reference = encoder(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                            token_type_ids=inputs["token_type_ids"])
        encoded = ours.bert(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                            token_type_ids=inputs["token_type_ids"])
    torch.testing.assert_close(encoded.last_hidden_state, reference.last_hidden_state, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(encoded.pooler_output, reference.pooler_output, atol=1e-5, rtol=1e-5)
    assert ours.cls.predictions.decoder.weight is ours.bert.embeddings.word_embeddings.weight


def test_pytorch_model_bin_with_bare_keys_and_tf_names(tmp_path: Path) -> None:
    ours = randomize(BertForPreTraining(BertConfig(**TINY)))
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in ours.state_dict().items()}
    (tmp_path / "config.json").write_text(json.dumps(BertConfig(**TINY).to_hf_dict()))
    torch.save(state, tmp_path / "pytorch_model.bin")
    again = BertForPreTraining.from_pretrained(tmp_path)
    for name, tensor in ours.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name


class Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_pickle_with_a_payload_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(BertConfig(**TINY).to_hf_dict()))
    with open(tmp_path / "pytorch_model.bin", "wb") as handle:
        pickle.dump({"bert.embeddings.word_embeddings.weight": Payload()}, handle, protocol=2)
    with pytest.raises(UserError, match="refused to load"):
        BertForPreTraining.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "setup, words",
    [
        ("nothing", "not a model folder"),
        ("hub", "never downloads"),
        ("no_config", "no config.json"),
        ("bad_json", "not valid JSON"),
        ("no_weights", "no weights"),
        ("bad_safetensors", "not a readable safetensors"),
        ("wrong_shape", "config.json and the weights do not match"),
        ("albert_type", "model_type 'albert'"),
        ("encoder_missing", "encoder weights are missing"),
    ],
)
def test_unreadable_folders_are_user_errors(tmp_path: Path, setup: str, words: str, monkeypatch) -> None:
    folder = tmp_path / "model"
    config = BertConfig(**TINY).to_hf_dict()
    if setup != "nothing":
        folder.mkdir()
    if setup in ("no_weights", "bad_safetensors", "wrong_shape", "encoder_missing"):
        (folder / "config.json").write_text(json.dumps(config))
    if setup == "hub":
        monkeypatch.chdir(tmp_path)
        folder = "bert-base-uncased"
    elif setup == "bad_json":
        (folder / "config.json").write_text("{not json")
    elif setup == "bad_safetensors":
        (folder / "model.safetensors").write_bytes(b"\x00" * 20)
    elif setup == "wrong_shape":
        save_file({"bert.embeddings.word_embeddings.weight": torch.zeros(50, 32)}, folder / "model.safetensors")
    elif setup == "albert_type":
        (folder / "config.json").write_text(json.dumps({**config, "model_type": "albert"}))
    elif setup == "encoder_missing":
        save_file({"bert.embeddings.word_embeddings.weight": torch.zeros(97, 32)}, folder / "model.safetensors")
    with pytest.raises(UserError, match=words):
        BertForPreTraining.from_pretrained(folder)


def write_vocab(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))


def fake_run(root: Path, model: BertForPreTraining, step: int = 20) -> Path:
    """A RUN folder as the trainer writes it: tokenizer/, checkpoints/step-N/, checkpoints/latest."""
    run = root / "run"
    name = f"step-{step:08d}"
    model.save_pretrained(run / "checkpoints" / name)
    torch.save({"step": step}, run / "checkpoints" / name / "trainer_state.pt")
    (run / "checkpoints" / "latest").write_text(name + "\n")
    write_vocab(run / "tokenizer")
    return run


def test_export_of_a_run_loads_in_transformers(tmp_path: Path) -> None:
    ours = randomize(BertForPreTraining(BertConfig(**TINY)))
    run = fake_run(tmp_path, ours)
    summary = export(run, tmp_path / "export")
    out = tmp_path / "export"
    assert summary.architecture == "BertForPreTraining" and summary.checkpoint.name == "step-00000020"
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())
    theirs, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert all(len(keys) == 0 for keys in info.values()), info
    inputs = batch()
    with torch.no_grad():
        reference = theirs.eval()(**inputs)
        dense = ours(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    torch.testing.assert_close(dense.prediction_logits, reference.prediction_logits, atol=1e-5, rtol=1e-5)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer("w3 w5")["input_ids"] == [2, 8, 10, 3]
    # a step folder given directly works too, and an existing --out needs overwrite
    with pytest.raises(UserError, match="already exists"):
        export(run / "checkpoints" / "step-00000020", out)
    assert export(run / "checkpoints" / "step-00000020", out, overwrite=True).out == out


def test_export_errors_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such folder"):
        export(tmp_path / "absent", tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="neither a RUN folder"):
        export(tmp_path / "empty", tmp_path / "out")
    run = fake_run(tmp_path, BertForPreTraining(BertConfig(**TINY)))
    (run / "checkpoints" / "latest").write_text("step-00000099\n")
    with pytest.raises(UserError, match="step-00000099"):
        export(run, tmp_path / "out")
    (run / "checkpoints" / "latest").unlink()
    with pytest.raises(UserError, match="no checkpoints/latest"):
        export(run, tmp_path / "out")
    (run / "checkpoints" / "latest").write_text("step-00000020")
    for name in ("vocab.txt", "tokenizer_config.json"):
        (run / "tokenizer" / name).unlink()
    with pytest.raises(UserError, match="no tokenizer"):
        export(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("changes", [{"embedding_size": 16, "share_layers": True},
                                     {"embedding_size": 16}, {"share_layers": True}])
def test_albert_export_matches_transformers_albert(tmp_path: Path, changes: dict) -> None:
    ours = randomize(BertForPreTraining(BertConfig(**{**TINY, "num_hidden_layers": 3, **changes})))
    run = fake_run(tmp_path, ours)
    assert export(run, tmp_path / "export").architecture == "AlbertForPreTraining"
    theirs, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "export", output_loading_info=True)
    assert all(len(keys) == 0 for keys in info.values()), info
    inputs = batch()
    with torch.no_grad():
        reference = theirs.eval()(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                  token_type_ids=inputs["token_type_ids"], labels=inputs["labels"],
                                  sentence_order_label=inputs["next_sentence_label"])
        dense = ours(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
        out = ours(**inputs)
    torch.testing.assert_close(dense.prediction_logits, reference.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.seq_relationship_logits, reference.sop_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss, reference.loss, atol=1e-5, rtol=1e-5)
    # bertpre's own checkpoint of an ALBERT-option model reads back exactly
    again = BertForPreTraining.from_pretrained(run / "checkpoints" / "step-00000020")
    assert again.config == ours.config


def test_export_refuses_a_checkpoint_without_heads(tmp_path: Path) -> None:
    run = fake_run(tmp_path, BertForPreTraining(BertConfig(**TINY)))
    weights = run / "checkpoints" / "step-00000020" / "model.safetensors"
    state = {k: v for k, v in BertForPreTraining.from_pretrained(weights.parent).state_dict().items()
             if k.startswith("bert.") and not k.startswith("bert.pooler.")}
    save_file(state, weights)
    with pytest.raises(UserError, match="incomplete checkpoint.*cls.seq_relationship.weight"):
        export(run, tmp_path / "out")


def test_export_tokenizer_gives_the_same_ids_in_transformers(tmp_path: Path) -> None:
    from bertpre.tokenizer.wordpiece import save_tokenizer, train_tokenizer

    documents = [["The cat sat on the mat.", "A dog ran after the cat."],
                 ["Cats and dogs are pets.", "The mat was red."]] * 5
    tokenizer = train_tokenizer(documents, vocab_size=120, lowercase=True, min_frequency=1)
    config = BertConfig(**{**TINY, "vocab_size": tokenizer.get_vocab_size()})
    run = fake_run(tmp_path, BertForPreTraining(config))
    for path in (run / "tokenizer").iterdir():
        path.unlink()
    save_tokenizer(tokenizer, run / "tokenizer", lowercase=True)
    export(run, tmp_path / "export")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "export")
    text = "The red cat and the dog."
    assert theirs(text)["input_ids"] == tokenizer.encode(text).ids
    assert theirs.mask_token_id == tokenizer.token_to_id("[MASK]")
