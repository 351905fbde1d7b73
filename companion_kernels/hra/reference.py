"""Plain-PyTorch oracle for the fused HRA op (HyperET, Peng et al., NeurIPS 2025, Eq. 10).

``W[g] = log0( W_s[g] ⊗_c exp0(W0[g]) )`` row by row, evaluated exactly as the official code does it
(``Fine-tuning/HyperET/adapter_*.py``): W_s is built as a dense n×n matrix from its structured
coefficients, the rows of W0 are mapped into the ball, multiplied with ``_mobius_matvec`` (norm clamp
1e-5, artanh clamp 1 − 1e-5, tanh clamp 15, projection to (1 − 1e-3)/√c) and mapped back. It runs on any
device and any float dtype (computed in at least fp32, returned in W0's dtype like the official
``.to(orig_dtype)``); autograd gives the gradient w.r.t. the coefficients. W0 is a constant (frozen).

Coefficient format (shared with the kernel), ``coef[g, k, i]`` for output column i:

* ``diagonal`` (K = 1):  W_s[i, i] = coef[0, i]
* ``banded`` (K = 2d + 1): W_s[i, i + k − d] = coef[k, i]  (entries outside the matrix are ignored)
* ``block`` (K = b, b | n): W_s[i, b⌊i/b⌋ + k] = coef[k, i]

Deviation: a row whose image W_s w is exactly zero gives 0 with a zero gradient (the official code
divides 0 by 0 there).
"""

from __future__ import annotations

import torch

MIN_NORM = 1e-5
ARTANH_EPS = 1e-5
TANH_CLAMP = 15.0
BALL_EPS = 1e-3


def gather_index(kind: str, k: int, n: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(idx, valid)`` of shape [K, n]: coef[k, i] multiplies u[idx[k, i]] where valid."""
    ks = torch.arange(k, device=device)[:, None]
    cols = torch.arange(n, device=device)[None, :]
    if kind == "block":
        idx = (cols // k) * k + ks
    else:  # diagonal, banded: offsets k - d
        idx = cols + ks - (k - 1) // 2
    valid = (idx >= 0) & (idx < n)
    return idx.clamp(0, n - 1), valid


def dense_ws(coef: torch.Tensor, kind: str) -> torch.Tensor:
    """Dense W_s [G, n, n] from coefficients [G, K, n] (differentiable)."""
    g, k, n = coef.shape
    idx, valid = gather_index(kind, k, n, coef.device)
    rows = torch.arange(n, device=coef.device)[None, :].expand(k, n)
    flat = torch.zeros(g, n * n, dtype=coef.dtype, device=coef.device)
    flat = flat.index_add(1, rows[valid] * n + idx[valid], coef[:, valid])
    return flat.reshape(g, n, n)


def _artanh(x):
    x = x.clamp(-1 + ARTANH_EPS, 1 - ARTANH_EPS)
    return 0.5 * (torch.log1p(x) - torch.log1p(-x))


def _tanh(x):
    return x.clamp(-TANH_CLAMP, TANH_CLAMP).tanh()


def _safe(den):
    return torch.where(den == 0, torch.ones_like(den), den)


def hra_reference(w0: torch.Tensor, coef: torch.Tensor, kind: str, c: float) -> torch.Tensor:
    """``log0(W_s ⊗_c exp0(W0))`` for W0 [G, R, n] and coefficients [G, K, n] (the official sequence)."""
    out_dtype = w0.dtype
    dtype = torch.promote_types(torch.promote_types(w0.dtype, coef.dtype), torch.float32)
    u = w0.detach().to(dtype)
    ws = dense_ws(coef.to(dtype), kind)
    sqrt_c = c**0.5
    # exp0
    un = u.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)
    x = _tanh(sqrt_c * un) * u / (sqrt_c * un)
    # Möbius matvec (mx = x W_sᵀ), then projection
    xn = x.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)
    mx = x @ ws.transpose(-1, -2)
    mxn = mx.norm(dim=-1, keepdim=True)
    res = _tanh(mxn / xn * _artanh(sqrt_c * xn)) * mx / _safe(mxn * sqrt_c)
    res = torch.where(mxn == 0, torch.zeros_like(res), res)
    rn = res.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)
    maxnorm = (1 - BALL_EPS) / sqrt_c
    res = torch.where(rn > maxnorm, res / rn * maxnorm, res)
    # log0
    yn = res.norm(dim=-1, keepdim=True).clamp_min(MIN_NORM)
    out = res / yn / sqrt_c * _artanh(sqrt_c * yn)
    return out.to(out_dtype)


def closed_form(w0: torch.Tensor, coef: torch.Tensor, kind: str) -> torch.Tensor:
    """The exact identity ``W = W0 W_sᵀ`` (what HRA equals wherever the guards are inactive)."""
    dtype = torch.promote_types(torch.promote_types(w0.dtype, coef.dtype), torch.float32)
    return (w0.detach().to(dtype) @ dense_ws(coef.to(dtype), kind).transpose(-1, -2)).to(w0.dtype)
