"""bertpre.model.xlnet: Hugging Face's layout and parity, the permutation invariances, recurrence."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bertpre.errors import UserError
from bertpre.model.xlnet import XLNetConfig, XLNetLMHeadModel

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, mem_len=12)
ATOL = 1e-4


def tiny_config(**changes) -> XLNetConfig:
    return XLNetConfig(**{**TINY, **changes})


def model_pair(config: XLNetConfig, seed: int = 0) -> tuple[XLNetLMHeadModel, transformers.XLNetLMHeadModel]:
    """bertpre's model with every parameter random (LayerNorms and biases too) and
    transformers' model holding the very same tensors, both in eval mode."""
    torch.manual_seed(seed)
    ours = XLNetLMHeadModel(config)
    with torch.no_grad():
        for parameter in ours.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    hf_config = transformers.XLNetConfig(**{k: v for k, v in config.to_hf_dict().items()
                                            if k not in ("architectures", "model_type")})
    theirs = transformers.XLNetLMHeadModel(hf_config)
    theirs.load_state_dict(ours.state_dict(), strict=True)
    return ours.eval(), theirs.eval()


def random_ids(batch_size: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(5, 100, (batch_size, length), generator=torch.Generator().manual_seed(seed))


def orders(batch_size: int, length: int, seed: int) -> torch.Tensor:
    """Each row's factorization order: its positions in the order they are predicted."""
    generator = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(length, generator=generator) for _ in range(batch_size)])


def permutation_inputs(order: torch.Tensor, num_predict: int) -> tuple[torch.Tensor, torch.Tensor]:
    """perm_mask (B, T, T): 1 where j is not before i in the order (i itself included);
    target_mapping (B, P, T): the last `num_predict` of each order, as XLNet's partial prediction."""
    B, T = order.shape
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(T).expand(B, T))
    perm_mask = (rank[:, None, :] >= rank[:, :, None]).float()
    target_mapping = torch.zeros(B, num_predict, T)
    target_mapping.scatter_(2, order[:, -num_predict:, None], 1.0)
    return perm_mask, target_mapping


def assert_mems_equal(ours: list[torch.Tensor], theirs: tuple[torch.Tensor, ...]) -> None:
    assert len(ours) == len(theirs)
    for mine, hf in zip(ours, theirs, strict=True):  # ours batch-first, theirs time-first
        torch.testing.assert_close(mine, hf.transpose(0, 1), atol=ATOL, rtol=0)


# --- layout --------------------------------------------------------------------------------


def test_parameter_names_and_shapes_are_those_of_transformers() -> None:
    ours, theirs = model_pair(tiny_config())
    assert {k: v.shape for k, v in ours.state_dict().items()} == \
        {k: v.shape for k, v in theirs.state_dict().items()}
    names = set(ours.state_dict())
    for name in ("transformer.word_embedding.weight", "transformer.mask_emb", "lm_loss.weight",
                 "lm_loss.bias", "transformer.layer.1.rel_attn.seg_embed",
                 "transformer.layer.0.rel_attn.r_s_bias", "transformer.layer.0.ff.layer_2.bias"):
        assert name in names
    assert ours.state_dict()["transformer.layer.0.rel_attn.q"].shape == (32, 4, 8)
    assert ours.lm_loss.weight is ours.transformer.word_embedding.weight
    assert ours.num_parameters() == sum(p.numel() for p in theirs.parameters())


def test_export_is_a_native_xlnet_folder_and_reads_back(tmp_path: Path) -> None:
    ours, _ = model_pair(tiny_config(clamp_len=5, reuse_len=6))
    ours.save_pretrained(tmp_path)
    hf_config = json.loads((tmp_path / "config.json").read_text())
    assert hf_config["model_type"] == "xlnet" and hf_config["architectures"] == ["XLNetLMHeadModel"]
    assert (hf_config["d_model"], hf_config["n_head"], hf_config["d_head"], hf_config["mem_len"]) == (32, 4, 8, 12)
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(loaded).__name__ == "XLNetLMHeadModel"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    _, info = transformers.XLNetForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert {k.split(".")[0] for k in info["missing_keys"]} == {"sequence_summary", "logits_proj"}
    back = XLNetLMHeadModel.from_pretrained(tmp_path)
    assert back.config == ours.config
    for (name, mine), theirs in zip(ours.state_dict().items(), back.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs), name
    loaded.save_pretrained(tmp_path / "hf")  # Hugging Face's own folder reads back too
    assert torch.equal(XLNetLMHeadModel.from_pretrained(tmp_path / "hf").transformer.mask_emb,
                       ours.transformer.mask_emb)


def test_config_round_trip_and_refusals() -> None:
    config = tiny_config(clamp_len=7, reuse_len=4, hidden_act="relu")
    assert XLNetConfig.from_hf_dict(config.to_hf_dict()) == config
    assert XLNetConfig.from_hf_dict({**config.to_hf_dict(), "mem_len": None}).mem_len == 0
    for changes, words in [(dict(attn_type="uni"), "attn_type"), (dict(bi_data=True), "bi_data"),
                           (dict(hidden_size=33, num_attention_heads=3), "even"),
                           (dict(num_attention_heads=5), "divisible"), (dict(mem_len=-1), "mem_len"),
                           (dict(hidden_act="tanh"), "hidden_act"), (dict(dropout=1.0), "dropout")]:
        with pytest.raises(UserError, match=words):
            tiny_config(**changes).validate()
    with pytest.raises(UserError, match="model_type"):
        XLNetConfig.from_hf_dict({"model_type": "bert"})


# --- parity with transformers.XLNetLMHeadModel ---------------------------------------------


@pytest.mark.parametrize("changes", [{}, dict(clamp_len=3, hidden_act="relu")])
def test_plain_forward_equals_transformers(changes: dict) -> None:
    ours, theirs = model_pair(tiny_config(**changes))
    input_ids = random_ids(3, 10, seed=1)
    labels = torch.where(torch.rand(3, 10, generator=torch.Generator().manual_seed(2)) < 0.5, input_ids, -100)
    with torch.no_grad():
        mine, reference = ours(input_ids, labels=labels), theirs(input_ids, labels=labels)
    assert mine.logits.shape == (3, 10, 100)
    torch.testing.assert_close(mine.logits, reference.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.loss, reference.loss, atol=ATOL, rtol=0)
    assert_mems_equal(mine.mems, reference.mems)


def test_two_stream_forward_equals_transformers() -> None:
    """perm_mask + target_mapping, padding, and an unused target slot (a zero row)."""
    ours, theirs = model_pair(tiny_config())
    B, T, P = 3, 10, 4
    input_ids = random_ids(B, T, seed=3)
    perm_mask, target_mapping = permutation_inputs(orders(B, T, seed=4), P)
    attention_mask = torch.ones(B, T)
    attention_mask[2, :3] = 0  # left padding, XLNet's side
    target_mapping[1, 0] = 0
    labels = random_ids(B, P, seed=5)
    labels[1, 0] = -100
    inputs = dict(attention_mask=attention_mask, perm_mask=perm_mask, target_mapping=target_mapping,
                  labels=labels)
    with torch.no_grad():
        mine, reference = ours(input_ids, **inputs), theirs(input_ids, **inputs)
    assert mine.logits.shape == (B, P, 100)
    torch.testing.assert_close(mine.logits, reference.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.loss, reference.loss, atol=ATOL, rtol=0)
    assert_mems_equal(mine.mems, reference.mems)


@pytest.mark.parametrize("segments", [False, True])
def test_second_segment_with_mems_equals_transformers(segments: bool) -> None:
    """mem_len 12 over segments of 8: the memory keeps the first segment whole, then the last
    12 of 16 states; both streams, with and without token types."""
    ours, theirs = model_pair(tiny_config())
    B, T, P = 2, 8, 3
    first, second = random_ids(B, T, seed=6), random_ids(B, T, seed=7)
    token_type_ids = None
    if segments:
        token_type_ids = torch.zeros(B, T, dtype=torch.long)
        token_type_ids[:, 5:] = 1
    perm_mask, target_mapping = permutation_inputs(orders(B, T, seed=8), P)
    labels = random_ids(B, P, seed=9)
    with torch.no_grad():
        mine = ours(first, token_type_ids=token_type_ids)
        reference = theirs(first, token_type_ids=token_type_ids)
        torch.testing.assert_close(mine.logits, reference.logits, atol=ATOL, rtol=0)
        assert_mems_equal(mine.mems, reference.mems)
        for streams in (dict(), dict(perm_mask=perm_mask, target_mapping=target_mapping)):
            mine_2 = ours(second, token_type_ids=token_type_ids, mems=mine.mems, **streams,
                          labels=labels if streams else second)
            reference_2 = theirs(second, token_type_ids=token_type_ids, mems=reference.mems, **streams,
                                 labels=labels if streams else second)
            torch.testing.assert_close(mine_2.logits, reference_2.logits, atol=ATOL, rtol=0)
            torch.testing.assert_close(mine_2.loss, reference_2.loss, atol=ATOL, rtol=0)
            assert_mems_equal(mine_2.mems, reference_2.mems)
            assert mine_2.mems[0].shape == (B, 12, 32)


# --- what the permutation objective promises -----------------------------------------------


def test_a_target_sees_exactly_the_tokens_before_it_in_its_order() -> None:
    """Every position a target, in a random order: changing token j leaves target t's logits
    bit for bit alone when j is t itself or after t in the order, and changes them otherwise."""
    ours, _ = model_pair(tiny_config(mem_len=0))
    B, T = 2, 9
    input_ids = random_ids(B, T, seed=10)
    order = orders(B, T, seed=11)
    perm_mask, target_mapping = permutation_inputs(order, T)  # predicted: the whole order
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(T).expand(B, T))
    target_rank = rank.gather(1, order)  # the rank of each target slot's position: 0..T-1
    with torch.no_grad():
        base = ours(input_ids, perm_mask=perm_mask, target_mapping=target_mapping).logits
        for j in range(T):
            changed = input_ids.clone()
            changed[:, j] = (changed[:, j] + 1 - 5) % 95 + 5
            logits = ours(changed, perm_mask=perm_mask, target_mapping=target_mapping).logits
            for b in range(B):
                for slot in range(T):
                    same = torch.equal(logits[b, slot], base[b, slot])
                    assert same == bool(rank[b, j] >= target_rank[b, slot]), (b, j, slot)


def test_a_target_that_sees_nothing_gets_no_context() -> None:
    """The first target of an order with no memory: transformers attends uniformly over every
    key there, its own token included (a leak); bertpre gives it no context at all."""
    ours, theirs = model_pair(tiny_config(mem_len=0))
    input_ids = random_ids(1, 6, seed=12)
    perm_mask, target_mapping = permutation_inputs(torch.arange(6)[None], 6)  # left to right
    first_only = target_mapping[:, :1]
    changed = input_ids.clone()
    changed[0, 0] += 1
    with torch.no_grad():
        mine = [ours(ids, perm_mask=perm_mask, target_mapping=first_only).logits for ids in (input_ids, changed)]
        hf = [theirs(ids, perm_mask=perm_mask, target_mapping=first_only).logits for ids in (input_ids, changed)]
    assert torch.equal(mine[0], mine[1])
    assert not torch.allclose(hf[0], hf[1])


# --- recurrence ----------------------------------------------------------------------------


def test_memory_equals_one_pass_where_the_first_segment_cannot_see_the_second() -> None:
    """forward(second, mems=forward(first).mems) == forward(first + second) in which the first
    segment's tokens may not see the second's: relative positions make the two the same sums."""
    ours, _ = model_pair(tiny_config(mem_len=8))
    B, T, P = 2, 8, 3
    first, second = random_ids(B, T, seed=13), random_ids(B, T, seed=14)
    perm_mask, target_mapping = permutation_inputs(orders(B, T, seed=15), P)
    joint_perm = torch.zeros(B, 2 * T, 2 * T)
    joint_perm[:, :T, T:] = 1
    joint_two_stream = joint_perm.clone()
    joint_two_stream[:, T:, T:] = perm_mask
    joint_mapping = torch.cat([torch.zeros(B, P, T), target_mapping], dim=2)
    with torch.no_grad():
        memory = ours(first).mems
        content = ours(second, mems=memory).logits
        query = ours(second, mems=memory, perm_mask=perm_mask, target_mapping=target_mapping).logits
        joint = ours(torch.cat([first, second], dim=1), perm_mask=joint_perm).logits
        joint_query = ours(torch.cat([first, second], dim=1), perm_mask=joint_two_stream,
                           target_mapping=joint_mapping).logits
    torch.testing.assert_close(content, joint[:, T:], atol=1e-5, rtol=0)
    torch.testing.assert_close(query, joint_query, atol=1e-5, rtol=0)


def test_memory_is_detached_cut_to_mem_len_and_reuse_len() -> None:
    ours, _ = model_pair(tiny_config(mem_len=5, reuse_len=4, dropout=0.0))
    ours.train()
    input_ids = random_ids(2, 7, seed=16)
    output = ours(input_ids)
    assert [tuple(m.shape) for m in output.mems] == [(2, 4, 32), (2, 4, 32)]
    assert not any(m.requires_grad for m in output.mems)
    embedded = ours.transformer.word_embedding(input_ids[:, :4]).detach()  # layer 0's input
    torch.testing.assert_close(output.mems[0], embedded)
    again = ours(input_ids, mems=output.mems)
    assert [tuple(m.shape) for m in again.mems] == [(2, 5, 32), (2, 5, 32)]
    torch.testing.assert_close(again.mems[0], torch.cat([output.mems[0][:, 3:], embedded], dim=1))
    assert ours(input_ids).mems is not None and model_pair(tiny_config(mem_len=0))[0](input_ids).mems is None


def test_a_masked_memory_is_no_memory() -> None:
    """mems_attention_mask 0 (a row whose document ended) equals running without memory, and
    the returned mask carries which memory slots are real."""
    ours, _ = model_pair(tiny_config(mem_len=6))
    B, T = 2, 6
    first, second = random_ids(B, T, seed=17), random_ids(B, T, seed=18)
    with torch.no_grad():
        memory = ours(first).mems
        alone = ours(second).logits
        reset = ours(second, mems=memory, mems_attention_mask=torch.zeros(B, T))
        kept = ours(second, mems=memory).logits
    torch.testing.assert_close(reset.logits, alone, atol=1e-5, rtol=0)
    assert not torch.allclose(kept, alone)
    assert reset.mems_attention_mask.tolist() == [[True] * 6] * 2


# --- numerics and training helpers ---------------------------------------------------------


def test_masks_stay_finite_in_float16() -> None:
    """Blocked scores take the dtype's minimum (-65504 in float16), never a -1e30 that overflows."""
    ours, _ = model_pair(tiny_config())
    B, T, P = 2, 10, 4
    input_ids = random_ids(B, T, seed=19)
    perm_mask, target_mapping = permutation_inputs(orders(B, T, seed=20), P)
    with torch.no_grad():
        full = ours(input_ids, perm_mask=perm_mask, target_mapping=target_mapping).logits
        half = ours.half()(input_ids, perm_mask=perm_mask.half(), target_mapping=target_mapping.half()).logits
    assert half.dtype == torch.float16 and torch.isfinite(half).all()
    torch.testing.assert_close(half.float(), full, atol=5e-3, rtol=0)


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    B, T, P = 2, 8, 3
    input_ids, labels = random_ids(B, T, seed=21), random_ids(B, P, seed=22)
    perm_mask, target_mapping = permutation_inputs(orders(B, T, seed=23), P)
    gradients = []
    for enabled in (False, True):
        model, _ = model_pair(tiny_config(dropout=0.0))
        model.train().set_gradient_checkpointing(enabled)
        model(input_ids, perm_mask=perm_mask, target_mapping=target_mapping, labels=labels).loss.backward()
        gradients.append([p.grad for p in model.parameters()])
    for plain, recomputed in zip(*gradients, strict=True):
        torch.testing.assert_close(plain, recomputed)
