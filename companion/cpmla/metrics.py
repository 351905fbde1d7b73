"""Sample-quality metrics against exact samples: energy distance, sliced W2, MMD and KID.

KID here is the unbiased polynomial-kernel MMD² (Bińkowski et al. 2018) on features of a *fixed random*
network, not Inception (no weights can be downloaded); numbers are comparable within one run only.
"""

from __future__ import annotations

import math

import torch

from companion.core import check_int


def energy_distance(x, y):
    """2E‖X − Y‖ − E‖X − X'‖ − E‖Y − Y'‖ (V-statistic; ≥ 0, zero iff the laws agree)."""
    x, y = x.double(), y.double()
    return float(2 * torch.cdist(x, y).mean() - torch.cdist(x, x).mean() - torch.cdist(y, y).mean())


def sliced_w2(x, y, n_projections=64, seed=0):
    """Sliced 2-Wasserstein distance over ``n_projections`` fixed random directions (equal sizes by subsampling)."""
    check_int("n_projections", n_projections, lo=1)
    n = min(len(x), len(y))
    x, y = x[:n].double(), y[:n].double()
    gen = torch.Generator().manual_seed(seed)
    dirs = torch.randn(x.shape[1], n_projections, generator=gen, dtype=torch.float64).to(x.device)
    dirs = dirs / dirs.norm(dim=0, keepdim=True)
    px, _ = torch.sort(x @ dirs, 0)
    py, _ = torch.sort(y @ dirs, 0)
    return float(((px - py) ** 2).mean().sqrt())


class RandomFeatures(torch.nn.Module):
    """A fixed random ReLU network (seeded) used as the feature extractor for MMD / KID."""

    def __init__(self, dim, width=512, out=128, seed=0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.w1 = torch.nn.Parameter(torch.randn(dim, width, generator=gen) / math.sqrt(dim), requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.randn(width, out, generator=gen) / math.sqrt(width), requires_grad=False)

    def forward(self, x):
        return torch.relu(x.float() @ self.w1) @ self.w2


def kid(fx, fy):
    """Unbiased MMD² with the kernel (xᵀy / d + 1)³ between two feature sets."""
    d = fx.shape[1]
    kxx, kyy, kxy = ((fx @ fx.T) / d + 1) ** 3, ((fy @ fy.T) / d + 1) ** 3, ((fx @ fy.T) / d + 1) ** 3
    m, n = len(fx), len(fy)
    sxx = (kxx.sum() - kxx.diagonal().sum()) / (m * (m - 1))
    syy = (kyy.sum() - kyy.diagonal().sum()) / (n * (n - 1))
    return float(sxx + syy - 2 * kxy.mean())


def mmd_rbf(fx, fy):
    """Unbiased MMD² with a Gaussian kernel, bandwidth the median pairwise distance of the pooled set."""
    z = torch.cat([fx, fy]).double()
    dist2 = torch.cdist(z, z) ** 2
    bw = dist2[dist2 > 0].median()
    k = torch.exp(-dist2 / bw)
    m = len(fx)
    kxx, kyy, kxy = k[:m, :m], k[m:, m:], k[:m, m:]
    n = len(fy)
    return float((kxx.sum() - kxx.diagonal().sum()) / (m * (m - 1)) + (kyy.sum() - kyy.diagonal().sum()) / (n * (n - 1))
                 - 2 * kxy.mean())
