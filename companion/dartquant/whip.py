"""The distribution losses DartQuant calibrates rotations with (paper Sec. 3.2, Eq. 4, and the Fig. 7a ablation).

For one rotated token y = x R ∈ R^n (x a row of the layer's input X, R orthogonal):

* **Whip** (Eq. 4): ``Whip(y) = Σ_i exp(−|y_i|)``; the official code averages it over the tokens of a batch,
  ``L = mean_tokens(sum_channels(exp(−|X R|)))``. Its gradient −sign(y_i) exp(−|y_i|) is largest near 0, so
  it pushes small entries outward; since ‖x R‖ = ‖x‖, the large ones must shrink, which flattens the
  distribution towards a uniform one and shrinks its range (what per-token INT4 needs). It is not scale
  invariant: it assumes activations of unit per-channel scale, as after RMSNorm.
* **Variance** (ablation): the variance of the rotated distribution, pooled over the batch's entries,
  ``mean((y − μ)²)`` with μ the mean of all entries. ``Σ y² = Σ x²`` for every rotation, so only μ
  depends on R, and μ ≈ 0 for zero-mean symmetric activations: the loss carries (almost) no signal,
  which is the paper's argument against it (its Riemannian gradient is exactly zero when μ = 0).
* **Kurtosis** (ablation): ``E[(y − μ)⁴] / Var(y)²`` pooled over the batch's entries (3 for a Gaussian,
  1.8 for a uniform, 6 for a Laplace); a valid target that the paper finds slow to optimise.

The paper gives no formula for the two ablation losses; pooling over all entries (the distribution the
histograms show) is this companion's reading, and it keeps both meaningful for the 2-D picture.

All three take a ``[tokens, n]`` tensor and return a 0-d tensor (differentiable).
"""

from __future__ import annotations

import torch

from companion.core import ParameterError, check_choice


def _check(y: torch.Tensor, name: str = "activations") -> torch.Tensor:
    if not isinstance(y, torch.Tensor) or y.ndim != 2 or y.shape[0] < 1 or y.shape[1] < 2:
        raise ParameterError(name, getattr(y, "shape", y), "a [tokens, channels] tensor with >= 2 channels")
    return y


def whip_loss(y: torch.Tensor) -> torch.Tensor:
    """Eq. 4: mean over tokens of Σ_channels exp(−|y|)."""
    return torch.exp(-_check(y).abs()).sum(dim=-1).mean()


def variance_loss(y: torch.Tensor) -> torch.Tensor:
    """Variance of all entries of the rotated batch (pooled over tokens and channels)."""
    y = _check(y)
    return (y - y.mean()).pow(2).mean()


def kurtosis_loss(y: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Kurtosis E[(y−μ)⁴]/Var(y)² of all entries of the rotated batch."""
    c = _check(y) - y.mean()
    var = (c * c).mean()
    return (c ** 4).mean() / (var * var + eps)


LOSSES = {"whip": whip_loss, "variance": variance_loss, "kurtosis": kurtosis_loss}


def get_loss(name: str):
    """The loss function called ``name`` (one of :data:`LOSSES`)."""
    return LOSSES[check_choice("loss", name, list(LOSSES))]
