"""Targets with exact samples: the ill-conditioned Gaussian (κ = 100), 8 Gaussians, and upsampled digits.

The paper's toy is 8 Gaussians (50,000 samples, App. I); the κ = 100 Gaussian is this companion's known
target where the mirror Langevin stationary law is exact (see :func:`newton_stationary_covariance`).
Images cannot be downloaded here: the GPU section uses scikit-learn's bundled ``load_digits`` upsampled.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion.core import ParameterError, check_float, check_int

TARGETS = ("gaussian", "8gaussians")


class GaussianTarget:
    """N(mean, Σ): exact log-density, gradient, Hessian and samples."""

    def __init__(self, mean, cov, name="Gaussian"):
        self.mean = torch.as_tensor(mean, dtype=torch.float64)
        self.cov = torch.as_tensor(cov, dtype=torch.float64)
        self.dim = self.mean.numel()
        if self.cov.shape != (self.dim, self.dim):
            raise ParameterError("cov", tuple(self.cov.shape), f"a [{self.dim}, {self.dim}] matrix")
        self.precision = torch.linalg.inv(self.cov)
        self.chol = torch.linalg.cholesky(self.cov)
        self.name = name

    @property
    def covariance(self):
        return self.cov

    def log_prob(self, x):
        d = x - self.mean.to(x.dtype)
        return -0.5 * ((d @ self.precision.to(x.dtype)) * d).sum(1)

    def grad_log_prob(self, x):
        return -(x - self.mean.to(x.dtype)) @ self.precision.to(x.dtype)

    def hessian_neg_log_prob(self, x):
        return self.precision.to(x.dtype).expand(len(x), -1, -1)

    def sample(self, n, generator=None):
        eps = torch.randn(check_int("n", n, lo=1), self.dim, generator=generator, dtype=torch.float64)
        return self.mean + eps @ self.chol.T


def ill_conditioned_gaussian(kappa: float = 100.0, angle: float = math.pi / 4, offset: float = 2.0) -> GaussianTarget:
    """N(μ, R diag(1, 1/κ) Rᵀ): condition number κ, principal axes rotated by ``angle`` (so that the
    Hessian Σ⁻¹ is not diagonal and the diagonal approximation has something to miss), mean μ at
    ``offset`` along the major axis (so chains started near the origin must travel along the slow direction)."""
    check_float("kappa", kappa, lo=1.0)
    check_float("offset", offset)
    c, s = math.cos(angle), math.sin(angle)
    R = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    cov = R @ torch.diag(torch.tensor([1.0, 1.0 / kappa], dtype=torch.float64)) @ R.T
    return GaussianTarget(offset * R[:, 0], cov, name=f"Gaussian, κ = {kappa:g}")


class GaussianMixture:
    """Equal-weight mixture of isotropic Gaussians N(μ_j, σ²I)."""

    def __init__(self, means, std, name="mixture"):
        self.means = torch.as_tensor(means, dtype=torch.float64)
        self.std = check_float("std", std, lo=0, lo_open=True)
        self.dim = self.means.shape[1]
        self.name = name

    @property
    def covariance(self):
        mu = self.means.mean(0)
        d = self.means - mu
        return d.T @ d / len(self.means) + self.std ** 2 * torch.eye(self.dim, dtype=torch.float64)

    def _logits(self, x):
        d2 = ((x.unsqueeze(1) - self.means.to(x.dtype)) ** 2).sum(-1)
        return -0.5 * d2 / self.std ** 2

    def log_prob(self, x):
        return torch.logsumexp(self._logits(x), 1)

    def grad_log_prob(self, x):
        w = torch.softmax(self._logits(x), 1)
        return ((w.unsqueeze(-1) * self.means.to(x.dtype)).sum(1) - x) / self.std ** 2

    def hessian_neg_log_prob(self, x):
        w = torch.softmax(self._logits(x), 1)
        m = self.means.to(x.dtype)
        mean = (w.unsqueeze(-1) * m).sum(1)
        second = torch.einsum("bj,jd,je->bde", w, m, m)
        cov_w = second - mean.unsqueeze(2) * mean.unsqueeze(1)
        eye = torch.eye(self.dim, dtype=x.dtype)
        return eye / self.std ** 2 - cov_w / self.std ** 4

    def sample(self, n, generator=None):
        check_int("n", n, lo=1)
        idx = torch.randint(0, len(self.means), (n,), generator=generator)
        return self.means[idx] + self.std * torch.randn(n, self.dim, generator=generator, dtype=torch.float64)


def eight_gaussians(radius: float = 2.0, std: float = 0.25) -> GaussianMixture:
    """The 8-Gaussians toy: modes on a circle of ``radius``, each N(μ, std²I)."""
    check_float("radius", radius, lo=0, lo_open=True)
    angles = torch.arange(8, dtype=torch.float64) * (2 * math.pi / 8)
    means = radius * torch.stack([torch.cos(angles), torch.sin(angles)], 1)
    return GaussianMixture(means, std, name="8 Gaussians")


def newton_stationary_covariance(cov: torch.Tensor, eta: float, noise_diag: bool = False) -> torch.Tensor:
    """The exact stationary covariance of mirror Langevin on N(μ, Σ) with the Newton map G = ½xᵀΣ⁻¹x
    (the stationary mean is μ).

    In the dual, y = Σ⁻¹x and ∇f(x) = −(y − Σ⁻¹μ), so with ỹ = y − Σ⁻¹μ y_{k+1} = (1 − η) y_k + √(2η) ξ_k with ξ_k ~ N(0, D):
    Cov(y) = 2ηD / (1 − (1 − η)²) = D / (1 − η/2), and Cov(x) = Σ D Σ / (1 − η/2). The full Hessian
    (D = Σ⁻¹) gives Σ / (1 − η/2), a bias that vanishes as η → 0; the diagonal one (D = diag Σ⁻¹) does
    not converge to Σ at any η when Σ⁻¹ is not diagonal.
    """
    check_float("eta", eta, lo=0, lo_open=True, hi=2, hi_open=True)
    P = torch.linalg.inv(cov)
    D = torch.diag(torch.diagonal(P)) if noise_diag else P
    return cov @ D @ cov / (1 - eta / 2)


def upsampled_digits(size: int = 16, n: int | None = None, seed: int = 0) -> np.ndarray:
    """scikit-learn's bundled 8×8 digits, bilinearly upsampled to size×size, scaled to [-1, 1], flattened."""
    from sklearn.datasets import load_digits

    check_int("size", size, lo=8, hi=64)
    images = load_digits().images.astype(np.float32) / 16.0
    t = torch.from_numpy(images).unsqueeze(1)
    if size != 8:
        t = torch.nn.functional.interpolate(t, size=(size, size), mode="bilinear", align_corners=False)
    flat = (t.reshape(len(t), -1) * 2 - 1).numpy()
    if n is not None:
        rng = np.random.default_rng(seed)
        flat = flat[rng.choice(len(flat), size=min(n, len(flat)), replace=False)]
    return flat
