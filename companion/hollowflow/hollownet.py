"""HollowNet on an MLP (Chen & Duvenaud 2019; paper §2.3): the idea behind HollowFlow in its simplest form.

b_i(x) = τ_i(x_i, h_i) with h_i = c_i(x_¬i): the conditioner c_i sees every coordinate but x_i (a masked
input), the transformer τ_i sees x_i and h_i. Then J_b = J_diag + J_hollow, and with h detached a single
VJP with the all-ones vector returns the whole diagonal: ∇·b = 1ᵀ (∂τ/∂x)|_{h detached} 1.

This is the d = 1 case of Theorem 1 (one coordinate per "particle"). The conditioner costs D masked
passes here (D small), which is why HollowFlow replaces it by message passing on a pruned line graph.
"""

from __future__ import annotations

import torch
from torch import nn

from companion.core import ParameterError

__all__ = ["HollowMLP"]


class HollowMLP(nn.Module):
    """b: R^D → R^D with a block-diagonal-plus-hollow Jacobian (here diagonal plus hollow)."""

    def __init__(self, D: int = 4, hidden: int = 32):
        super().__init__()
        if isinstance(D, bool) or not isinstance(D, int) or D < 2:
            raise ParameterError("D", D, "an integer >= 2")
        self.D = D
        self.cond = nn.Sequential(nn.Linear(D, hidden), nn.Tanh(), nn.Linear(hidden, hidden))
        self.tau = nn.Sequential(nn.Linear(hidden + 1, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.register_buffer("mask", 1.0 - torch.eye(D))

    def forward(self, x: torch.Tensor, detach_h: bool = False) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.D:
            raise ParameterError("x", tuple(x.shape), f"(batch, {self.D})")
        h = self.cond(x[:, None, :] * self.mask.to(x.dtype))  # (B, D, hidden): h_i = c(x_¬i)
        if detach_h:
            h = h.detach()
        return self.tau(torch.cat([x[..., None], h], -1))[..., 0]

    def divergence(self, x: torch.Tensor) -> torch.Tensor:
        """∇·b from one VJP with h detached (the diagonal of J_τ)."""
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            (g,) = torch.autograd.grad(self(x, detach_h=True).sum(), x)
        return g.sum(-1)
