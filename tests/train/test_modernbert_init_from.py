"""`model.init_from` a transformers ModernBERT folder: the architecture from its model_type, the masked
LM alone, transformers' logits at the start; after a few of bertpre's steps the export is read by
AutoModelForMaskedLM with bertpre's logits. With a byte-level BPE tokenizer beside the weights (as
a released ModernBERT has its own), AutoTokenizer and pipeline("fill-mask") read the export."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from _released_tokenizers import roberta_like, sample_lines
from _tokenize_helpers import run

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model.families import load_pretraining_model
from bertpre.tokenizer import load_tokenizer
from bertpre.tools.export import export
from bertpre.tools.inference import fill_mask
from bertpre.train.trainer import Trainer, pretrain

transformers = pytest.importorskip("transformers")

# 3 layers: 0 global, 1 and 2 reading 4 tokens each way; rows of 32 tokens go past the window.
SHAPE = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
             max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=3)


def modernbert_folder(folder: Path, vocab_size: int, pad_token_id: int, kind: str = "ModernBertForMaskedLM",
                      tokenizer: Path | None = None) -> tuple[Path, torch.nn.Module]:
    """A transformers model of `kind`, off its init values, saved (with `tokenizer`'s files)."""
    torch.manual_seed(7)
    config = transformers.ModernBertConfig(vocab_size=vocab_size, pad_token_id=pad_token_id, bos_token_id=None,
                                           eos_token_id=None, cls_token_id=None, sep_token_id=None, **SHAPE)
    model = getattr(transformers, kind)(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(folder)
    for file in (tokenizer.iterdir() if tokenizer is not None else ()):
        if file.is_file() and not (folder / file.name).exists():
            shutil.copy(file, folder / file.name)
    return folder, model


def config_file(tmp_path: Path, source: Path, **data) -> Path:
    """A user's config for continuing `source`: no shape keys, no pair task (unless `data` gives one)."""
    path = tmp_path / "continue.yaml"
    path.write_text(json.dumps({
        "model": {"init_from": str(source)},
        "data": {"max_seq_length": 32, "max_predictions_per_seq": 5, "num_workers": 0, **data},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "train": {"batch_size": 8, "micro_batch_size": 8, "precision": "fp32", "max_steps": 4, "save_every": 4,
                  "eval_every": 1000, "log_every": 1}}))
    return path


def padded_inputs(vocab_size: int, pad: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, vocab_size, (3, 20), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 12:], attention_mask[1, 12:] = pad, 0
    input_ids[2, 4:], attention_mask[2, 4:] = pad, 0
    return dict(input_ids=input_ids, attention_mask=attention_mask)


def mlm_logits(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits at the real tokens, of bertpre's model or transformers'."""
    with torch.no_grad():
        out = model.eval()(**inputs)
    logits = getattr(out, "prediction_logits", None)
    return (out.logits if logits is None else logits)[inputs["attention_mask"].bool()]


@pytest.mark.slow
def test_a_modernbert_folder_continues_and_exports_natively_with_bertpres_logits(tiny_data, tmp_path, capsys):
    vocab_size = load_tokenizer(tiny_data / "tokenizer").get_vocab_size()
    source, reference = modernbert_folder(tmp_path / "source", vocab_size, 0, tokenizer=tiny_data / "tokenizer")
    config = load_config(config_file(tmp_path, source), [f"data.path={tiny_data}", f"train.out={tmp_path / 'run'}"])
    inputs = padded_inputs(vocab_size, 0)
    with Trainer(config) as trainer:
        model = trainer.config.model
        assert model.architecture == "modernbert"  # from config.json's model_type
        assert trainer.config.data.pair_task == "none"  # no pair head: the default pair task is dropped
        assert (model.local_attention, model.global_attn_every_n_layers, model.intermediate_size) == (8, 3, 48)
        torch.testing.assert_close(mlm_logits(trainer.model, inputs), mlm_logits(reference, inputs),
                                   rtol=0, atol=1e-5)
    assert f"starting from the weights of {source}" in capsys.readouterr().err

    run_result = pretrain(config)
    assert run_result.step == 4
    export(run_result.run_dir, tmp_path / "export")
    exported, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "export", output_loading_info=True)
    assert type(exported).__name__ == "ModernBertForMaskedLM"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    trained = load_pretraining_model(run_result.run_dir / "checkpoints" / "step-00000004", strict=True)
    ours = mlm_logits(trained, inputs)
    torch.testing.assert_close(ours, mlm_logits(exported, inputs), rtol=0, atol=1e-4)
    assert (ours - mlm_logits(reference, inputs)).abs().max() > 1e-2  # the steps moved the weights


def test_a_modernbertmodel_folder_starts_with_a_fresh_head_and_a_pair_task_is_refused(tiny_data, tmp_path, capsys):
    vocab_size = load_tokenizer(tiny_data / "tokenizer").get_vocab_size()
    source, reference = modernbert_folder(tmp_path / "source", vocab_size, 0, kind="ModernBertModel",
                                          tokenizer=tiny_data / "tokenizer")
    config = load_config(config_file(tmp_path, source), [f"data.path={tiny_data}", f"train.out={tmp_path / 'run'}"])
    with Trainer(config) as trainer:
        encoder = trainer.model.model
        assert torch.equal(encoder.layers[1].attn.Wqkv.weight, reference.layers[1].attn.Wqkv.weight)
    assert "has no weights for the MLM head (head), the decoder's bias (decoder.bias); newly initialized" \
        in capsys.readouterr().err
    # refused as the config is read: the architecture is the source's (issue 51), not BERT's default
    with pytest.raises(UserError, match=rf"data.pair_task nsp trains a sentence-pair head, which {source}'s model "
                                        r"\(ModernBERT\) does not have.*set data.pair_task: none"):
        load_config(config_file(tmp_path, source, pair_task="nsp"),
                    [f"data.path={tiny_data}", f"train.out={tmp_path / 'run2'}"])


def test_the_architecture_is_the_sources_when_the_config_does_not_write_it(tiny_data, tmp_path):
    """The report: ModernBERT's own keys beside `init_from` were refused as not BERT's until
    `model.architecture: modernbert` was written."""
    vocab_size = load_tokenizer(tiny_data / "tokenizer").get_vocab_size()
    source, _ = modernbert_folder(tmp_path / "source", vocab_size, 0, tokenizer=tiny_data / "tokenizer")
    path = config_file(tmp_path, source)
    values = json.loads(path.read_text())
    values["model"] |= {"embedding_dropout": 0.0, "mlp_dropout": 0.05}
    path.write_text(json.dumps(values))
    config = load_config(path, [f"data.path={tiny_data}", f"train.out={tmp_path / 'run'}"])
    assert (config.model.architecture, config.model.mlp_dropout, config.data.pair_task) == ("modernbert", 0.05, "none")
    with Trainer(config) as trainer:
        assert trainer.config.model.mlp_dropout == 0.05 and trainer.config.model.local_attention == 8
    values["model"] = {"init_from": str(source), "hidden_dropout_prob": 0.0}  # BERT's key, ModernBERT's named
    path.write_text(json.dumps(values))
    with pytest.raises(UserError, match="model.hidden_dropout_prob is BERT's, which model.architecture modernbert "
                                        "does not read; remove it"):
        load_config(path, [f"data.path={tiny_data}", f"train.out={tmp_path / 'run'}"])


@pytest.mark.slow
def test_a_modernbert_with_a_bpe_tokenizer_exports_for_autotokenizer_and_the_fill_mask_pipeline(tmp_path):
    tokenizer_folder = roberta_like(tmp_path / "tokenizer")
    vocab_size = load_tokenizer(tokenizer_folder).get_vocab_size()
    source, _ = modernbert_folder(tmp_path / "source", vocab_size, 1, tokenizer=tokenizer_folder)  # <pad> is 1
    lines = sample_lines(fuzzed=0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(lines[start:start + 6]) for start in range(0, len(lines), 6)) + "\n",
                      encoding="utf-8")
    run(corpus, tmp_path / "data", tokenizer_path=source, split_sentences=False, validation_share=0.1)
    config = load_config(config_file(tmp_path, source), [f"data.path={tmp_path / 'data'}",
                                                          f"train.out={tmp_path / 'run'}"])
    run_result = pretrain(config)
    export(run_result.run_dir, tmp_path / "export")
    written = json.loads((tmp_path / "export" / "config.json").read_text())
    assert (written["model_type"], written["pad_token_id"], written["cls_token_id"], written["sep_token_id"]) == \
        ("modernbert", 1, 0, 2)

    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "export")
    model = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "export").eval()
    ours = load_pretraining_model(run_result.run_dir / "checkpoints" / "step-00000004", strict=True).eval()
    text = "The quick brown fox jumps over the lazy dog, and then it runs far away into the woods."
    batch = tokenizer([text, "北京大学"], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] > 9 and batch["input_ids"][1, -1] == 1  # past the window; <pad> padding
    with torch.no_grad():
        theirs = model(**batch).logits
        mine = ours(batch["input_ids"], batch["attention_mask"]).prediction_logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(mine[real], theirs[real], rtol=0, atol=1e-4)

    filled = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer)("The quick brown <mask> jumps.")
    ours_filled = fill_mask(ours, load_tokenizer(run_result.run_dir / "tokenizer"), "The quick brown [MASK] jumps.")
    assert filled[0]["token"] == load_tokenizer(tmp_path / "export").token_to_id(ours_filled[0][0].token)
    assert filled[0]["score"] == pytest.approx(ours_filled[0][0].probability, abs=1e-4)
