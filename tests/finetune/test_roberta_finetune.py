"""`bertpre finetune --save-model` of a RoBERTa source: the family's heads (RobertaForSequenceClassification's
dense + tanh + out_proj on <s>, no pooler; RobertaForTokenClassification) saved so that transformers
loads them with no missing or unexpected keys and the same logits."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_finetune import run_main, write_conll, write_task

from bertpre.model.hf_format import read_config
from bertpre.model.roberta_heads import (
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
)

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def roberta_sources(tiny_data, tmp_path_factory) -> dict[str, Path]:
    """A transformers RobertaForMaskedLM and an XLMRobertaForMaskedLM of the tiny vocabulary, each
    saved with the tiny DATA's tokenizer, by model_type."""
    sources = {}
    for model_type, kind, config_class in (("roberta", "RobertaForMaskedLM", "RobertaConfig"),
                                           ("xlm-roberta", "XLMRobertaForMaskedLM", "XLMRobertaConfig")):
        folder = tmp_path_factory.mktemp(model_type)
        torch.manual_seed(7)
        model = getattr(transformers, kind)(getattr(transformers, config_class)(
            vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=66, type_vocab_size=1, pad_token_id=0))  # the tiny vocabulary's [PAD]
        model.save_pretrained(folder)
        for file in (tiny_data / "tokenizer").iterdir():
            shutil.copy(file, folder / file.name)
        sources[model_type] = folder
    return sources


@pytest.mark.slow
@pytest.mark.parametrize(("task", "model_type"), [("classification", "roberta"), ("tagging", "roberta"),
                                                  ("pairs", "roberta"), ("classification", "xlm-roberta")])
def test_a_saved_roberta_task_model_loads_in_transformers_with_the_same_logits(
        task, model_type, roberta_sources, tmp_path, monkeypatch, capsys):
    prefix = "XLMRoberta" if model_type == "xlm-roberta" else "Roberta"
    if task == "tagging":
        files = ["--train", write_conll(tmp_path / "train.conll", 60, 0), "--validation",
                 write_conll(tmp_path / "dev.conll", 20, 1), "--task", "tagging"]
        auto, ours, name = (transformers.AutoModelForTokenClassification, RobertaForTokenClassification,
                            f"{prefix}ForTokenClassification")
    else:
        pair = task == "pairs"
        files = ["--train", write_task(tmp_path, 60, 0, "train.jsonl", pair=pair), "--validation",
                 write_task(tmp_path, 20, 1, "dev.jsonl", pair=pair), *(["--text-pair-column", "other"] * pair)]
        auto, ours, name = (transformers.AutoModelForSequenceClassification, RobertaForSequenceClassification,
                            f"{prefix}ForSequenceClassification")
    out = tmp_path / "out"
    code, _, stderr = run_main(["finetune", roberta_sources[model_type], *files, "--out", out, "--seeds", "1", "--epochs", "1",
                                "--lr", "0.001", "--batch-size", "8", "--save-model"], monkeypatch, capsys)
    assert code == 0, stderr
    saved = Path(json.loads((out / "results.json").read_text())["saved_model"]["path"])
    config = json.loads((saved / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == model_type
    hf, info = auto.from_pretrained(saved, output_loading_info=True)
    assert type(hf).__name__ == name
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    weights = load_file(saved / "model.safetensors")
    assert not any("pooler" in key for key in weights)
    model = ours(read_config(saved), hf.config.num_labels)
    model.load_state_dict(weights, strict=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    texts = ["the cat sees the river .", "my sister feeds a red apple today ."]
    if task == "pairs":  # RoBERTa's pair layout, one token type: as bertpre fine-tuned it
        batch = tokenizer(texts, ["a dog finds the door .", "the farmer ."], padding=True, return_tensors="pt")
        tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0])
        assert tokens[:9] == ["[CLS]", "the", "c", "##at", "sees", "the", "river", ".", "[SEP]"]
        assert tokens[9:11] == ["[SEP]", "a"] and "token_type_ids" not in batch
    else:
        batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = hf.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = model.eval()(batch["input_ids"], batch["attention_mask"])
    if task == "tagging":  # the padding's outputs are no one's to read
        real = batch["attention_mask"].bool()
        logits, expected = logits[real], expected[real]
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_question_answering_on_roberta_saves_its_class_with_the_same_logits(roberta_sources, tmp_path, monkeypatch,
                                                                           capsys):
    from test_qa_finetune import write_squad

    out = tmp_path / "out"
    code, _, stderr = run_main(
        ["finetune", roberta_sources["roberta"], "--task", "qa", "--train", write_squad(tmp_path / "train.json", 24, 0),
         "--validation", write_squad(tmp_path / "dev.json", 8, 1), "--out", out, "--seeds", "1", "--epochs", "1",
         "--batch-size", "8", "--max-seq-length", "48", "--doc-stride", "8", "--save-model"], monkeypatch, capsys)
    assert code == 0, stderr
    saved = Path(json.loads((out / "results.json").read_text())["saved_model"]["path"])
    hf, info = transformers.AutoModelForQuestionAnswering.from_pretrained(saved, output_loading_info=True)
    assert type(hf).__name__ == "RobertaForQuestionAnswering"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    model = RobertaForQuestionAnswering(read_config(saved))
    model.load_state_dict(load_file(saved / "model.safetensors"), strict=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    batch = tokenizer(["who sees the river ?"], ["the cat sees the river today ."], return_tensors="pt")
    with torch.no_grad():
        out = hf.eval()(**batch)
        logits = model.eval()(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(logits, torch.stack([out.start_logits, out.end_logits], dim=-1), rtol=0, atol=1e-5)
