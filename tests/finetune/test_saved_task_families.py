"""`--save-model` for every layout of the BERT family: with ALBERT's options a fine-tuned model is
saved as transformers' AlbertFor*, with relative positions (ALBERT's options or not) as remote
code's BertpreFor*. Each loads through transformers' Auto class with no missing or unexpected keys
and gives bertpre's logits (classification, regression, tagging, question answering) on a padded
batch of pairs; the ALBERT-option question-answering run goes through the CLI too (slow)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.finetune.model import build_task_model
from bertpre.finetune.saved_model import check_can_save, save_task_model
from bertpre.model import BertConfig
from bertpre.model import families as families_module
from bertpre.model.families import family
from bertpre.tokenizer import load_tokenizer
from bertpre.train.trainer import pretrain

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)
# (options, the prefix of transformers' class it saves as)
LAYOUTS = {
    "albert-factorized": (dict(embedding_size=16), "Albert"),
    "albert-shared": (dict(share_layers=True), "Albert"),
    "albert-both": (dict(embedding_size=16, share_layers=True), "Albert"),
    "rope": (dict(position_embedding_type="rope"), "Bertpre"),
    "transformer-xl": (dict(position_embedding_type="transformer_xl"), "Bertpre"),
    "rope-albert": (dict(position_embedding_type="rope", embedding_size=16, share_layers=True), "Bertpre"),
    "transformer-xl-albert": (dict(position_embedding_type="transformer_xl", embedding_size=16), "Bertpre"),
}
# task: (the Auto class, bertpre's label names, the class's name from "For" on)
TASKS = {
    "classification": ("AutoModelForSequenceClassification", ["neg", "neutral", "pos"], "ForSequenceClassification"),
    "regression": ("AutoModelForSequenceClassification", [], "ForSequenceClassification"),
    "tagging": ("AutoModelForTokenClassification", ["O", "B-X", "I-X", "B-Y"], "ForTokenClassification"),
    "qa": ("AutoModelForQuestionAnswering", [], "ForQuestionAnswering"),
}
QUESTIONS = ["who feeds the cat ?", "what does my sister see ?", "where ?"]
CONTEXTS = ["my sister feeds the cat today .", "the cat sees the river and my sister sees a red apple .",
            "the river ."]


def fine_tuned(config: BertConfig, task: str, labels: int) -> torch.nn.Module:
    """bertpre's task model of `task`, every weight moved off its init so that each one counts."""
    torch.manual_seed(0)
    encoder_state = family(config).build_encoder(config).state_dict()
    model = build_task_model(config, encoder_state, labels, tagging=task == "tagging",
                             question_answering=task == "qa")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def tiny_config(tiny_data: Path, options: dict) -> BertConfig:
    config = BertConfig(**TINY, **options, vocab_size=load_tokenizer(tiny_data / "tokenizer").get_vocab_size())
    config.validate()
    return config


def load_saved(folder: Path, auto_class: str) -> torch.nn.Module:
    """transformers' model of the folder (remote code allowed: from the folder itself), checked to
    have loaded every tensor and to have drawn none."""
    model, info = getattr(transformers, auto_class).from_pretrained(folder, trust_remote_code=True,
                                                                    output_loading_info=True)
    assert all(len(keys) == 0 for keys in info.values()), info
    return model.eval()


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_saved_task_model_loads_in_transformers_with_bertpre_logits(layout, task, tiny_data, tmp_path):
    options, prefix = LAYOUTS[layout]
    auto_class, label_names, suffix = TASKS[task]
    config = tiny_config(tiny_data, options)
    check_can_save(config, "full")  # refused before this change
    labels = {"regression": 1, "qa": 2}.get(task, len(label_names))
    ours = fine_tuned(config, task, labels)
    saved = save_task_model(tmp_path / "out", ours, config, task=task, label_names=label_names,
                            tokenizer_folder=tiny_data / "tokenizer")

    hf = load_saved(saved, auto_class)
    assert type(hf).__name__ == prefix + suffix
    assert json.loads((saved / "config.json").read_text())["architectures"] == [prefix + suffix]
    if label_names:
        assert hf.config.id2label == dict(enumerate(label_names))
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved, trust_remote_code=True)
    batch = tokenizer(QUESTIONS, CONTEXTS, padding=True, return_tensors="pt")
    assert not bool(batch["attention_mask"].all())  # padded: the mask must be read alike
    with torch.no_grad():
        mine = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        theirs = hf(**batch)
    if task == "qa":
        torch.testing.assert_close(theirs.start_logits, mine[..., 0], atol=1e-5, rtol=0)
        torch.testing.assert_close(theirs.end_logits, mine[..., 1], atol=1e-5, rtol=0)
    else:
        torch.testing.assert_close(theirs.logits, mine, atol=1e-5, rtol=0)
    assert mine.abs().max() > 0.01  # not a trivially equal pair of zeros


def test_the_albert_layout_names_each_weight_as_transformers_albert(tiny_data, tmp_path):
    """Shared layers are one group of one layer; the head keeps its name; a tagger has no pooler."""
    config = tiny_config(tiny_data, dict(share_layers=True))
    saved = save_task_model(tmp_path / "out", fine_tuned(config, "tagging", 3), config, task="tagging",
                            label_names=["O", "B", "I"], tokenizer_folder=tiny_data / "tokenizer")
    names = set(load_file(saved / "model.safetensors"))
    assert {"classifier.weight", "classifier.bias",
            "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn.weight",
            "albert.encoder.embedding_hidden_mapping_in.weight"} <= names
    assert not any(name.startswith(("albert.encoder.albert_layer_groups.1.", "albert.pooler", "bert."))
                   for name in names)
    written = json.loads((saved / "config.json").read_text())
    assert (written["model_type"], written["num_hidden_groups"]) == ("albert", 1)


def test_remote_code_losses_are_transformers_losses(tiny_data, tmp_path):
    """BertpreFor*'s losses: cross-entropy over the labelled tokens; for QA the mean of the start
    and end cross-entropies, a position past the sequence ignored."""
    config = tiny_config(tiny_data, dict(position_embedding_type="rope"))
    tokenizer_folder = tiny_data / "tokenizer"
    tagger = load_saved(save_task_model(tmp_path / "tag", fine_tuned(config, "tagging", 3), config, task="tagging",
                                        label_names=["O", "B", "I"], tokenizer_folder=tokenizer_folder),
                        "AutoModelForTokenClassification")
    reader = load_saved(save_task_model(tmp_path / "qa", fine_tuned(config, "qa", 2), config, task="qa",
                                        label_names=[], tokenizer_folder=tokenizer_folder),
                        "AutoModelForQuestionAnswering")
    input_ids = torch.randint(5, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    tags = torch.tensor([[-100, 0, 1, 2, 0, -100, 1, 1, -100], [-100, 2, 2, 0, -100, -100, -100, -100, -100]])
    with torch.no_grad():
        tagged = tagger(input_ids, labels=tags)
        answered = reader(input_ids, start_positions=torch.tensor([3, 40]), end_positions=torch.tensor([5, 2]))
    kept = tags != -100
    torch.testing.assert_close(tagged.loss, torch.nn.functional.cross_entropy(tagged.logits[kept], tags[kept]))
    start = torch.nn.functional.cross_entropy(answered.start_logits[:1], torch.tensor([3]))  # 40: ignored
    end = torch.nn.functional.cross_entropy(answered.end_logits, torch.tensor([5, 2]))
    torch.testing.assert_close(answered.loss, (start + end) / 2)


def test_a_family_without_task_classes_is_refused_by_name(monkeypatch):
    """Whatever a row cannot save is refused up front, naming the family and the shape."""
    row = families_module.FAMILIES["bert"]
    monkeypatch.setitem(families_module.FAMILIES, "bert", replace(row, native_task_models=lambda config: False))
    with pytest.raises(UserError, match=r"no transformers class holds a fine-tuned BERT of this shape \(2 layers"):
        check_can_save(BertConfig(**TINY, vocab_size=50), "full")


@pytest.mark.slow
def test_finetune_qa_saves_an_albert_option_run_as_albert_for_question_answering(
        tiny_data, tmp_path, monkeypatch, capsys):
    """The CLI end to end: a tiny run pretrained with ALBERT's options, `finetune --task qa
    --save-model` (refused before); AutoModelForQuestionAnswering loads it as ALBERT's class,
    every tensor read, with AutoTokenizer's tokenizer from the same folder."""
    from test_finetune import run_main
    from test_qa_finetune import write_squad

    run = tmp_path / "run"
    pretrain(load_config("tiny", [
        f"data.path={tiny_data}", f"train.out={run}", *(f"model.{key}={value}" for key, value in TINY.items()),
        "model.embedding_size=16", "model.share_layers=true", "data.max_seq_length=32",
        "data.max_predictions_per_seq=5", "data.num_workers=0", "train.batch_size=8", "train.micro_batch_size=8",
        "train.max_steps=10", "train.precision=fp32", "train.save_every=10", "train.eval_every=1000",
        "train.log_every=10", "optim.warmup_steps=2"]), resume=False)
    train, validation = write_squad(tmp_path / "train.json", 24, 0), write_squad(tmp_path / "dev.json", 8, 1)
    out = tmp_path / "out"
    code, _, stderr = run_main(
        ["finetune", run, "--task", "qa", "--train", train, "--validation", validation, "--out", out,
         "--seeds", "1", "--epochs", "1", "--lr", "0.002", "--batch-size", "8", "--max-seq-length", "48",
         "--doc-stride", "8", "--save-model"], monkeypatch, capsys)
    assert code == 0, stderr
    hf = load_saved(out / "model", "AutoModelForQuestionAnswering")
    assert type(hf).__name__ == "AlbertForQuestionAnswering"
    tokenizer = transformers.AutoTokenizer.from_pretrained(out / "model")
    batch = tokenizer(QUESTIONS, CONTEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = hf(**batch)
    assert logits.start_logits.shape == batch["input_ids"].shape and torch.isfinite(logits.end_logits).all()
