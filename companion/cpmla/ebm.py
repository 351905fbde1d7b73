"""The energy-based model p_θ(x) = exp(f_θ(x)) / Z(θ), f_θ the *negative* energy (paper §2).

Maximum likelihood by contrastive divergence: ∇_θ L = E_data[∇_θ f_θ(x)] − E_{p_θ}[∇_θ f_θ(x̂)], the model
expectation taken over sampler outputs x̂ (here mirror Langevin chains, Alg. 2). The toy EBM of App. I is a
4-layer MLP with Swish (SiLU) activations.
"""

from __future__ import annotations

import torch
from torch import nn

from companion.core import check_float, check_int


class EBM(nn.Module):
    """f_θ: R^d → R, ``depth`` linear layers with Swish in between (App. I: 4 layers)."""

    def __init__(self, dim: int, hidden: int = 64, depth: int = 4, seed: int | None = None, dtype=torch.float64):
        super().__init__()
        self.dim = check_int("dim", dim, lo=1)
        check_int("depth", depth, lo=2)
        if seed is not None:
            torch.manual_seed(seed)
        sizes = [dim] + [check_int("hidden", hidden, lo=1)] * (depth - 1) + [1]
        layers = []
        for i in range(depth):
            layers.append(nn.Linear(sizes[i], sizes[i + 1], dtype=dtype))
            if i < depth - 1:
                layers.append(nn.SiLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)

    def log_prob(self, x):
        """f_θ(x) = log p_θ(x) + log Z(θ)."""
        return self(x)

    def grad_log_prob(self, x):
        """∇_x f_θ(x) (no graph kept: for samplers)."""
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            (g,) = torch.autograd.grad(self(x).sum(), x)
        return g.detach()


def cd_loss(ebm: EBM, x_data, x_model, energy_reg: float = 0.0):
    """Contrastive divergence: minimising E_model[f] − E_data[f] ascends the log-likelihood;
    ``energy_reg`` adds λ·E[f²] on both sets (a common stabiliser; 0 = the paper's plain CD)."""
    check_float("energy_reg", energy_reg, lo=0)
    f_data, f_model = ebm(x_data), ebm(x_model.detach())
    loss = f_model.mean() - f_data.mean()
    if energy_reg:
        loss = loss + energy_reg * ((f_data ** 2).mean() + (f_model ** 2).mean())
    return loss
