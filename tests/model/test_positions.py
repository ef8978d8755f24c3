"""Relative positions: Transformer-XL's scores read straight off the formula, rotary scores that
depend on i − j only, and every variant training, resuming and evaluating past its length."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model import BertForPreTraining
from bertpre.model.bert import BertSelfAttention, attention_mask_for_sdpa
from bertpre.model.config import BertConfig
from bertpre.model.positions import apply_rotary, rotary_angles
from bertpre.train.trainer import pretrain

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
VARIANTS = ["absolute", "transformer_xl", "rope"]


def config(kind: str, **changes) -> BertConfig:
    values = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=16, attention_probs_dropout_prob=0.0,
                  hidden_dropout_prob=0.0, position_embedding_type=kind)
    return BertConfig(**(values | changes))


def sinusoid(distance: int, width: int) -> list[float]:
    """Transformer-XL's R(d), written out: [sin(d f_0), ..., cos(d f_0), ...], f_k = 10000^(-2k/width)."""
    frequencies = [10000 ** (-2 * k / width) for k in range(width // 2)]
    return [math.sin(distance * f) for f in frequencies] + [math.cos(distance * f) for f in frequencies]


def test_transformer_xl_attention_is_the_formula_pair_by_pair():
    torch.manual_seed(0)
    cfg = config("transformer_xl")
    attention = BertSelfAttention(cfg).double()
    u = torch.randn(2, 8, dtype=torch.float64)
    v = torch.randn(2, 8, dtype=torch.float64)
    from bertpre.model.positions import PositionInputs, relative_distances, sinusoid_table

    T, C, heads, size = 5, 16, 2, 8
    hidden = torch.randn(2, T, C, dtype=torch.float64)
    padding = torch.ones(2, T, dtype=torch.long)
    padding[1, 3:] = 0  # the second row's last two tokens are padding
    positions = PositionInputs("transformer_xl", sinusoids=sinusoid_table(relative_distances(T, "cpu"), C).double(),
                               r_w_bias=u, r_r_bias=v)
    got = attention(hidden, attention_mask_for_sdpa(padding), positions)  # (B, T, C)

    with torch.no_grad():
        q = attention.query(hidden).view(2, T, heads, size)
        k = attention.key(hidden).view(2, T, heads, size)
        values = attention.value(hidden).view(2, T, heads, size)
        W_R = attention.r_net.weight  # (C, C)
        expected = torch.zeros(2, T, heads, size, dtype=torch.float64)
        for b in range(2):
            for h in range(heads):
                for i in range(T):
                    scores = []
                    for j in range(T):
                        if not padding[b, j]:
                            scores.append(float("-inf"))
                            continue
                        r = (W_R @ torch.tensor(sinusoid(i - j, C), dtype=torch.float64)).view(heads, size)[h]
                        score = (q[b, i, h] @ k[b, j, h] + q[b, i, h] @ r + u[h] @ k[b, j, h] + v[h] @ r)
                        scores.append(float(score) / math.sqrt(size))
                    weights = torch.tensor(scores, dtype=torch.float64).softmax(-1)
                    expected[b, i, h] = weights @ values[b, :, h]
    torch.testing.assert_close(got, expected.reshape(2, T, C))


def test_rotary_scores_depend_on_the_distance_only():
    torch.manual_seed(1)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)

    def scores(start: int) -> torch.Tensor:
        cos, sin = rotary_angles(torch.arange(start, start + 6), 8, theta=10000.0)
        return apply_rotary(q, cos, sin) @ apply_rotary(k, cos, sin).transpose(-1, -2)

    torch.testing.assert_close(scores(0), scores(37), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scores(0), scores(1000), rtol=1e-4, atol=1e-4)
    # The same vectors at other distances score differently: positions do reach the scores.
    same = torch.randn(1, 1, 1, 8).expand(1, 1, 6, 8)
    cos, sin = rotary_angles(torch.arange(6), 8, theta=10000.0)
    rotated = apply_rotary(same, cos, sin)
    row = (rotated[..., :1, :] @ rotated.transpose(-1, -2))[0, 0, 0]
    assert len({round(float(value), 4) for value in row}) == 6
    assert torch.allclose(apply_rotary(same, cos, sin)[..., 0, :], same[..., 0, :])  # position 0: no turn


@pytest.mark.parametrize("kind", ["transformer_xl", "rope"])
def test_relative_models_read_past_their_length_and_have_no_position_table(kind):
    torch.manual_seed(0)
    model = BertForPreTraining(config(kind)).eval()
    names = dict(model.named_parameters())
    assert "bert.embeddings.position_embeddings.weight" not in names
    assert ("bert.encoder.r_w_bias" in names) == (kind == "transformer_xl")
    assert ("bert.encoder.layer.0.attention.self.r_net.weight" in names) == (kind == "transformer_xl")
    logits = model(torch.randint(5, 60, (2, 64))).prediction_logits  # 4x max_position_embeddings
    assert logits.shape == (2, 64, 60) and torch.isfinite(logits).all()


def test_absolute_positions_stop_at_the_table():
    model = BertForPreTraining(config("absolute")).eval()
    with pytest.raises(ValueError, match="exceeds max_position_embeddings 16"):
        model(torch.randint(5, 60, (1, 17)))


@pytest.mark.parametrize("kind", ["transformer_xl", "rope"])
@pytest.mark.parametrize("albert", [False, True])
def test_checkpointing_and_albert_sharing_give_the_same_gradients(kind, albert):
    extra = {"embedding_size": 8, "share_layers": True} if albert else {}
    torch.manual_seed(0)
    model = BertForPreTraining(config(kind, **extra)).train()
    ids = torch.randint(5, 60, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, 9:] = 0
    labels = torch.full((2, 12), -100)
    labels[:, 3] = 7

    def gradients(checkpointing: bool) -> dict[str, torch.Tensor]:
        model.zero_grad()
        model.set_gradient_checkpointing(checkpointing)
        model(ids, mask, labels=labels).loss.backward()
        return {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}

    plain, checkpointed = gradients(False), gradients(True)
    assert plain.keys() == checkpointed.keys()
    if kind == "transformer_xl":
        assert plain["bert.encoder.r_w_bias"].abs().sum() > 0 and plain["bert.encoder.r_r_bias"].abs().sum() > 0
    for name in plain:
        torch.testing.assert_close(plain[name], checkpointed[name], msg=name)


def test_config_refuses_unknown_types_and_odd_heads():
    with pytest.raises(UserError, match="position_embedding_type 'alibi' is not supported"):
        config("alibi").validate()
    with pytest.raises(UserError, match="rotates pairs"):
        config("rope", hidden_size=18, num_attention_heads=2).validate()
    with pytest.raises(UserError, match="rope_theta must be a number above 1"):
        config("rope", rope_theta=0.5).validate()


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(run_dir / "checkpoints" / latest / "model.safetensors")


@pytest.mark.parametrize("kind", VARIANTS)
def test_every_variant_trains_resumes_exactly_and_is_deterministic(kind, tiny_data, tmp_path):
    def run(out: Path, steps: int):
        return pretrain(load_config(TINY, [f"data.path={tiny_data}", f"train.out={out}", "train.log_every=1",
                                           "train.eval_every=1000", "train.save_every=3",
                                           f"train.max_steps={steps}", f"model.position_embedding_type={kind}"]))

    run(tmp_path / "a", 6)
    run(tmp_path / "b", 6)
    run(tmp_path / "resumed", 3)
    run(tmp_path / "resumed", 6)
    a, b, resumed = (final_weights(tmp_path / name) for name in ("a", "b", "resumed"))
    assert ("bert.embeddings.position_embeddings.weight" in a) == (kind == "absolute")
    for name in a:
        assert torch.equal(a[name], b[name]), name
        assert torch.equal(a[name], resumed[name]), name


@pytest.mark.parametrize("kind", ["transformer_xl", "rope"])
def test_relative_models_compile_to_one_graph(kind, tiny_data, tmp_path):
    import json

    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    steps = [f"data.path={tiny_data}", "train.log_every=1", "train.eval_every=1000", "train.max_steps=6",
             "train.save_every=1000", "model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0",
             f"model.position_embedding_type={kind}"]
    compiled = pretrain(load_config(TINY, [*steps, f"train.out={tmp_path / 'compiled'}", "train.compile=true"]))
    graph_breaks, stats = dict(counters["graph_break"]), dict(counters["stats"])
    torch._dynamo.reset()
    assert graph_breaks == {} and stats["unique_graphs"] == 1
    eager = pretrain(load_config(TINY, [*steps, f"train.out={tmp_path / 'eager'}"]))

    def losses(run_dir: Path) -> list[float]:
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [row["train/loss"] for row in rows if "train/loss" in row]

    assert compiled.step == 6 and losses(compiled.run_dir) == pytest.approx(losses(eager.run_dir), abs=2e-3)
