"""bench.step_cost: a tiny BERT's traced step, counted exactly (hidden 32, 2 layers, 4 x 32, no padding)."""
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives at the repository root

from bench import step_cost  # noqa: E402

BATCH, LENGTH, HIDDEN, LAYERS = 4, 32, 32, 2
HIDDEN_STATE = BATCH * LENGTH * HIDDEN  # elements of one (B, T, C) activation; no weight of tiny's has as many
LINEARS = 6 * LAYERS + 4  # q, k, v, attention output, FFN in and out a layer; pooler, MLM transform, decoder, pair


def trace(**changes):
    shape = step_cost.StepShape("bert", "tiny", BATCH, LENGTH, short_rows=0.0, changes=changes)
    kernels, totals, config = step_cost.trace_step(shape)
    return kernels, step_cost.summarize(kernels, totals, config, shape)


@pytest.fixture(scope="module")
def fp32_layernorm():
    # CUDA autocast's LayerNorm and the whole last layer: the step profiled on the H100
    return trace(low_precision_layernorm=False, last_layer_rows=False)


@pytest.fixture(scope="module")
def bf16_layernorm():
    return trace(last_layer_rows=False)  # low_precision_layernorm auto, on under bf16 autocast


@pytest.fixture(scope="module")
def rows_read():
    return trace(low_precision_layernorm=False)  # the default: the last layer on the rows the heads read


def hidden_state_kernels(kernels, phase: str, cast: bool) -> Counter:
    """Kernels of `phase` writing a float32 (B, T, C) activation: casts to or from it, or the rest."""
    return Counter(k.op for k in kernels.kernels if k.phase == phase and k.numel == HIDDEN_STATE
                   and (k.cast is not None) == cast and ("torch.float32" in (k.cast or (k.dtype,))))


def test_matrix_products_layer_norms_and_syncs_are_counted_exactly(fp32_layernorm):
    kernels, report = fp32_layernorm
    # each Linear one addmm forward; backward one mm for its input's gradient, one for its weight's
    assert report["matmuls"] == {"addmm": LINEARS, "mm": 2 * LINEARS}
    assert report["layer_norms"] == {"forward": 2 * LAYERS + 2, "backward": 2 * LAYERS + 2}
    assert report["host_syncs"] == 0
    attention = [k for k in kernels.kernels if k.kind == "attention"]
    assert [k.phase for k in attention] == ["forward"] * LAYERS + ["backward"] * LAYERS
    assert report["attention_tflop"] * 1e12 == 3 * 4 * BATCH * LENGTH**2 * HIDDEN * LAYERS
    slots, intermediate, vocab = 4, 64, 30522  # (B, P) predictions: round(0.15 * 29) a row
    forward = 2 * (BATCH * LENGTH * (4 * HIDDEN**2 + 2 * HIDDEN * intermediate) * LAYERS  # the layers
                   + BATCH * HIDDEN**2 + BATCH * 2 * HIDDEN  # pooler, pair classifier on [CLS]
                   + BATCH * slots * (HIDDEN**2 + HIDDEN * vocab))  # MLM transform and decoder
    assert report["matmul_tflop"] * 1e12 == 3 * forward  # backward: twice the forward


def test_the_fp32_residual_stream_is_cast_into_every_layer(fp32_layernorm):
    """CUDA autocast's fp32 LayerNorm: q, k, v and the FFN each cast the same fp32 state to bf16
    (4 a layer), and the backward casts their gradients back."""
    kernels, report = fp32_layernorm
    assert hidden_state_kernels(kernels, "forward", cast=True) == {"_to_copy": 4 * LAYERS}
    # the embeddings' three tables added (2), each layer's 2 residual adds, LayerNorms, embedding dropout
    assert hidden_state_kernels(kernels, "forward", cast=False) == {
        "embedding": 2, "add": 2 + 2 * LAYERS, "native_layer_norm": 2 * LAYERS + 1, "native_dropout": 1}


def test_the_report_predicts_a_step_from_its_fit(fp32_layernorm):
    _, report = fp32_layernorm
    ms = report["predicted_h100_ms"]
    assert ms["step"] == pytest.approx(ms["matmul"] + ms["attention"] + ms["other"] + ms["optimizer"])
    assert ms["optimizer"] == step_cost.FIT.optimizer_ms
    assert report["fit"]["source"] == step_cost.FIT.source


def test_profile_rows_read_self_cuda_times():
    header = ("Name  Self CPU %  Self CPU  CPU total %  CPU total  CPU time avg  Self CUDA  Self CUDA %  "
              "CUDA total  CUDA time avg  # of Calls")
    table = "\n".join([header, "aten::mm  6.65%  8.859ms  9.91%  13.192ms  43.394us  34.888ms  23.49%  34.888ms  "
                       "114.765us  304", "aten::add  0.1%  1us  0.1%  1us  1us  500.000us  1%  1us  1us  2"])
    assert step_cost.profile_rows(table) == {"aten::mm": 34.888, "aten::add": 0.5}


def test_a_bf16_residual_stream_casts_only_at_the_embeddings(fp32_layernorm, bf16_layernorm):
    """model.low_precision_layernorm: the embeddings' sum is cast once into bf16 by their LayerNorm
    (its gradient once back); no layer casts its input, and no fp32 (B, T, C) kernel runs after the
    embeddings, forward or backward, with the same matrix products and LayerNorms."""
    kernels, report = bf16_layernorm
    assert hidden_state_kernels(kernels, "forward", cast=True) == {"_to_copy": 1}
    assert hidden_state_kernels(kernels, "backward", cast=True) == {"_to_copy": 1}
    assert hidden_state_kernels(kernels, "forward", cast=False) == {"embedding": 2, "add": 2}
    assert hidden_state_kernels(kernels, "backward", cast=False) == {}
    old = fp32_layernorm[1]
    assert (report["matmuls"], report["layer_norms"], report["host_syncs"]) == \
        (old["matmuls"], old["layer_norms"], old["host_syncs"])
    assert report["gb_other"] < old["gb_other"] and report["gb_casts"] < old["gb_casts"]


def test_the_last_layer_computes_the_rows_read_alone(fp32_layernorm, rows_read):
    """model.last_layer_rows: the last layer's keys and values from all T tokens, its query,
    attention output and feed-forward on R = 1 + P rows ([CLS] and the prediction slots); the
    same Linears, LayerNorms, no host sync (fixed shapes: gather, no nonzero)."""
    _, whole = fp32_layernorm
    _, report = rows_read
    slots, intermediate = 4, 64
    rows = 1 + slots
    saved = 2 * (BATCH * (LENGTH - rows) * (2 * HIDDEN**2 + 2 * HIDDEN * intermediate))  # q, output, FFN in and out
    assert (whole["matmul_tflop"] - report["matmul_tflop"]) * 1e12 == pytest.approx(3 * saved, abs=1)
    assert report["attention_tflop"] * 1e12 == 3 * 4 * BATCH * LENGTH * HIDDEN * (LENGTH * (LAYERS - 1) + rows)
    assert sum(report["matmuls"].values()) == sum(whole["matmuls"].values())
    assert report["layer_norms"] == whole["layer_norms"] and report["host_syncs"] == 0
    assert report["gb_other"] < whole["gb_other"]
