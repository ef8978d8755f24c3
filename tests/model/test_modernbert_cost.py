"""bertpre.model.modernbert_cost: parameters against transformers' ModernBertForMaskedLM and
bertpre's own, FLOPs against torch's FLOP counter on a training step, local layers' (query, key)
pairs against the window's mask, activations against the tensors autograd keeps, the forward's
peak against the profiler's, and `bertpre info` for a ModernBERT."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from _cpu_peak import peak_of
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode
from transformers import ModernBertConfig
from transformers import ModernBertForMaskedLM as HFModernBertForMaskedLM
from transformers.masking_utils import sliding_window_bidirectional_overlay
from typer.testing import CliRunner

from bertpre.cli import app
from bertpre.config import load_config
from bertpre.model import BertConfig
from bertpre.model.bert_cost import ForwardShape, LossChunks, chunked_loss_memory
from bertpre.model.cost import (
    count_parameters,
    estimate_inference_memory,
    estimate_memory,
    readable,
    training_flops_per_token,
    training_memory_floor,
)
from bertpre.model.modernbert import AttentionMasks, ModernBertForMaskedLM
from bertpre.model.modernbert_cost import (
    estimate_modernbert_inference_memory,
    global_layer_count,
    modernbert_activations,
    modernbert_flops_by_part,
    window_pairs,
)
from bertpre.tools.info import format_info, model_info, total_memory
from bertpre.train.setup import predicted_share

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = dict(architecture="modernbert", vocab_size=211, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=96, local_attention=8, max_position_embeddings=128, pad_token_id=0)


def modernbert(**changes) -> BertConfig:
    return BertConfig(**{**TINY, **changes})


def transformers_model(config: BertConfig) -> HFModernBertForMaskedLM:
    """transformers' ModernBertForMaskedLM of `config`'s shape, its head on the predicted rows
    alone (sparse_prediction, as bertpre's head), attention by SDPA."""
    hf = ModernBertConfig.from_dict({**config.to_hf_dict(), "sparse_prediction": True})
    hf._attn_implementation = "sdpa"
    return HFModernBertForMaskedLM(hf)


def step_inputs(config: BertConfig, batch: int, length: int, predicted: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and labels with the first `predicted` tokens of each row predicted."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, config.vocab_size, (batch, length), generator=generator)
    labels = torch.full((batch, length), -100)
    labels[:, :predicted] = 7
    return input_ids, labels


@pytest.mark.parametrize("changes", [
    {}, {"num_hidden_layers": 1}, {"intermediate_size": 40, "num_hidden_layers": 4},
    {"norm_bias": True, "attention_bias": True, "mlp_bias": True, "classifier_bias": True},
    {"decoder_bias": False, "vocab_size": 1000, "hidden_size": 32, "num_attention_heads": 2},
])
def test_parameters_equal_transformers_and_bertpre(changes: dict) -> None:
    config = modernbert(**changes)
    counts = count_parameters(config)
    reference = transformers_model(config)
    assert counts.total == reference.num_parameters() == ModernBertForMaskedLM(config).num_parameters()
    assert counts.encoder == sum(p.numel() for p in reference.model.parameters())
    assert counts.heads == sum(p.numel() for p in reference.head.parameters()) + (
        config.vocab_size if config.decoder_bias else 0)  # the decoder's weight is the word table
    named = dict(reference.named_parameters())
    assert counts.attention == sum(p.numel() for name, p in named.items() if ".attn.W" in name)
    assert counts.feed_forward == sum(p.numel() for name, p in named.items() if ".mlp.W" in name)
    assert counts.layer_norms == sum(p.numel() for name, p in named.items()
                                     if name.startswith("model.") and "norm" in name)
    assert counts.pooler == 0 and counts.embeddings == config.vocab_size * config.hidden_size


def test_modernbert_base_parameters() -> None:
    """ModernBERT-base's shape (the defaults: 22 layers, hidden 768, GeGLU 1152, 50,368 tokens),
    built on the meta device."""
    config = BertConfig(architecture="modernbert", vocab_size=50368, intermediate_size=1152, num_hidden_layers=22,
                        max_position_embeddings=8192, pad_token_id=50283)
    with torch.device("meta"):
        reference = transformers_model(config)
    assert count_parameters(config).total == reference.num_parameters() == 149_655_232


@pytest.mark.parametrize("window", [2, 3, 8, 9, 16, 31, 64, 200])
@pytest.mark.parametrize("length", [1, 2, 7, 16, 33, 100])
def test_window_pairs_are_the_masks_true_entries(length: int, window: int) -> None:
    """transformers' window rule (its config's sliding_window, local_attention // 2 each way),
    counted entry by entry, edges included, windows wider than the sequence too; and the True
    entries of bertpre's own mask."""
    half = ModernBertConfig(local_attention=window).sliding_window
    allowed = sliding_window_bidirectional_overlay(half)
    brute_force = sum(bool(allowed(0, 0, query, key)) for query in range(length) for key in range(length))
    assert window_pairs(length, window) == brute_force
    bertpre_mask = AttentionMasks.of_padding(None, length, half, torch.device("cpu"), flex=False).local_mask
    assert window_pairs(length, window) == int(bertpre_mask.sum())
    assert window_pairs(length, window) <= min(length * length, length * (window + 1))


def counted_flops(model: torch.nn.Module, config: BertConfig, batch: int, length: int, predicted: int) -> int:
    """FlopCounterMode's total for forward + backward; the math kernel runs attention as matmuls."""
    input_ids, labels = step_inputs(config, batch, length, predicted)
    model.train()
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        model(input_ids, labels=labels).loss.backward()
    return counter.get_total_flops()


# (layers, global period, window, T, predicted rows a sequence, batch)
SHAPES = [(3, 1, 8, 32, 8, 2), (3, 3, 8, 32, 5, 2), (4, 2, 16, 24, 24, 1), (5, 3, 6, 17, 3, 3), (2, 1, 128, 64, 10, 2)]


@pytest.mark.parametrize("layers, period, window, length, predicted, batch", SHAPES)
def test_flops_equal_a_flop_counter(layers: int, period: int, window: int, length: int, predicted: int,
                                    batch: int) -> None:
    """Every part but the local layers' attention equals the counter exactly, on transformers'
    step and on bertpre's. The counter sees SDPA's dense T×T matmuls, masked: what a global
    layer costs, and what a local layer would cost without a kernel that skips the window's
    outside; so the counter is the formula with each local layer's band replaced by T²."""
    config = modernbert(num_hidden_layers=layers, global_attn_every_n_layers=period, local_attention=window)
    flops = modernbert_flops_by_part(config, length, predicted / length)
    local_layers = layers - global_layer_count(config)
    dense_instead = 12 * config.hidden_size * local_layers * (length * length - window_pairs(length, window))
    expected = flops.total * batch * length + batch * dense_instead
    assert counted_flops(transformers_model(config), config, batch, length, predicted) == pytest.approx(
        expected, rel=1e-12)
    assert counted_flops(ModernBertForMaskedLM(config), config, batch, length, predicted) == pytest.approx(
        expected, rel=1e-12)
    assert (flops.local_attention == 0) == (local_layers == 0)
    assert flops.total == training_flops_per_token(config, length, predicted / length)


def test_flops_parts_follow_the_shape() -> None:
    config = modernbert(num_hidden_layers=6, local_attention=128)
    d = config.hidden_size
    short, long = modernbert_flops_by_part(config, 128, 0.3), modernbert_flops_by_part(config, 8192, 0.3)
    # global layers grow with T a token; local ones stop growing once T passes the window
    assert long.global_attention == short.global_attention * 64 == 12 * d * 2 * 8192
    assert long.local_attention == pytest.approx(12 * d * 4 * 129 * (1 - 64 * 65 / (129 * 8192)))
    assert (long.attention_projections, long.feed_forward, long.head, long.decoder) == (
        short.attention_projections, short.feed_forward, short.head, short.decoder)
    dense = modernbert_flops_by_part(config, 8192, 1.0)
    assert dense.decoder == pytest.approx(long.decoder / 0.3) and dense.head == pytest.approx(long.head / 0.3)
    assert modernbert_flops_by_part(config, 8192, 0.3).feed_forward == 6 * 6 * 3 * d * config.intermediate_size


def kept_bytes(model: torch.nn.Module, config: BertConfig, batch: int, length: int, predicted: int,
               autocast: bool, window_masks: bool) -> int:
    """Bytes of the distinct tensors autograd keeps for backward (parameters left out) plus the
    logits (none where the loss ran in chunks): what a step holds at the end of its forward.
    `window_masks` False leaves out the
    (B, 1, T, T) masks, which transformers' SDPA path makes afresh as float for every local layer
    (bertpre's one boolean mask is counted)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters and (window_masks or tensor.shape != (batch, 1, length, length)):
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    input_ids, labels = step_inputs(config, batch, length, predicted)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, -1] = 0  # padding: bertpre's window mask is then a row's own, as in pretraining
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), \
            torch.autocast("cpu", torch.bfloat16, enabled=autocast):
        out = model(input_ids, attention_mask=attention_mask, labels=labels)
    logits = out.logits if hasattr(out, "logits") else out.prediction_logits
    if logits is not None:
        kept[logits.untyped_storage().data_ptr()] = logits.untyped_storage().nbytes()
    return sum(kept.values())


@pytest.mark.parametrize("autocast", [False, True])
def test_a_chunked_loss_keeps_the_rows_gradient_in_place_of_their_logits(autocast: bool) -> None:
    """bertpre's step with the loss in chunks of 4 rows (48 and 16 predicted rows a batch of 6
    and 2) keeps, a sequence, what `modernbert_activations` counts with `loss_chunks`: the
    logits and their log-softmax gone ((p + 4)·V a row), the rows' (N, E) gradient where the
    decoder's input was. Once a batch: the float32 (V, E) and (V,) gradients, where the whole
    head kept (under autocast) the decoder weight's 16-bit copy. Exact."""
    config = modernbert()
    length, predicted = 32, 8
    precision = "bf16" if autocast else "fp32"
    p = 2 if autocast else 4
    chunks = chunked_loss_memory(dataclasses.replace(config, loss_chunk_rows=4), 6 * predicted, config.hidden_size,
                                 precision, device_type="cpu")
    full, _ = modernbert_activations(config, length, predicted / length, precision,
                                     norm_statistics_bytes=2 if autocast else 4, loss_chunks=chunks)
    kept = {}
    for rows in (0, 4):
        torch.manual_seed(0)
        model = ModernBertForMaskedLM(dataclasses.replace(config, loss_chunk_rows=rows)).train()
        kept[rows] = {batch: kept_bytes(model, config, batch, length, predicted, autocast, True) for batch in (2, 6)}
    assert (kept[4][6] - kept[4][2]) / 4 == pytest.approx(full, rel=0.002)
    v, e = config.vocab_size, config.hidden_size
    weight_copy = p * v * e if autocast else 0
    targets = 6 * predicted * 8 + 4  # the whole loss's int64 targets and total weight, kept by nll_loss
    assert kept[0][6] - kept[4][6] == 6 * predicted * (p + 4) * v + weight_copy + targets - (4 * v * e + 4 * v)


MODERNBERT_BASE = BertConfig(architecture="modernbert", vocab_size=50368, intermediate_size=1152, num_hidden_layers=22,
                             max_position_embeddings=8192, pad_token_id=50283)


def test_without_chunks_modernbert_base_s_estimate_is_unchanged() -> None:
    """`model.loss_chunk_rows` 0, or no micro-batch given: every predicted row's logits, the
    figures pinned from before the chunks were counted (32 × 1,024 at 30%, bf16, a GPU)."""
    whole = dataclasses.replace(MODERNBERT_BASE, loss_chunk_rows=0)
    for memory in (estimate_memory(MODERNBERT_BASE, 1024, 0.3, "bf16"),
                   estimate_memory(whole, 1024, 0.3, "bf16", micro_batch_size=32)):
        assert (memory.activations_per_sequence, memory.activations_per_sequence_checkpointed) == (653_510_041,
                                                                                                   159_835_545)
        assert memory.loss_chunks is None
    assert training_memory_floor(whole, 1024, 0.3, 32) == (2_394_483_712, 5_148_291_872)


def test_modernbert_base_in_chunks_counts_one_chunk_where_the_rows_logits_were() -> None:
    """32 × 1,024 at 25% (256 predicted rows a sequence, 8,192 a micro-batch), bf16, on a GPU:
    `auto` chunks of 2,624 rows (2²⁷ float32 logits over 50,368 ids), 4 of them. A row keeps no
    logits ((2 + 4)·V bytes less); the micro-batch holds the float32 (V, E) and (V,) gradients
    and one chunk at its most (its bf16 logits, their float32 copy and log-probabilities)."""
    v, e, rows = 50_368, 768, 2_624
    whole = estimate_memory(dataclasses.replace(MODERNBERT_BASE, loss_chunk_rows=0), 1024, 0.25, "bf16",
                            micro_batch_size=32)
    chunked = estimate_memory(MODERNBERT_BASE, 1024, 0.25, "bf16", micro_batch_size=32)
    chunk_bytes = 4 * v * e + 4 * v + rows * v * (2 + 4 + 4)
    assert chunked.loss_chunks == LossChunks(rows=rows, count=4, bytes=chunk_bytes)
    logits = 256 * (2 + 4) * v
    assert whole.activations_per_sequence - chunked.activations_per_sequence == logits
    assert whole.activations_per_sequence_checkpointed - chunked.activations_per_sequence_checkpointed == logits
    assert whole.activation_peak(32) - chunked.activation_peak(32) == 32 * logits - chunk_bytes
    assert whole.checkpointed_activation_peak(32) - chunked.checkpointed_activation_peak(32) \
        == 32 * logits - chunk_bytes
    # at 30% (9,830 rows, 4 chunks) the floor `pretrain` checks is 1.39 GiB lower than the whole logits'
    assert training_memory_floor(MODERNBERT_BASE, 1024, 0.3, 32) == (2_394_483_712, 3_654_054_656)
    # a micro-batch of 8 (2,048 rows) is one chunk's worth: unchunked, as the step runs it
    assert estimate_memory(MODERNBERT_BASE, 1024, 0.25, "bf16", micro_batch_size=8).loss_chunks is None


def test_info_prints_the_chunked_loss_as_its_own_line() -> None:
    """`bertpre info` for ModernBERT-base (32 × 1,024, 30% predicted): the chunks and what they
    hold once a micro-batch; at loss_chunk_rows 0 no such line, and the step's figure is higher."""
    chunked = model_info(MODERNBERT_BASE, seq_length=1024, predicted_share=0.3, precision="bf16")
    whole = model_info(dataclasses.replace(MODERNBERT_BASE, loss_chunk_rows=0), seq_length=1024,
                       predicted_share=0.3, precision="bf16")
    chunks = chunked.memory.loss_chunks
    assert (chunks.rows, chunks.count) == (2624, 4)
    line = f"  masked-LM loss in 4 chunks of 2,624 rows: {readable(chunks.bytes)} a micro-batch"
    assert any(text.startswith(line) for text in format_info(chunked).splitlines())
    assert "masked-LM loss in" not in format_info(whole)
    lower = total_memory(whole.memory, 32, False) - total_memory(chunked.memory, 32, False)
    assert lower == whole.memory.activation_peak(32) - chunked.memory.activation_peak(32) > 2**30


@pytest.mark.parametrize("changes", [{}, {"global_attn_every_n_layers": 1}, {"embedding_dropout": 0.1, "mlp_dropout": 0.1},
                                     {"num_hidden_layers": 4, "global_attn_every_n_layers": 2, "local_attention": 16}])
@pytest.mark.parametrize("autocast", [False, True])
def test_activation_estimate_matches_the_kept_tensors(changes: dict, autocast: bool) -> None:
    """Per sequence (batches of 6 less batches of 2, which cancels what a batch keeps once: the
    rotary angles), on transformers' step and on bertpre's. CPU's dropout keeps its mask in the
    input's dtype (CUDA a byte), hence `dropout_mask_bytes`; under autocast some inputs are
    float32 (a LayerNorm's output), which the 2% tolerance there covers."""
    config = modernbert(**changes)
    length, predicted = 32, 8
    precision = "bf16" if autocast else "fp32"
    # CPU's dropout masks and (under autocast, in bf16) LayerNorm statistics take the input's dtype
    full, checkpointed = modernbert_activations(config, length, predicted / length, precision,
                                                dropout_mask_bytes=2 if autocast else 4,
                                                norm_statistics_bytes=2 if autocast else 4)
    # transformers' (B, 1, T, T) masks, left out of its count (it makes one for every layer),
    # where bertpre keeps one additive padding mask (T a row) for the global layers and one
    # window (T²) for the local ones, in the query's dtype
    local_layers = config.num_hidden_layers - global_layer_count(config)
    masks = (2 if autocast else 4) * (length + (length * length if local_layers else 0))
    torch.manual_seed(0)
    # transformers' LayerNorm returns float32 under autocast: the residual stream of the switch off
    fp32_stream, _ = modernbert_activations(dataclasses.replace(config, low_precision_layernorm=False), length,
                                            predicted / length, precision, dropout_mask_bytes=2 if autocast else 4)
    for model, keep_masks, expected in ((transformers_model(config).train(), False, fp32_stream - masks),
                                        (ModernBertForMaskedLM(config).train(), True, full)):
        measured = (kept_bytes(model, config, 6, length, predicted, autocast, keep_masks)
                    - kept_bytes(model, config, 2, length, predicted, autocast, keep_masks)) / 4
        tolerance = 0.02 if autocast and config.mlp_dropout > 0 else 0.002
        assert measured == pytest.approx(expected, rel=tolerance), type(model).__module__
    assert checkpointed < full
    memory = estimate_memory(config, length, predicted / length, precision)
    assert memory.weights == 4 * count_parameters(config).total and memory.adamw_state == 2 * memory.weights


def bertpre_forward(config: BertConfig, shape: ForwardShape):
    """fill-mask's and evaluate's forward: an attention mask given, the head at P positions a row."""
    model = ModernBertForMaskedLM(config).eval()
    B, T, P = shape.batch_size, shape.seq_length, shape.predicted_rows
    input_ids = torch.randint(5, config.vocab_size, (B, T))
    positions = (torch.arange(P) * (T // P)).expand(B, P)
    return lambda: model(input_ids, attention_mask=torch.ones_like(input_ids),
                         masked_lm_positions=positions).prediction_logits.softmax(-1)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(("changes", "shape"), [
    ({}, ForwardShape(1, 384, 2)),
    ({}, ForwardShape(2, 1024, 4)),  # the T×T window mask's making is the peak
    ({"local_attention": 128}, ForwardShape(1, 2048, 8)),
    ({"hidden_size": 128, "intermediate_size": 384}, ForwardShape(2, 256, 20)),  # the feed-forward's
    ({"global_attn_every_n_layers": 1, "hidden_size": 128, "intermediate_size": 384}, ForwardShape(2, 512, 20)),
    ({"vocab_size": 5000}, ForwardShape(4, 128, 30)),  # the head's
])
def test_the_inference_estimate_is_the_peak_of_a_real_forward_within_five_percent(changes, shape) -> None:
    """bertpre's forward on the CPU, where every layer runs SDPA with an explicit mask."""
    torch.manual_seed(0)
    config = modernbert(**{"vocab_size": 500, "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64,
                           "local_attention": 16, "max_position_embeddings": 4096, **changes})
    with torch.no_grad():
        measured = peak_of(bertpre_forward(config, shape))
    estimated = estimate_inference_memory(config, shape).activations  # FlexAttention's, as a GPU runs it
    sdpa = estimate_modernbert_inference_memory(config, shape, flex_attention=False)
    assert measured <= sdpa.activations <= 1.05 * measured, (sdpa.activations, measured)
    assert estimated <= sdpa.activations and sdpa.weights == 4 * ModernBertForMaskedLM(config).num_parameters()


def test_flex_attention_keeps_the_forward_linear_in_the_length() -> None:
    """With FlexAttention (a GPU) no T×T tensor exists: twice the length, twice the activations;
    with SDPA's explicit window mask, about four times at long lengths."""
    config = BertConfig(architecture="modernbert", vocab_size=50368, intermediate_size=1152, num_hidden_layers=22,
                        max_position_embeddings=8192, pad_token_id=50283)

    def activations(length: int, flex: bool) -> int:
        shape = ForwardShape(1, length, 1)
        return estimate_modernbert_inference_memory(config, shape, flex_attention=flex).activations

    assert 1.99 < activations(8192, True) / activations(4096, True) < 2.01
    assert 3.5 < activations(8192, False) / activations(4096, False) < 4.0
    assert estimate_inference_memory(config, ForwardShape(1, 8192, 1)).activations == activations(8192, True)
    memory, sdpa = estimate_memory(config, 8192, 0.3, "bf16"), modernbert_activations(config, 8192, 0.3, "bf16")
    # SDPA's one additive window, shared by the 14 local layers
    assert memory.activations_per_sequence < sdpa[0] == memory.activations_per_sequence + 8192 * 8192 * 2


def test_info_for_modernbert_base_prints_flops_by_part(tmp_path: Path) -> None:
    """`bertpre info` as a user runs it, ModernBERT-base's shape from the family's defaults: its
    parameters (transformers' count, `test_modernbert_base_parameters`), FLOPs by part at 1,024
    and 8,192 tokens, the local layers' at their window."""
    path = tmp_path / "modernbert.yaml"
    path.write_text("model:\n  vocab_size: 50368\n  pad_token_id: 50283\n"
                    "data:\n  pair_task: none\n  max_seq_length: 1024\n  max_predictions_per_seq: null\n"
                    "  mlm_probability: 0.3\n", encoding="utf-8")
    for length in (1024, 8192):
        options = ["--set", "model.architecture=modernbert", "--set", f"data.max_seq_length={length}"]
        result = CliRunner().invoke(app, ["info", "--config", str(path), *options])
        assert result.exit_code == 0, result.output
        config = load_config(path, [option for option in options if option != "--set"])
        info = model_info(config.model, seq_length=length, predicted_share=0.3)
        assert info.parameters.total == 149_655_232 and "149,655,232" in result.output
        assert "total (ModernBertForMaskedLM)" in result.output
        assert "global attention every 3 layers and a window of 128 (64 each way) elsewhere" in result.output
        flops = info.flops_by_part
        assert info.flops_per_token == flops.total and f"{flops.total / 1e6:.1f} MFLOP" in result.output
        for name, part in (("global attention", flops.global_attention), ("local attention", flops.local_attention),
                           ("feed-forward (GeGLU)", flops.feed_forward), ("decoder", flops.decoder)):
            line = next(line for line in result.output.splitlines() if line.strip().startswith(name))
            assert f"{part / 1e6:.3f} MFLOP" in line and f"{100 * part / flops.total:5.1f}%" in line
        assert "8 layers, " in result.output and "14 layers, at most 129 keys a token" in result.output
    # at 8,192 tokens the global layers are most of the step; the local ones barely grew
    assert flops.global_attention > flops.feed_forward > 20 * flops.local_attention


def test_info_on_the_tiny_modernbert_preset() -> None:
    """The shipped preset: 64 tokens, the two local layers reading 17 keys (8 each way)."""
    result = CliRunner().invoke(app, ["info", "--config", str(CONFIGS / "tiny-modernbert.yaml")])
    assert result.exit_code == 0, result.output
    config = load_config(CONFIGS / "tiny-modernbert.yaml")
    info = model_info(config.model, seq_length=64, predicted_share=predicted_share(config.data))
    assert "1 layer, 64 keys a token" in result.output and "2 layers, at most 17 keys a token" in result.output
    assert f"{info.flops_per_token / 1e6:.1f} MFLOP" in result.output
    assert info.flops_by_part.local_attention == 12 * 64 * 2 * window_pairs(64, 16) / 64


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("batch_size", [1, 4])
def test_the_cpu_training_estimate_is_the_peak_of_a_fine_tuning_step_within_three_percent(batch_size) -> None:
    """Fine-tuning's pre-check on a CPU (`MemoryEstimate.activation_peak`): SDPA's dense window
    there, the additive copy kept for backward, the boolean one held until the forward ends, and
    at batch 1 the int64 distances it is built from. The GPU's figure (FlexAttention's block
    mask) leaves every T×T tensor out: nearly half the step here."""
    from bertpre.model.modernbert_heads import ModernBertForSequenceClassification

    config = modernbert(vocab_size=120, hidden_size=64, num_hidden_layers=3, intermediate_size=48,
                        local_attention=16, max_position_embeddings=2048)
    length = 1536
    torch.manual_seed(0)
    model = ModernBertForSequenceClassification(config, 2).train()
    input_ids = torch.randint(5, 120, (batch_size, length))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, length // 2:] = 0  # padding: a window mask a row

    def step() -> None:
        logits = model(input_ids, attention_mask=attention_mask)
        torch.nn.functional.cross_entropy(logits, torch.zeros(batch_size, dtype=torch.long)).backward()

    measured = peak_of(step)
    cpu = estimate_memory(config, length, 0.0, "fp32", device_type="cpu").activation_peak(batch_size)
    gpu = estimate_memory(config, length, 0.0, "fp32", device_type="cuda").activation_peak(batch_size)
    assert 0.97 * measured <= cpu <= measured, (cpu, measured)
    assert gpu < 0.6 * measured
