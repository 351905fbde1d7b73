"""A game with known Shapley values at any dimension, for the GPU scale-up (d = 784, 3072).

Tree models give exact values only through TreeExplainer on a CPU; for large d the notebook's GPU
section uses a sparse polynomial model evaluated in batches on the device,

    f(x) = Σ_j a_j x_j + Σ_t c_t Π_{i ∈ M_t} x_i      (random monomials M_t of a fixed order),

whose interventional Shapley values are exact in closed form. With query q, baseline r and
δ = q − r, a monomial's game is Π_{i∈M}(r_i + δ_i 1[i∈S]) = Σ_{A⊆M} Π_{i∈A} δ_i Π_{i∈M∖A} r_i · 1[A⊆S],
a sum of unanimity games, and the unanimity game of A gives each member 1/|A|. Order ≥ 3 matters:
with paired sampling the regression estimator is exact on games of order ≤ 2, so a quadratic model
would make every LS estimate look perfect.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch


class PolynomialGame:
    """v(S) for masks [n, d] (NumPy or torch), evaluated in batches on ``device``."""

    def __init__(self, d: int, order: int = 3, terms_per_feature: int = 2, seed: int = 0, device="cpu", batch: int = 8192):
        if not isinstance(d, (int, np.integer)) or d < 2:
            raise ValueError(f"d = {d!r}: Shapley estimation needs at least 2 features")
        if order < 1 or order > d:
            raise ValueError(f"order = {order} must lie in 1 … d = {d}")
        g = torch.Generator().manual_seed(seed)
        self.d, self.order, self.device, self.batch = d, order, torch.device(device), batch
        n_terms = terms_per_feature * d
        self.a = torch.randn(d, generator=g, dtype=torch.float64)
        self.members = torch.stack([torch.randperm(d, generator=g)[:order] for _ in range(n_terms)])  # [T, order]
        self.c = torch.randn(n_terms, generator=g, dtype=torch.float64) / np.sqrt(terms_per_feature)
        self.query = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
        self.baseline = 1.0 + 0.5 * torch.randn(d, generator=g, dtype=torch.float64)
        for name in ("a", "members", "c", "query", "baseline"):
            setattr(self, name, getattr(self, name).to(self.device))
        self.evaluations = 0
        self.empty = float(self._f(self.baseline[None])[0])
        self.full = float(self._f(self.query[None])[0])

    def _f(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.a + x[:, self.members].prod(-1) @ self.c

    def __call__(self, masks):
        is_numpy = isinstance(masks, np.ndarray)
        masks = torch.as_tensor(masks, device=self.device)
        out = torch.cat([self._f(torch.where(chunk, self.query, self.baseline)) for chunk in masks.split(self.batch)])
        self.evaluations += len(masks)
        return out.cpu().numpy() if is_numpy else out

    def shapley(self) -> np.ndarray:
        """The exact interventional Shapley values (unanimity expansion, module docstring)."""
        delta, base = (self.query - self.baseline)[self.members], self.baseline[self.members]  # [T, order]
        phi = self.a * (self.query - self.baseline)
        for size in range(1, self.order + 1):
            for subset in itertools.combinations(range(self.order), size):
                inside = torch.zeros(self.order, dtype=torch.bool, device=self.device)
                inside[list(subset)] = True
                share = self.c * torch.where(inside, delta, base).prod(-1) / size  # [T]
                for i in subset:
                    phi = phi.index_add(0, self.members[:, i], share)
        return phi.cpu().numpy()
