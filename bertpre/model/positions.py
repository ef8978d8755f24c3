"""Relative positions in attention: rotary embeddings (RoFormer) and Transformer-XL's relative bias.

Both replace BERT's absolute position table, so a model reads lengths it was never trained on.

- `rope`: queries and keys of each head are rotated by angles position · θ^(-2k/d) (the
  "rotate half" pairing of GPT-NeoX, LLaMA and ModernBERT), so q_i·k_j depends on i − j only.
- `transformer_xl`: score(i, j) = q_i·k_j + q_i·W_R R(i−j) + u·k_j + v·W_R R(i−j), with R the
  sinusoid of the signed distance i − j (both directions: an encoder attends both ways), W_R a
  per-layer projection and u, v learned per head and shared by the layers (Dai et al. 2019;
  XLNet's bidirectional form). All but q_i·k_j enters SDPA as an additive bias, so the fused
  kernels still do the rest.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

POSITION_EMBEDDING_TYPES = ("absolute", "transformer_xl", "rope")
TRANSFORMER_XL_BASE = 10000.0  # the sinusoids' wavelength base, as in Transformer-XL


class PositionInputs(NamedTuple):
    """What every layer's attention needs about positions, computed once per forward."""

    kind: str
    cos: torch.Tensor | None = None  # rope: (T, hs)
    sin: torch.Tensor | None = None
    sinusoids: torch.Tensor | None = None  # transformer_xl: R of distances T-1 … -(T-1), (2T-1, C)
    r_w_bias: torch.Tensor | None = None  # transformer_xl: u, (nh, hs)
    r_r_bias: torch.Tensor | None = None  # transformer_xl: v, (nh, hs)


def rotary_angles(positions: torch.Tensor, head_size: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's rotation angles, (T, hs), in float32."""
    inverse_frequency = theta ** (-torch.arange(0, head_size, 2, device=positions.device,
                                                dtype=torch.float32) / head_size)  # (hs/2,)
    angles = positions.float()[:, None] * inverse_frequency[None, :]  # (T, hs/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, hs): pairs (k, k + hs/2)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_k, x_{k+hs/2}) of every head by its position's angle; x (B, nh, T, hs)."""
    first, second = x.chunk(2, dim=-1)
    rotated_half = torch.cat([-second, first], dim=-1)
    return x * cos.to(x.dtype) + rotated_half * sin.to(x.dtype)


def sinusoid_table(distances: torch.Tensor, width: int) -> torch.Tensor:
    """Transformer-XL's R: [sin(d·f), cos(d·f)] for f = base^(-2k/width), (N, width), float32."""
    frequencies = TRANSFORMER_XL_BASE ** (-torch.arange(0, width, 2, device=distances.device,
                                                        dtype=torch.float32) / width)
    angles = distances.float()[:, None] * frequencies[None, :]  # (N, width/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def relative_distances(length: int, device: torch.device) -> torch.Tensor:
    """The signed distances i − j from T−1 down to −(T−1): row (T−1) − (i − j) holds i − j."""
    return torch.arange(length - 1, -length, -1, device=device)


def transformer_xl_bias(query: torch.Tensor, key: torch.Tensor, r: torch.Tensor,
                        r_w_bias: torch.Tensor, r_r_bias: torch.Tensor) -> torch.Tensor:
    """(u·k_j + (q_i + v)·r_{i−j}) / sqrt(hs), the score SDPA adds to q_i·k_j / sqrt(hs).

    Args:
        query, key: (B, nh, T, hs).
        r: W_R R(d) for the distances of `relative_distances`, (2T−1, nh, hs).
        r_w_bias, r_r_bias: u and v, (nh, hs).

    Returns:
        (B, nh, T, T).
    """
    B, nh, T, hs = query.shape
    content = torch.einsum("hd,bhjd->bhj", r_w_bias.to(key.dtype), key)[:, :, None, :]  # (B, nh, 1, T)
    by_distance = torch.einsum("bhid,nhd->bhin", query + r_r_bias.to(query.dtype)[None, :, None, :],
                               r.to(query.dtype))  # (B, nh, T, 2T-1)
    rows = torch.arange(T, device=query.device)
    index = (T - 1) - rows[:, None] + rows[None, :]  # (T, T): where i - j sits in `by_distance`
    position = by_distance.gather(-1, index.expand(B, nh, T, T))  # (B, nh, T, T)
    return (content + position) / math.sqrt(hs)
