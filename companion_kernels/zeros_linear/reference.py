"""Plain-PyTorch oracle of the ZeroS op (runs on the CPU): the explicit O(T^2) weights.

Paper: Lu et al., *ZeroS: Zero-Sum Linear Attention for Efficient Transformers*, NeurIPS 2025,
Sec. 3. For query t (``n_t`` = t causal, T bidirectional) and the keys i it sees::

    p_{t,i} = softmax_t(s)_i,   delta_{t,i} = s_i - mean_{j<=t} s_j
    r_{t,i} = sigma1_t delta_{t,i}/n_t + sigmah_t (p_{t,i} - 1/n_t - delta_{t,i}/n_t)  (+ sigma0_t/n_t)
    o_t     = sum_i r_{t,i} (q_t . k_i) v_i

Computed in float32 (float64 if the inputs are float64) and returned in ``v.dtype``. O(T^2) memory:
for small T only. Written from the definition, independently of ``triton.py``.
"""

from __future__ import annotations

import torch

__all__ = ["zeros_linear_reference", "zeros_weights_reference"]


def zeros_weights_reference(s, sigma1, sigmah, sigma0=None, *, causal=True):
    """The weights ``r`` ``[B, H, T, T]`` from per-step logits ``s`` and gates ``[B, T, H]``."""
    wd = torch.float64 if s.dtype == torch.float64 else torch.float32
    B, T, H = s.shape
    S = s.to(wd).permute(0, 2, 1)[:, :, None, :].expand(B, H, T, T)
    vis = torch.ones(T, T, dtype=torch.bool, device=s.device)
    if causal:
        vis = vis.tril()
        n = torch.arange(1, T + 1, device=s.device, dtype=wd).view(T, 1)
    else:
        n = torch.full((T, 1), float(T), device=s.device, dtype=wd)
    p = torch.softmax(S.masked_fill(~vis, float("-inf")), dim=-1)
    mean = S.masked_fill(~vis, 0.0).sum(-1, keepdim=True) / n
    first = (S - mean) / n
    higher = p - 1.0 / n - first
    row = lambda x: x.to(wd).permute(0, 2, 1).unsqueeze(-1)  # noqa: E731
    r = row(sigma1) * first + row(sigmah) * higher
    if sigma0 is not None:
        r = r + row(sigma0) / n
    return r.masked_fill(~vis, 0.0)


def zeros_linear_reference(q, k, v, s, sigma1, sigmah, sigma0=None, *, causal=True):
    """ZeroS output ``[B, T, H, dv]`` for unit ``q, k`` ``[B, T, H, d]``, ``v`` ``[B, T, H, dv]``."""
    wd = torch.float64 if q.dtype == torch.float64 else torch.float32
    r = zeros_weights_reference(s, sigma1, sigmah, sigma0, causal=causal)
    cos = torch.einsum("bthd,bihd->bhti", q.to(wd), k.to(wd))
    o = torch.einsum("bhti,bihe->bthe", r * cos, v.to(wd))
    return o.to(v.dtype)
