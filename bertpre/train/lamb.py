"""LAMB: Adam's update rescaled per tensor by a trust ratio, for batches in the tens of thousands."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning").

    For each parameter tensor `p` with gradient `g` at step `t` (counted from 1):

        m = β1·m + (1 − β1)·g            v = β2·v + (1 − β2)·g²
        u = (m / (1 − β1^t)) / (sqrt(v / (1 − β2^t)) + eps) + weight_decay·p
        r = ‖p‖ / ‖u‖ when both norms are above 0, else 1
        p ← p − lr·r·u

    Bias correction is always on, as in NVIDIA's FusedLAMB default. The trust ratio `r` is
    applied to every tensor, also in groups with `weight_decay` 0 (biases, LayerNorm weights):
    this is NVLAMB, NVIDIA's variant used for its BERT recipe (apex's FusedLAMB does it with
    `use_nvlamb=True`; with its default `False`, and in Google's ALBERT LAMB, tensors without
    weight decay take the plain Adam step). Gradient clipping is the caller's, by global norm
    before `step()`, as for AdamW.

    State per tensor: `step` (a Python int), `exp_avg` and `exp_avg_sq`; `state_dict()` loads
    with `torch.load(weights_only=True)`. Plain torch ops, so any device works; nothing here
    reads a value back to the host.
    """

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0) -> None:
        if lr < 0:
            raise ValueError(f"lr must be 0 or more, got {lr}")
        if not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if eps <= 0:
            raise ValueError(f"eps must be above 0, got {eps}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be 0 or more, got {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One update of every parameter that has a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("Lamb does not support sparse gradients")
                state = self.state[param]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["step"] += 1
                update = adam_direction(param.grad, state["exp_avg"], state["exp_avg_sq"],
                                        step=state["step"], beta1=beta1, beta2=beta2, eps=group["eps"])
                if group["weight_decay"] != 0:
                    update.add_(param, alpha=group["weight_decay"])
                param.addcmul_(update, trust_ratio(param, update), value=-group["lr"])
        return loss


def adam_direction(grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, *,
                   step: int, beta1: float, beta2: float, eps: float) -> torch.Tensor:
    """Update the moments in place; return the bias-corrected Adam direction m̂ / (sqrt(v̂) + eps)."""
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denominator = (exp_avg_sq / (1 - beta2 ** step)).sqrt_().add_(eps)
    return (exp_avg / (1 - beta1 ** step)).div_(denominator)


def trust_ratio(param: torch.Tensor, update: torch.Tensor) -> torch.Tensor:
    """‖param‖ / ‖update‖ as a 0-d tensor on the parameter's device; 1 where either norm is 0."""
    param_norm = torch.linalg.vector_norm(param)
    update_norm = torch.linalg.vector_norm(update)
    both = (param_norm > 0) & (update_norm > 0)
    return torch.where(both, param_norm / update_norm, torch.ones_like(param_norm))
