"""bertpre.model.bert: Hugging Face names and parity, sparse MLM head, checkpointing, init, ALBERT options."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from bertpre.errors import UserError
from bertpre.model.bert import BertConfig, BertForPreTraining, PreTrainingOutput

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)


def tiny_config(**changes) -> BertConfig:
    return BertConfig(**{**TINY, **changes})


def hf_model(config: BertConfig, seed: int = 0) -> transformers.BertForPreTraining:
    """A transformers model of the same shape, with every parameter (biases, LayerNorms too) random."""
    torch.manual_seed(seed)
    hf_config = transformers.BertConfig(**{k: v for k, v in config.to_hf_dict().items()
                                           if k not in ("architectures", "model_type")})
    model = transformers.BertForPreTraining(hf_config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def batch(vocab_size: int = 97, seed: int = 1) -> dict[str, torch.Tensor]:
    """3 sequences of length 12 with padding in two of them, 30% of real tokens labelled."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (3, 12), generator=generator)
    attention_mask = torch.ones(3, 12, dtype=torch.long)
    attention_mask[1, 8:] = 0
    attention_mask[2, 5:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros(3, 12, dtype=torch.long)
    token_type_ids[:, 6:] = 1
    token_type_ids[attention_mask == 0] = 0
    predicted = (torch.rand(3, 12, generator=generator) < 0.3) & (attention_mask == 1)
    predicted[0, 1] = True
    labels = torch.where(predicted, torch.randint(5, vocab_size, (3, 12), generator=generator), -100)
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                labels=labels, next_sentence_label=torch.tensor([0, 1, 1]))


def test_parameter_names_are_those_of_transformers() -> None:
    ours = set(BertForPreTraining(tiny_config()).state_dict())
    theirs = {k for k in hf_model(tiny_config()).state_dict() if not k.endswith(("position_ids", "token_type_ids"))}
    assert ours == theirs
    assert "cls.predictions.decoder.weight" in ours and "bert.pooler.dense.weight" in ours


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "relu", "silu"])
def test_outputs_and_loss_equal_transformers(hidden_act: str) -> None:
    config = tiny_config(hidden_act=hidden_act)
    theirs = hf_model(config)
    ours = BertForPreTraining(config).eval()
    missing, unexpected = ours.load_state_dict(theirs.state_dict(), strict=False)
    assert missing == [] and set(unexpected) <= {"bert.embeddings.position_ids", "bert.embeddings.token_type_ids"}
    inputs = batch()
    with torch.no_grad():
        reference = theirs(**inputs)
        dense = ours(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
        sparse = ours(**inputs)
    predicted = inputs["labels"] != -100
    torch.testing.assert_close(dense.prediction_logits, reference.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sparse.prediction_logits, reference.prediction_logits[predicted], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sparse.seq_relationship_logits, reference.seq_relationship_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(sparse.loss, reference.loss, atol=1e-5, rtol=1e-5)
    assert sparse.prediction_logits.shape == (int(predicted.sum()), 97)


def test_sparse_and_dense_heads_give_the_same_loss() -> None:
    model = BertForPreTraining(tiny_config()).eval()
    inputs = batch()
    with torch.no_grad():
        sparse = model(**inputs)
        dense = model(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
    dense_loss = F.cross_entropy(dense.prediction_logits.view(-1, 97), inputs["labels"].view(-1))
    pair_loss = F.cross_entropy(dense.seq_relationship_logits, inputs["next_sentence_label"])
    torch.testing.assert_close(sparse.mlm_loss, dense_loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(sparse.pair_loss, pair_loss, atol=1e-6, rtol=0)
    torch.testing.assert_close(sparse.loss, dense_loss + pair_loss, atol=1e-6, rtol=0)


def test_label_smoothing_and_missing_labels() -> None:
    model = BertForPreTraining(tiny_config()).eval()
    inputs = batch()
    with torch.no_grad():
        out = model(**inputs, label_smoothing=0.1)
        dense = model(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"]).prediction_logits
        mlm_only = model(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"], labels=inputs["labels"])
        nothing = model(inputs["input_ids"], labels=torch.full((3, 12), -100))
    expected = F.cross_entropy(dense.view(-1, 97), inputs["labels"].view(-1), label_smoothing=0.1)
    torch.testing.assert_close(out.mlm_loss, expected, atol=1e-6, rtol=0)
    assert isinstance(out, PreTrainingOutput)
    assert mlm_only.pair_loss is None and torch.equal(mlm_only.loss, mlm_only.mlm_loss)
    assert nothing.loss.item() == 0.0 and nothing.prediction_logits.shape == (0, 97)
    assert dense.shape == (3, 12, 97)


def fixed_size_layout(labels: torch.Tensor, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Google's (B, P) masked_lm_positions / masked_lm_ids, written out with a loop."""
    positions = torch.zeros(labels.shape[0], slots, dtype=torch.long)
    ids = torch.full((labels.shape[0], slots), -100)
    for row in range(labels.shape[0]):
        where = torch.nonzero(labels[row] != -100).flatten()
        positions[row, : len(where)], ids[row, : len(where)] = where, labels[row, where]
    return positions, ids


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_fixed_size_predictions_equal_the_labels_path(label_smoothing: float) -> None:
    model = BertForPreTraining(tiny_config()).eval()
    inputs = batch()
    positions, ids = fixed_size_layout(inputs["labels"], slots=8)
    with torch.no_grad():
        sparse = model(**inputs, label_smoothing=label_smoothing)
        fixed = model(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"],
                      next_sentence_label=inputs["next_sentence_label"], label_smoothing=label_smoothing,
                      masked_lm_positions=positions, masked_lm_ids=ids)
    assert fixed.prediction_logits.shape == (3, 8, 97)
    torch.testing.assert_close(fixed.prediction_logits[ids != -100], sparse.prediction_logits, atol=1e-6, rtol=0)
    for name in ("loss", "mlm_loss", "pair_loss", "mlm_loss_sum", "pair_loss_sum"):
        torch.testing.assert_close(getattr(fixed, name), getattr(sparse, name), atol=1e-5, rtol=1e-6)
    predictions = int((inputs["labels"] != -100).sum())
    torch.testing.assert_close(fixed.mlm_loss_sum / predictions, fixed.mlm_loss, atol=1e-6, rtol=0)
    # Pair labels of -100 count for nothing: the mean is over the labelled rows only.
    pair_labels = torch.tensor([1, -100, 0])
    with torch.no_grad():
        partial = model(inputs["input_ids"], inputs["attention_mask"], next_sentence_label=pair_labels)
    expected = F.cross_entropy(partial.seq_relationship_logits[[0, 2]], pair_labels[[0, 2]])
    torch.testing.assert_close(partial.pair_loss, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("changes", [{}, {"embedding_size": 16, "share_layers": True}])
def test_gradient_checkpointing_gives_the_same_gradients(changes: dict) -> None:
    config = tiny_config(**changes)
    inputs = batch()
    gradients = []
    for enabled in (False, True):
        torch.manual_seed(0)
        model = BertForPreTraining(config).train()  # dropout on: checkpointing must replay its RNG
        model.set_gradient_checkpointing(enabled)
        torch.manual_seed(7)
        model(**inputs).loss.backward()
        gradients.append({name: p.grad.clone() for name, p in model.named_parameters()})
    assert gradients[0].keys() == gradients[1].keys()
    for name, gradient in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], gradient, atol=1e-6, rtol=0, msg=name)


def test_bert_initialization() -> None:
    torch.manual_seed(0)
    config = tiny_config(vocab_size=3000, hidden_size=64, intermediate_size=256, initializer_range=0.05)
    model = BertForPreTraining(config)
    for name, parameter in model.named_parameters():
        if "LayerNorm.weight" in name:
            assert torch.equal(parameter, torch.ones_like(parameter)), name
        elif name.endswith("bias"):
            assert torch.equal(parameter, torch.zeros_like(parameter)), name
    embeddings = model.bert.embeddings.word_embeddings.weight
    assert torch.equal(embeddings[0], torch.zeros(64))
    # sample std of n normal draws: relative standard error ~ 1/sqrt(2n); allow 5 sigma
    n = embeddings[1:].numel()
    assert abs(embeddings[1:].std().item() / 0.05 - 1) < 5 / (2 * n) ** 0.5
    assert model.cls.predictions.decoder.weight is embeddings
    assert model.cls.predictions.decoder.bias is model.cls.predictions.bias


def test_albert_options_share_and_factorize() -> None:
    config = tiny_config(embedding_size=16, share_layers=True, num_hidden_layers=3)
    model = BertForPreTraining(config)
    names = set(model.state_dict())
    assert {n.split(".")[3] for n in names if n.startswith("bert.encoder.layer.")} == {"0"}
    assert model.bert.embeddings.word_embeddings.weight.shape == (97, 16)
    assert model.bert.encoder.embedding_hidden_mapping_in.weight.shape == (32, 16)
    assert model.cls.predictions.transform.dense.weight.shape == (16, 32)
    plain = BertForPreTraining(tiny_config(num_hidden_layers=3))
    layer = sum(p.numel() for p in plain.bert.encoder.layer[0].parameters())
    embedding_saving = (97 + 64 + 2) * (32 - 16) + 2 * (32 - 16)  # tables and their LayerNorm
    projections = (16 * 32 + 32) - (32 * 32 + 32 - 16 * 32 - 16) - (32 - 16) * 2  # in; head dense; head LN
    assert model.num_parameters() == plain.num_parameters() - 2 * layer - embedding_saving + projections
    with torch.no_grad():
        out = model.eval()(**batch())
    assert out.prediction_logits.shape[1] == 97 and torch.isfinite(out.loss)


def test_bert_returns_last_hidden_state_and_pooler_output() -> None:
    model = BertForPreTraining(tiny_config()).eval()
    inputs = batch()
    with torch.no_grad():
        encoded = model.bert(inputs["input_ids"], attention_mask=inputs["attention_mask"])
    assert encoded.last_hidden_state.shape == (3, 12, 32)
    assert encoded.pooler_output.shape == (3, 32)


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"vocab_size": "auto"}, "vocab_size"),
        ({"num_attention_heads": 5}, "divisible"),
        ({"hidden_act": "gelu_fast"}, "hidden_act"),
        ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
        ({"embedding_size": 0}, "embedding_size"),
    ],
)
def test_bad_configs_are_user_errors(changes: dict, words: str) -> None:
    with pytest.raises(UserError, match=words):
        BertForPreTraining(tiny_config(**changes))


def test_config_round_trips_through_hf_dict() -> None:
    for config in (tiny_config(), tiny_config(embedding_size=16, share_layers=True)):
        assert BertConfig.from_hf_dict(config.to_hf_dict()) == config
    values = tiny_config().to_hf_dict()
    assert values["architectures"] == ["BertForPreTraining"] and values["model_type"] == "bert"
    assert "embedding_size" not in values
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        transformers.BertConfig(**{k: v for k, v in values.items() if k != "model_type"})
