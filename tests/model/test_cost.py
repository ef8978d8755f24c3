"""bertpre.model.cost: parameter counts against built models, FLOPs against a FLOP counter, memory."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from bertpre.cli import app, main
from bertpre.config import load_config
from bertpre.model.bert import BertConfig, BertForPreTraining
from bertpre.model.cost import count_parameters, estimate_memory, training_flops_per_token
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
