"""ModernBERT (`model.architecture: modernbert`) against transformers' ModernBertForMaskedLM: its
config keys and their refusals, the same state-dict names both ways, the same logits (padded rows,
lengths below and above the local window), gradients with and without checkpointing, bf16
autocast, the parameter count, the truncated-normal init, and FlexAttention's path equal to SDPA's."""
from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path

import pytest
import torch

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model.config import BertConfig
from bertpre.model.families import FAMILIES, load_encoder_weights
from bertpre.model.modernbert import (
    AttentionMasks,
    ModernBertForMaskedLM,
    flex_attention_available,
    read_modernbert_weights,
)
from bertpre.model.modernbert_config import MODERNBERT_FIELDS
from bertpre.model.modernbert_cost import count_modernbert_parameters

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).parents[2]
# 4 layers: 0 and 2 global, 1 and 3 reading 4 tokens each way (local_attention 8).
SHAPE = dict(architecture="modernbert", vocab_size=120, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
             intermediate_size=48, max_position_embeddings=64, local_attention=8, global_attn_every_n_layers=2,
             pad_token_id=0)
# Every layer of logits differs well beyond 1e-4 when the window or the layers' thetas are wrong.
INIT_RANGE = 0.2


def modernbert_config(**changes) -> BertConfig:
    config = BertConfig(**{**SHAPE, "initializer_range": INIT_RANGE, **changes})
    config.validate()
    return config


def hf_twin(model: ModernBertForMaskedLM, attn_implementation: str = "sdpa") -> torch.nn.Module:
    """transformers' ModernBertForMaskedLM of `model`'s config.json, holding `model`'s weights."""
    hf_config = transformers.ModernBertConfig.from_dict(model.config.to_hf_dict())
    hf_config._attn_implementation = attn_implementation
    twin = transformers.ModernBertForMaskedLM(hf_config)
    missing, unexpected = twin.load_state_dict(model.state_dict(), strict=False)
    assert not missing and not unexpected
    return twin


def padded_batch(length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows of `length`: one full, one right-padded to half, one of 3 tokens."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 120, (3, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, length // 2:] = 0
    attention_mask[2, 3:] = 0
    input_ids[attention_mask == 0] = 0
    return input_ids, attention_mask


def real_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    out = model(input_ids, attention_mask=attention_mask)
    logits = getattr(out, "prediction_logits", None)
    return (out.logits if logits is None else logits)[attention_mask.bool()]


# --- config ----------------------------------------------------------------------------------


def test_defaults_are_modernbert_base_as_transformers_has_them():
    config = load_config(None, ["model.architecture=modernbert"]).model
    reference = transformers.ModernBertConfig()
    for name in (*MODERNBERT_FIELDS, "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "max_position_embeddings", "initializer_range"):
        if name in ("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta"):
            continue  # transformers 5 keeps these as layer_types and rope_parameters, checked below
        assert getattr(config, name) == getattr(reference, name), name
    assert [("full_attention" if config.layer_is_global(i) else "sliding_attention")
            for i in range(config.num_hidden_layers)] == reference.layer_types
    assert config.global_rope_theta == reference.rope_parameters["full_attention"]["rope_theta"]
    assert config.local_rope_theta == reference.rope_parameters["sliding_attention"]["rope_theta"]
    assert config.sliding_window == reference.sliding_window == 64


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.local_attention=256", "model.max_position_embeddings=128"],
     r"model.local_attention \(256\) is wider than the model.max_position_embeddings \(128\)"),
    (["model.hidden_size=36", "model.num_attention_heads=4"],
     r"rotary positions turn pairs of a head's 9 dimensions; choose model.hidden_size / model.num_attention_heads even"),
    (["model.global_attn_every_n_layers=0"], r"model.global_attn_every_n_layers must be a positive integer"),
    (["model.type_vocab_size=2"], r"model.type_vocab_size is BERT's.*no token types"),
    (["model.position_embedding_type=rope"], r"model.position_embedding_type is BERT's.*rotary"),
    (["model.hidden_act=gelu"], r"model.hidden_act is BERT's.*set model.hidden_activation instead"),
    (["model.layer_norm_eps=1e-12"], r"set model.norm_eps instead"),
    (["model.rope_theta=10000"], r"set model.global_rope_theta and model.local_rope_theta instead"),
    (["model.classifier_pooling=max"], r"model.classifier_pooling 'max' is not built; use one of cls, mean"),
    (["model.hidden_activation=tanh"], r"model.hidden_activation 'tanh' is not supported"),
])
def test_bad_modernbert_input_is_refused_naming_the_key(overrides, message):
    with pytest.raises(UserError, match=message):
        load_config(None, ["model.architecture=modernbert", *overrides])


def test_modernbert_keys_are_refused_for_another_architecture():
    with pytest.raises(UserError, match=r"model.local_attention is ModernBERT's, which model.architecture bert does "
                                        r"not have; remove it, or set model.architecture: modernbert"):
        load_config(None, ["model.local_attention=64"])


def test_a_pair_task_is_refused_with_the_reason_and_the_default_is_none():
    config = load_config(None, ["model.architecture=modernbert"])
    assert config.data.pair_task == "none"
    with pytest.raises(UserError, match=r"data.pair_task sop trains a sentence-pair head, which model.architecture "
                                        r"modernbert \(ModernBERT\) does not have.*set data.pair_task: none"):
        load_config(None, ["model.architecture=modernbert", "data.pair_task=sop"])


def test_a_runs_config_yaml_holds_its_architectures_keys_alone_and_reads_back(tmp_path):
    config = load_config("tiny-modernbert", [f"train.out={tmp_path}"])
    config.save(tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    assert "local_attention: 16" in text and "hidden_act:" not in text and "type_vocab_size" not in text
    assert load_config(tmp_path / "config.yaml") == config
    bert = load_config("tiny", [f"train.out={tmp_path}"])
    bert.save(tmp_path / "bert.yaml")
    assert "local_attention" not in (tmp_path / "bert.yaml").read_text()
    assert load_config(tmp_path / "bert.yaml") == bert


def test_config_json_reads_back_in_both_of_transformers_forms():
    config = modernbert_config(global_rope_theta=5e5, local_rope_theta=2e4, norm_bias=True)
    hf = config.to_hf_dict()
    assert BertConfig.from_hf_dict(hf) == config
    older = {key: value for key, value in hf.items() if key not in ("layer_types", "rope_parameters")}
    assert BertConfig.from_hf_dict(older) == config  # a released folder's global_attn_every_n_layers, thetas
    newer = {key: value for key, value in hf.items()
             if key not in ("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta")}
    assert BertConfig.from_hf_dict(newer) == config
    with pytest.raises(UserError, match="not global every n-th layer"):
        BertConfig.from_hf_dict({**newer, "layer_types": ["sliding_attention", "full_attention"] * 2})


# --- the network against transformers ---------------------------------------------------------


def test_state_dict_names_are_transformers_both_ways(tmp_path):
    torch.manual_seed(0)
    ours = ModernBertForMaskedLM(modernbert_config())
    ours.save_pretrained(tmp_path / "ours")
    theirs, info = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    theirs.save_pretrained(tmp_path / "theirs")
    back = ModernBertForMaskedLM.from_pretrained(tmp_path / "theirs", strict=True)
    for name, tensor in ours.state_dict().items():
        assert torch.equal(back.state_dict()[name], tensor), name
    assert back.decoder.weight is back.model.embeddings.tok_embeddings.weight


@pytest.mark.parametrize(("length", "local_attention"), [(6, 8), (40, 8), (40, 9)])
def test_logits_equal_transformers_on_padded_rows(length, local_attention):
    """Below the window (4 each way, 9 wide) and well above it; an odd width reads as transformers
    reads it (9 // 2 each way)."""
    torch.manual_seed(1)
    ours = ModernBertForMaskedLM(modernbert_config(local_attention=local_attention)).eval()
    input_ids, attention_mask = padded_batch(length)
    with torch.no_grad():
        mine = real_logits(ours, input_ids, attention_mask)
        for implementation in ("sdpa", "eager"):
            theirs = real_logits(hf_twin(ours, implementation).eval(), input_ids, attention_mask)
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-4)
        if length > 9:  # the window is read: another width gives other logits
            wider = ModernBertForMaskedLM(dataclasses.replace(ours.config, local_attention=12)).eval()
            wider.load_state_dict(ours.state_dict())
            assert (real_logits(wider, input_ids, attention_mask) - mine).abs().max() > 1e-2


def test_a_rows_logits_do_not_depend_on_its_padding():
    torch.manual_seed(2)
    model = ModernBertForMaskedLM(modernbert_config()).eval()
    input_ids, attention_mask = padded_batch(40)
    with torch.no_grad():
        batched = model(input_ids, attention_mask).prediction_logits[1, :20]
        alone = model(input_ids[1:2, :20], torch.ones(1, 20, dtype=torch.long)).prediction_logits[0]
    torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_gradients_equal_transformers_with_and_without_checkpointing(checkpointing):
    torch.manual_seed(3)
    ours = ModernBertForMaskedLM(modernbert_config())
    theirs = hf_twin(ours)
    ours.train()
    theirs.train()
    if checkpointing:
        ours.set_gradient_checkpointing(True)
        theirs.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    input_ids, attention_mask = padded_batch(24)
    labels = torch.full_like(input_ids, -100)
    labels[:, ::3] = input_ids[:, ::3]
    labels[attention_mask == 0] = -100
    calls = []
    ours.model.layers[1].register_forward_pre_hook(lambda module, args: calls.append(1))
    ours(input_ids, attention_mask, labels=labels).loss.backward()
    assert len(calls) == (2 if checkpointing else 1)  # checkpointing computes the layer again in backward
    theirs(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
    their_grads = dict(theirs.named_parameters())
    for name, parameter in ours.named_parameters():
        torch.testing.assert_close(parameter.grad, their_grads[name].grad, rtol=1e-4, atol=1e-5, msg=name)


def test_bf16_autocast_on_cpu_is_close_to_transformers():
    torch.manual_seed(4)
    ours = ModernBertForMaskedLM(modernbert_config()).eval()  # logits of a few units
    theirs = hf_twin(ours).eval()
    input_ids, attention_mask = padded_batch(40)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        mine = real_logits(ours, input_ids, attention_mask).float()
        reference = real_logits(theirs, input_ids, attention_mask).float()
    assert mine.abs().max() > 1
    # bf16 keeps 8 bits of mantissa: logits of a few units agree to a few bf16 steps (2^-6 at 4)
    torch.testing.assert_close(mine, reference, rtol=0, atol=5e-2)


@pytest.mark.parametrize("changes", [{}, dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True),
                                     dict(decoder_bias=False)])
def test_parameter_count_equals_transformers(changes):
    ours = ModernBertForMaskedLM(modernbert_config(**changes))
    theirs = hf_twin(ours)
    assert count_modernbert_parameters(ours.config).total == ours.num_parameters() == theirs.num_parameters()
    assert FAMILIES["modernbert"].count_parameters(ours.config).total == ours.num_parameters()


def test_init_is_truncated_normal_with_transformers_stds():
    torch.manual_seed(5)
    config = modernbert_config(hidden_size=128, num_hidden_layers=8, num_attention_heads=4, intermediate_size=192,
                               initializer_range=0.02, vocab_size=400)
    model = ModernBertForMaskedLM(config)
    cut = math.sqrt(2 / math.pi) * 2 * math.exp(-2) / math.erf(2 / math.sqrt(2))  # truncation at ±2σ
    shrink = math.sqrt(1 - cut)  # a normal cut at ±2σ has std 0.88σ
    out_std = 0.02 / math.sqrt(2 * 8)
    for name, std in (("model.layers.3.attn.Wqkv.weight", 0.02), ("model.layers.3.mlp.Wi.weight", 0.02),
                      ("model.layers.3.attn.Wo.weight", out_std), ("model.layers.3.mlp.Wo.weight", out_std),
                      ("model.embeddings.tok_embeddings.weight", 0.02), ("head.dense.weight", out_std)):
        weight = model.state_dict()[name]
        assert weight.abs().max() <= 2 * std, name
        assert weight.std().item() == pytest.approx(std * shrink, rel=0.05), name
    assert torch.equal(model.decoder.bias, torch.zeros(400))
    assert isinstance(model.model.layers[0].attn_norm, torch.nn.Identity)
    assert isinstance(model.model.layers[1].attn_norm, torch.nn.LayerNorm)


def test_a_modernbertmodel_folder_loads_with_the_head_drawn_fresh(tmp_path):
    torch.manual_seed(6)
    ours = ModernBertForMaskedLM(modernbert_config())
    transformers_config = transformers.ModernBertConfig.from_dict(ours.config.to_hf_dict())
    bare = transformers.ModernBertModel(transformers_config)
    bare.load_state_dict({name.removeprefix("model."): tensor for name, tensor in ours.state_dict().items()
                          if name.startswith("model.")})
    bare.save_pretrained(tmp_path)
    weights = read_modernbert_weights(tmp_path)
    assert set(weights) == {name for name in ours.state_dict() if name.startswith("model.")}
    with pytest.warns(UserWarning, match="no weights for head.dense.weight"):
        loaded = ModernBertForMaskedLM.from_pretrained(tmp_path)
    assert torch.equal(loaded.model.layers[1].attn.Wqkv.weight, ours.model.layers[1].attn.Wqkv.weight)
    with pytest.raises(UserError):
        ModernBertForMaskedLM.from_pretrained(tmp_path, strict=True)
    encoder, fresh = load_encoder_weights(tmp_path, ours.config)
    assert fresh == [] and torch.equal(encoder["layers.2.mlp.Wo.weight"], ours.model.layers[2].mlp.Wo.weight)


# --- FlexAttention -----------------------------------------------------------------------------


@pytest.mark.skipif(not flex_attention_available(), reason="this torch has no FlexAttention")
def test_flex_attentions_block_mask_equals_sdpas_exact_mask_on_cpu():
    torch.manual_seed(7)
    model = ModernBertForMaskedLM(modernbert_config()).eval()
    input_ids, attention_mask = padded_batch(40)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # uncompiled FlexAttention says it computes every score
        model.model.flex_attention = False
        sdpa = real_logits(model, input_ids, attention_mask)
        model.model.flex_attention = True
        flex = real_logits(model, input_ids, attention_mask)
        unpadded = model(input_ids[:1]).prediction_logits[0]
        model.model.flex_attention = False
        unpadded_sdpa = model(input_ids[:1]).prediction_logits[0]
    torch.testing.assert_close(flex, sdpa, rtol=0, atol=1e-5)
    torch.testing.assert_close(unpadded, unpadded_sdpa, rtol=0, atol=1e-5)


@pytest.mark.gpu
def test_flex_attention_on_cuda_equals_sdpa_forward_and_backward():
    assert flex_attention_available()
    torch.manual_seed(8)
    config = modernbert_config(hidden_size=256, num_attention_heads=4, intermediate_size=384, local_attention=128,
                               max_position_embeddings=1024, initializer_range=0.02, vocab_size=1000)
    model = ModernBertForMaskedLM(config).cuda().train()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 1000, (2, 512), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 300:] = 0
    input_ids[attention_mask == 0] = 0
    input_ids, attention_mask = input_ids.cuda(), attention_mask.cuda()
    results = {}
    for flex in (False, True):
        model.zero_grad()
        model.model.flex_attention = flex
        logits = model(input_ids, attention_mask).prediction_logits
        logits[attention_mask.bool()].float().pow(2).mean().backward()
        results[flex] = (logits[attention_mask.bool()].detach(), model.model.layers[1].attn.Wqkv.weight.grad.clone())
    model.model.flex_attention = None
    # the default on a GPU: SDPA up to 1024 tokens (measured faster there), FlexAttention beyond
    assert not model.model.uses_flex(torch.device("cuda"), 1024)
    assert model.model.uses_flex(torch.device("cuda"), 1025)
    torch.testing.assert_close(results[True][0], results[False][0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(results[True][1], results[False][1], rtol=1e-3, atol=1e-5)


def test_a_grown_vocabulary_adds_embedding_rows_and_decoder_biases_as_the_pieces_means():
    torch.manual_seed(9)
    model = ModernBertForMaskedLM(modernbert_config())
    state = FAMILIES["modernbert"].grow_vocabulary(read_state(model), [[5, 7], [9]])
    rows = state["model.embeddings.tok_embeddings.weight"]
    assert rows.shape == (122, 32)
    torch.testing.assert_close(rows[120], (rows[5] + rows[7]) / 2)
    assert torch.equal(rows[121], rows[9])
    assert state["decoder.bias"].shape == (122,)
    grown = ModernBertForMaskedLM(modernbert_config(vocab_size=122))
    missing, unexpected = grown.load_weights(state, Path("grown"), strict=True)
    assert not missing and not unexpected and torch.equal(grown.decoder.weight, rows)


def read_state(model: ModernBertForMaskedLM) -> dict[str, torch.Tensor]:
    """The model's tensors as a folder gives them (the tied decoder weight left out)."""
    return {name: tensor.clone() for name, tensor in model.state_dict().items() if name != "decoder.weight"}


def test_sdpa_gets_one_additive_mask_for_every_layer_while_gradients_are_kept():
    """What SDPA would make of the boolean mask (0 or -inf), made once and handed to every layer;
    without gradients the boolean mask itself (SDPA's copy is freed after each layer)."""
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    masks = AttentionMasks.of_padding(attention_mask, 6, 2, torch.device("cpu"), flex=False)
    for is_global, boolean in ((True, masks.global_mask), (False, masks.local_mask)):
        additive = masks.sdpa_mask(is_global, torch.bfloat16)
        assert additive is masks.sdpa_mask(is_global, torch.bfloat16) and additive.dtype == torch.bfloat16
        assert torch.equal(additive == 0, boolean) and torch.isneginf(additive[~boolean.expand_as(additive)]).all()
        with torch.no_grad():
            assert masks.sdpa_mask(is_global, torch.bfloat16) is boolean
    assert masks.sdpa_mask(False, torch.float32).dtype == torch.float32
    assert AttentionMasks.of_padding(None, 6, 2, torch.device("cpu"), flex=False).sdpa_mask(True, torch.float32) is None
