"""`BertModel(..., unpadded=Unpadded.from_mask(mask))`: the layers computed over the real tokens
alone give the same outputs at every real token, the same pooled output and the same gradients
as the padded batch; the outputs at padding are zeros."""
import pytest
import torch

from bertpre.model import BertConfig, BertModel
from bertpre.model.bert_heads import BertForSequenceClassification, BertForTokenClassification
from bertpre.model.unpad import Unpadded

SHAPES = {
    "absolute": {},
    "rope": {"position_embedding_type": "rope"},
    "transformer_xl": {"position_embedding_type": "transformer_xl"},
    "albert": {"embedding_size": 16, "share_layers": True},
}


def config_for(**options) -> BertConfig:
    return BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, **options)


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    input_ids = torch.randint(5, 50, (4, 12))
    attention_mask = torch.ones(4, 12, dtype=torch.long)
    for row, length in enumerate((12, 7, 1, 3)):
        attention_mask[row, length:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 5:] = 1
    return input_ids, attention_mask, token_type_ids


def test_pad_and_unpad_are_inverse_on_the_real_tokens():
    _, mask, _ = padded_batch()
    unpadded = Unpadded.from_mask(mask)
    assert unpadded.tokens == int(mask.sum())
    values = torch.randn(4, 12, 3)
    tokens = unpadded.unpad(values)
    assert torch.equal(tokens, values[mask.bool()])  # row-major order
    again = unpadded.pad(tokens)
    assert torch.equal(again[mask.bool()], values[mask.bool()])
    assert not again[~mask.bool()].any()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("checkpointing", [False, True])
def test_unpadded_layers_equal_the_padded_ones(shape, checkpointing):
    torch.manual_seed(0)
    model = BertModel(config_for(**SHAPES[shape]))
    model.encoder.gradient_checkpointing = checkpointing
    input_ids, mask, token_type_ids = padded_batch()
    real = mask.bool()
    outputs = []
    for unpadded in (None, Unpadded.from_mask(mask)):
        model.zero_grad()
        out = model(input_ids, mask, token_type_ids, unpadded=unpadded)
        (out.last_hidden_state[real].pow(2).sum() + out.pooler_output.sum()).backward()
        outputs.append((out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}))
    (padded, padded_grads), (unpadded, unpadded_grads) = outputs
    assert unpadded.last_hidden_state.shape == padded.last_hidden_state.shape
    torch.testing.assert_close(unpadded.last_hidden_state[real], padded.last_hidden_state[real],
                               rtol=0, atol=1e-5)
    assert not unpadded.last_hidden_state[~real].any()
    torch.testing.assert_close(unpadded.pooler_output, padded.pooler_output, rtol=0, atol=1e-5)
    assert padded_grads.keys() == unpadded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(unpadded_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_cls_rows_of_an_unpadded_batch_equal_the_padded_ones():
    torch.manual_seed(0)
    model = BertModel(config_for())
    input_ids, mask, token_type_ids = padded_batch()
    whole = model(input_ids, mask, token_type_ids)
    cls = model(input_ids, mask, token_type_ids, last_rows=1, unpadded=Unpadded.from_mask(mask))
    assert cls.last_hidden_state.shape == (4, 1, 32)
    torch.testing.assert_close(cls.pooler_output, whole.pooler_output, rtol=0, atol=1e-5)


@pytest.mark.parametrize("model_class", [BertForSequenceClassification, BertForTokenClassification])
def test_task_models_give_the_same_logits_unpadded(model_class):
    torch.manual_seed(0)
    model = model_class(config_for(), 3).eval()
    input_ids, mask, token_type_ids = padded_batch()
    padded = model(input_ids, mask, token_type_ids)
    unpadded = model(input_ids, mask, token_type_ids, unpadded=Unpadded.from_mask(mask))
    if model_class is BertForTokenClassification:
        padded, unpadded = padded[mask.bool()], unpadded[mask.bool()]
    torch.testing.assert_close(unpadded, padded, rtol=0, atol=1e-5)


def test_unpadded_without_its_mask_is_refused():
    model = BertModel(config_for())
    input_ids, mask, _ = padded_batch()
    with pytest.raises(ValueError, match="attention mask"):
        model(input_ids, None, unpadded=Unpadded.from_mask(mask))


def test_unpadded_layers_run_under_bf16_autocast():
    # the precision `bertpre finetune --precision bf16` trains in: the padded and unpadded paths
    # agree to bf16's resolution, and the unpadded backward reaches every parameter
    torch.manual_seed(0)
    model = BertForSequenceClassification(config_for(), 3)
    input_ids, mask, token_type_ids = padded_batch()
    logits = []
    for unpadded in (None, Unpadded.from_mask(mask)):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids, mask, token_type_ids, unpadded=unpadded)
        out.float().sum().backward()
        logits.append(out.float())
    torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=5e-2)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
