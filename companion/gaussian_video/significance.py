"""Perceptually weighted significance, the layer split and the progressive render (paper Sec. 3.1).

* :func:`significance` — **Ψ = α + λ_Ψ · S** (the paper's weighted sum; λ_Ψ = 1e5 in 3-D scene units),
  with S the volume (4/3)π a b c of a 3-D Gaussian or, in the 2-D analogue, the area π a b. The modes
  ``"opacity"`` (Ψ = α), ``"volume"`` (Ψ = S) and ``"product"`` (Ψ = α · S) are the paper's ablations.
* :func:`split_layers` — sort by Ψ, descending, and split into L layers; layer 1 (the largest Ψ) is the
  base. The paper does not give the per-layer counts: the default is an equal split (the first N mod L
  layers get one more Gaussian) and ``counts`` overrides it. [assumption, exposed as a parameter]
* :func:`layer_masks` / :func:`progressive_render` — the render with layers ≤ l,
  c^l = Σ_{i∈N_l} c_i α'_i Π_{j<i, j∈N_l} (1 − α'_j), N_l the Gaussians of layers 1..l.
* :func:`layer_weights` — λ_l = 0.5 / l for l < L and λ_L = 1 (from a third-party summary of the paper;
  the text version is garbled there).
"""

from __future__ import annotations

import math

import torch

from companion.core import ParameterError, check_choice, check_float, check_int

PSI_MODES = ("sum", "opacity", "volume", "product")


def size_measure(scales: torch.Tensor) -> torch.Tensor:
    """S: the area π a b for ``[N, 2]`` scales, the volume (4/3) π a b c for ``[N, 3]``."""
    if scales.dim() != 2 or scales.shape[1] not in (2, 3):
        raise ParameterError("scales", tuple(scales.shape), "a [N, 2] or [N, 3] tensor of standard deviations")
    if scales.shape[1] == 2:
        return math.pi * scales[:, 0] * scales[:, 1]
    return 4.0 / 3.0 * math.pi * scales.prod(-1)


def significance(alpha: torch.Tensor, scales: torch.Tensor, lam: float = 1e5, mode: str = "sum") -> torch.Tensor:
    """Ψ per Gaussian (see the module docstring); ``alpha`` is the opacity in [0, 1]."""
    lam = check_float("lambda_psi", lam, lo=0.0)
    check_choice("psi_mode", mode, PSI_MODES)
    s = size_measure(scales)
    if alpha.shape != s.shape:
        raise ParameterError("alpha", tuple(alpha.shape), f"one opacity per Gaussian, shape {tuple(s.shape)}")
    if mode == "sum":
        return alpha + lam * s
    if mode == "opacity":
        return alpha.clone()
    if mode == "volume":
        return s
    return alpha * s


def layer_counts(n: int, L: int, counts=None) -> list[int]:
    """Gaussians per layer: ``counts`` if given (must sum to n), else the equal split."""
    check_int("n", n, lo=1)
    L = check_int("L", L, lo=1)
    if L > n:
        raise ParameterError("L", L, f"an integer in [1, {n}] (the number of Gaussians)")
    if counts is None:
        return [n // L + (1 if i < n % L else 0) for i in range(L)]
    counts = [int(c) for c in counts]
    if len(counts) != L or any(c < 1 for c in counts) or sum(counts) != n:
        raise ParameterError("counts", counts, f"{L} positive integers summing to the {n} Gaussians")
    return counts


def split_layers(psi: torch.Tensor, L: int, counts=None) -> torch.Tensor:
    """Layer index (1..L) per Gaussian: the ``counts[0]`` largest Ψ form layer 1, and so on."""
    sizes = layer_counts(psi.shape[0], L, counts)
    order = torch.argsort(psi, descending=True, stable=True)
    layer = torch.empty(psi.shape[0], dtype=torch.long, device=psi.device)
    layer[order] = torch.repeat_interleave(torch.arange(1, L + 1, device=psi.device),
                                           torch.tensor(sizes, device=psi.device))
    return layer



def layer_masks(layer: torch.Tensor, L: int) -> torch.Tensor:
    """``[L, N]`` 0/1: row l−1 selects the Gaussians of layers ≤ l."""
    check_int("L", L, lo=1)
    return (layer[None, :] <= torch.arange(1, L + 1, device=layer.device)[:, None]).float()


def progressive_render(g, layer: torch.Tensor, l: int, height: int, width: int) -> torch.Tensor:
    """c^l: ``g`` (:class:`~companion.gaussian_video.scene.Gaussians2D`) rendered with layers ≤ l only."""
    L = int(layer.max())
    check_int("l", l, lo=1, hi=L)
    return g.render(height, width, masks=(layer <= l).float()[None])[0]


def layer_weights(L: int) -> list[float]:
    """λ_l = 0.5 / l for l < L, λ_L = 1."""
    check_int("L", L, lo=1)
    return [0.5 / l for l in range(1, L)] + [1.0]
