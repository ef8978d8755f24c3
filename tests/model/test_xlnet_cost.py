"""bertpre.model.cost for `architecture: xlnet`: parameters against the built model, FLOPs
against torch's FLOP counter, activations against the tensors autograd keeps, and `info`."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordPiece
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from bertpre.batches.plm import PermutationCollator
from bertpre.cli import app
from bertpre.config import load_config
from bertpre.model import BertConfig
from bertpre.model.cost import (
    count_parameters,
    estimate_memory,
    memory_shortfall,
    plm_query_rows,
    training_flops_per_token,
    training_memory_floor,
    xlnet_activations,
    xlnet_training_flops,
)
from bertpre.model.xlnet import XLNetLMHeadModel
from bertpre.model.xlnet_config import xlnet_config
from bertpre.tools.info import format_info, model_info

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = dict(architecture="xlnet", vocab_size=211, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128)


def xlnet(**changes) -> BertConfig:
    return BertConfig(**{**TINY, **changes})


def step_inputs(config: BertConfig, batch: int, length: int, rows: int, memory: int) -> dict:
    """One PLM step's model inputs: a random order's perm_mask, P one-hot targets, two segments."""
    generator = torch.Generator().manual_seed(0)
    token_type_ids = torch.zeros(batch, length, dtype=torch.long)
    token_type_ids[:, length // 2:] = 1
    target_mapping = torch.zeros(batch, rows, length)
    target_mapping[:, torch.arange(rows), torch.arange(rows)] = 1
    mems = None
    if memory:
        mems = [torch.randn(batch, memory, config.hidden_size, generator=generator)
                for _ in range(config.num_hidden_layers)]
    return dict(input_ids=torch.randint(5, config.vocab_size, (batch, length), generator=generator),
                token_type_ids=token_type_ids,
                perm_mask=torch.rand(batch, length, length, generator=generator) < 0.5,
                target_mapping=target_mapping, mems=mems,
                labels=torch.randint(5, config.vocab_size, (batch, rows), generator=generator))


@pytest.mark.parametrize("changes", [{}, {"num_hidden_layers": 3, "intermediate_size": 96},
                                     {"vocab_size": 1000, "hidden_size": 32, "num_attention_heads": 2,
                                      "num_hidden_layers": 5, "mem_len": 16}])
def test_parameters_equal_the_built_model(changes: dict) -> None:
    config = xlnet(**changes)
    model = XLNetLMHeadModel(xlnet_config(config))
    counts = count_parameters(config)
    assert counts.total == model.num_parameters()
    assert counts.encoder == sum(p.numel() for p in model.transformer.parameters())
    assert counts.heads == model.lm_loss.bias.numel() and counts.pooler == 0
    assert counts.layer_norms == sum(p.numel() for name, p in model.named_parameters() if "layer_norm" in name)
    assert counts.feed_forward == sum(p.numel() for name, p in model.named_parameters()
                                      if ".ff.layer_1." in name or ".ff.layer_2." in name)


def test_xlnet_large_parameters() -> None:
    """XLNet-large's shape (d 1024, 24 layers, d_inner 4096, 32,000 tokens): 360,300,800, what
    transformers' `XLNetLMHeadModel` of that shape counts too (checked once by hand, on the meta
    device); built here on the meta device."""
    config = BertConfig(architecture="xlnet", vocab_size=32000, hidden_size=1024, num_hidden_layers=24,
                        num_attention_heads=16, intermediate_size=4096)
    with torch.device("meta"):
        model = XLNetLMHeadModel(xlnet_config(config))
    assert count_parameters(config).total == model.num_parameters() == 360_300_800


# (T, P, M, batch, layers): the xlnet plan's P = T/6, every row (hf plan, clm), memory longer
# and shorter than T, one layer (whose content stream never trains) to three
SHAPES = [(32, 5, 0, 3, 2), (32, 32, 0, 2, 1), (32, 5, 32, 3, 3), (16, 3, 48, 2, 2), (64, 11, 64, 2, 3),
          (24, 24, 8, 1, 1)]


@pytest.mark.parametrize("length, rows, memory, batch, layers", SHAPES)
def test_flops_equal_a_flop_counter(length: int, rows: int, memory: int, batch: int, layers: int) -> None:
    """Forward + backward of the real model under FlopCounterMode equals the formula exactly:
    every matmul is counted, and the counter, like the formula, leaves out elementwise work."""
    config = xlnet(num_hidden_layers=layers, mem_len=memory)
    model = XLNetLMHeadModel(xlnet_config(config)).train()
    with FlopCounterMode(display=False) as counter:
        model(**step_inputs(config, batch, length, rows, memory)).loss.backward()
    flops = xlnet_training_flops(config, length, 0.5, memory_length=memory, query_rows=rows,
                                 micro_batch_size=batch)
    assert counter.get_total_flops() == pytest.approx(flops.total * batch * length, rel=1e-12)
    assert flops.total == training_flops_per_token(config, length, 0.5, memory_length=memory,
                                                   query_rows=rows, micro_batch_size=batch)
    assert (flops.memory == 0) == (memory == 0)


def test_flops_parts_follow_the_shape() -> None:
    config = xlnet(mem_len=64)
    base = xlnet_training_flops(config, 64, 1 / 6)
    assert base == xlnet_training_flops(config, 64, 1 / 6, memory_length=64, query_rows=11)
    # no memory: only the memory part goes, and positions shrink from M + 2T - 1 to 2T - 1 distances
    without = xlnet_training_flops(config, 64, 1 / 6, memory_length=0)
    assert without.memory == 0 and (without.content_stream, without.query_stream, without.head) == (
        base.content_stream, base.query_stream, base.head)
    assert without.relative_positions == pytest.approx(base.relative_positions * 127 / 191)
    # every row a query (hf plan, clm): the query stream and head grow with P, the content stream does not
    every = xlnet_training_flops(config, 64, 1.0)
    assert every.content_stream == base.content_stream
    assert every.head == pytest.approx(base.head * 64 / 11)
    assert every.query_stream > 5 * base.query_stream
    # W_R runs once a micro-batch
    assert xlnet_training_flops(config, 64, 1 / 6, micro_batch_size=8).relative_positions == pytest.approx(
        base.relative_positions / 8)


def test_query_rows_are_the_collators_slots() -> None:
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "w"])}
    tokenizer = Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
    for probability in (1 / 6, 1 / 7, 0.15, 0.25):
        collator = PermutationCollator(tokenizer, plm_probability=probability, max_span_length=1)
        for length in (2, 5, 16, 63, 64, 128, 512):
            assert plm_query_rows(length, probability) == collator.slots(length)
    hf = PermutationCollator(tokenizer, plan="hf", max_span_length=1)
    assert plm_query_rows(64, 1.0) == hf.slots(64) == 64


def saved_bytes(config: BertConfig, batch: int, length: int, rows: int, memory: int, autocast: bool) -> int:
    """Bytes of the distinct tensors the loss's autograd graph keeps for backward (parameters
    left out), plus the logits the step holds: what is alive at the end of the forward."""
    model = XLNetLMHeadModel(xlnet_config(config)).train()
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        out = model(**step_inputs(config, batch, length, rows, memory))
    kept = {out.logits.untyped_storage().data_ptr(): out.logits.untyped_storage().nbytes()}
    stack, visited = [out.loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        for name in dir(node):
            if name.startswith("_saved_"):
                value = getattr(node, name)
                for tensor in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(tensor, torch.Tensor):
                        storage = tensor.untyped_storage()
                        if storage.data_ptr() not in parameters:
                            kept[storage.data_ptr()] = storage.nbytes()
        stack.extend(function for function, _ in node.next_functions)
    return sum(kept.values())


@pytest.mark.parametrize("length, rows, memory", [(32, 5, 0), (32, 32, 0), (32, 5, 32), (16, 3, 64), (64, 11, 64)])
@pytest.mark.parametrize("dropout, autocast, tolerance", [(0.0, False, 0.001), (0.1, False, 0.001),
                                                          (0.0, True, 0.001), (0.1, True, 0.02)])
def test_activation_estimate_matches_the_kept_tensors(length: int, rows: int, memory: int, dropout: float,
                                                      autocast: bool, tolerance: float) -> None:
    """Per sequence (the difference between batches of 6 and 2, which cancels what a
    micro-batch keeps once: sinusoids, W_R's output, weight copies). CPU's dropout keeps a
    mask in the input's dtype where CUDA keeps bytes, hence `dropout_mask_bytes`; under
    autocast those masks are 2 or 4 bytes, which the 2% tolerance covers."""
    config = xlnet(num_hidden_layers=3, intermediate_size=256, vocab_size=500, mem_len=memory,
                   hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    torch.manual_seed(0)
    measured = (saved_bytes(config, 6, length, rows, memory, autocast)
                - saved_bytes(config, 2, length, rows, memory, autocast)) / 4
    precision = "bf16" if autocast else "fp32"
    full, checkpointed, states = xlnet_activations(config, length, 0.5, precision, memory_length=memory,
                                                   query_rows=rows, dropout_mask_bytes=2 if autocast else 4)
    assert measured == pytest.approx(full, rel=tolerance)
    assert checkpointed < full and states == 3 * memory * 64 * 4


def test_memory_states_persist_and_count_in_the_floor() -> None:
    config = xlnet(mem_len=128)
    memory = estimate_memory(config, 64, 1 / 6, "bf16")
    assert memory.memory_states_per_sequence == 2 * 128 * 64 * 4  # layers x M x d, float32
    assert memory.attention_probs_per_sequence == 0  # never fused: already in the activations
    no_memory = estimate_memory(config, 64, 1 / 6, "bf16", memory_length=0)
    assert no_memory.memory_states_per_sequence == 0
    assert no_memory.activations_per_sequence < memory.activations_per_sequence
    model, activations = training_memory_floor(config, 64, 1 / 6, 4, memory_rows=32)
    assert activations == 4 * memory.activations_per_sequence_checkpointed + 32 * memory.memory_states_per_sequence
    assert model == 16 * count_parameters(config).total
    # the states of every row keep a long memory from fitting where the segment alone would
    big = xlnet(mem_len=4096, hidden_size=1024, num_attention_heads=16, num_hidden_layers=24)
    model, activations = training_memory_floor(big, 512, 1 / 6, 8)
    states = estimate_memory(big, 512, 1 / 6).memory_states_per_sequence
    problem = memory_shortfall(big, 512, 1 / 6, 8, model + activations - 1, "the GPU has", memory_rows=8)
    assert problem is not None and "model.mem_len" in problem
    assert memory_shortfall(big, 512, 1 / 6, 8, model + activations - 8 * states, "the GPU has",
                            memory_length=0) is None


def test_activations_order_shapes() -> None:
    """Longer segments, longer memories and more query rows each cost more."""
    config = xlnet()
    def full(length: int, share: float, memory: int) -> int:
        return estimate_memory(config, length, share, "bf16", memory_length=memory).activations_per_sequence
    assert full(64, 1 / 6, 0) < full(64, 1 / 6, 64) < full(64, 1 / 6, 128)
    assert full(64, 1 / 6, 64) < full(64, 1.0, 64)
    assert full(64, 1 / 6, 64) < full(128, 1 / 6, 64)


def test_info_for_an_xlnet_config() -> None:
    config = xlnet(vocab_size="auto", intermediate_size=256, mem_len=64)
    info = model_info(config, seq_length=64, predicted_share=1 / 6, micro_batch_size=16, memory_rows=32)
    text = format_info(info)
    total = XLNetLMHeadModel(xlnet_config(info.config)).num_parameters()
    assert "model: XLNet, 2 layers, hidden 64, 4 heads, intermediate 256, vocab 30522" in text
    assert "memory 64" in text and f"{total:,}" in text and "total (XLNetLMHeadModel)" in text
    flops = info.flops_by_part
    assert info.flops_per_token == flops.total
    for name, part in (("content stream", flops.content_stream), ("query stream", flops.query_stream),
                       ("memory", flops.memory), ("LM head", flops.head)):
        line = next(line for line in text.splitlines() if line.strip().startswith(name) and "MFLOP" in line)
        assert f"{100 * part / flops.total:5.1f}%" in line
    assert "P=11 query rows" in text and "11 target rows" in text
    assert "memory states / sequence: 32.0 KiB" in text and "1.0 MiB for 32 rows" in text
    assert "with gradient checkpointing" in text
    no_memory = format_info(model_info(xlnet(mem_len=0), seq_length=64, predicted_share=1 / 6))
    assert "no memory" in no_memory and "memory states" not in no_memory


def test_info_command_for_xlnet_on_the_tiny_preset() -> None:
    """`bertpre info` as a user runs it on the tiny preset turned XLNet: P from data.plm_probability
    (1/6 of 64 = 11 rows), memory from model.mem_len, every row's memory counted."""
    result = CliRunner().invoke(app, ["info", "--config", str(CONFIGS / "tiny.yaml"),
                                      "--set", "model.architecture=xlnet", "--set", "data.objective=plm",
                                      "--set", "data.pair_task=none", "--set", "model.mem_len=32"])
    assert result.exit_code == 0, result.output
    config = load_config(CONFIGS / "tiny.yaml", ["model.architecture=xlnet", "data.objective=plm",
                                                 "data.pair_task=none", "model.mem_len=32"])
    info = model_info(config.model, seq_length=64, predicted_share=1 / 6,
                      micro_batch_size=config.train.micro_batch_size, memory_rows=config.train.batch_size)
    assert "model: XLNet, 2 layers, hidden 64, 4 heads, intermediate 256" in result.output
    assert "memory 32" in result.output and f"{info.parameters.total:,}" in result.output
    assert "P=11 query rows" in result.output and "memory M=32" in result.output
    assert f"{info.flops_per_token / 1e6:.3f} MFLOP" in result.output
    assert f"for {config.train.batch_size} rows" in result.output
