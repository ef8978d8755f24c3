"""`model.init_from`: a run starts from a Hugging Face folder, an export, or another run's weights."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from _tiny_data import build_tiny_data

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.tools.export import export
from bertpre.train.trainer import Trainer, pretrain

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
# configs/tiny.yaml's shape, so that its model keys agree with the source.
TINY_SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
                  max_position_embeddings=64, type_vocab_size=2)


def tiny_config(data: Path, out: Path, *overrides: str):
    return load_config(TINY, [f"data.path={data}", f"train.out={out}", "train.log_every=1",
                              "train.eval_every=1000", *overrides])


def hf_folder(kind: str, data: Path, folder: Path, **shape) -> tuple[Path, torch.nn.Module]:
    """A randomly initialized transformers model of `kind` saved with DATA's tokenizer files."""
    import transformers

    torch.manual_seed(7)
    config = transformers.BertConfig(vocab_size=120, **{**TINY_SHAPE, **shape})
    model = getattr(transformers, kind)(config).eval()
    with torch.no_grad():  # biases and LayerNorms away from their init values
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(folder)
    for file in (data / "tokenizer").iterdir():
        shutil.copy(file, folder / file.name)
    return folder, model


def inputs() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, 120, (2, 12), generator=generator)
    attention_mask = torch.ones(2, 12, dtype=torch.long)
    attention_mask[1, 8:] = 0
    token_type_ids = torch.zeros(2, 12, dtype=torch.long)
    token_type_ids[:, 5:] = 1
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


def test_a_bert_for_masked_lm_folder_gives_transformers_logits(tiny_data, tmp_path, capsys):
    source, reference = hf_folder("BertForMaskedLM", tiny_data, tmp_path / "mlm")
    with Trainer(tiny_config(tiny_data, tmp_path / "run", f"model.init_from={source}")) as trainer:
        model = trainer.model.eval()
        with torch.no_grad():
            ours = model(**inputs()).prediction_logits
            theirs = reference(**inputs()).logits
        torch.testing.assert_close(ours, theirs)
        notes = trainer.notes
    said = capsys.readouterr().err
    assert f"starting from the weights of {source}" in said
    assert "the pooler (bert.pooler), the pair head (cls.seq_relationship)" in said
    assert not any("MLM head" in note for note in notes)


@pytest.mark.parametrize("setting", ["model.unpad=true", "model.fused_qkv=true", "model.fused_qkv=false",
                                     "model.low_precision_layernorm=false", "model.last_layer_rows=false",
                                     "model.loss_chunk_rows=0"])
def test_how_the_step_computes_is_the_run_s_to_choose_from_a_released_model(setting, tiny_data, tmp_path):
    """Unpadding, one QKV product, LayerNorm's precision, the loss's chunks: no config.json holds them
    and the weights are the same, so a typed one is no shape contradicting the source's."""
    source, reference = hf_folder("BertForMaskedLM", tiny_data, tmp_path / "mlm")
    key, value = setting.split("=")
    with Trainer(tiny_config(tiny_data, tmp_path / "run", f"model.init_from={source}", setting)) as trainer:
        assert str(getattr(trainer.config.model, key.removeprefix("model."))).lower() == value
        if key != "model.unpad":  # the padded forward is transformers'
            with torch.no_grad():
                torch.testing.assert_close(trainer.model.eval()(**inputs()).prediction_logits,
                                           reference(**inputs()).logits)


def test_a_bert_model_folder_gives_transformers_states_and_names_the_new_heads(tiny_data, tmp_path, capsys):
    source, reference = hf_folder("BertModel", tiny_data, tmp_path / "encoder")
    with Trainer(tiny_config(tiny_data, tmp_path / "run", f"model.init_from={source}")) as trainer:
        with torch.no_grad():
            ours = trainer.model.eval().bert(**inputs())
            theirs = reference(**inputs()).last_hidden_state
        torch.testing.assert_close(getattr(ours, "last_hidden_state", ours), theirs)
    said = capsys.readouterr().err
    # transformers' BertModel has a pooler: only the two heads are new.
    assert (f"{source} has no weights for the MLM head (cls.predictions), the pair head "
            "(cls.seq_relationship); newly initialized") in said


def test_the_shape_comes_from_the_source_and_a_contradicting_key_is_named(tiny_data, tmp_path):
    source, _ = hf_folder("BertForPreTraining", tiny_data, tmp_path / "wide", intermediate_size=128)
    with pytest.raises(UserError, match=r"model.intermediate_size is 256 in the config but .* has 128"):
        Trainer(tiny_config(tiny_data, tmp_path / "run", f"model.init_from={source}"))
    # A config without shape keys takes the source's; dropout may still be set.
    config_file = tmp_path / "no-shape.yaml"
    config_file.write_text(json.dumps({"model": {"hidden_dropout_prob": 0.0, "init_from": str(source)},
                                       "data": {"max_seq_length": 64, "max_predictions_per_seq": 10},
                                       "train": {"batch_size": 16, "micro_batch_size": 16,
                                                 "precision": "fp32"}}))
    config = load_config(config_file, [f"data.path={tiny_data}", f"train.out={tmp_path / 'run2'}"])
    with Trainer(config) as trainer:
        assert trainer.config.model.intermediate_size == 128
        assert trainer.config.model.hidden_dropout_prob == 0.0
        assert trainer.config.model.max_position_embeddings == 64


def test_a_hub_name_or_another_vocabulary_is_refused_in_one_line(tiny_data, tmp_path):
    with pytest.raises(UserError, match="not a local folder; bertpre never downloads"):
        Trainer(tiny_config(tiny_data, tmp_path / "run", "model.init_from=bert-base-uncased"))
    source, _ = hf_folder("BertForPreTraining", tiny_data, tmp_path / "source")
    other = build_tiny_data(tmp_path / "other", documents=40, seed=5)  # its own, other vocabulary
    with pytest.raises(UserError, match=rf"bertpre tokenize CORPUS --tokenizer {source} --out NEW_DATA` \(with "
                                        r"--add-vocab N to learn new pieces\) and train on it$"):
        Trainer(tiny_config(other, tmp_path / "run", f"model.init_from={source}"))
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source / name, bare / name)
    with pytest.raises(UserError, match="has no vocab.txt or tokenizer.json"):
        Trainer(tiny_config(tiny_data, tmp_path / "run", f"model.init_from={bare}"))


def test_a_damaged_source_is_refused_before_it_is_announced(tiny_data, tmp_path, capsys):
    """The report: "note: starting from the weights of …" came first, then the refusal."""
    source, _ = hf_folder("BertForPreTraining", tiny_data, tmp_path / "source")
    weights = source / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # cut short
    capsys.readouterr()
    with pytest.raises(UserError, match="model.safetensors"):
        Trainer(tiny_config(tiny_data, tmp_path / "run", f"model.init_from={source}"))
    assert "starting from the weights" not in capsys.readouterr().err


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_in_the_source_are_refused_naming_the_tensor(tiny_data, tmp_path, capsys, value):
    from safetensors.torch import load_file, save_file

    source, _ = hf_folder("BertForPreTraining", tiny_data, tmp_path / "source")
    weights = load_file(source / "model.safetensors")
    name = "bert.encoder.layer.1.attention.self.query.weight"
    weights[name][3, 5] = value
    save_file(weights, source / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()
    with pytest.raises(UserError) as refused:
        Trainer(tiny_config(tiny_data, tmp_path / "run", f"model.init_from={source}"))
    assert str(refused.value) == (
        f"model.init_from {source}: tensor {name} holds values that are not finite (NaN or inf); the "
        "weights are damaged: use another copy of them")
    assert "starting from the weights" not in capsys.readouterr().err


def final_loss(run_dir: Path, last: int = 5) -> float:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [row["train/loss"] for row in rows if "train/loss" in row]
    return sum(losses[-last:]) / last


def test_a_run_from_another_runs_export_learns_faster_than_from_scratch(tiny_data, tmp_path):
    first = pretrain(tiny_config(tiny_data, tmp_path / "first", "train.max_steps=150",
                                 "train.save_every=150"))
    export(first.run_dir, tmp_path / "export")
    steps = ["train.max_steps=30", "train.seed=3"]
    scratch = pretrain(tiny_config(tiny_data, tmp_path / "scratch", *steps))
    warm = pretrain(tiny_config(tiny_data, tmp_path / "warm", *steps,
                                f"model.init_from={tmp_path / 'export'}"))
    assert warm.step == 30  # a fresh optimizer and schedule: the step count starts at 0
    assert final_loss(warm.run_dir) < final_loss(scratch.run_dir) - 0.3
    # A RUN folder gives the same weights as its export.
    with Trainer(tiny_config(tiny_data, tmp_path / "from-run", f"model.init_from={first.run_dir}")) as a, \
            Trainer(tiny_config(tiny_data, tmp_path / "from-export",
                                f"model.init_from={tmp_path / 'export'}")) as b:
        for (name, x), (_, y) in zip(a.model.state_dict().items(), b.model.state_dict().items(), strict=True):
            assert torch.equal(x, y), name


def test_a_resumed_init_from_run_reads_its_checkpoint_not_the_source(tiny_data, tmp_path):
    source, _ = hf_folder("BertForPreTraining", tiny_data, tmp_path / "source")
    steps = ["train.save_every=3", f"model.init_from={source}"]
    straight = pretrain(tiny_config(tiny_data, tmp_path / "straight", "train.max_steps=6", *steps))
    pretrain(tiny_config(tiny_data, tmp_path / "resumed", "train.max_steps=3", *steps))
    shutil.rmtree(source)  # the source may be gone: the checkpoint holds the weights and shape
    resumed = pretrain(tiny_config(tiny_data, tmp_path / "resumed", "train.max_steps=6", *steps))
    assert resumed.step == 6
    a = (straight.run_dir / "checkpoints" / "step-00000006" / "model.safetensors").read_bytes()
    b = (resumed.run_dir / "checkpoints" / "step-00000006" / "model.safetensors").read_bytes()
    assert a == b


DOMAIN_WORDS = ["immunohistochemistry", "cardiomyopathy", "thrombocytopenia"]


def test_a_grown_vocabulary_starts_from_the_mean_of_its_pieces_and_exports_to_transformers(tiny_data, tmp_path,
                                                                                            capsys):
    import transformers

    from bertpre.data.build import tokenize_corpus
    from bertpre.tokenizer import load_tokenizer, vocab_extension

    source, _ = hf_folder("BertForPreTraining", tiny_data, tmp_path / "source")
    corpus = tmp_path / "domain.txt"
    corpus.write_text("\n\n".join(f"the cat sees {DOMAIN_WORDS[i % 3]} today {i} .\na dog finds "
                                  f"{DOMAIN_WORDS[(i + 1) % 3]} again ." for i in range(40)) + "\n")
    data = tmp_path / "domain"
    tokenize_corpus([corpus], data, tokenizer_path=source, add_vocab=8, min_frequency=2,
                    validation_share=0.1, split_sentences=False, show_progress=False)
    pieces = vocab_extension(load_tokenizer(source), load_tokenizer(data / "tokenizer"))
    assert pieces and len(pieces) <= 8

    steps = ["train.max_steps=2", "train.save_every=2", "train.batch_size=8", "train.micro_batch_size=8"]
    with Trainer(tiny_config(data, tmp_path / "probe", f"model.init_from={source}", *steps)) as trainer:
        grown = trainer.model.bert.embeddings.word_embeddings.weight.detach().clone()
    assert f"the vocabulary grows from 120 to {120 + len(pieces)} tokens" in capsys.readouterr().err
    reference = transformers.BertForPreTraining.from_pretrained(source).eval()
    old_rows = reference.bert.embeddings.word_embeddings.weight.detach()
    torch.testing.assert_close(grown[:120], old_rows, rtol=0, atol=0)
    for row, ids in enumerate(pieces, start=120):
        torch.testing.assert_close(grown[row], old_rows[ids].mean(dim=0))

    run = pretrain(tiny_config(data, tmp_path / "run", f"model.init_from={source}", *steps))
    export(run.run_dir, tmp_path / "export")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "export")
    assert len(tokenizer) == 120 + len(pieces)
    encoded = tokenizer("the cat sees immunohistochemistry today", return_tensors="pt")
    assert tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])[4] == "immunohistochemistry"
    exported = transformers.BertForPreTraining.from_pretrained(tmp_path / "export").eval()
    from bertpre.model import BertForPreTraining

    ours = BertForPreTraining.from_pretrained(tmp_path / "export").eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(**encoded).prediction_logits, exported(**encoded).prediction_logits)
