"""Fused Triton kernel for HyperET's hyperbolic radius adjustment (Peng et al., NeurIPS 2025, Eq. 10).

``W[g, r] = log0( W_s[g] ⊗_c exp0(W0[g, r]) )`` for a stack of frozen weights W0 [G, R, n] and
structured W_s given by coefficients [G, K, n] (format in ``reference.py``'s docstring; this file does
not import it).

Why one kernel suffices: exp0, the Möbius matvec and log0 all act *radially*. exp0(u) is a multiple of
u, W_s ⊗ x is a multiple of W_s x, and log0(y) a multiple of y. So the whole chain is
``W[g, r] = φ(‖u‖, ‖v‖) · v`` with ``v = W_s u`` (one structured matvec per row) and a per-row scalar φ
computed from the two norms with the official formula sequence and guards (norm clamp 1e-5, artanh
clamp 1 − 1e-5, tanh clamp 15, projection to (1 − 1e-3)/√c). In exact arithmetic φ = 1 unless a
guard bites. Each program owns ``ROWS`` rows of one matrix: it loads W_s's K×n coefficients once,
then per row gathers u at the K structured positions, reduces to v, computes both norms and φ, and
stores φ·v. Everything is computed in fp32 and stored in W0's dtype.

Backward (W0 is frozen, as in the official code): with g = ∂L/∂W[g, r],
``∂L/∂v = φ g + φ'(‖v‖) (g·v) v/‖v‖`` and ``∂L/∂coef[k, i] = Σ_r ∂L/∂v_i · u[idx_k(i)]``; each program
accumulates its rows' contribution in registers and writes one partial [K, n] block, summed on the
host (deterministic, no atomics). φ' is the derivative of the guarded chain, piece by piece (0 in the
unguarded regime up to rounding; −φ/‖v‖ where the projection is active).

tanh and artanh are written with ``tl.exp``/``tl.log`` only (libdevice is not available in the CPU
interpreter), with short series on small arguments to keep fp32 relative accuracy ≈ 1e-7.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..host import cdiv, next_power_of_2


@triton.jit
def _tanh_pos(x):
    """tanh for x >= 0: series for tanh(x/8) then three doublings on x < 1, exp form above."""
    h = x * 0.125
    h2 = h * h
    t = h * (1.0 + h2 * (-0.33333333333 + h2 * (0.13333333333 + h2 * (-0.053968253968 + h2 * 0.021869488536))))
    t = 2.0 * t / (1.0 + t * t)
    t = 2.0 * t / (1.0 + t * t)
    t = 2.0 * t / (1.0 + t * t)
    big = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)
    return tl.where(x < 1.0, t, big)


@triton.jit
def _artanh_pos(y):
    """artanh for 0 <= y < 1: odd series below 0.25, log form above."""
    y2 = y * y
    s = y * (1.0 + y2 * (0.33333333333 + y2 * (0.2 + y2 * (0.14285714286 + y2 * (0.11111111111 + y2 * (0.090909090909 + y2 * (0.076923076923 + y2 * 0.066666666667)))))))
    big = 0.5 * tl.log((1.0 + y) / (1.0 - y))
    return tl.where(y < 0.25, s, big)


@triton.jit
def _row_scale(a, b, sqrt_c):
    """(φ, dφ/db) of the guarded chain for a row with ‖u‖ = a and ‖W_s u‖ = b."""
    un = tl.maximum(a, 1e-5)
    t = _tanh_pos(tl.minimum(sqrt_c * un, 15.0))  # exp0: x = alpha * u
    alpha = t / (sqrt_c * un)
    xn = tl.maximum(alpha * a, 1e-5)
    big_a = _artanh_pos(tl.minimum(sqrt_c * xn, 1.0 - 1e-5))
    kappa = alpha * big_a / xn
    z = (alpha * b) / xn * big_a  # ‖Mx‖/‖x‖ · artanh(√c‖x‖)
    zc = (z < 15.0).to(tl.float32)
    tz = _tanh_pos(tl.minimum(z, 15.0))
    rho_raw = tz / sqrt_c  # ‖M ⊗ x‖ before projection
    rn = tl.maximum(rho_raw, 1e-5)
    maxnorm = (1.0 - 1e-3) / sqrt_c
    proj = rn > maxnorm
    rho = tl.where(proj, rho_raw / rn * maxnorm, rho_raw)
    yn = tl.maximum(rho, 1e-5)
    a_out = _artanh_pos(tl.minimum(sqrt_c * yn, 1.0 - 1e-5))  # log0
    pos = b > 0.0
    bs = tl.where(pos, b, 1.0)
    phi = rho * a_out / (bs * yn * sqrt_c)
    dtz = (1.0 - tz * tz) * kappa * zc
    d_typ = (kappa * zc * bs - a_out) / (bs * bs * sqrt_c)
    d_proj = -phi / bs
    d_tiny = a_out / (1e-5 * sqrt_c) * (dtz / sqrt_c / bs - rho / (bs * bs))
    dphi = tl.where(proj, d_proj, tl.where(rho < 1e-5, d_tiny, d_typ))
    phi = tl.where(pos, phi, 0.0)
    dphi = tl.where(pos, dphi, 0.0)
    return phi, dphi


@triton.jit
def _gather_setup(coef_ptr, g, N, stride_cg, stride_ck, K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_MODE: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, K_PAD)
    col_ok = cols < N
    if BLOCK_MODE:
        idx = (cols[None, :] // K) * K + ks[:, None]
    else:
        idx = cols[None, :] + ks[:, None] - (K - 1) // 2
    kc_ok = (ks[:, None] < K) & col_ok[None, :]
    g_ok = kc_ok & (idx >= 0) & (idx < N)
    coef = tl.load(coef_ptr + g * stride_cg + ks[:, None] * stride_ck + cols[None, :], mask=kc_ok, other=0.0).to(tl.float32)
    return cols, ks, col_ok, idx, kc_ok, g_ok, coef


@triton.jit
def _hra_fwd_kernel(
    w0_ptr, coef_ptr, out_ptr, R, N, sqrt_c,
    stride_wg, stride_wr, stride_cg, stride_ck, stride_og, stride_or,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, BLOCK_MODE: tl.constexpr,
):
    pid_r = tl.program_id(0)
    g = tl.program_id(1)
    cols, ks, col_ok, idx, kc_ok, g_ok, coef = _gather_setup(coef_ptr, g, N, stride_cg, stride_ck, K, K_PAD, BLOCK_N, BLOCK_MODE)
    w_base = w0_ptr + g.to(tl.int64) * stride_wg
    o_base = out_ptr + g.to(tl.int64) * stride_og
    for r in range(ROWS):
        row = pid_r * ROWS + r
        row_ok = row < R
        row_ptr = w_base + row.to(tl.int64) * stride_wr
        u = tl.load(row_ptr + cols, mask=col_ok & row_ok, other=0.0).to(tl.float32)
        ug = tl.load(row_ptr + idx, mask=g_ok & row_ok, other=0.0).to(tl.float32)
        v = tl.sum(coef * ug, axis=0)
        a = tl.sqrt(tl.sum(u * u, axis=0))
        b = tl.sqrt(tl.sum(v * v, axis=0))
        phi, _dphi = _row_scale(a, b, sqrt_c)
        out = (phi * v).to(out_ptr.dtype.element_ty)
        tl.store(o_base + row.to(tl.int64) * stride_or + cols, out, mask=col_ok & row_ok)


@triton.jit
def _hra_bwd_kernel(
    w0_ptr, coef_ptr, gout_ptr, part_ptr, R, N, sqrt_c,
    stride_wg, stride_wr, stride_cg, stride_ck, stride_gg, stride_gr, stride_pg, stride_pp, stride_pk,
    K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, BLOCK_MODE: tl.constexpr,
):
    pid_r = tl.program_id(0)
    g = tl.program_id(1)
    cols, ks, col_ok, idx, kc_ok, g_ok, coef = _gather_setup(coef_ptr, g, N, stride_cg, stride_ck, K, K_PAD, BLOCK_N, BLOCK_MODE)
    w_base = w0_ptr + g.to(tl.int64) * stride_wg
    g_base = gout_ptr + g.to(tl.int64) * stride_gg
    acc = tl.zeros([K_PAD, BLOCK_N], dtype=tl.float32)
    for r in range(ROWS):
        row = pid_r * ROWS + r
        row_ok = row < R
        row_ptr = w_base + row.to(tl.int64) * stride_wr
        u = tl.load(row_ptr + cols, mask=col_ok & row_ok, other=0.0).to(tl.float32)
        ug = tl.load(row_ptr + idx, mask=g_ok & row_ok, other=0.0).to(tl.float32)
        go = tl.load(g_base + row.to(tl.int64) * stride_gr + cols, mask=col_ok & row_ok, other=0.0).to(tl.float32)
        v = tl.sum(coef * ug, axis=0)
        a = tl.sqrt(tl.sum(u * u, axis=0))
        b = tl.sqrt(tl.sum(v * v, axis=0))
        phi, dphi = _row_scale(a, b, sqrt_c)
        gv = tl.sum(go * v, axis=0)
        bs = tl.where(b > 0.0, b, 1.0)
        delta = phi * go + (dphi * gv / bs) * v
        acc += delta[None, :] * ug
    part = part_ptr + g.to(tl.int64) * stride_pg + pid_r.to(tl.int64) * stride_pp
    tl.store(part + ks[:, None] * stride_pk + cols[None, :], acc, mask=kc_ok)


FWD_ROWS = 16  # rows per program (fewer when R is smaller)
BWD_ROWS = 64


def partial_shape(w0: torch.Tensor, k: int) -> tuple[int, int, int, int]:
    """Shape of the backward's per-program partial sums."""
    g, r, n = w0.shape
    return (g, cdiv(r, min(BWD_ROWS, r)), k, n)


def _meta(n: int, k: int):
    block_n = max(16, next_power_of_2(n))
    k_pad = max(2, next_power_of_2(k))
    num_warps = 4 if block_n * k_pad <= 2048 else 8
    return block_n, k_pad, num_warps


def hra_forward(w0: torch.Tensor, coef: torch.Tensor, block_mode: bool, sqrt_c: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """W [G, R, n] (W0's dtype) from contiguous W0 [G, R, n] and coefficients [G, K, n] (fp32)."""
    g, r, n = w0.shape
    k = coef.shape[1]
    out = torch.empty_like(w0) if out is None else out
    block_n, k_pad, num_warps = _meta(n, k)
    rows = min(FWD_ROWS, r)
    grid = (cdiv(r, rows), g)
    _hra_fwd_kernel[grid](
        w0, coef, out, r, n, sqrt_c,
        w0.stride(0), w0.stride(1), coef.stride(0), coef.stride(1), out.stride(0), out.stride(1),
        K=k, K_PAD=k_pad, BLOCK_N=block_n, ROWS=rows, BLOCK_MODE=block_mode, num_warps=num_warps,
    )
    return out


def hra_backward(w0: torch.Tensor, coef: torch.Tensor, grad_out: torch.Tensor, block_mode: bool, sqrt_c: float, part: torch.Tensor | None = None) -> torch.Tensor:
    """∂L/∂coef [G, K, n] (fp32) for contiguous W0, coefficients and ∂L/∂W.

    ``part`` (optional, [G, ceil(R / rows), K, n] fp32) receives the per-program partial sums.
    """
    g, r, n = w0.shape
    k = coef.shape[1]
    block_n, k_pad, num_warps = _meta(n, k)
    rows = min(BWD_ROWS, r)
    programs = cdiv(r, rows)
    if part is None:
        part = torch.empty(g, programs, k, n, device=w0.device, dtype=torch.float32)
    _hra_bwd_kernel[(programs, g)](
        w0, coef, grad_out, part, r, n, sqrt_c,
        w0.stride(0), w0.stride(1), coef.stride(0), coef.stride(1), grad_out.stride(0), grad_out.stride(1),
        part.stride(0), part.stride(1), part.stride(2),
        K=k, K_PAD=k_pad, BLOCK_N=block_n, ROWS=rows, BLOCK_MODE=block_mode, num_warps=num_warps,
    )
    return part.sum(dim=1)
