"""ModernBERT's fine-tuning heads against transformers' ModernBertFor* classes: the same state-dict
names both ways, the same logits on padded rows longer than the local window (the sequence head
pooling at the first token and as the mean over the attention mask), the head drawn as transformers
draws it, and the family row naming the heads."""
from __future__ import annotations

import pytest
import torch

from bertpre.model.config import BertConfig
from bertpre.model.families import FAMILIES
from bertpre.model.modernbert_heads import (
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    mean_pool,
)

transformers = pytest.importorskip("transformers")

# 3 layers: 0 global, 1 and 2 reading 3 tokens each way (local_attention 6); rows of 20 tokens.
SHAPE = dict(architecture="modernbert", vocab_size=90, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
             intermediate_size=40, max_position_embeddings=64, local_attention=6, global_attn_every_n_layers=3,
             pad_token_id=0)
HEADS = {"sequence": ModernBertForSequenceClassification, "token": ModernBertForTokenClassification,
         "qa": ModernBertForQuestionAnswering}


def twins(kind: str, num_labels: int, **changes) -> tuple[torch.nn.Module, torch.nn.Module]:
    """bertpre's head model (weights moved off their init, so that every part counts) and
    transformers' class of the same config.json holding the same weights."""
    config = BertConfig(**{**SHAPE, **changes})
    config.validate()
    torch.manual_seed(5)
    ours = HEADS[kind](config, num_labels)
    with torch.no_grad():
        for parameter in ours.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    hf_config = transformers.ModernBertConfig.from_dict({**config.to_hf_dict(), "num_labels": num_labels})
    hf_config._attn_implementation = "sdpa"
    theirs = getattr(transformers, type(ours).__name__)(hf_config)
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not missing and not unexpected
    return ours.eval(), theirs.eval()


def padded_batch(length: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows: one full, one padded from the middle, one of 3 tokens."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(4, 90, (3, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, length // 2:] = 0
    attention_mask[2, 3:] = 0
    input_ids[attention_mask == 0] = 0
    return input_ids, attention_mask


@pytest.mark.parametrize("kind", list(HEADS))
def test_state_dict_names_are_transformers(kind):
    ours, theirs = twins(kind, 2 if kind == "qa" else 3)
    assert set(ours.state_dict()) == set(theirs.state_dict())
    assert {"head.dense.weight", "head.norm.weight", "classifier.weight", "classifier.bias",
            "model.embeddings.tok_embeddings.weight"} <= set(ours.state_dict())


@pytest.mark.parametrize(("pooling", "num_labels"), [("cls", 3), ("mean", 3), ("mean", 1)])
def test_sequence_logits_equal_transformers_on_padded_rows_past_the_window(pooling, num_labels):
    ours, theirs = twins("sequence", num_labels, classifier_pooling=pooling)
    input_ids, attention_mask = padded_batch()
    with torch.no_grad():
        expected = theirs(input_ids=input_ids, attention_mask=attention_mask).logits
        logits = ours(input_ids, attention_mask)
        unpadded = ours(input_ids[:1])  # no mask: every token is real
    assert logits.shape == (3, num_labels)
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(unpadded, expected[:1], rtol=0, atol=1e-5)


def test_the_two_poolings_differ_and_mean_leaves_the_padding_out():
    cls, _ = twins("sequence", 3, classifier_pooling="cls")
    mean, _ = twins("sequence", 3, classifier_pooling="mean")
    input_ids, attention_mask = padded_batch()
    with torch.no_grad():
        assert not torch.allclose(cls(input_ids, attention_mask), mean(input_ids, attention_mask), atol=1e-3)
        alone = mean(input_ids[2:, :3])  # the 3-token row without its padding
        torch.testing.assert_close(mean(input_ids, attention_mask)[2:], alone, rtol=0, atol=1e-5)
    hidden = torch.arange(12.0).view(1, 4, 3)
    assert mean_pool(hidden, torch.tensor([[1, 1, 0, 0]])).tolist() == [[1.5, 2.5, 3.5]]


@pytest.mark.parametrize("kind", ["token", "qa"])
def test_token_logits_equal_transformers_on_padded_rows_past_the_window(kind):
    ours, theirs = twins(kind, 2 if kind == "qa" else 5)
    input_ids, attention_mask = padded_batch()
    with torch.no_grad():
        out = theirs(input_ids=input_ids, attention_mask=attention_mask)
        expected = (torch.stack([out.start_logits, out.end_logits], dim=-1) if kind == "qa" else out.logits)
        logits = ours(input_ids, attention_mask)
    real = attention_mask.bool()  # the padding's outputs are no one's to read
    torch.testing.assert_close(logits[real], expected[real], rtol=0, atol=1e-5)


def test_gradients_equal_transformers_in_training_mode_without_dropout():
    ours, theirs = twins("sequence", 3, classifier_pooling="mean")
    input_ids, attention_mask = padded_batch()
    labels = torch.tensor([0, 2, 1])
    torch.nn.functional.cross_entropy(ours.train()(input_ids, attention_mask), labels).backward()
    theirs_logits = theirs.train()(input_ids=input_ids, attention_mask=attention_mask).logits
    torch.nn.functional.cross_entropy(theirs_logits, labels).backward()
    theirs_grads = dict(theirs.named_parameters())
    for name, parameter in ours.named_parameters():
        torch.testing.assert_close(parameter.grad, theirs_grads[name].grad, rtol=0, atol=1e-5, msg=name)


def test_the_head_is_drawn_with_transformers_stds_and_cutoff():
    config = BertConfig(**{**SHAPE, "hidden_size": 256, "num_attention_heads": 4, "initializer_range": 0.02})
    torch.manual_seed(0)
    model = ModernBertForSequenceClassification(config, 4)
    out_std, final_std, cutoff = 0.02 / (2 * 3) ** 0.5, 256 ** -0.5, config.initializer_cutoff_factor
    assert cutoff == 2.0
    for weight, std in ((model.head.dense.weight, out_std), (model.classifier.weight, final_std)):
        assert weight.std().item() == pytest.approx(std * 0.880, rel=0.05)  # a 2σ-truncated normal's std
        assert weight.abs().max().item() <= cutoff * std
    assert torch.equal(model.head.norm.weight, torch.ones(256)) and not model.classifier.bias.any()


def test_the_family_row_names_the_heads_and_transformers_classes():
    from bertpre.finetune.saved_model import task_class_name

    row, config = FAMILIES["modernbert"], BertConfig(**SHAPE)
    assert (row.sequence_head, row.token_head, row.question_answering_head) == (
        ModernBertForSequenceClassification, ModernBertForTokenClassification, ModernBertForQuestionAnswering)
    for task, name in (("classification", "ModernBertForSequenceClassification"),
                       ("tagging", "ModernBertForTokenClassification"), ("qa", "ModernBertForQuestionAnswering")):
        assert task_class_name(config, task) == name
        assert hasattr(transformers, name)
