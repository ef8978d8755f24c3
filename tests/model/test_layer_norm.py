"""model.low_precision_layernorm: the residual stream in the autocast dtype, fp32 untouched."""
from __future__ import annotations

import pytest
import torch

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model import BertConfig, BertForPreTraining
from bertpre.model.layer_norm import LayerNorm, low_precision_dtype, resolve_low_precision
from bertpre.model.modernbert import ModernBertForMaskedLM
from bertpre.model.roberta import RobertaForMaskedLM

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
FAMILIES = {
    "bert": (BertForPreTraining, dict(TINY)),
    "albert": (BertForPreTraining, dict(TINY, embedding_size=16, share_layers=True)),
    "roberta": (RobertaForMaskedLM, dict(TINY, architecture="roberta", pad_token_id=1, type_vocab_size=1)),
    "modernbert": (ModernBertForMaskedLM, dict(TINY, architecture="modernbert", local_attention=8)),
}


def build(family: str, low_precision: bool | str, seed: int = 0) -> torch.nn.Module:
    cls, values = FAMILIES[family]
    torch.manual_seed(seed)
    return cls(BertConfig(**values, low_precision_layernorm=low_precision)).eval()


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 99, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 8:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "masked_lm_positions": torch.tensor([[1, 2], [3, 4], [5, 6]]),
            "masked_lm_ids": torch.tensor([[7, 8], [9, -100], [10, 11]])}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fp32_outputs_and_gradients_are_bit_identical_with_the_switch_on_or_off(family):
    outputs = {}
    for switch in (True, False):
        model = build(family, switch).train()
        torch.manual_seed(1)  # the same dropout draws
        out = model(**batch())
        out.loss.backward()
        outputs[switch] = (out.prediction_logits, out.loss, [p.grad for p in model.parameters()])
    assert torch.equal(outputs[True][0], outputs[False][0])
    assert torch.equal(outputs[True][1], outputs[False][1])
    assert all((a is None and b is None) or torch.equal(a, b)  # a part the batch leaves unused has no gradient
               for a, b in zip(outputs[True][2], outputs[False][2], strict=True))


def layer_output_dtypes(model: torch.nn.Module) -> list[torch.dtype]:
    """The dtype of every LayerNorm's output (the residual stream, post-LN layers) in a forward
    under CPU bf16 autocast."""
    dtypes: list[torch.dtype] = []
    hooks = [module.register_forward_hook(lambda _m, _i, out: dtypes.append(out.dtype))
             for module in model.modules() if isinstance(module, torch.nn.LayerNorm)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(**batch())
    for hook in hooks:
        hook.remove()
    return dtypes


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_under_bf16_autocast_the_residual_stream_stays_bf16(family):
    on = layer_output_dtypes(build(family, "auto"))
    assert on and set(on) == {torch.bfloat16}
    # the old path: LayerNorm returns its fp32 input's dtype, so the stream is fp32 (CUDA: always fp32)
    assert torch.float32 in layer_output_dtypes(build(family, False))


def test_bf16_layer_norm_keeps_float32_master_weights_and_matches_fp32_closely():
    norm = LayerNorm(64, eps=1e-12, low_precision=True)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = torch.randn(8, 64) * 3 + 5  # an offset mean: statistics in bf16 would lose it
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = norm(x)
    assert low.dtype == torch.bfloat16 and norm.weight.dtype == torch.float32
    reference = torch.nn.functional.layer_norm(x, (64,), norm.weight, norm.bias, 1e-12)
    torch.testing.assert_close(low.float(), reference, atol=0.05, rtol=0.02)
    low.float().sum().backward()
    assert norm.weight.grad.dtype == torch.float32


@pytest.mark.parametrize(("setting", "dtype", "expected"), [
    ("auto", torch.bfloat16, torch.bfloat16), ("auto", torch.float16, None), (True, torch.float16, torch.float16),
    (False, torch.bfloat16, None)])
def test_auto_is_bf16_alone(setting, dtype, expected):
    with torch.autocast("cpu", dtype=dtype):
        assert low_precision_dtype(setting, "cpu") == expected
    assert low_precision_dtype(setting, "cpu") is None  # no autocast: plain LayerNorm
    assert resolve_low_precision("auto", "bf16") is True
    assert resolve_low_precision("auto", "fp16") is resolve_low_precision("auto", "fp32") is False


def test_the_config_key_takes_true_false_or_auto_and_nothing_else():
    assert load_config(None).model.low_precision_layernorm == "auto"
    assert load_config(None, ["model.low_precision_layernorm=false"]).model.low_precision_layernorm is False
    with pytest.raises(UserError, match="model.low_precision_layernorm must be true, false or auto, got 'yes please'"):
        load_config(None, ["model.low_precision_layernorm=yes please"])
    with pytest.raises(UserError, match="low_precision_layernorm"):
        BertConfig(**TINY, low_precision_layernorm=1).validate()


def test_no_config_json_carries_the_switch():
    for family in FAMILIES:
        cls, values = FAMILIES[family]
        assert "low_precision_layernorm" not in BertConfig(**values, low_precision_layernorm=False).to_hf_dict()


def test_xlnet_refuses_the_switch_it_does_not_build():
    xlnet = dict(TINY, architecture="xlnet", attention_probs_dropout_prob=0.1)
    BertConfig(**xlnet).validate()  # auto: XLNet keeps its fp32 LayerNorm
    with pytest.raises(UserError, match="not built for XLNet"):
        BertConfig(**xlnet, low_precision_layernorm=True).validate()


@pytest.mark.gpu
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_on_cuda_the_stream_is_bf16_and_the_step_tracks_the_float32_layer_norm(family):
    """CUDA autocast (unlike the CPU's) runs layer_norm in float32: there the switch is what keeps
    the stream bf16, and the loss and gradients stay close to the float32 LayerNorm's."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    results = {}
    for switch in (True, False):
        # no dropout: CUDA draws its masks by the tensor's dtype (the first H200 run: gradients at
        # cosine 0.87-0.89 with dropout on, both streams drawing other masks; ModernBERT, which has
        # none, passed)
        cls, values = FAMILIES[family]
        torch.manual_seed(0)
        model = cls(BertConfig(**values, low_precision_layernorm=switch, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)).cuda().train()
        dtypes: list[torch.dtype] = []
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.register_forward_hook(lambda _m, _i, out, seen=dtypes: seen.append(out.dtype))
        torch.manual_seed(1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**{name: value.cuda() for name, value in batch().items()}).loss
        loss.backward()
        results[switch] = (set(dtypes), loss.float(), torch.cat([p.grad.flatten() for p in model.parameters()
                                                                   if p.grad is not None]))
    assert results[True][0] == {torch.bfloat16}
    assert results[False][0] == {torch.float32}
    torch.testing.assert_close(results[True][1], results[False][1], atol=0.02, rtol=0.01)
    on, off = results[True][2], results[False][2]
    assert torch.nn.functional.cosine_similarity(on, off, dim=0) > 0.99
