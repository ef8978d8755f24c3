"""fill-mask: loading a model with its tokenizer, and top-k predictions that match a plain forward."""
from __future__ import annotations

import pytest
import torch

from bertpre.errors import UserError
from bertpre.model.bert import BertConfig, BertForPreTraining
from bertpre.tokenizer.wordpiece import save_tokenizer, train_tokenizer
from bertpre.tools.inference import SPECIAL_TOKENS, fill_in, fill_mask, load_model_and_tokenizer

SENTENCES = [
    "the cat sat on the mat.", "the dog sat on the log.", "a cat and a dog met on a mat.",
    "the sun is hot and the moon is cold.", "dogs and cats like the sun.",
] * 4


@pytest.fixture(scope="module")
def export_folder(tmp_path_factory):
    """A tiny model and its tokenizer in one folder, as `bertpre export` writes it."""
    tokenizer = train_tokenizer([SENTENCES], vocab_size=60, min_frequency=1)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=32))
    folder = tmp_path_factory.mktemp("export")
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    return folder


def test_predictions_are_the_top_non_special_tokens_of_a_plain_forward(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    text = "the [MASK] sat on the [MASK]."
    predictions = fill_mask(model, tokenizer, text, top_k=3)

    ids = torch.tensor([tokenizer.encode(text).ids])
    with torch.no_grad():
        logits = model(ids).prediction_logits[0]  # (T, V)
    probabilities = logits.softmax(-1)
    special = [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS]
    probabilities[:, special] = 0.0
    positions = (ids[0] == tokenizer.token_to_id("[MASK]")).nonzero().flatten()
    assert len(predictions) == 2
    for row, candidates in zip(probabilities[positions], predictions, strict=True):
        expected = row.topk(3)
        assert [c.token for c in candidates] == [tokenizer.id_to_token(int(i)) for i in expected.indices]
        torch.testing.assert_close(torch.tensor([c.probability for c in candidates]), expected.values)
        assert not {c.token for c in candidates} & set(SPECIAL_TOKENS)


def test_fill_in_puts_the_best_token_in_place_of_each_mask(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    text = "the cat sat on the [MASK]."
    predictions = fill_mask(model, tokenizer, text, top_k=2)
    ids = tokenizer.encode(text).ids
    mask = ids.index(tokenizer.token_to_id("[MASK]"))
    ids[mask] = tokenizer.token_to_id(predictions[0][0].token)
    filled = fill_in(tokenizer, text, predictions)
    assert filled == tokenizer.decode(ids)
    assert "[MASK]" not in filled


def test_text_without_mask_is_refused(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    with pytest.raises(UserError, match=r"no \[MASK\]"):
        fill_mask(model, tokenizer, "the cat sat on the mat.")


def test_text_longer_than_the_model_is_refused(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    with pytest.raises(UserError, match="at most 32"):
        fill_mask(model, tokenizer, "the cat " * 40 + "[MASK]")


def test_a_folder_without_model_is_refused(tmp_path):
    with pytest.raises(UserError):
        load_model_and_tokenizer(tmp_path)
