"""Attention Selectivity Index, scale-wise z-scores and drafter selection (paper 03, Eq. 1-2).

Paper: ScaleKV (arXiv 2505.19602), Sec. 3.2. For layer ``l`` at scale ``k``, with softmax weights
``alpha_ij`` from query ``i`` of the current map ``r_k``, current map ``C_k`` and history ``P_{k-1}``:

    ASI(l, k) = E_i[ sum_{j in C_k} alpha_ij ] * E_i[ TopKSum_{K'}( alpha_ij : j in P_{k-1} ) ]

High ASI: the layer looks at the current map and a few history tokens (a *refiner*); low ASI: its
attention is dispersed over earlier scales (a *drafter*). ``Z(l, k) = (ASI - mu_k) / (sigma_k + eps)``
over layers at scale ``k``; the ``N_d`` (layer, scale) pairs with the lowest ``Z`` are drafters.

The official calibration code is not released. Choices made here, each a parameter: ``K'`` defaults to
``|r_k|`` (the paper does not give it) capped by the history length; the history factor is a
*concentration*: each query's top-``K'`` history weights divided by its history mass (``normalize``,
default True). With the raw weights, as the formula is printed, the product is not monotone: a layer
with all attention on the current map (``1 * 0``) and one with none (``0 * x``) both score 0, and on
our planted model the raw index ranks the planted drafters as refiners; the normalised reading agrees
with the paper's "high ASI = refiner, low ASI = drafter" [inferred]. The expectation runs over queries,
heads and calibration images; ``sigma`` is the population standard deviation; selection is global over
the compressed scales (``mode="global"``, the paper's wording) or a fixed count per scale
(``mode="per_scale"``, the shape of the shipped budgets: 2-3 drafters at every scale).
"""

from __future__ import annotations

import torch

from companion.core import ParameterError, check_choice, check_int
from companion.scalekv.model import TinyVAR, generate

__all__ = ["ASIStats", "asi_from_probs", "calibrate_asi", "zscores", "select_drafters"]


class ASIStats:
    """Accumulates the two expectations of the ASI per (layer, scale) from observed attention."""

    def __init__(self, layers: int, sides, topk_prime: int | None = None, normalize: bool = True):
        self.sides = tuple(sides)
        n = len(self.sides)
        self.current = torch.zeros(layers, n, dtype=torch.float64)
        self.history = torch.zeros(layers, n, dtype=torch.float64)
        self.count = torch.zeros(layers, n, dtype=torch.float64)
        self.topk_prime, self.normalize = topk_prime, normalize

    def __call__(self, layer: int, scale: int, probs: torch.Tensor, cache) -> None:
        cur, hist = asi_from_probs(probs, self.sides[scale] ** 2, self.topk_prime, normalize=self.normalize)
        n = probs.shape[0] * probs.shape[1] * probs.shape[2]
        self.current[layer, scale] += cur * n
        self.history[layer, scale] += hist * n
        self.count[layer, scale] += n

    def parts(self) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.count.clamp_min(1)
        return self.current / c, self.history / c

    def asi(self) -> torch.Tensor:
        """``[L, K]``; NaN at scale 0 (no history)."""
        cur, hist = self.parts()
        out = cur * hist
        out[:, 0] = float("nan")
        return out


def asi_from_probs(probs: torch.Tensor, current: int, topk_prime: int | None = None, *, normalize: bool = True) -> tuple[float, float]:
    """The two factors from ``probs [..., q, L]`` whose last ``current`` keys are the current map.

    Returns ``(E_i sum_{j in C} alpha_ij, E_i TopKSum_{K'} over the history)``. With ``normalize``
    (the default) the history weights of each query are first divided by their sum, so the second
    factor is the *concentration* of the history attention in ``[K'/|P|, 1]``; without it the raw
    weights are summed, as the printed formula reads. With no history the second factor is 0.
    """
    total = probs.shape[-1]
    hist_len = total - current
    cur = probs[..., hist_len:].sum(-1).mean().item()
    if hist_len <= 0:
        return cur, 0.0
    kp = current if topk_prime is None else topk_prime
    kp = max(1, min(int(kp), hist_len))
    h = probs[..., :hist_len]
    if normalize:
        h = h / h.sum(-1, keepdim=True).clamp_min(1e-30)
    hist = h.topk(kp, dim=-1).values.sum(-1).mean().item()
    return cur, hist


@torch.no_grad()
def calibrate_asi(model: TinyVAR, labels: torch.Tensor, *, seed: int = 0, temperature: float = 1.0, guidance: float = 0.0,
                  topk_prime: int | None = None, normalize: bool = True, bias=None) -> ASIStats:
    """ASI statistics of ``model`` generating one image per label with the full cache."""
    stats = ASIStats(model.config.layers, model.config.sides, topk_prime, normalize)
    generate(model, labels, None, seed=seed, temperature=temperature, guidance=guidance, observer=stats, bias=bias)
    return stats


def zscores(asi: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Scale-wise z-scores over layers; NaN columns stay NaN."""
    mu = asi.mean(dim=0, keepdim=True)
    sd = asi.std(dim=0, unbiased=False, keepdim=True)
    return (asi - mu) / (sd + eps)


def select_drafters(z: torch.Tensor, scales, n_drafters: int, *, mode: str = "global") -> torch.Tensor:
    """Bool ``[L, K]``: the ``n_drafters`` lowest-``Z`` pairs among ``scales`` (or per scale)."""
    check_choice("mode", mode, ("global", "per_scale"))
    scales = sorted(set(int(k) for k in scales))
    nl, nk = z.shape
    if not scales or any(k < 1 or k >= nk for k in scales):
        raise ParameterError("scales", scales, f"scale indices in 1..{nk - 1} (scale 0 has no history)")
    limit = nl if mode == "per_scale" else nl * len(scales)
    check_int("n_drafters", n_drafters, lo=0, hi=limit)
    mask = torch.zeros(nl, nk, dtype=torch.bool)
    if n_drafters == 0:
        return mask
    if mode == "per_scale":
        for k in scales:
            order = torch.argsort(z[:, k], stable=True)
            mask[order[:n_drafters], k] = True
        return mask
    cols = torch.tensor(scales)
    sub = z[:, cols].reshape(-1)
    order = torch.argsort(sub, stable=True)[:n_drafters]
    rows, cidx = order // len(scales), order % len(scales)
    mask[rows, cols[cidx]] = True
    return mask
