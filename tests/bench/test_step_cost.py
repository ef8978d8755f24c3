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
    # the step profiled on the H100: CUDA autocast's float32 LayerNorm, three projections, the whole last layer
    return trace(low_precision_layernorm=False, fused_qkv=False, last_layer_rows=False)


@pytest.fixture(scope="module")
def bf16_layernorm():
    return trace(fused_qkv=False, last_layer_rows=False)  # LayerNorm's change alone: auto, on under bf16


@pytest.fixture(scope="module")
def default_step():
    return trace(last_layer_rows=False)  # bf16 LayerNorm and one QKV product


@pytest.fixture(scope="module")
def rows_read():
    return trace(low_precision_layernorm=False, fused_qkv=False)  # the last layer's change alone


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
    ms = report["predicted_ms"]
    assert ms["step"] == pytest.approx(ms["matmul"] + ms["attention"] + ms["other"] + ms["kernels"] + ms["optimizer"])
    assert ms["kernels"] == pytest.approx(report["kernels"] * step_cost.FIT.kernel_us / 1e3)
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


def test_one_qkv_product_a_layer_reads_the_hidden_state_once(bf16_layernorm, default_step):
    """model.fused_qkv: one (3C, C) product a layer forward and its two backward, the same FLOPs;
    fewer kernels a step and less matrix-product traffic (the input read once, not three times)."""
    old, new = bf16_layernorm[1], default_step[1]
    assert new["matmuls"] == {"addmm": LINEARS - 2 * LAYERS, "mm": 2 * (LINEARS - 2 * LAYERS)}
    assert new["matmul_tflop"] == pytest.approx(old["matmul_tflop"], rel=1e-12)
    assert new["kernels"] < old["kernels"] and new["gb_matmul_io"] < old["gb_matmul_io"]
    assert new["predicted_ms"]["step"] < old["predicted_ms"]["step"]


def profiled(gb: float, kernels: int, rest_ms: float, name: str) -> step_cost.ProfiledStep:
    """A profiled step whose rest (bytes and kernels) took `rest_ms`."""
    report = {"gb_other": gb, "kernels": kernels, "matmul_tflop": 10.0, "attention_tflop": 0.5,
              "shape": {"seq_length": 128}}
    recorded = {"machine": {"gpu": {"name": "GPU"}}, "date": "2026-11-28"}
    return step_cost.ProfiledStep(Path(name), recorded, report, step_ms=rest_ms + 20 + 5 + step_cost.OPTIMIZER_MS,
                                  matmul_ms=20.0, attention_ms=5.0)


def test_two_profiles_solve_bandwidth_and_the_cost_of_a_kernel(monkeypatch):
    """An A/B pair moving bytes and kernels differently: 4 TB/s and 12 µs a kernel come back."""
    steps = {"a": profiled(90.0, 1000, 90 / 4 + 12.0, "a"), "b": profiled(50.0, 700, 50 / 4 + 700 * 0.012, "b")}
    monkeypatch.setattr(step_cost, "profiled_step", lambda path: steps[str(path)])
    fit = step_cost.refit([Path("a"), Path("b")])
    assert fit.bandwidth_tb_s == pytest.approx(4.0, abs=0.01) and fit.kernel_us == pytest.approx(12.0, abs=0.1)
    assert fit.matmul_tflops == pytest.approx(500.0) and "a, b" in fit.source
    # one profile: the bandwidth over what the current kernel cost leaves
    one = step_cost.refit([Path("a")])
    assert one.kernel_us == step_cost.FIT.kernel_us
    assert one.bandwidth_tb_s == pytest.approx(90 / (90 / 4 + 12.0 - 1000 * step_cost.FIT.kernel_us / 1e3), abs=0.01)
    # bytes and kernels in proportion: nothing to solve, said in one line
    steps["c"] = profiled(45.0, 500, 30.0, "c")
    with pytest.raises(SystemExit, match="in proportion"):
        step_cost.refit([Path("a"), Path("c")])


def test_a_record_names_the_runtime_keys_its_step_ran():
    old = step_cost.profiled_runtime({})  # 2026-11-26: before any switch
    assert old["low_precision_layernorm"] is False and old["fused_qkv"] is False
    first = step_cost.profiled_runtime({"model_changes": {}})  # 2026-11-28's first run
    assert first["low_precision_layernorm"] == "auto" and first["fused_qkv"] is False
    recorded = step_cost.profiled_runtime({"model_changes": {"fused_qkv": False},
                                           "model_runtime": {"low_precision_layernorm": "auto", "fused_qkv": False}})
    assert recorded == {**old, "low_precision_layernorm": "auto", "fused_qkv": False}


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


def test_the_peer_is_traced_on_the_same_batch_with_its_head_on_every_position(fp32_layernorm):
    """`--peer`: transformers.BertForPreTraining's step, whose MLM decoder reads every position
    where bertpre's reads the predicted rows; the same batch, so the same real tokens."""
    shape = step_cost.StepShape("bert", "tiny", BATCH, LENGTH, short_rows=0.0)
    kernels, totals, config = step_cost.trace_step(shape, peer=True)
    peer = step_cost.summarize(kernels, totals, config, shape)
    ours_kernels, ours = fp32_layernorm
    decoder = 2 * BATCH * LENGTH * HIDDEN * config.vocab_size  # forward FLOPs of the decoder on all B·T rows
    forward_flops = lambda trace: {k.flops for k in trace.kernels if k.kind == "matmul" and k.phase == "forward"}  # noqa: E731
    assert decoder in forward_flops(kernels) and decoder not in forward_flops(ours_kernels)
    assert peer["tokens"] == ours["tokens"] and peer["matmul_tflop"] > ours["matmul_tflop"]
    assert Counter(k.op for k in kernels.kernels)["native_layer_norm"] == 2 * LAYERS + 2  # embeddings, MLM transform


def test_modernberts_rotation_runs_in_bf16_without_a_float32_copy():
    """model.low_precision_rotary: under bf16 autocast q and k are rotated as Wqkv gave them, with
    no float32 (B, T, C)-sized kernel (cast or arithmetic) in a layer; off, each of q and k is cast to
    float32 and back and rotated there, the old path. The matrix products are the same."""
    def modernbert(switch):
        shape = step_cost.StepShape("modernbert", "tiny", BATCH, 64, short_rows=0.0,
                                    changes={"low_precision_rotary": switch})
        kernels, totals, config = step_cost.trace_step(shape)
        return kernels, step_cost.summarize(kernels, totals, config, shape)

    (on, on_report), (off, off_report) = modernbert("auto"), modernbert(False)
    layers, activation = 3, BATCH * 64 * 64  # tiny ModernBERT: 3 layers, hidden 64

    def fp32_rotation_kernels(trace):
        return Counter(k.op for k in trace.kernels if k.phase == "forward" and k.numel == activation
                       and "torch.float32" in (k.cast or (k.dtype,)) and k.op in ("_to_copy", "mul", "add", "cat"))

    assert fp32_rotation_kernels(on) == {"_to_copy": 1}  # the embeddings' sum into bf16 by their LayerNorm
    # q and k a layer, but the last layer's q of the rows read alone: each the cast up, x·cos, the
    # swapped halves, ·sin, the sum, the cast back
    rotations = 2 * layers - 1
    assert fp32_rotation_kernels(off) == {"_to_copy": 2 * rotations + 1, "mul": 2 * rotations, "add": rotations,
                                          "cat": rotations}
    assert on_report["matmuls"] == off_report["matmuls"]
    assert on_report["kernels"] < off_report["kernels"] and on_report["gb_casts"] < off_report["gb_casts"]


def test_varlen_attention_computes_whole_tiles_within_the_window():
    # 300 tokens: tiles of 128, 128, 44; a window of 64 reaches the next tile (nearest pair 1 apart), not
    # the one after (129 apart)
    assert step_cost.varlen_pairs([300], None) == 300 * 300
    assert step_cost.varlen_pairs([300], 64) == 128 * 128 * 2 + 44 * 44 + 2 * 128 * 128 + 2 * 128 * 44
    assert step_cost.varlen_pairs([300], 200) == 300 * 300
    # tiles of 2: (2, 2, 1) and (2, 2, 2, 1); a window of 1 computes each tile's block and its neighbours'
    assert step_cost.varlen_pairs([5, 7], 1, tile=2) == (4 + 4 + 1) + 2 * (4 + 2) + (4 + 4 + 4 + 1) + 2 * (4 + 4 + 2)


def test_an_unpadded_modernbert_step_is_traced_on_varlen_attention():
    """unpad=true: attention a GPU runs as `varlen_attn` (no attention dropout) is one kernel each way,
    at the pairs of its sequences; the last layer's rows read alone keep SDPA on the padded view."""
    shape = step_cost.StepShape("modernbert", "tiny", BATCH, 64, short_rows=0.0, changes={"unpad": True})
    kernels, totals, config = step_cost.trace_step(shape)
    varlen = [k for k in kernels.kernels if k.op.startswith("varlen_attention")]
    heads, head_size = 4, 16  # tiny ModernBERT: hidden 64, 4 heads; layer 0 global, 1 and 2 local
    pairs = BATCH * 64 * 64  # rows of 64, shorter than a tile: the window skips no block
    assert [(k.op, k.flops) for k in varlen] == [("varlen_attention", 4 * heads * head_size * pairs)] * 2 + [
        ("varlen_attention_backward", 8 * heads * head_size * pairs)] * 2
    assert Counter(k.op for k in kernels.kernels)["fused_attention"] == 1  # the last layer's rows
    bert, _, _ = step_cost.trace_step(step_cost.StepShape("bert", "tiny", BATCH, LENGTH, changes={"unpad": True}))
    assert not any(k.op.startswith("varlen") for k in bert.kernels)  # BERT's attention dropout 0.1
