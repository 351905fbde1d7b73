"""Lemma 1 of Δ Attention (paper 09, arXiv 2505.11254): how far Δ is from the missing attention mass.

For one attention row with scores s_i and values v_i, let a kept set S (top-k in the paper; any set
here) define the sparse, renormalised attention A* over S. With H = Σ_{i∉S} e^{s_i} (excluded mass)
and T = Σ_{i∈S} e^{s_i} (kept mass), Δ = AV − A*V satisfies

    | Δ − Σ_{i∉S} a_i v_i |  ≤  H / (H + T) · max_{i∈S} |v_i|.

Proof sketch (ours, used as a second test): Δ − Σ_{i∉S} a_i v_i = Σ_{i∈S}(a_i − a*_i) v_i
= −H/(H+T) · A*V exactly, and A*V is a convex combination of the kept v_i, so the bound holds in every
norm and in every coordinate. `lemma1_terms` returns both sides and that identity's residual.
No deviation from the paper; the lemma does not need S to be the top-k set.
"""

from __future__ import annotations

import torch


def lemma1_terms(scores: torch.Tensor, values: torch.Tensor, kept: torch.Tensor) -> dict:
    """Both sides of Lemma 1 for rows `scores` [..., N], `values` [..., N, D], `kept` bool [..., N].

    Returns float64 tensors (leading dims of `scores`): `lhs_l2`, `bound_l2` (Euclidean norm),
    `lhs_coord`, `bound_coord` ([..., D], coordinate-wise), `identity_residual` (max-abs of
    Δ − Σ_{i∉S} a_i v_i + H/(H+T)·A*V, zero up to rounding), and `delta` (AV − A*V).
    """
    if not kept.any(dim=-1).all():
        raise ValueError("every row needs at least one kept key (the sparse softmax is undefined otherwise)")
    s = scores.double()
    v = values.double()
    m = s.max(dim=-1, keepdim=True).values              # stabilise; H/(H+T) is shift-invariant
    e = torch.exp(s - m)
    kept_f = kept.double()
    t_mass = (e * kept_f).sum(-1)
    h_mass = (e * (1 - kept_f)).sum(-1)
    a = e / (h_mass + t_mass)[..., None]                # dense attention row
    a_star = e * kept_f / t_mass[..., None]             # sparse, renormalised over S
    av = (a[..., None] * v).sum(-2)
    a_star_v = (a_star[..., None] * v).sum(-2)
    delta = av - a_star_v
    missing = ((a * (1 - kept_f))[..., None] * v).sum(-2)
    ratio = h_mass / (h_mass + t_mass)
    vmax_l2 = torch.where(kept[..., None].expand_as(v), v, torch.zeros_like(v)).norm(dim=-1).max(dim=-1).values
    vmax_coord = torch.where(kept[..., None].expand_as(v), v.abs(), torch.zeros_like(v)).max(dim=-2).values
    return {
        "delta": delta,
        "lhs_l2": (delta - missing).norm(dim=-1),
        "bound_l2": ratio * vmax_l2,
        "lhs_coord": (delta - missing).abs(),
        "bound_coord": ratio[..., None] * vmax_coord,
        "identity_residual": (delta - missing + ratio[..., None] * a_star_v).abs().amax(dim=-1),
        "excluded_share": ratio,
    }
