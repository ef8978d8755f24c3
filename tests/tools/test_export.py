"""bertpre.tools.export: a run's checkpoint and tokenizer as a Hugging Face folder (BERT or ALBERT)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from bertpre.errors import UserError
from bertpre.folders import RUN_CONFIG_HEADER, current_umask
from bertpre.model import BertConfig, BertForPreTraining
from bertpre.tools.export import export

transformers = pytest.importorskip("transformers")
from _hf_models import TINY, VOCAB, batch, randomize  # noqa: E402


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
    assert sorted(p.name for p in out.iterdir()) == [".bertpre-export", ".bertpre-inventory.json", "config.json", "model.safetensors",
                                                     "tokenizer_config.json", "vocab.txt"]
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
    started = tmp_path / "started"  # a run before its first checkpoint: config.yaml, no checkpoints/
    started.mkdir()
    (started / "config.yaml").write_bytes(RUN_CONFIG_HEADER + b" 0.1.0\n")
    with pytest.raises(UserError, match="started: no checkpoints/latest; the run has not saved a checkpoint yet"):
        export(started, tmp_path / "out")
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
    with pytest.raises(UserError, match="do not fit BERT's layout.*9 missing.*bert.pooler.dense.weight"):
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


def test_export_replaces_its_own_export_and_sets_length_and_permissions(tmp_path: Path) -> None:
    run = fake_run(tmp_path, BertForPreTraining(BertConfig(**TINY)))
    out = tmp_path / "export"
    export(run, out)
    (out / "README.md").write_text("a model card of yours")
    (out / "model.safetensors").unlink()  # a file bertpre wrote and you deleted: written again
    export(run, out, overwrite=True)  # an export made by `bertpre export` may be replaced
    assert (out / "README.md").read_text() == "a model card of yours"  # only bertpre's files go
    assert (out / "model.safetensors").is_file()
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == TINY["max_position_embeddings"] == 64
    modes = {path.name: path.stat().st_mode & 0o777 for path in out.iterdir()}
    assert len(set(modes.values())) == 1, modes  # model.safetensors as readable as the rest
    assert out.stat().st_mode & 0o777 == 0o777 & ~current_umask()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".export")] == []
