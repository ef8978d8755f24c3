"""bertpre.model.cost: parameter counts against built models, FLOPs against a FLOP counter, memory."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from bertpre.cli import app, main
from bertpre.config import load_config
from bertpre.model.bert import BertConfig, BertForPreTraining
from bertpre.model.bert_cost import LossChunks
from bertpre.model.cost import (
    count_parameters,
    estimate_memory,
    training_flops_per_token,
    training_memory_floor,
)
from bertpre.model.families import family
from bertpre.tools.info import format_info, memory_lines, model_info

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TINY = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
IN_TEST = {
    "tiny": BertConfig(**TINY),
    "albert": BertConfig(**TINY, embedding_size=16, share_layers=True),
    "factorized": BertConfig(**TINY, embedding_size=8),
    "shared": BertConfig(**{**TINY, "num_hidden_layers": 5}, share_layers=True),
    "rope": BertConfig(**TINY, position_embedding_type="rope"),
    "transformer_xl": BertConfig(**TINY, position_embedding_type="transformer_xl"),
    "albert-transformer_xl": BertConfig(**TINY, embedding_size=16, share_layers=True,
                                        position_embedding_type="transformer_xl"),
    "bert-large": BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}


def shipped_and_test_configs() -> list:
    shipped = [pytest.param(path, id=path.stem) for path in sorted(CONFIGS.glob("*.yaml"))]
    return shipped + [pytest.param(config, id=name) for name, config in IN_TEST.items()]


def part_of(name: str) -> str:
    """Which `ParameterCounts` field a parameter belongs to (ALBERT projection: embeddings)."""
    if name.startswith("cls."):
        return "heads"
    if name.startswith("bert.pooler."):
        return "pooler"
    if "LayerNorm" in name:
        return "layer_norms"
    if name in ("bert.encoder.r_w_bias", "bert.encoder.r_r_bias"):  # Transformer-XL's u and v
        return "attention"
    if name.startswith("bert.embeddings.") or "embedding_hidden_mapping_in" in name:
        return "embeddings"
    return "attention" if ".attention." in name else "feed_forward"


@pytest.mark.parametrize("source", shipped_and_test_configs())
def test_counts_equal_the_built_model(source: Path | BertConfig) -> None:
    config = load_config(source).model if isinstance(source, Path) else source
    info = model_info(config)  # vocab_size: auto -> 30522
    if info.config.architecture != "bert":  # another family's parts have its own names: its total
        with torch.device("meta"):
            model = family(info.config).build_pretraining(info.config, None)
        assert info.parameters.total == sum(p.numel() for p in model.parameters())
        return
    with torch.device("meta"):  # shapes only: bert-large costs no memory or init time
        model = BertForPreTraining(info.config)
    by_part: dict[str, int] = {}
    for name, parameter in model.named_parameters():  # tied decoder weight listed once
        by_part[part_of(name)] = by_part.get(part_of(name), 0) + parameter.numel()
    counts = info.parameters
    assert counts.total == sum(p.numel() for p in model.parameters())
    assert by_part == {part: getattr(counts, part) for part in by_part}
    assert counts.encoder == sum(p.numel() for p in model.bert.parameters())


def test_bert_base_numbers() -> None:
    counts = count_parameters(BertConfig())
    assert counts.encoder == 109_482_240  # the paper's "110M"
    assert counts.total == 110_106_428
    assert counts.matrices == 108_770_304  # "108.8M": no biases, LayerNorms, pooler or heads
    assert counts.encoder - counts.matrices == 82_944 + 38_400 + 590_592  # biases, LayerNorms, pooler
    text = format_info(model_info(BertConfig(vocab_size="auto")))
    assert "109,482,240" in text and "108,770,304" in text and "110M" in text and "assumed 30522" in text
    # 6·84.9M + 12·12·128·768 + 6·0.15·(768² + 768·30522)
    assert training_flops_per_token(BertConfig(), 128, 0.15) == pytest.approx(509_607_936 + 14_155_776 + 21_627_648)


@pytest.mark.parametrize("changes", [{}, {"embedding_size": 16, "share_layers": True},
                                     {"position_embedding_type": "rope"},
                                     {"position_embedding_type": "transformer_xl"}])
def test_flops_equal_a_flop_counter(changes: dict) -> None:
    config = BertConfig(vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=128, **changes)
    model = BertForPreTraining(config).train()
    batch, length = 4, 32
    input_ids = torch.randint(5, 300, (batch, length))
    labels = torch.full((batch, length), -100)
    labels[:, :8] = 7  # predicted share 8/32
    # the math kernel runs attention as matmuls, which the counter sees
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        model(input_ids, labels=labels, next_sentence_label=torch.zeros(batch, dtype=torch.long)).loss.backward()
    per_sequence_heads = 6 * (64 * 64 + 64 * 2)  # pooler and pair head, left out of the per-token figure
    expected = training_flops_per_token(config, length, 8 / 32) * batch * length + batch * per_sequence_heads
    if changes.get("position_embedding_type") == "transformer_xl":
        # Left out of the per-token figure: W_R, applied to the 2s - 1 distances once per batch
        # (here 3% of the step), and u·k.
        assert expected < counter.get_total_flops() < 1.05 * expected
    else:
        assert counter.get_total_flops() == expected


@pytest.mark.parametrize("positions", ["absolute", "transformer_xl"])
def test_activation_estimate_matches_saved_tensors(positions: str) -> None:
    """Bytes autograd keeps for backward (fused attention, fp32) are within 10% of the estimate."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=512, attention_probs_dropout_prob=0.0,
                        position_embedding_type=positions)
    model = BertForPreTraining(config).train()
    batch, length = 4, 64
    input_ids = torch.randint(5, 1000, (batch, length))
    labels = torch.full((batch, length), -100)
    labels[:, ::8] = 9  # 12.5% predicted
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids, labels=labels, next_sentence_label=torch.zeros(batch, dtype=torch.long))
    estimate = estimate_memory(config, length, 0.125, "fp32")
    assert sum(saved.values()) / batch == pytest.approx(estimate.activations_per_sequence, rel=0.10)
    assert estimate.activations_per_sequence_checkpointed < estimate.activations_per_sequence
    assert estimate.weights == 4 * count_parameters(config).total
    assert estimate.adamw_state == 2 * estimate.weights


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda path: path.stem)
def test_info_command_on_every_shipped_config(path: Path) -> None:
    result = CliRunner().invoke(app, ["info", "--config", str(path)])
    assert result.exit_code == 0, result.output
    total = model_info(load_config(path).model).parameters.total
    assert f"{total:,}" in result.output and "training FLOPs per token" in result.output


def test_info_on_a_missing_config_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["bertpre", "info", "--config", "absent.yaml"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_memory_lines_count_fp32_weights_gradients_and_two_adamw_moments():
    # BERT-base: 110,106,428 fp32 parameters are 420.0 MiB; AdamW keeps two moments
    assert memory_lines(model_info(BertConfig(vocab_size="auto"), precision="bf16")) == [
        "memory estimate (bf16 activations, fp32 weights and AdamW)",
        "  weights             420.0 MiB",
        "  gradients           420.0 MiB",
        "  AdamW state         840.0 MiB",
    ]


BERT_BASE = BertConfig(vocab_size=30522)
XLM_R_BASE = BertConfig(architecture="xlm-roberta", vocab_size=250002, max_position_embeddings=514,
                        pad_token_id=1, type_vocab_size=1)


@pytest.mark.parametrize("config", [BERT_BASE, XLM_R_BASE], ids=["bert-base", "xlm-r-base"])
def test_without_chunks_the_training_estimate_is_unchanged(config):
    """`model.loss_chunk_rows` 0 (or no micro-batch given) counts every predicted row's logits, as
    before the chunks were counted: the figures pinned from then (bf16, BERT at 128 tokens, XLM-R
    at 512, 15% predicted, micro-batch 32)."""
    length = 128 if config is BERT_BASE else 512
    pinned = {128: (46_396_339, 9_827_251, 1_761_702_848, 314_472_032),
              512: (286_721_740, 140_445_388, 4_452_722_976, 4_494_252_416)}[length]
    whole = replace(config, loss_chunk_rows=0)
    for memory in (estimate_memory(config, length, 0.15, "bf16"),
                   estimate_memory(whole, length, 0.15, "bf16", micro_batch_size=32)):
        assert (memory.activations_per_sequence, memory.activations_per_sequence_checkpointed) == pinned[:2]
        assert memory.loss_chunks is None
    assert training_memory_floor(whole, length, 0.15, 32) == pinned[2:]


def test_bert_base_at_128_tokens_is_not_chunked_and_its_estimate_is_unchanged():
    """32 × 128 at 15%: 614 predicted rows, under `auto`'s 4,352 a chunk (2²⁷ float32 logits)."""
    chunked = estimate_memory(BERT_BASE, 128, 0.15, "bf16", micro_batch_size=32)
    assert chunked == estimate_memory(BERT_BASE, 128, 0.15, "bf16") and chunked.loss_chunks is None
    assert training_memory_floor(BERT_BASE, 128, 0.15, 32) == (1_761_702_848, 314_472_032)


@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
def test_xlm_r_in_chunks_drops_the_rows_logits_for_the_decoders_gradients_and_one_chunk(device_type):
    """XLM-R-base, 32 × 512 at 12.5% (64 predicted rows a sequence, 2,048 a micro-batch), bf16:
    `auto` chunks of 512 rows (2²⁷ float32 logits over 250,002 ids, a multiple of 64), 4 of them.
    A row keeps no logits ((2 + 4)·V bytes less); the micro-batch holds the float32 (V, E) and (V,)
    gradients and one chunk at its most: its logits and float32 log-probabilities, then the
    gradient's bf16 cast and its bf16 (V, E) product (on a CPU the product's float32 copy too)."""
    v, e, rows = 250_002, 768, 512
    whole = estimate_memory(replace(XLM_R_BASE, loss_chunk_rows=0), 512, 0.125, "bf16", micro_batch_size=32,
                            device_type=device_type)
    chunked = estimate_memory(XLM_R_BASE, 512, 0.125, "bf16", micro_batch_size=32, device_type=device_type)
    product = (2 + 4) * v * e if device_type == "cpu" else 2 * v * e
    chunk_bytes = 4 * v * e + 4 * v + rows * v * (2 + 4) + max(4 * rows * v, 2 * rows * v + product,
                                                              *([(2 + 4) * rows * v] if device_type == "cpu" else []))
    assert chunked.loss_chunks == LossChunks(rows=rows, count=4, bytes=chunk_bytes)
    assert whole.loss_chunks is None
    logits = 64 * (2 + 4) * v  # a sequence's
    assert whole.activations_per_sequence - chunked.activations_per_sequence == logits
    assert whole.activations_per_sequence_checkpointed - chunked.activations_per_sequence_checkpointed == logits
    assert whole.activation_peak(32) - chunked.activation_peak(32) == 32 * logits - chunk_bytes
    assert (whole.weights, whole.gradients, whole.adamw_state) == (chunked.weights, chunked.gradients,
                                                                  chunked.adamw_state)
    floor_whole, floor_chunked = (training_memory_floor(config, 512, 0.125, 32, device_type=device_type)
                                  for config in (replace(XLM_R_BASE, loss_chunk_rows=0), XLM_R_BASE))
    assert floor_whole[1] - floor_chunked[1] == 32 * logits - chunk_bytes > 0


def test_albert_s_chunks_read_its_embedding_width():
    """ALBERT's decoder reads the embedding width E (128), not the hidden size: its (V, E)
    gradients are V·E, in fp32 a chunk its logits and log-probabilities alone."""
    albert = BertConfig(vocab_size=30000, embedding_size=128, share_layers=True, loss_chunk_rows=256)
    chunks = estimate_memory(albert, 512, 0.125, "fp32", micro_batch_size=8).loss_chunks
    assert chunks == LossChunks(rows=256, count=2, bytes=4 * 30000 * 128 + 4 * 30000 + 256 * 30000 * 8)
