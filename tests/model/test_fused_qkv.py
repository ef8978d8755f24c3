"""model.fused_qkv: query, key and value from one (3C, C) matrix product; the parameters, the
outputs and the gradients those of three."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from bertpre.model import BertConfig, BertForPreTraining, BertModel
from bertpre.model.roberta import RobertaForMaskedLM
from bertpre.model.unpad import Unpadded

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
FAMILIES = {
    "bert": (BertForPreTraining, dict(TINY)),
    "albert": (BertForPreTraining, dict(TINY, embedding_size=16, share_layers=True)),
    "roberta": (RobertaForMaskedLM, dict(TINY, architecture="roberta", pad_token_id=1, type_vocab_size=1)),
    "rope": (BertForPreTraining, dict(TINY, position_embedding_type="rope")),
}


def build(family: str, fused: bool | str) -> torch.nn.Module:
    cls, values = FAMILIES[family]
    torch.manual_seed(0)
    return cls(BertConfig(**values, fused_qkv=fused)).train()


def ragged_batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 99, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 8:] = 0
    attention_mask[2, 5:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "masked_lm_positions": torch.tensor([[1, 2], [3, 4], [2, 0]]),
            "masked_lm_ids": torch.tensor([[7, 8], [9, -100], [10, -100]])}


class ProductShapes(TorchDispatchMode):
    """The output widths of every matrix product (mm, addmm) run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.widths: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
            self.widths.append(out.shape[-1])
        return out


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_product_a_layer_gives_the_three_projections_outputs_and_gradients(family):
    results = {}
    for fused in (True, False):
        model = build(family, fused)
        with ProductShapes() as products:
            out = model(**ragged_batch())
        out.loss.backward()
        results[fused] = (products.widths, out.loss, {name: p.grad for name, p in model.named_parameters()
                                                      if p.grad is not None})
    hidden, layers = TINY["hidden_size"], TINY["num_hidden_layers"]
    # forward: one (…, 3C) product a layer in place of three (…, C) ones; the last layer, on the
    # rows read (model.last_layer_rows), one (…, 2C) for its keys and values beside its query
    assert results[True][0].count(3 * hidden) == layers - 1 and results[True][0].count(2 * hidden) == 1
    assert results[False][0].count(3 * hidden) == results[False][0].count(2 * hidden) == 0
    assert len(results[False][0]) - len(results[True][0]) == 2 * (layers - 1) + 1
    torch.testing.assert_close(results[True][1], results[False][1], rtol=0, atol=1e-6)
    assert results[True][2].keys() == results[False][2].keys()  # the same three Linears, same names
    for name, grad in results[False][2].items():
        torch.testing.assert_close(results[True][2][name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_the_state_dict_keeps_hugging_faces_three_projections():
    names = build("bert", True).state_dict().keys()
    assert "bert.encoder.layer.0.attention.self.query.weight" in names
    assert not any("qkv" in name.lower() for name in names)
    assert names == build("bert", False).state_dict().keys()


def test_unpadded_layers_with_one_product_equal_those_with_three():
    batch = ragged_batch()
    mask = batch["attention_mask"]
    outputs = []
    for fused in (True, False):
        torch.manual_seed(0)
        model = BertModel(BertConfig(**TINY, fused_qkv=fused))
        outputs.append(model(batch["input_ids"], mask, unpadded=Unpadded.from_mask(mask)).last_hidden_state)
    real = mask.bool()
    torch.testing.assert_close(outputs[0][real], outputs[1][real], rtol=0, atol=1e-6)


def test_the_switch_takes_true_false_or_auto_alone():
    from bertpre.config import load_config
    from bertpre.errors import UserError

    assert load_config("tiny", ["model.fused_qkv=false"]).model.fused_qkv is False
    assert load_config("tiny", ["model.fused_qkv=auto"]).model.fused_qkv == "auto"
    with pytest.raises(UserError, match="model.fused_qkv must be true, false or auto"):
        BertConfig(**TINY, fused_qkv="yes").validate()
    assert "fused_qkv" not in BertConfig(**TINY).to_hf_dict()


def test_auto_fuses_under_autocast_alone():
    """float32 keeps three products (bit for bit as before); under autocast one product casts the
    input once. (A training step: its last layer queries the rows read alone.)"""
    model = build("bert", "auto").train()
    batch = ragged_batch()
    with ProductShapes() as products:
        model(**batch)
    assert 3 * TINY["hidden_size"] not in products.widths
    with ProductShapes() as products, torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch)
    assert products.widths.count(3 * TINY["hidden_size"]) == TINY["num_hidden_layers"] - 1
    assert products.widths.count(2 * TINY["hidden_size"]) == 1  # the last layer's keys and values
