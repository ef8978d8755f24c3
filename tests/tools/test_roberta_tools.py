"""`bertpre evaluate` and `bertpre fill-mask` on a RoBERTa folder: no pair head to score (whatever the
default config's pair task), the masked LM's loss as transformers computes it, its top token."""
from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch

from bertpre.tokenizer import load_tokenizer
from bertpre.tools.inference import evaluate_saved_model, fill_mask, load_model_and_tokenizer

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def roberta_source(tiny_data, tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    """A transformers RobertaForMaskedLM of the tiny vocabulary (its [PAD] the padding), saved with
    the tiny DATA's tokenizer."""
    folder = tmp_path_factory.mktemp("roberta-tools")
    torch.manual_seed(5)
    model = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=66, type_vocab_size=1, pad_token_id=0))
    model.save_pretrained(folder)
    for file in (tiny_data / "tokenizer").iterdir():
        shutil.copy(file, folder / file.name)
    return folder, model.eval()


def test_evaluate_scores_the_masked_lm_alone(roberta_source, tiny_data):
    folder, _ = roberta_source
    metrics = evaluate_saved_model(folder, tiny_data, micro_batch_size=8)  # the defaults ask for nsp
    assert math.isfinite(metrics["mlm_loss"]) and metrics["predictions"] > 0
    assert "pair_acc" not in metrics  # no pair head: nothing scored, nothing asked of the model, nothing reported
    # A random model of 120 tokens: its loss is near log(120), as transformers' own would be.
    assert abs(metrics["mlm_loss"] - math.log(120)) < 0.5


def test_fill_mask_gives_transformers_top_token(roberta_source):
    folder, reference = roberta_source
    model, tokenizer = load_model_and_tokenizer(folder)
    text = "the cat [MASK] the river ."
    predictions = fill_mask(model, tokenizer, text, top_k=3)
    ids = load_tokenizer(folder).encode(text).ids
    position = ids.index(tokenizer.token_to_id("[MASK]"))
    with torch.no_grad():
        logits = reference(input_ids=torch.tensor([ids])).logits[0, position]
    probabilities = logits.softmax(dim=-1)
    probabilities[:5] = 0  # fill-mask never proposes [PAD] [UNK] [CLS] [SEP] [MASK]
    top = predictions[0][0]
    assert tokenizer.token_to_id(top.token) == int(probabilities.argmax())
    assert top.probability == pytest.approx(float(probabilities.max()), abs=1e-5)
    assert top.text == tokenizer.decode([tokenizer.token_to_id(top.token)])  # what the CLI prints
