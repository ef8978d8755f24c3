"""Stateless random numbers: every draw is a hash of (key, counter), so no generator state exists.

Pair sampling and masking use this instead of seeded generators so that a draw depends only on
*what* it is for (seed, epoch, document, instance, position), never on which worker made it or
on what was drawn before. The hash is SplitMix64's finalizer (Steele et al., 2014), applied to
numpy uint64 arrays, where multiplication wraps around modulo 2**64 as the algorithm needs.
"""

from __future__ import annotations

import numpy as np

GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_MASK_64 = (1 << 64) - 1


def mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer: a bijective hash of uint64 values, element-wise."""
    z = np.atleast_1d(np.asarray(values, dtype=np.uint64))
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    return z ^ (z >> np.uint64(31))


def derive_key(*parts: int) -> int:
    """One 64-bit key from a tuple of integers, e.g. ``derive_key(seed, epoch)``."""
    key = np.array([0x5EED], dtype=np.uint64)
    for part in parts:
        key = mix64(key + GOLDEN_GAMMA + np.array([int(part) & _MASK_64], dtype=np.uint64))
    return int(key[0])


def derive_keys(key: int, indices: np.ndarray) -> np.ndarray:
    """Vectorized ``derive_key(*parts_of(key), index)`` for many indices at once: uint64 keys."""
    base = mix64(np.array([key], dtype=np.uint64) + GOLDEN_GAMMA)
    return mix64(base + GOLDEN_GAMMA + np.asarray(indices).astype(np.uint64))


def random_bits(keys: np.ndarray, counters: np.ndarray | int) -> np.ndarray:
    """64 random bits per (key, counter) pair; ``keys`` and ``counters`` broadcast together."""
    # At least 1-d: numpy scalars warn on the wrap-around that arrays do silently.
    keys = np.atleast_1d(np.asarray(keys, dtype=np.uint64))
    counters = np.atleast_1d(np.asarray(counters).astype(np.uint64))
    return mix64(keys + (counters + np.uint64(1)) * GOLDEN_GAMMA)


def random_bits_int(key: int, counter: int) -> int:
    """`random_bits` for one (key, counter) in plain Python ints: cheaper than numpy for one draw."""
    z = (key + (counter + 1) * 0x9E3779B97F4A7C15) & _MASK_64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK_64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK_64
    return z ^ (z >> 31)


def uniform(keys: np.ndarray, counters: np.ndarray | int) -> np.ndarray:
    """Floats in [0, 1) with 53 random bits, one per broadcast (key, counter) pair."""
    return (random_bits(keys, counters) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def integers(keys: np.ndarray, counters: np.ndarray | int, low, high) -> np.ndarray:
    """Integers uniform in [low, high] (both inclusive, broadcast) as int64."""
    low = np.asarray(low, dtype=np.int64)
    span = np.asarray(high, dtype=np.int64) - low + 1
    # floor(u * span) is uniform up to a 2**-53 bias, far below anything a test could see.
    return low + np.floor(uniform(keys, counters) * span).astype(np.int64)
