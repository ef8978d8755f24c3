"""bertpre.model.vocab_growth: each new vocab row is the mean of its old pieces' rows, old rows unchanged."""
from __future__ import annotations

import pytest
import torch

from bertpre.errors import UserError
from bertpre.model import BertConfig, BertForPreTraining, grow_vocab_rows
from bertpre.model.hf_format import normalize_keys

TINY = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)
EMBEDDINGS, BIAS = "bert.embeddings.word_embeddings.weight", "cls.predictions.bias"
PIECES = [[5, 6, 7], [9], [1], [7, 7, 8]]


def released_model(**changes) -> BertForPreTraining:
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**{**TINY, **changes}))
    with torch.no_grad():
        model.cls.predictions.bias.normal_()  # zeros at init would hide a wrong bias mean
    return model


def test_new_rows_are_the_means_of_their_pieces_and_old_rows_stay():
    old = released_model().state_dict()
    grown = grow_vocab_rows(old, PIECES)
    assert grown[EMBEDDINGS].shape == (97 + 4, 32)
    assert torch.equal(grown[EMBEDDINGS][:97], old[EMBEDDINGS])
    assert torch.equal(grown[BIAS][:97], old[BIAS])
    for row, ids in enumerate(PIECES, start=97):
        torch.testing.assert_close(grown[EMBEDDINGS][row], old[EMBEDDINGS][ids].mean(dim=0), rtol=0, atol=0)
        torch.testing.assert_close(grown[BIAS][row], old[BIAS][ids].mean(), rtol=0, atol=0)
    assert torch.equal(grown[EMBEDDINGS][99], old[EMBEDDINGS][1])  # one piece: its row exactly
    others = [key for key in old if key not in (EMBEDDINGS, BIAS) and not key.startswith("cls.predictions.decoder")]
    assert all(grown[key] is old[key] for key in others)
    assert old[EMBEDDINGS].shape == (97, 32)  # the input is left as it was


def test_the_tied_decoder_follows_and_a_grown_model_loads_the_rows():
    old = released_model().state_dict()
    grown = grow_vocab_rows(old, PIECES)
    assert grown["cls.predictions.decoder.weight"] is grown[EMBEDDINGS]
    assert grown["cls.predictions.decoder.bias"] is grown[BIAS]
    model = BertForPreTraining(BertConfig(**{**TINY, "vocab_size": 101}))
    model.load_state_dict(grown)
    assert torch.equal(model.cls.predictions.decoder.weight, grown[EMBEDDINGS])
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


def test_hugging_face_keys_without_a_decoder_and_albert_width():
    old = normalize_keys(released_model(embedding_size=16).state_dict())
    assert "cls.predictions.decoder.weight" not in old
    grown = grow_vocab_rows(old, PIECES)
    assert set(grown) == set(old)
    assert grown[EMBEDDINGS].shape == (101, 16)
    assert torch.equal(grown[EMBEDDINGS][97], old[EMBEDDINGS][[5, 6, 7]].mean(dim=0))


def test_dtype_is_kept_and_the_mean_taken_in_float32():
    old = {key: tensor.to(torch.bfloat16) for key, tensor in released_model().state_dict().items()}
    grown = grow_vocab_rows(old, PIECES)
    assert grown[EMBEDDINGS].dtype == grown[BIAS].dtype == torch.bfloat16
    expected = old[EMBEDDINGS][[7, 7, 8]].float().mean(dim=0).to(torch.bfloat16)
    assert torch.equal(grown[EMBEDDINGS][100], expected)


def test_no_pieces_grow_nothing():
    old = released_model().state_dict()
    assert torch.equal(grow_vocab_rows(old, [])[EMBEDDINGS], old[EMBEDDINGS])


@pytest.mark.parametrize("pieces, says", [([[5], []], "new token 98 has pieces"), ([[97]], "below the model's"),
                                          ([[-1]], "below the model's")])
def test_bad_pieces_are_refused(pieces, says):
    with pytest.raises(UserError, match=says):
        grow_vocab_rows(released_model().state_dict(), pieces)


def test_weights_without_word_embeddings_are_refused():
    with pytest.raises(UserError, match="no bert.embeddings.word_embeddings.weight"):
        grow_vocab_rows({BIAS: torch.zeros(3)}, [[0]])
