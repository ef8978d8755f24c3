"""A released RoBERTa or XLM-R as a user has it (its own byte-level BPE or Unigram tokenizer beside
the weights), continued the whole way: `bertpre tokenize --tokenizer SOURCE`, pretrain from
`model.init_from`, export; transformers' AutoTokenizer and AutoModelForMaskedLM read the export
and give bertpre's logits, and `pipeline("fill-mask")` fills `<mask>`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _released_tokenizers import roberta_like, sample_lines, xlmr_like
from _tokenize_helpers import run

from bertpre.config import load_config
from bertpre.model.families import load_pretraining_model
from bertpre.tokenizer import load_tokenizer
from bertpre.tools.export import export
from bertpre.tools.inference import fill_mask
from bertpre.train.trainer import pretrain

transformers = pytest.importorskip("transformers")

KINDS = {"roberta": (roberta_like, "RobertaForMaskedLM", "RobertaConfig"),
         "xlm-roberta": (xlmr_like, "XLMRobertaForMaskedLM", "XLMRobertaConfig")}


def released(model_type: str, folder: Path) -> Path:
    """A tiny model of `model_type` with its own tokenizer, saved as the hub has them (pad 1, 514
    positions' worth: here 66 for 64 tokens)."""
    make_tokenizer, model_class, config_class = KINDS[model_type]
    make_tokenizer(folder)
    vocab_size = load_tokenizer(folder).get_vocab_size()
    torch.manual_seed(3)
    config = getattr(transformers, config_class)(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    getattr(transformers, model_class)(config).save_pretrained(folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta"])
def test_a_released_model_with_its_own_tokenizer_continues_and_exports(model_type, tmp_path):
    source = released(model_type, tmp_path / "source")
    lines = sample_lines(fuzzed=0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(lines[start:start + 6]) for start in range(0, len(lines), 6)) + "\n",
                      encoding="utf-8")
    run(corpus, tmp_path / "data", tokenizer_path=source, split_sentences=False, validation_share=0.1)
    config_file = tmp_path / "continue.yaml"
    config_file.write_text(json.dumps({
        "model": {"init_from": str(source)},
        "data": {"path": str(tmp_path / "data"), "max_seq_length": 64, "max_predictions_per_seq": 10,
                 "num_workers": 0},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "train": {"batch_size": 8, "micro_batch_size": 8, "precision": "fp32", "max_steps": 5, "save_every": 5,
                  "eval_every": 1000, "log_every": 1, "out": str(tmp_path / "run")}}))
    config = load_config(config_file)
    run_result = pretrain(config)
    resolved = run_result.run_dir / "config.yaml"
    assert f"architecture: {model_type}" in resolved.read_text() and "pair_task: none" in resolved.read_text()
    export(run_result.run_dir, tmp_path / "export")

    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "export")
    model, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "export", output_loading_info=True)
    assert type(model).__name__ == KINDS[model_type][1]
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ours = load_pretraining_model(run_result.run_dir / "checkpoints" / "step-00000005", strict=True).eval()
    batch = tokenizer(["The quick brown fox jumps over the lazy dog.", "北京大学"], padding=True, return_tensors="pt")
    assert batch["input_ids"][1, -1] == 1  # padded with <pad>, whose id RoBERTa's positions start after
    with torch.no_grad():
        theirs = model.eval()(**batch).logits
        mine = ours(batch["input_ids"], batch["attention_mask"]).prediction_logits
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(mine[real], theirs[real], rtol=0, atol=1e-4)

    # fill-mask: transformers' pipeline on the export, bertpre's on the run, the same best token
    filled = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer)("The quick brown <mask> jumps.")
    ours_filled = fill_mask(ours, load_tokenizer(run_result.run_dir / "tokenizer"), "The quick brown [MASK] jumps.")
    assert filled[0]["token"] == load_tokenizer(tmp_path / "export").token_to_id(ours_filled[0][0].token)
    assert filled[0]["score"] == pytest.approx(ours_filled[0][0].probability, abs=1e-4)
