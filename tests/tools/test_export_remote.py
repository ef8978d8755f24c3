"""Exports of models with relative positions: the remote-code layout that transformers loads with
`trust_remote_code=True` and bertpre's own tools read back."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertpre.config import load_config
from bertpre.model import BertConfig, BertForPreTraining
from bertpre.model.bert_config import REMOTE_AUTO_MAP
from bertpre.tools.export import export
from bertpre.tools.inference import evaluate_saved_model, fill_mask, load_model_and_tokenizer
from bertpre.train.trainer import Trainer, pretrain

transformers = pytest.importorskip("transformers")
from _hf_models import TINY, VOCAB, randomize  # noqa: E402

ROOT = Path(__file__).parents[2]
REMOTE = "BertpreForPreTraining (remote code: trust_remote_code=True)"
AUTO_CLASSES = ("AutoModelForPreTraining", "AutoModelForMaskedLM", "AutoModel")


def fake_run(root: Path, model: BertForPreTraining) -> Path:
    """A RUN folder as the trainer writes it: tokenizer/, checkpoints/step-N/, checkpoints/latest."""
    run = root / "run"
    model.save_pretrained(run / "checkpoints" / "step-00000020")
    (run / "checkpoints" / "latest").write_text("step-00000020\n")
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    (run / "tokenizer" / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True}))
    return run


def padded_inputs(length: int, vocab_size: int, seed: int = 3) -> dict[str, torch.Tensor]:
    """Two rows of `length` tokens, the second padded after 60% of them, two segments each."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (2, length), generator=generator)
    attention_mask = torch.ones(2, length, dtype=torch.long)
    attention_mask[1, length * 3 // 5:] = 0
    input_ids[1, length * 3 // 5:] = 0
    token_type_ids = torch.zeros(2, length, dtype=torch.long)
    token_type_ids[:, length // 3:] = 1
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


def load_remote(folder: Path, auto_class: str) -> torch.nn.Module:
    """A transformers Auto class's model of an export, checked to have loaded every tensor."""
    model, info = getattr(transformers, auto_class).from_pretrained(
        folder, trust_remote_code=True, output_loading_info=True)
    assert all(len(keys) == 0 for keys in info.values()), (auto_class, info)
    return model.eval()


def assert_same_outputs(ours: BertForPreTraining, folder: Path, lengths: tuple[int, ...]) -> None:
    """The three Auto classes give bertpre's logits and states on padded input of each length."""
    pretraining, masked_lm, encoder = (load_remote(folder, name) for name in AUTO_CLASSES)
    assert type(pretraining).__name__ == "BertpreForPreTraining"
    for model in (pretraining, masked_lm):  # the decoder is the word embedding matrix, not a copy
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    for length in lengths:
        inputs = padded_inputs(length, ours.config.vocab_size)
        labels = torch.full((2, length), -100)
        labels[0, [1, length - 2]] = torch.tensor([11, 12])
        labels[1, 2] = 21
        pair_labels = torch.tensor([1, 0])
        with torch.no_grad():
            reference = ours(**inputs)
            reference_loss = ours(**inputs, labels=labels, next_sentence_label=pair_labels).loss
            encoded = ours.bert(**inputs)
            theirs = pretraining(**inputs, labels=labels, next_sentence_label=pair_labels)
            masked = masked_lm(**inputs)
            states = encoder(**inputs)
        torch.testing.assert_close(theirs.prediction_logits, reference.prediction_logits)
        torch.testing.assert_close(theirs.seq_relationship_logits, reference.seq_relationship_logits)
        torch.testing.assert_close(theirs.loss, reference_loss)
        torch.testing.assert_close(masked.logits, reference.prediction_logits)
        torch.testing.assert_close(states.last_hidden_state, encoded.last_hidden_state)
        torch.testing.assert_close(states.pooler_output, encoded.pooler_output)


@pytest.mark.parametrize("changes", [
    {"position_embedding_type": "rope"},
    {"position_embedding_type": "transformer_xl"},
    {"position_embedding_type": "rope", "rope_theta": 500.0, "embedding_size": 16, "share_layers": True},
], ids=["rope", "transformer_xl", "rope-albert"])
def test_a_relative_export_loads_in_transformers_with_bertpre_outputs(tmp_path: Path, changes: dict) -> None:
    ours = randomize(BertForPreTraining(BertConfig(**{**TINY, "num_hidden_layers": 3, **changes})))
    summary = export(fake_run(tmp_path, ours), tmp_path / "export")
    out = tmp_path / "export"
    assert summary.architecture == REMOTE
    assert sorted(p.name for p in out.iterdir()) == [
        ".bertpre-export", ".bertpre-inventory.json", "config.json", "configuration_bertpre.py", "model.safetensors",
        "modeling_bertpre.py", "tokenizer_config.json", "vocab.txt"]
    hf_config = json.loads((out / "config.json").read_text())
    assert hf_config["model_type"] == "bertpre" and hf_config["auto_map"] == REMOTE_AUTO_MAP
    # The model's training length (its max_position_embeddings) and twice it.
    assert_same_outputs(ours, out, lengths=(64, 128))
    # bertpre reads its export back exactly.
    again = BertForPreTraining.from_pretrained(out)
    assert again.config == ours.config
    for (name, x), (_, y) in zip(again.state_dict().items(), ours.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_a_relative_export_is_fine_tuned_through_transformers_task_auto_classes(tmp_path: Path) -> None:
    """An export's auto_map names the task classes too: a user's AutoModelForSequenceClassification
    (and Token, QuestionAnswering) takes the encoder's weights and draws only the new head."""
    ours = randomize(BertForPreTraining(BertConfig(**{**TINY, "position_embedding_type": "rope"})))
    export(fake_run(tmp_path, ours), tmp_path / "export")
    inputs = padded_inputs(24, TINY["vocab_size"])
    with torch.no_grad():
        hidden = ours.bert(**inputs).last_hidden_state
    for auto_class, head in (("AutoModelForSequenceClassification", "classifier"),
                             ("AutoModelForTokenClassification", "classifier"),
                             ("AutoModelForQuestionAnswering", "qa_outputs")):
        model, info = getattr(transformers, auto_class).from_pretrained(
            tmp_path / "export", trust_remote_code=True, output_loading_info=True)
        assert info["unexpected_keys"] == [] or all("cls." in key for key in info["unexpected_keys"]), info
        assert sorted(info["missing_keys"]) == [f"{head}.bias", f"{head}.weight"], (auto_class, info)
        with torch.no_grad():
            states = model.eval().bert(**inputs)[0]
        torch.testing.assert_close(states, hidden)


def test_the_remote_code_reads_absolute_and_albert_configs_as_bertpre_does(tmp_path: Path) -> None:
    ours = randomize(BertForPreTraining(BertConfig(**{**TINY, "position_embedding_type": "rope"})))
    export(fake_run(tmp_path, ours), tmp_path / "export")
    remote_class = type(load_remote(tmp_path / "export", "AutoModelForPreTraining"))
    for changes in ({}, {"embedding_size": 16, "share_layers": True},
                    {"position_embedding_type": "transformer_xl", "embedding_size": 16}):
        config = BertConfig(**{**TINY, "num_hidden_layers": 3, "hidden_act": "gelu_new", **changes})
        ours = randomize(BertForPreTraining(config))
        theirs = remote_class(remote_class.config_class(**config.to_dict())).eval()
        missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
        assert (missing, unexpected) == ([], []), changes
        inputs = padded_inputs(40, config.vocab_size)
        with torch.no_grad():
            torch.testing.assert_close(theirs(**inputs).prediction_logits, ours(**inputs).prediction_logits)


def test_absolute_and_albert_exports_keep_their_transformers_layouts(tmp_path: Path) -> None:
    for name, changes, architecture in (("plain", {}, "BertForPreTraining"),
                                        ("albert", {"embedding_size": 16}, "AlbertForPreTraining")):
        run = fake_run(tmp_path / name, BertForPreTraining(BertConfig(**{**TINY, **changes})))
        assert export(run, tmp_path / name / "export").architecture == architecture
        files = {p.name for p in (tmp_path / name / "export").iterdir()}
        assert not files & {"configuration_bertpre.py", "modeling_bertpre.py"}
        assert "auto_map" not in json.loads((tmp_path / name / "export" / "config.json").read_text())


def test_bertpre_reads_a_trained_rope_export_as_any_other(tiny_data: Path, tmp_path: Path) -> None:
    def config(out: Path, *overrides: str):
        return load_config(ROOT / "configs" / "tiny.yaml", [
            f"data.path={tiny_data}", f"train.out={out}", "data.max_seq_length=32",
            "train.batch_size=8", "train.micro_batch_size=8", "train.eval_every=1000", *overrides])

    run = pretrain(config(tmp_path / "run", "model.position_embedding_type=rope", "train.max_steps=3",
                          "train.save_every=3"))
    export(run.run_dir, tmp_path / "export")
    ours = BertForPreTraining.from_pretrained(run.run_dir / "checkpoints" / "step-00000003").eval()
    assert_same_outputs(ours, tmp_path / "export", lengths=(32, 64))  # training length and twice it

    # fill-mask: the same predictions as from the run
    model, tokenizer = load_model_and_tokenizer(tmp_path / "export")
    assert model.config.position_embedding_type == "rope"
    text = "the cat [MASK] the river today ."
    # (AutoTokenizer reads config.json too, so it asks for trust_remote_code as well.)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "export", trust_remote_code=True)
    assert theirs(text)["input_ids"] == tokenizer.encode(text).ids
    assert fill_mask(model, tokenizer, text, top_k=3) == fill_mask(*load_model_and_tokenizer(run.run_dir),
                                                                   text, top_k=3)
    # evaluate: the same metrics as the run's checkpoint
    same = dict(config_path=run.run_dir / "config.yaml", micro_batch_size=8)
    scored = evaluate_saved_model(tmp_path / "export", tiny_data, **same)
    assert scored == evaluate_saved_model(run.run_dir, tiny_data, **same) and scored["predictions"] > 0
    # model.init_from: a new run starts from exactly the exported weights and shape
    with Trainer(config(tmp_path / "warm", f"model.init_from={tmp_path / 'export'}")) as trainer:
        assert trainer.model.config.position_embedding_type == "rope"
        for (name, x), (_, y) in zip(trainer.model.state_dict().items(), ours.state_dict().items(), strict=True):
            assert torch.equal(x, y), name
