"""The optimizer and schedule: exact lr values, LAMB against its rule, the groups, a round trip."""
import math

import pytest
import torch
import yaml

from bertpre.config import load_config
from bertpre.model.bert import BertConfig, BertForPreTraining
from bertpre.train.checkpoint import load_checkpoint, save_checkpoint
from bertpre.train.lamb import Lamb
from bertpre.train.optim import (
    build_optimizer,
    learning_rate,
    scheduled_learning_rate,
    wsd_decay_start,
)
from bertpre.train.runtime import Runtime

SETTINGS = {"lr": 1e-3, "warmup_steps": 10, "max_steps": 110}


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant", "wsd"])
def test_warmup_is_linear_and_reaches_lr_on_its_last_step(schedule):
    assert learning_rate(0, schedule=schedule, **SETTINGS) == pytest.approx(1e-4, abs=1e-15)
    assert learning_rate(4, schedule=schedule, **SETTINGS) == pytest.approx(5e-4, abs=1e-15)
    assert learning_rate(9, schedule=schedule, **SETTINGS) == 1e-3
    assert learning_rate(10, schedule=schedule, **SETTINGS) == 1e-3


def test_linear_decay_mid_and_last_step():
    assert learning_rate(60, schedule="linear", **SETTINGS) == pytest.approx(5e-4, abs=1e-15)
    assert learning_rate(109, schedule="linear", **SETTINGS) == pytest.approx(1e-5, abs=1e-15)
    assert learning_rate(110, schedule="linear", **SETTINGS) == 0.0


def test_cosine_decay_mid_and_last_step():
    assert learning_rate(60, schedule="cosine", **SETTINGS) == pytest.approx(5e-4, abs=1e-15)
    last = 1e-3 * 0.5 * (1 + math.cos(math.pi * 99 / 100))
    assert learning_rate(109, schedule="cosine", **SETTINGS) == pytest.approx(last, abs=1e-18)
    assert learning_rate(35, schedule="cosine", **SETTINGS) == pytest.approx(
        1e-3 * 0.5 * (1 + math.cos(math.pi / 4)), abs=1e-15)


def test_constant_after_warmup_and_no_warmup():
    assert learning_rate(109, schedule="constant", **SETTINGS) == 1e-3
    assert learning_rate(0, lr=2e-4, warmup_steps=0, max_steps=100, schedule="linear") == 2e-4
    assert learning_rate(99, lr=2e-4, warmup_steps=0, max_steps=100, schedule="linear") == pytest.approx(2e-6)


# WSD: 10 warmup steps, then lr until the last 22 of 110 steps (0.2 of them), then the decay.
WSD = {**SETTINGS, "schedule": "wsd", "decay_fraction": 0.2}


@pytest.mark.parametrize("shape", ["1-sqrt", "linear"])
def test_wsd_is_stable_until_the_last_fraction_of_the_steps(shape):
    assert wsd_decay_start(10, 110, 0.2) == 88
    assert learning_rate(9, decay_shape=shape, **WSD) == 1e-3  # warmup's last step
    assert learning_rate(10, decay_shape=shape, **WSD) == 1e-3  # stable
    assert learning_rate(87, decay_shape=shape, **WSD) == 1e-3
    assert learning_rate(88, decay_shape=shape, **WSD) == 1e-3  # the decay's first step, progress 0


def test_wsd_1_sqrt_decay_values():
    assert learning_rate(89, decay_shape="1-sqrt", **WSD) == pytest.approx(1e-3 * (1 - math.sqrt(1 / 22)), abs=1e-18)
    assert learning_rate(109, decay_shape="1-sqrt", **WSD) == pytest.approx(1e-3 * (1 - math.sqrt(21 / 22)), abs=1e-18)
    assert learning_rate(110, decay_shape="1-sqrt", **WSD) == 0.0


def test_wsd_linear_decay_values():
    assert learning_rate(99, decay_shape="linear", **WSD) == pytest.approx(5e-4, abs=1e-18)
    assert learning_rate(109, decay_shape="linear", **WSD) == pytest.approx(1e-3 / 22, abs=1e-18)
    assert learning_rate(110, decay_shape="linear", **WSD) == 0.0


def test_wsd_defaults_are_a_fifth_of_the_steps_and_1_sqrt():
    settings = {"lr": 1e-3, "warmup_steps": 0, "max_steps": 100, "schedule": "wsd"}
    assert learning_rate(80, **settings) == 1e-3
    assert learning_rate(85, **settings) == pytest.approx(5e-4, abs=1e-18)  # 1 - √(5/20)
    assert learning_rate(99, **settings) == pytest.approx(1e-3 * (1 - math.sqrt(19 / 20)), abs=1e-18)


def test_a_wsd_decay_longer_than_what_follows_warmup_starts_at_warmup_end():
    assert wsd_decay_start(10, 20, 0.8) == 10  # the last 16 of 20 steps would begin inside warmup
    assert wsd_decay_start(0, 100, 1.0) == 0  # all decay: 1-sqrt from the first step
    assert learning_rate(9, lr=1e-3, warmup_steps=10, max_steps=20, schedule="wsd", decay_fraction=0.8) == 1e-3
    assert learning_rate(15, lr=1e-3, warmup_steps=10, max_steps=20, schedule="wsd", decay_fraction=0.8,
                         decay_shape="linear") == pytest.approx(5e-4, abs=1e-18)


def test_wsd_over_phases_decays_at_each_schedule_span_end(tmp_path):
    """`continue` phases share one WSD span, so its stable lr crosses their boundary; a
    `restart` phase has its own warmup, stable phase and decay."""
    path = tmp_path / "phased.yaml"
    path.write_text(yaml.safe_dump({
        "optim": {"schedule": "wsd", "decay_fraction": 0.5, "warmup_steps": 2, "lr": 2e-3},
        "phases": [{"steps": 4}, {"steps": 4, "lr_schedule": "continue"},
                   {"steps": 4, "optim": {"lr": 1e-3, "warmup_steps": 1}}]}))
    config = load_config(path)
    assert (config.schedule_span(1), config.schedule_span(2)) == ((0, 8), (8, 12))
    lrs = [scheduled_learning_rate(config, step) for step in range(12)]
    assert lrs == pytest.approx([1e-3, 2e-3, 2e-3, 2e-3,  # warmup, stable (the span of steps 0-7)
                                 2e-3, 2e-3 * (1 - math.sqrt(1 / 4)), 2e-3 * (1 - math.sqrt(2 / 4)),
                                 2e-3 * (1 - math.sqrt(3 / 4)),  # its decay: the last 4 steps
                                 1e-3, 1e-3, 1e-3, 1e-3 * (1 - math.sqrt(1 / 2))], abs=1e-18)  # steps 8-11


# LAMB: one and two steps against the rule written out here, the groups, and a checkpoint.

BETAS, EPS, LR = (0.9, 0.999), 1e-6, 0.1


def lamb_by_hand(param: torch.Tensor, grads: list[torch.Tensor], weight_decay: float) -> torch.Tensor:
    """`param` after one LAMB update per gradient in `grads`, written out from the paper."""
    p, m, v = param.clone(), torch.zeros_like(param), torch.zeros_like(param)
    for t, g in enumerate(grads, start=1):
        m = BETAS[0] * m + (1 - BETAS[0]) * g
        v = BETAS[1] * v + (1 - BETAS[1]) * g * g
        m_hat, v_hat = m / (1 - BETAS[0] ** t), v / (1 - BETAS[1] ** t)
        u = m_hat / (v_hat.sqrt() + EPS) + weight_decay * p
        p_norm, u_norm = p.norm().item(), u.norm().item()
        ratio = p_norm / u_norm if p_norm > 0 and u_norm > 0 else 1.0
        p = p - LR * ratio * u
    return p


def lamb_steps(params: list[torch.Tensor], grads: list[list[torch.Tensor]],
               weight_decays: list[float]) -> Lamb:
    optimizer = Lamb([{"params": [p], "weight_decay": wd} for p, wd in zip(params, weight_decays, strict=True)],
                     lr=LR, betas=BETAS, eps=EPS)
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
    return optimizer


@pytest.mark.parametrize("steps", [1, 2])
def test_lamb_matches_the_rule_written_out(steps):
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(4, 3, generator=generator, dtype=torch.float64)
    bias = torch.randn(3, generator=generator, dtype=torch.float64)
    zeros = torch.zeros(5, dtype=torch.float64)  # ‖p‖ = 0: the ratio is 1, a plain Adam step
    start = [matrix, bias, zeros]
    grads = [[torch.randn(p.shape, generator=generator, dtype=torch.float64) for p in start]
             for _ in range(steps)]
    params, weight_decays = [p.clone() for p in start], [0.01, 0.0, 0.0]
    lamb_steps(params, grads, weight_decays)
    for index, (p, p0, wd) in enumerate(zip(params, start, weight_decays, strict=True)):
        expected = lamb_by_hand(p0, [g[index] for g in grads], wd)
        torch.testing.assert_close(p, expected, rtol=1e-12, atol=1e-15)
    # The first step moves every element of the zero tensor by exactly lr (Adam's |m̂/√v̂| = 1).
    if steps == 1:
        torch.testing.assert_close(params[2], -LR * grads[0][2].sign(), rtol=1e-5, atol=0)


def test_lamb_update_of_a_parameter_is_lr_times_its_norm():
    """The trust ratio makes the step's length lr·‖p‖, whatever the gradient's scale."""
    param = torch.full((3, 3), 2.0, dtype=torch.float64)
    start = param.clone()
    lamb_steps([param], [[torch.full((3, 3), 1e-3, dtype=torch.float64)]], [0.0])
    assert (param - start).norm().item() == pytest.approx(LR * start.norm().item(), rel=1e-12)


def test_lamb_zero_gradient_and_zero_param_leave_the_tensor_unchanged():
    param = torch.zeros(4)
    lamb_steps([param], [[torch.zeros(4)]], [0.01])  # ‖u‖ = 0 too: ratio 1, no NaN
    assert torch.equal(param, torch.zeros(4))


def tiny_bert() -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=64,
                                         max_position_embeddings=32))


@pytest.mark.parametrize("name, kind", [("adamw", torch.optim.AdamW), ("lamb", Lamb)])
def test_build_optimizer_chooses_by_name_with_decay_on_matrices_only(name, kind):
    model = tiny_bert()
    optim = load_config(None, [f"optim.name={name}", "optim.lr=3e-3", "optim.weight_decay=0.02"]).optim
    optimizer = build_optimizer(model, optim, torch.device("cpu"))
    assert type(optimizer) is kind
    decay, no_decay = optimizer.param_groups
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (0.02, 0.0)
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert {id(p) for p in no_decay["params"]} >= {id(model.bert.embeddings.LayerNorm.weight),
                                                   id(model.bert.encoder.layer[0].output.dense.bias)}
    assert (decay["lr"], decay["betas"], decay["eps"]) == (3e-3, (0.9, 0.999), 1e-6)


def test_lamb_state_survives_a_checkpoint_round_trip(tmp_path):
    def one_step(model, optimizer):
        input_ids = torch.arange(5, 21).reshape(2, 8)
        model(input_ids, labels=input_ids, next_sentence_label=torch.tensor([0, 1])).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    runtime = Runtime(device=torch.device("cpu"))
    optim = load_config(None, ["optim.name=lamb", "optim.lr=1e-2"]).optim
    model = tiny_bert()
    model.eval()  # no dropout: the two runs below see the same gradients
    optimizer = build_optimizer(model, optim, runtime.device)
    one_step(model, optimizer)
    folder = save_checkpoint(tmp_path, 1, model=model, optimizer=optimizer, scaler=None,
                             trainer_state={"epoch": 0, "position": 0, "skipped_steps": 0},
                             runtime=runtime, keep_last=1)
    fresh = tiny_bert()
    fresh.eval()
    fresh_optimizer = build_optimizer(fresh, optim, runtime.device)
    load_checkpoint(folder, model=fresh, optimizer=fresh_optimizer, scaler=None, runtime=runtime)
    one_step(model, optimizer)
    one_step(fresh, fresh_optimizer)
    assert all(state["step"] == 2 for state in fresh_optimizer.state.values())
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
