"""`bertpre finetune --save-model` of an ELECTRA source (a released discriminator, as transformers saves
it, and `bertpre export` of a tiny rtd run): ELECTRA's heads (ElectraForSequenceClassification's dense +
gelu + out_proj on [CLS], no pooler; ElectraForTokenClassification; ElectraForQuestionAnswering) saved so
that transformers' Auto classes load them with no missing or unexpected keys and the same logits."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from test_finetune import run_main, write_conll, write_task

from bertpre.config import load_config
from bertpre.model.electra_generator import read_electra_weights
from bertpre.model.electra_heads import (
    ElectraForQuestionAnswering,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
)
from bertpre.model.hf_format import read_config
from bertpre.tokenizer import load_tokenizer
from bertpre.tools.export import export
from bertpre.train.trainer import pretrain

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def electra_sources(tiny_data, tmp_path_factory) -> dict[str, Path]:
    """A released discriminator (transformers' ElectraForPreTraining, embeddings 16 wide under layers
    of 32) with the tiny DATA's tokenizer, and the export of a two-step tiny-electra run."""
    released = tmp_path_factory.mktemp("released")
    torch.manual_seed(7)
    transformers.ElectraForPreTraining(transformers.ElectraConfig(
        vocab_size=load_tokenizer(tiny_data / "tokenizer").get_vocab_size(), embedding_size=16, hidden_size=32,
        num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    ).save_pretrained(released)
    for file in (tiny_data / "tokenizer").iterdir():
        shutil.copy(file, released / file.name)
    run = tmp_path_factory.mktemp("electra") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pretrain(load_config(ROOT / "configs" / "tiny-electra.yaml", [
            f"data.path={tiny_data}", f"train.out={run}", "train.max_steps=2", "train.save_every=2",
            "train.eval_every=1000", "data.max_seq_length=32"]))
    finally:
        torch.set_num_threads(threads)
    exported = run.parent / "export"
    export(run, exported)
    return {"released": released, "export": exported}


def saved_model(out: Path) -> Path:
    return Path(json.loads((out / "results.json").read_text())["saved_model"]["path"])


def load_hf(auto_class, saved: Path, name: str) -> torch.nn.Module:
    hf, info = auto_class.from_pretrained(saved, output_loading_info=True)
    assert type(hf).__name__ == name
    assert all(len(keys) == 0 for keys in info.values()), info
    return hf.eval()


@pytest.mark.slow
@pytest.mark.parametrize(("task", "source"), [("classification", "export"), ("pairs", "released"),
                                              ("tagging", "released")])
def test_a_saved_electra_task_model_loads_in_transformers_with_the_same_logits(
        task, source, electra_sources, tmp_path, monkeypatch, capsys):
    if task == "tagging":
        files = ["--train", write_conll(tmp_path / "train.conll", 60, 0), "--validation",
                 write_conll(tmp_path / "dev.conll", 20, 1), "--task", "tagging"]
        auto, ours, name = (transformers.AutoModelForTokenClassification, ElectraForTokenClassification,
                            "ElectraForTokenClassification")
    else:
        pair = task == "pairs"
        files = ["--train", write_task(tmp_path, 60, 0, "train.jsonl", pair=pair), "--validation",
                 write_task(tmp_path, 20, 1, "dev.jsonl", pair=pair), *(["--text-pair-column", "other"] * pair)]
        auto, ours, name = (transformers.AutoModelForSequenceClassification, ElectraForSequenceClassification,
                            "ElectraForSequenceClassification")
    out = tmp_path / "out"
    code, _, stderr = run_main(["finetune", electra_sources[source], *files, "--out", out, "--seeds", "1",
                                "--epochs", "1", "--lr", "0.001", "--batch-size", "8", "--save-model"],
                               monkeypatch, capsys)
    assert code == 0, stderr
    saved = saved_model(out)
    config = json.loads((saved / "config.json").read_text())
    assert config["architectures"] == [name] and config["model_type"] == "electra"
    hf = load_hf(auto, saved, name)
    model = ours(read_config(saved), hf.config.num_labels)
    model.load_state_dict(read_electra_weights(saved), strict=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    texts = ["the cat sees the river .", "my sister feeds a red apple today ."]
    if task == "pairs":  # BERT's pair layout, two token types: as bertpre fine-tuned it
        batch = tokenizer(texts, ["a dog finds the door .", "the farmer ."], padding=True, return_tensors="pt")
        assert int(batch["token_type_ids"].max()) == 1
    else:
        batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = hf(**batch).logits
        logits = model.eval()(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    if task == "tagging":  # the padding's outputs are no one's to read
        real = batch["attention_mask"].bool()
        logits, expected = logits[real], expected[real]
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_question_answering_on_electra_saves_its_class_with_the_same_logits(electra_sources, tmp_path, monkeypatch,
                                                                           capsys):
    from test_qa_finetune import write_squad

    out = tmp_path / "out"
    code, _, stderr = run_main(
        ["finetune", electra_sources["export"], "--task", "qa", "--train", write_squad(tmp_path / "train.json", 24, 0),
         "--validation", write_squad(tmp_path / "dev.json", 8, 1), "--out", out, "--seeds", "1", "--epochs", "1",
         "--batch-size", "8", "--max-seq-length", "48", "--doc-stride", "8", "--save-model"], monkeypatch, capsys)
    assert code == 0, stderr
    saved = saved_model(out)
    hf = load_hf(transformers.AutoModelForQuestionAnswering, saved, "ElectraForQuestionAnswering")
    model = ElectraForQuestionAnswering(read_config(saved))
    model.load_state_dict(read_electra_weights(saved), strict=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    batch = tokenizer(["who sees the river ?"], ["the cat sees the river today ."], return_tensors="pt")
    with torch.no_grad():
        out = hf(**batch)
        logits = model.eval()(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    torch.testing.assert_close(logits, torch.stack([out.start_logits, out.end_logits], dim=-1), rtol=0, atol=1e-5)
