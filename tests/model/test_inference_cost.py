"""The cost model's peak of a forward pass without gradients (what fill-mask, evaluate and finetune
check against the machine's memory) against the peak of the tensors a real forward allocates."""
from __future__ import annotations

import pytest
import torch
from _cpu_peak import peak_of

from bertpre.model import BertConfig
from bertpre.model.bert import BertForPreTraining
from bertpre.model.cost import ForwardShape, estimate_inference_memory, inference_shortfall
from bertpre.model.xlnet import XLNetLMHeadModel
from bertpre.model.xlnet_config import xlnet_config

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest

SHAPE = dict(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def xlnet_forward(config: BertConfig, shape: ForwardShape):
    """fill-mask's forward (masks hidden by attention_mask) or evaluate's (perm_mask, token types)."""
    model = XLNetLMHeadModel(xlnet_config(config)).eval()
    B, T, P, M = shape.batch_size, shape.seq_length, shape.predicted_rows, shape.memory_length
    input_ids = torch.randint(5, config.vocab_size, (B, T))
    target_mapping = torch.zeros(B, P, T)
    target_mapping[:, torch.arange(P), torch.arange(P) * (T // P)] = 1.0
    mems = [torch.randn(B, M, config.hidden_size) for _ in range(config.num_hidden_layers)] if M else None
    if shape.permutation:
        inputs = {"perm_mask": torch.rand(B, T, T) < 0.5, "token_type_ids": torch.zeros(B, T, dtype=torch.long)}
    else:
        inputs = {"attention_mask": input_ids != 7}
    return lambda: model(input_ids, target_mapping=target_mapping, mems=mems, **inputs).logits.softmax(-1)


def bert_forward(config: BertConfig, shape: ForwardShape):
    """fill-mask's and evaluate's forward: the head at P positions a row."""
    model = BertForPreTraining(config).eval()
    B, T, P = shape.batch_size, shape.seq_length, shape.predicted_rows
    input_ids = torch.randint(5, config.vocab_size, (B, T))
    positions = (torch.arange(P) * (T // P)).expand(B, P)
    return lambda: model(input_ids, attention_mask=torch.ones_like(input_ids), token_type_ids=torch.zeros_like(input_ids),
                         masked_lm_positions=positions).prediction_logits.softmax(-1)


@pytest.mark.parametrize(("changes", "shape"), [
    ({"architecture": "xlnet"}, ForwardShape(1, 384, 2)),  # a fill-mask window, no memory
    ({"architecture": "xlnet", "mem_len": 64}, ForwardShape(1, 256, 8, memory_length=64)),  # one with memory
    ({"architecture": "xlnet", "mem_len": 16}, ForwardShape(2, 128, 21, memory_length=16, permutation=True)),
    ({"position_embedding_type": "transformer_xl"}, ForwardShape(1, 384, 3)),  # quadratic in T
    ({"position_embedding_type": "transformer_xl"}, ForwardShape(2, 192, 20)),
    ({"position_embedding_type": "rope"}, ForwardShape(2, 1024, 4)),  # linear in T (fused attention)
])
def test_the_estimate_is_the_peak_of_a_real_forward_within_ten_percent(changes, shape) -> None:
    torch.manual_seed(0)
    config = BertConfig(**{**SHAPE, **changes})
    forward = xlnet_forward(config, shape) if config.architecture == "xlnet" else bert_forward(config, shape)
    with torch.no_grad():
        measured = peak_of(forward)
    estimated = estimate_inference_memory(config, shape).activations
    assert measured <= estimated <= 1.1 * measured, (estimated, measured)


def test_xlnet_grows_with_the_square_of_the_length_and_bert_absolute_linearly() -> None:
    xlnet = BertConfig(**SHAPE, architecture="xlnet")
    bert = BertConfig(**SHAPE, max_position_embeddings=4096)

    def activations(config: BertConfig, length: int) -> int:
        return estimate_inference_memory(config, ForwardShape(1, length, 1)).activations

    assert 3.9 < activations(xlnet, 4096) / activations(xlnet, 2048) < 4.0
    assert 1.9 < activations(bert, 4096) / activations(bert, 2048) < 2.1


def test_the_shortfall_names_the_figure_its_parts_and_the_memory() -> None:
    config = BertConfig(**SHAPE, architecture="xlnet")
    need = estimate_inference_memory(config, ForwardShape(1, 2048, 1))
    assert need.weights == 4 * XLNetLMHeadModel(xlnet_config(config)).num_parameters()
    assert inference_shortfall(need, need.total, "this machine has") is None
    assert inference_shortfall(need, need.total - 1, "this machine has") == (
        "needs about 362.4 MiB (139.6 KiB of weights, 362.2 MiB of activations), "
        "but this machine has 362.4 MiB")
