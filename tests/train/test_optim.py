"""The learning-rate schedule: exact values at the points that matter."""
import math

import pytest

from bertpre.train.optim import learning_rate

SETTINGS = {"lr": 1e-3, "warmup_steps": 10, "max_steps": 110}


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
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
