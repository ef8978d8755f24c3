"""Rotary positions in the autocast dtype (`model.low_precision_rotary`): the swapped-halves form
is the rotate-half form bit for bit; fp32 runs are unchanged; under bf16 autocast ModernBERT
rotates q and k in bf16 (no float32 copy), close to the float32 rotation."""
from __future__ import annotations

import pytest
import torch

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model.config import BertConfig
from bertpre.model.modernbert import ModernBertForMaskedLM, rotate, rotation_tables
from bertpre.model.positions import rotary_angles

SHAPE = dict(architecture="modernbert", vocab_size=120, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=2,
             pad_token_id=0, initializer_range=0.2)


def rotate_half_form(x: torch.Tensor, length: int, theta: float = 10000.0) -> torch.Tensor:
    """The rotation as transformers writes it, in x's dtype: x·cos + (−second, first)·sin."""
    head_size = x.shape[-1]
    inverse_frequency = theta ** (-torch.arange(0, head_size, 2, dtype=torch.float32) / head_size)
    angles = torch.arange(length).float()[:, None] * inverse_frequency[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    first, second = x.chunk(2, dim=-1)
    return x * angles.cos().to(x.dtype) + torch.cat([-second, first], dim=-1) * angles.sin().to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swapped_halves_equal_the_rotate_half_form_bit_for_bit(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 17, 8).to(dtype)
    tables = rotation_tables(*rotary_angles(torch.arange(17), 8, theta=10000.0), dtype)
    assert torch.equal(rotate(x, *tables), rotate_half_form(x, 17))


def test_float32_tables_rotate_a_bf16_input_in_float32_as_before():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 9, 8).to(torch.bfloat16)
    tables = rotation_tables(*rotary_angles(torch.arange(9), 8, theta=160000.0), torch.float32)
    expected = rotate_half_form(x.float(), 9, theta=160000.0).to(torch.bfloat16)  # the old rotate
    assert torch.equal(rotate(x, *tables), expected)
    low = rotate(x, *(table.to(torch.bfloat16) for table in tables))
    assert low.dtype == torch.bfloat16 and not torch.equal(low, expected)  # fewer bits, another rounding
    torch.testing.assert_close(low.float(), expected.float(), rtol=0, atol=0.05)


def model(switch: bool | str, seed: int = 3) -> ModernBertForMaskedLM:
    torch.manual_seed(seed)
    return ModernBertForMaskedLM(BertConfig(**SHAPE, low_precision_rotary=switch)).eval()


def logits(net: ModernBertForMaskedLM, autocast: bool) -> torch.Tensor:
    input_ids = torch.randint(5, 120, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return net(input_ids).prediction_logits.float()


def test_fp32_is_the_same_either_way_and_bf16_autocast_moves_only_with_the_switch():
    assert torch.equal(logits(model(True), autocast=False), logits(model(False), autocast=False))
    on, off, auto = (logits(model(switch), autocast=True) for switch in (True, False, "auto"))
    assert torch.equal(auto, on)  # auto: on under bf16 autocast
    assert not torch.equal(on, off)
    reference = logits(model(False), autocast=False)
    assert reference.abs().max() > 1
    for result in (on, off):  # a few bf16 steps of logits of a few units either way
        torch.testing.assert_close(result, reference, rtol=0, atol=0.1)


def test_fp16_autocast_keeps_float32_rotation_under_auto():
    input_ids = torch.randint(5, 120, (2, 24), generator=torch.Generator().manual_seed(0))
    results = []
    for switch in ("auto", False):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            results.append(model(switch)(input_ids).prediction_logits)
    assert torch.equal(*results)


def test_the_switch_is_validated_and_never_written_to_config_json():
    assert load_config("tiny", ["model.low_precision_rotary=false"]).model.low_precision_rotary is False
    assert load_config("tiny", ["model.low_precision_rotary=auto"]).model.low_precision_rotary == "auto"
    with pytest.raises(UserError, match="model.low_precision_rotary must be true, false or auto"):
        BertConfig(**SHAPE, low_precision_rotary="yes").validate()
    assert "low_precision_rotary" not in BertConfig(**SHAPE).to_hf_dict()
