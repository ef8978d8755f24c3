"""`bertpre finetune` on a ModernBERT (a transformers ModernBertForMaskedLM with a byte-level BPE
tokenizer, as a released one has): classification pooled at the first token or as the mean
(`--set classifier_pooling=mean`, recorded in config.json as transformers reads it), tagging and
question answering, full and probe; `--save-model` loads in transformers as ModernBertFor* with no
missing or unexpected keys and bertpre's logits on padded rows longer than the local window. The
setting is refused, with the reason, where nothing would read it."""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _in_process import run_main
from _released_tokenizers import roberta_like
from safetensors.torch import load_file
from test_finetune import write_conll, write_task

from bertpre.config.finetune import Hyperparameters, load_hyperparameters
from bertpre.errors import UserError
from bertpre.finetune.encoding import encode_texts
from bertpre.finetune.model import build_task_model, task_config
from bertpre.finetune.source import load_encoder
from bertpre.model.config import BertConfig
from bertpre.model.hf_format import read_config
from bertpre.model.modernbert_heads import (
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
)
from bertpre.tokenizer import load_tokenizer

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

# 3 layers: 0 global, 1 and 2 reading 4 tokens each way; the texts below are longer.
SHAPE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=3)
TEXTS = ["the cat sees the river and the farmer feeds a red apple today .", "my sister ."]
WORDS = [["the", "farmer", "sees", "the", "river", "and", "my", "sister", "feeds", "a", "cat", "."], ["Rollo"]]


@pytest.fixture(scope="module")
def modernbert_source(tmp_path_factory) -> Path:
    """A transformers ModernBertForMaskedLM (weights off their init) beside a RoBERTa-like BPE
    tokenizer (<pad> is 1)."""
    folder = roberta_like(tmp_path_factory.mktemp("modernbert") / "source")
    torch.manual_seed(7)
    config = transformers.ModernBertConfig(vocab_size=load_tokenizer(folder).get_vocab_size(), pad_token_id=1,
                                           bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=2, **SHAPE)
    model = transformers.ModernBertForMaskedLM(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(folder)
    return folder


def saved_folder(out: Path) -> Path:
    return Path(json.loads((out / "results.json").read_text())["saved_model"]["path"])


def check_loads(saved: Path, auto, name: str) -> torch.nn.Module:
    """transformers' model of the saved folder, checked to be `name` with every key matched."""
    hf, info = auto.from_pretrained(saved, output_loading_info=True, attn_implementation="sdpa")
    assert type(hf).__name__ == name
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return hf.eval()


def run_finetune(source: Path, tmp_path: Path, files: list, monkeypatch, capsys, *options: str) -> Path:
    out = tmp_path / "out"
    code, _, stderr = run_main(["finetune", source, *files, "--out", out, "--seeds", "1", "--epochs", "1",
                                "--lr", "0.001", "--batch-size", "8", *options], monkeypatch, capsys)
    assert code == 0, stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_saved_modernbert_classifier_loads_in_transformers_with_its_pooling_and_logits(
        pooling, modernbert_source, tmp_path, monkeypatch, capsys):
    files = ["--train", write_task(tmp_path, 40, 0, "train.jsonl"), "--validation",
             write_task(tmp_path, 16, 1, "dev.jsonl")]
    setting = [] if pooling == "cls" else ["--set", "classifier_pooling=mean"]
    out = run_finetune(modernbert_source, tmp_path, files, monkeypatch, capsys, "--save-model", *setting)
    saved = saved_folder(out)
    config = json.loads((saved / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForSequenceClassification"] and config["model_type"] == "modernbert"
    assert config["classifier_pooling"] == pooling and config["id2label"] == {"0": "animal", "1": "person"}
    hf = check_loads(saved, transformers.AutoModelForSequenceClassification, "ModernBertForSequenceClassification")
    assert hf.config.classifier_pooling == pooling
    model = ModernBertForSequenceClassification(read_config(saved), 2)
    model.load_state_dict(load_file(saved / "model.safetensors"), strict=True)
    assert model.config.classifier_pooling == pooling
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] > 9 and batch["input_ids"][1, -1] == 1  # past the window; <pad>
    with torch.no_grad():
        expected = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = model.eval()(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)
    assert json.loads((out / "results.json").read_text())["hyperparameters"]["classifier_pooling"] == (
        None if pooling == "cls" else "mean")


@pytest.mark.slow
def test_a_saved_modernbert_tagger_splits_words_as_it_was_fine_tuned_and_gives_its_logits(
        modernbert_source, tmp_path, monkeypatch, capsys):
    files = ["--train", write_conll(tmp_path / "train.conll", 30, 0), "--validation",
             write_conll(tmp_path / "dev.conll", 10, 1), "--task", "tagging"]
    saved = saved_folder(run_finetune(modernbert_source, tmp_path, files, monkeypatch, capsys, "--save-model"))
    assert json.loads((saved / "tokenizer_config.json").read_text())["add_prefix_space"] is True
    hf = check_loads(saved, transformers.AutoModelForTokenClassification, "ModernBertForTokenClassification")
    model = ModernBertForTokenClassification(read_config(saved), hf.config.num_labels)
    model.load_state_dict(load_file(saved / "model.safetensors"), strict=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    batch = tokenizer(WORDS, is_split_into_words=True, padding=True, return_tensors="pt")
    first_pieces = [tokenizer.convert_ids_to_tokens(int(batch["input_ids"][0, batch.word_ids(0).index(word)]))
                    for word in range(len(WORDS[0]))]
    assert all(piece.startswith("Ġ") for piece in first_pieces)  # each word spaced, as bertpre pieced it
    with torch.no_grad():
        expected = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = model.eval()(batch["input_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(logits[real], expected[real], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_question_answering_on_modernbert_saves_its_class_with_the_same_logits(modernbert_source, tmp_path,
                                                                              monkeypatch, capsys):
    from test_qa_finetune import write_squad

    files = ["--task", "qa", "--train", write_squad(tmp_path / "train.json", 24, 0), "--validation",
             write_squad(tmp_path / "dev.json", 8, 1), "--max-seq-length", "48", "--doc-stride", "8"]
    saved = saved_folder(run_finetune(modernbert_source, tmp_path, files, monkeypatch, capsys, "--save-model"))
    hf = check_loads(saved, transformers.AutoModelForQuestionAnswering, "ModernBertForQuestionAnswering")
    model = ModernBertForQuestionAnswering(read_config(saved))
    model.load_state_dict(load_file(saved / "model.safetensors"), strict=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    batch = tokenizer(["who sees the river ?", "who ?"], ["the cat sees the river today and the farmer sleeps .",
                                                         "the cat ."], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = hf(**batch)
        logits = model.eval()(batch["input_ids"], batch["attention_mask"])
    real = batch["attention_mask"].bool()
    expected = torch.stack([out.start_logits, out.end_logits], dim=-1)
    torch.testing.assert_close(logits[real], expected[real], rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classification", "qa"])
def test_a_probe_of_a_modernbert_trains_the_head_alone(task, modernbert_source, tmp_path, monkeypatch, capsys):
    if task == "qa":
        from test_qa_finetune import write_squad

        files = ["--task", "qa", "--train", write_squad(tmp_path / "train.json", 16, 0), "--validation",
                 write_squad(tmp_path / "dev.json", 8, 1), "--max-seq-length", "48", "--doc-stride", "8"]
    else:
        files = ["--train", write_task(tmp_path, 24, 0, "train.jsonl"), "--validation",
                 write_task(tmp_path, 8, 1, "dev.jsonl"), "--set", "pooling=mean"]
    out = run_finetune(modernbert_source, tmp_path, files, monkeypatch, capsys, "--mode", "probe")
    result = json.loads((out / "results.json").read_text())
    assert result["mode"] == "probe"
    if task == "classification":  # frozen features, kept for the next probe
        assert list((out / "features").glob("*.safetensors"))


def modernbert_config() -> BertConfig:
    return BertConfig(architecture="modernbert", vocab_size=90, pad_token_id=0, **SHAPE)


def test_classifier_pooling_sets_the_sequence_heads_config_and_is_otherwise_left_alone():
    config = modernbert_config()
    hp = load_hyperparameters(None, None, ["classifier_pooling=mean"])
    assert task_config(config, hp, "classification").classifier_pooling == "mean"
    assert task_config(config, hp, "regression").classifier_pooling == "mean"
    assert task_config(config, Hyperparameters(), "tagging") is config  # unset: the source's config.json says
    with pytest.raises(UserError, match="classifier_pooling must be cls or mean, got 'max'"):
        load_hyperparameters(None, None, ["classifier_pooling=max"])


@pytest.mark.parametrize(("architecture", "mode", "task", "message"), [
    ("bert", "full", "classification", "classifier_pooling is ModernBERT's .*a BERT's sequence head reads its own "
                                       "classification token, so the setting would be ignored: leave it out"),
    ("roberta", "full", "classification", "a RoBERTa's sequence head"),
    ("modernbert", "probe", "classification", r"a probe's frozen features pool as `pooling` says \(--set pooling=mean\)"),
    ("modernbert", "full", "tagging", "--task tagging reads every token's output"),
    ("modernbert", "full", "qa", "--task qa reads every token's output"),
])
def test_classifier_pooling_is_refused_where_nothing_would_read_it(architecture, mode, task, message):
    config = modernbert_config() if architecture == "modernbert" else BertConfig(architecture=architecture)
    hp = load_hyperparameters(None, None, ["classifier_pooling=mean", f"mode={mode}"])
    with pytest.raises(UserError, match=message):
        task_config(config, hp, task)


@pytest.mark.slow
def test_a_bert_source_refuses_classifier_pooling_before_writing_anything(run_folder, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    code, _, stderr = run_main(["finetune", run_folder, "--train", write_task(tmp_path, 24, 0, "train.jsonl"),
                                "--validation", write_task(tmp_path, 12, 1, "dev.jsonl"), "--out", out,
                                "--set", "classifier_pooling=mean"], monkeypatch, capsys)
    assert code == 2 and "a BERT's sequence head reads its own classification token" in stderr
    assert not out.exists()


def test_the_work_key_is_as_before_where_classifier_pooling_is_unset():
    """Results of earlier runs (keyed without the setting) are still found, and a set pooling is
    other work."""
    from bertpre.finetune.jobs import work_key

    encoder = SimpleNamespace(weights_sha256="0" * 64)
    data = SimpleNamespace(task="classification", files={})
    files = SimpleNamespace(text_column="text", text_pair_column=None, label_column="label", qa=None,
                            benchmark_task=None)
    earlier = {name: value for name, value in asdict(Hyperparameters()).items() if name != "classifier_pooling"}
    described = {"weights": "0" * 64, "task": "classification", "mode": "full", "files": {},
                 "columns": ["text", None, "label"], "hyperparameters": earlier, "seeds": [1]}
    unset = work_key(encoder, data, files, Hyperparameters(), [1])
    assert unset == hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()
    assert unset != work_key(encoder, data, files, Hyperparameters(classifier_pooling="cls"), [1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ModernBertForMaskedLM", "ModernBertModel"])
def test_fine_tuning_starts_from_the_sources_mlm_head_as_transformers_does(kind, modernbert_source, tmp_path):
    """transformers' ModernBertFor* has the MLM head's `head` by name: from_pretrained of an MLM
    folder loads it, and only `classifier` is drawn; so does bertpre. A ModernBertModel folder has
    no head: both draw it."""
    source = modernbert_source
    if kind == "ModernBertModel":
        source = tmp_path / "bare"
        transformers.ModernBertModel.from_pretrained(modernbert_source).save_pretrained(source)
        for file in modernbert_source.glob("tokenizer*"):
            shutil.copy(file, source / file.name)
    encoder = load_encoder(source)
    torch.manual_seed(0)
    ours = build_task_model(encoder.config, encoder.state, 3, tagging=False, head_state=encoder.head_state)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(source, num_labels=3)
    mine, reference = ours.state_dict(), theirs.state_dict()
    assert set(mine) == set(reference)
    head = {name for name in mine if name.startswith("head.")}
    assert head == {"head.dense.weight", "head.norm.weight"}
    for name in mine:
        if name.startswith("model.") or (kind == "ModernBertForMaskedLM" and name in head):
            assert torch.equal(mine[name], reference[name]), name
    assert bool(encoder.head_state) == (kind == "ModernBertForMaskedLM")
    assert torch.equal(mine["head.dense.weight"], reference["head.dense.weight"]) == (kind == "ModernBertForMaskedLM")


@pytest.mark.slow
@pytest.mark.parametrize("tokenizer", ["wordpiece", "bpe"])
def test_a_saved_modernbert_pair_classifier_reads_pairs_in_transformers_as_it_was_fine_tuned(
        tokenizer, modernbert_source, tiny_data, tmp_path, monkeypatch, capsys):
    """A pair is what the source tokenizer's own template makes of it (WordPiece's `[CLS] a [SEP]
    b [SEP]`, the BPE's `<s> a </s></s> b </s>`), in bertpre's fine-tuning and in transformers on
    the saved folder alike."""
    source = modernbert_source
    if tokenizer == "wordpiece":  # the tiny DATA's BERT tokenizer beside a ModernBERT of its vocabulary
        source = tmp_path / "wordpiece"
        shutil.copytree(tiny_data / "tokenizer", source)
        torch.manual_seed(7)
        config = transformers.ModernBertConfig(vocab_size=load_tokenizer(source).get_vocab_size(), pad_token_id=0,
                                               bos_token_id=None, eos_token_id=None, cls_token_id=None,
                                               sep_token_id=None, **SHAPE)
        transformers.ModernBertForMaskedLM(config).save_pretrained(source)
    files = ["--train", write_task(tmp_path, 40, 0, "train.jsonl", pair=True), "--validation",
             write_task(tmp_path, 16, 1, "dev.jsonl", pair=True), "--text-pair-column", "other"]
    saved = saved_folder(run_finetune(source, tmp_path, files, monkeypatch, capsys, "--save-model",
                                      "--set", "classifier_pooling=mean"))
    hf = check_loads(saved, transformers.AutoModelForSequenceClassification, "ModernBertForSequenceClassification")
    model = ModernBertForSequenceClassification(read_config(saved), 2)
    model.load_state_dict(load_file(saved / "model.safetensors"), strict=True)
    pairs = ["a dog finds the door .", "the farmer ."]
    batch = transformers.AutoTokenizer.from_pretrained(saved)(TEXTS, pairs, padding=True, return_tensors="pt")
    encoder = load_encoder(source)
    trained = encode_texts(encoder.tokenizer, TEXTS, pairs, [0, 1], 64, config=encoder.config).input_ids
    assert [row[mask.bool()].tolist() for row, mask in zip(batch["input_ids"], batch["attention_mask"],
                                                           strict=True)] == trained
    with torch.no_grad():
        expected = hf(**batch).logits
        logits = model.eval()(batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)
