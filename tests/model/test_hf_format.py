"""bertpre.model.hf_format: Hugging Face folders both ways, BertModel-only folders, refusals."""
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

transformers = pytest.importorskip("transformers")
from _hf_models import TINY, batch, hf_config, randomize  # noqa: E402


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
        ("wrong_shape", "1 of another shape: bert.embeddings.word_embeddings.weight"),
        ("albert_type", "model_type 'albert'"),
        ("encoder_missing", "do not fit BERT's layout of config.json"),
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
