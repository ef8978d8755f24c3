"""bertpre.batches.keyed_random: stateless draws from (key, counter)."""

from __future__ import annotations

import math

import numpy as np

from bertpre.batches import keyed_random


def test_python_and_numpy_draws_agree():
    for key in (0, 5, 2**64 - 1, 123_456_789_123):
        for counter in (0, 1, 2**40 + 3):
            vector = keyed_random.random_bits(np.array([key], np.uint64), counter)
            assert keyed_random.random_bits_int(key, counter) == int(vector[0])


def test_draws_are_uniform_and_depend_on_key_and_counter():
    draws = keyed_random.uniform(np.uint64(7), np.arange(20_000))
    assert draws.min() >= 0 and draws.max() < 1
    assert abs(draws.mean() - 0.5) < 4.5 * math.sqrt(1 / 12 / len(draws))
    assert not np.array_equal(draws[:100], keyed_random.uniform(np.uint64(8), np.arange(100)))
    integers = keyed_random.integers(np.uint64(3), np.arange(6000), 1, 6)
    assert set(integers.tolist()) == {1, 2, 3, 4, 5, 6}
    assert keyed_random.derive_key(1, 2) != keyed_random.derive_key(2, 1)
    assert keyed_random.derive_key(1, 2) == keyed_random.derive_key(1, 2)
