"""Chunked Triton kernels for ZeroS attention (forward and backward), stable with a running max.

Paper: Lu et al., *ZeroS: Zero-Sum Linear Attention for Efficient Transformers*, NeurIPS 2025.
The paper ships no GPU kernel; this one is ours. It uses the identity (spec 04, "Chunked form")
that ZeroS is one un-normalised causal linear attention with a 3d-wide key::

    o_t = sum_{i<=t} (q^_t . k^_i) v_i [ a_t e^{s_i - lam_t} + b_t s_i + g_t ]

with per-step scalars computed here in PyTorch (O(T), autograd handles them)::

    lam_t = log sum_{j<=t} e^{s_j}          (running log-sum-exp: >= the running max, non-decreasing)
    a_t = sigmah_t,  b_t = (sigma1_t - sigmah_t)/t,  g_t = -(b_t P_t + sigmah_t)/t (+ sigma0_t/t),
    P_t = sum_{j<=t} s_j

so ``a_t e^{s_i - lam_t} = sigmah_t softmax_t(s)_i``. Every exponent the kernels take is <= 0.
The carried state (one per 64-token chunk) has three [d x dv] parts, F~ = sum e^{s_i - kappa} k_i v_i^T
(kappa = lam at the chunk's last row; only this part is rescaled, by exp(kappa_old - kappa_new) <= 1),
G = sum s_i k_i v_i^T and H = sum k_i v_i^T, exactly like flash-linear-attention's ``chunk`` kernels:

* ``_state_fwd``   grid (3 parts, B*H): sequential over chunks, writes the state before each chunk;
* ``_out_fwd``     grid (chunks, B*H): intra-chunk masked product + inter-chunk ``q @ state``;
* ``_state_bwd``   grid (3, B*H): the reverse scan of ``sum_t coef_t q_t do_t^T`` for dk, dv, ds;
* ``_dq_bwd``      grid (chunks, B*H): dq and the row-scalar gradients d a, d b, d g;
* ``_dkv_bwd``     grid (chunks, B*H): dk, dv and d s.

The backward recomputes the forward states (nothing but the inputs is saved), so activation memory
is the inputs plus two state buffers of [T/64, 3, d, dv] per head: linear in T.

Logits are shifted by their first value (``s - s_1``, detached) before anything else: ZeroS is
invariant to adding a constant to every logit, and the shift keeps ``b s + g`` free of a large
common offset. The bidirectional (``causal=False``) form needs no kernel: every row reads the
same full state, two dense contractions in PyTorch.

This module never imports ``reference.py`` (the oracle it is tested against).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["zeros_linear_triton", "step_scalars", "CHUNK"]

CHUNK = 64
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _configs(sequential: bool):
    """Two launch configurations per kernel (kept small: compile time counts in a 4-minute benchmark)."""
    if _INTERPRET:
        return [triton.Config({}, num_warps=4, num_stages=1)]
    if sequential:  # the state scans loop over chunks: let the loads of the next chunk pipeline
        return [triton.Config({}, num_warps=4, num_stages=2), triton.Config({}, num_warps=4, num_stages=3)]
    return [triton.Config({}, num_warps=4, num_stages=1), triton.Config({}, num_warps=8, num_stages=1)]


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------
@triton.jit
def _state_fwd_step(acc, kappa, c, k_base, v_base, s_base, l_base, h_base, hmask, is_f, is_g, offk, offv, offt,
                    T, H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr):
    tl.store(h_base + c * 3 * K * V + offk[:, None] * V + offv[None, :], acc.to(h_base.dtype.element_ty), mask=hmask)
    rows = c * BT + offt
    mrow = rows < T
    kc = tl.load(k_base + rows[:, None] * H * K + offk[None, :], mask=mrow[:, None] & (offk[None, :] < K), other=0.0)
    vc = tl.load(v_base + rows[:, None] * H * V + offv[None, :], mask=mrow[:, None] & (offv[None, :] < V), other=0.0)
    sc = tl.load(s_base + rows * H, mask=mrow, other=0.0).to(tl.float32)
    kap_new = tl.load(l_base + (tl.minimum(c * BT + BT, T) - 1) * H).to(tl.float32)
    coef_f = tl.exp(tl.where(mrow, sc - kap_new, float("-inf")))
    coef = tl.where(is_f, coef_f, tl.where(is_g, sc, 1.0))
    coef = tl.where(mrow, coef, 0.0)
    resc = tl.where(is_f, tl.exp(kappa - kap_new), 1.0)
    kw = (kc.to(tl.float32) * coef[:, None]).to(vc.dtype)
    acc = acc * resc + tl.dot(tl.trans(kw), vc, input_precision=PREC)
    return acc, kap_new


@triton.autotune(configs=_configs(True), key=["BT", "BK", "BV"])
@triton.jit
def _state_fwd(k, v, s, lam, h, T, H, NT,
               K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
               PREC: tl.constexpr, INTERPRET: tl.constexpr):
    """h[c] = state of the keys before chunk c; program (part, b*h) runs over the chunks in order."""
    part = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    hh = bh % H
    offk = tl.arange(0, BK)
    offv = tl.arange(0, BV)
    offt = tl.arange(0, BT)
    k_base = k + b * T * H * K + hh * K
    v_base = v + b * T * H * V + hh * V
    s_base = s + b * T * H + hh
    l_base = lam + b * T * H + hh
    h_base = h + bh * NT * 3 * K * V + part * K * V
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    is_f = part == 0
    is_g = part == 1
    acc = tl.zeros([BK, BV], dtype=tl.float32)
    kappa = tl.load(l_base + (tl.minimum(BT, T) - 1) * H).to(tl.float32)
    if INTERPRET:  # the CPU interpreter (NumPy >= 2.4) cannot use a runtime int as a range() bound
        c = NT * 0
        while c < NT:
            acc, kappa = _state_fwd_step(acc, kappa, c, k_base, v_base, s_base, l_base, h_base, hmask, is_f, is_g,
                                         offk, offv, offt, T, H, K, V, BT, PREC)
            c += 1
    else:
        for c in range(NT):
            acc, kappa = _state_fwd_step(acc, kappa, c, k_base, v_base, s_base, l_base, h_base, hmask, is_f, is_g,
                                         offk, offv, offt, T, H, K, V, BT, PREC)


@triton.autotune(configs=_configs(False), key=["BT", "BK", "BV"])
@triton.jit
def _out_fwd(q, k, v, s, lam, ca, cb, cg, h, o, T, H, NT,
             K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
             PREC: tl.constexpr):
    c = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    hh = bh % H
    offk = tl.arange(0, BK)
    offv = tl.arange(0, BV)
    rows = c * BT + tl.arange(0, BT)
    mrow = rows < T
    mk = mrow[:, None] & (offk[None, :] < K)
    mv = mrow[:, None] & (offv[None, :] < V)
    qk_off = b * T * H * K + hh * K + rows[:, None] * H * K + offk[None, :]
    v_off = b * T * H * V + hh * V + rows[:, None] * H * V + offv[None, :]
    sc_off = b * T * H + hh + rows * H
    qc = tl.load(q + qk_off, mask=mk, other=0.0)
    kc = tl.load(k + qk_off, mask=mk, other=0.0)
    vc = tl.load(v + v_off, mask=mv, other=0.0)
    sc = tl.load(s + sc_off, mask=mrow, other=0.0).to(tl.float32)
    lc = tl.load(lam + sc_off, mask=mrow, other=0.0).to(tl.float32)
    a = tl.load(ca + sc_off, mask=mrow, other=0.0).to(tl.float32)
    bb = tl.load(cb + sc_off, mask=mrow, other=0.0).to(tl.float32)
    g = tl.load(cg + sc_off, mask=mrow, other=0.0).to(tl.float32)

    m2 = (rows[:, None] >= rows[None, :]) & mrow[:, None] & mrow[None, :]
    A = tl.dot(qc, tl.trans(kc), input_precision=PREC)
    E = tl.exp(tl.where(m2, sc[None, :] - lc[:, None], float("-inf")))
    W = a[:, None] * E + bb[:, None] * sc[None, :] + g[:, None]
    W = tl.where(m2, W * A, 0.0)
    acc = tl.dot(W.to(vc.dtype), vc, input_precision=PREC)

    # inter-chunk: state before this chunk, stabilised at kappa = lam at the previous chunk's last row
    kappa = tl.load(lam + b * T * H + hh + tl.maximum(c * BT - 1, 0) * H).to(tl.float32)
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    h_base = h + (bh * NT + c) * 3 * K * V + offk[:, None] * V + offv[None, :]
    hF = tl.load(h_base, mask=hmask, other=0.0).to(qc.dtype)
    hG = tl.load(h_base + K * V, mask=hmask, other=0.0).to(qc.dtype)
    hH = tl.load(h_base + 2 * K * V, mask=hmask, other=0.0).to(qc.dtype)
    fF = tl.where(mrow, a * tl.exp(tl.where(mrow, kappa - lc, 0.0)), 0.0)
    acc += fF[:, None] * tl.dot(qc, hF, input_precision=PREC)
    acc += bb[:, None] * tl.dot(qc, hG, input_precision=PREC)
    acc += g[:, None] * tl.dot(qc, hH, input_precision=PREC)
    tl.store(o + v_off, acc.to(o.dtype.element_ty), mask=mv)


@triton.jit
def _state_bwd_step(acc, kappa, c, q_base, o_base, lam, ca, cb, cg, sc_base, dh_base, hmask, is_f, is_g,
                    offk, offv, offt, T, H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr):
    tl.store(dh_base + c * 3 * K * V + offk[:, None] * V + offv[None, :], acc.to(dh_base.dtype.element_ty), mask=hmask)
    rows = c * BT + offt
    mrow = rows < T
    qc = tl.load(q_base + rows[:, None] * H * K + offk[None, :], mask=mrow[:, None] & (offk[None, :] < K), other=0.0)
    oc = tl.load(o_base + rows[:, None] * H * V + offv[None, :], mask=mrow[:, None] & (offv[None, :] < V), other=0.0)
    lc = tl.load(lam + sc_base + rows * H, mask=mrow, other=0.0).to(tl.float32)
    a = tl.load(ca + sc_base + rows * H, mask=mrow, other=0.0).to(tl.float32)
    bb = tl.load(cb + sc_base + rows * H, mask=mrow, other=0.0).to(tl.float32)
    g = tl.load(cg + sc_base + rows * H, mask=mrow, other=0.0).to(tl.float32)
    kap_new = tl.load(lam + sc_base + tl.maximum(c * BT - 1, 0) * H).to(tl.float32)
    coef_f = a * tl.exp(tl.where(mrow, kap_new - lc, float("-inf")))
    coef = tl.where(is_f, coef_f, tl.where(is_g, bb, g))
    coef = tl.where(mrow, coef, 0.0)
    resc = tl.where(is_f, tl.exp(kap_new - kappa), 1.0)
    qw = (qc.to(tl.float32) * coef[:, None]).to(oc.dtype)
    acc = acc * resc + tl.dot(tl.trans(qw), oc, input_precision=PREC)
    return acc, kap_new


@triton.autotune(configs=_configs(True), key=["BT", "BK", "BV"])
@triton.jit
def _state_bwd(q, do, lam, ca, cb, cg, dh, T, H, NT,
               K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
               PREC: tl.constexpr, INTERPRET: tl.constexpr):
    """dh[c] = sum over rows t in chunks > c of coef_t q_t do_t^T, stabilised at lam[last row of c]."""
    part = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    hh = bh % H
    offk = tl.arange(0, BK)
    offv = tl.arange(0, BV)
    offt = tl.arange(0, BT)
    q_base = q + b * T * H * K + hh * K
    o_base = do + b * T * H * V + hh * V
    sc_base = b * T * H + hh
    dh_base = dh + bh * NT * 3 * K * V + part * K * V
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    is_f = part == 0
    is_g = part == 1
    acc = tl.zeros([BK, BV], dtype=tl.float32)
    kappa = tl.load(lam + sc_base + tl.maximum((NT - 1) * BT - 1, 0) * H).to(tl.float32)
    if INTERPRET:
        i = NT * 0
        while i < NT:
            acc, kappa = _state_bwd_step(acc, kappa, NT - 1 - i, q_base, o_base, lam, ca, cb, cg, sc_base, dh_base,
                                         hmask, is_f, is_g, offk, offv, offt, T, H, K, V, BT, PREC)
            i += 1
    else:
        for i in range(NT):
            acc, kappa = _state_bwd_step(acc, kappa, NT - 1 - i, q_base, o_base, lam, ca, cb, cg, sc_base, dh_base,
                                         hmask, is_f, is_g, offk, offv, offt, T, H, K, V, BT, PREC)


@triton.autotune(configs=_configs(False), key=["BT", "BK", "BV"])
@triton.jit
def _dq_bwd(q, k, v, do, s, lam, ca, cb, cg, h, dq, da, db, dg, T, H, NT,
            K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
            PREC: tl.constexpr):
    c = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    hh = bh % H
    offk = tl.arange(0, BK)
    offv = tl.arange(0, BV)
    rows = c * BT + tl.arange(0, BT)
    mrow = rows < T
    mk = mrow[:, None] & (offk[None, :] < K)
    mv = mrow[:, None] & (offv[None, :] < V)
    qk_off = b * T * H * K + hh * K + rows[:, None] * H * K + offk[None, :]
    v_off = b * T * H * V + hh * V + rows[:, None] * H * V + offv[None, :]
    sc_off = b * T * H + hh + rows * H
    qc = tl.load(q + qk_off, mask=mk, other=0.0)
    kc = tl.load(k + qk_off, mask=mk, other=0.0)
    vc = tl.load(v + v_off, mask=mv, other=0.0)
    oc = tl.load(do + v_off, mask=mv, other=0.0)
    sc = tl.load(s + sc_off, mask=mrow, other=0.0).to(tl.float32)
    lc = tl.load(lam + sc_off, mask=mrow, other=0.0).to(tl.float32)
    a = tl.load(ca + sc_off, mask=mrow, other=0.0).to(tl.float32)
    bb = tl.load(cb + sc_off, mask=mrow, other=0.0).to(tl.float32)
    g = tl.load(cg + sc_off, mask=mrow, other=0.0).to(tl.float32)

    m2 = (rows[:, None] >= rows[None, :]) & mrow[:, None] & mrow[None, :]
    A = tl.dot(qc, tl.trans(kc), input_precision=PREC)
    dA = tl.dot(oc, tl.trans(vc), input_precision=PREC)
    E = tl.exp(tl.where(m2, sc[None, :] - lc[:, None], float("-inf")))
    W = tl.where(m2, a[:, None] * E + bb[:, None] * sc[None, :] + g[:, None], 0.0)
    AdA = tl.where(m2, A * dA, 0.0)
    acc = tl.dot((W * dA).to(kc.dtype), kc, input_precision=PREC)
    gda = tl.sum(E * AdA, axis=1)
    gdb = tl.sum(AdA * sc[None, :], axis=1)
    gdg = tl.sum(AdA, axis=1)

    kappa = tl.load(lam + b * T * H + hh + tl.maximum(c * BT - 1, 0) * H).to(tl.float32)
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    h_base = h + (bh * NT + c) * 3 * K * V + offk[:, None] * V + offv[None, :]
    hF = tl.load(h_base, mask=hmask, other=0.0).to(oc.dtype)
    hG = tl.load(h_base + K * V, mask=hmask, other=0.0).to(oc.dtype)
    hH = tl.load(h_base + 2 * K * V, mask=hmask, other=0.0).to(oc.dtype)
    eF = tl.where(mrow, tl.exp(tl.where(mrow, kappa - lc, 0.0)), 0.0)
    dqF = tl.dot(oc, tl.trans(hF), input_precision=PREC)
    dqG = tl.dot(oc, tl.trans(hG), input_precision=PREC)
    dqH = tl.dot(oc, tl.trans(hH), input_precision=PREC)
    acc += (a * eF)[:, None] * dqF + bb[:, None] * dqG + g[:, None] * dqH
    qf = qc.to(tl.float32)
    gda += eF * tl.sum(qf * dqF, axis=1)
    gdb += tl.sum(qf * dqG, axis=1)
    gdg += tl.sum(qf * dqH, axis=1)
    tl.store(dq + qk_off, acc.to(dq.dtype.element_ty), mask=mk)
    tl.store(da + sc_off, gda, mask=mrow)
    tl.store(db + sc_off, gdb, mask=mrow)
    tl.store(dg + sc_off, gdg, mask=mrow)


@triton.autotune(configs=_configs(False), key=["BT", "BK", "BV"])
@triton.jit
def _dkv_bwd(q, k, v, do, s, lam, ca, cb, cg, dh, dk, dv, ds, T, H, NT,
             K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
             PREC: tl.constexpr):
    c = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    hh = bh % H
    offk = tl.arange(0, BK)
    offv = tl.arange(0, BV)
    rows = c * BT + tl.arange(0, BT)
    mrow = rows < T
    mk = mrow[:, None] & (offk[None, :] < K)
    mv = mrow[:, None] & (offv[None, :] < V)
    qk_off = b * T * H * K + hh * K + rows[:, None] * H * K + offk[None, :]
    v_off = b * T * H * V + hh * V + rows[:, None] * H * V + offv[None, :]
    sc_off = b * T * H + hh + rows * H
    qc = tl.load(q + qk_off, mask=mk, other=0.0)
    kc = tl.load(k + qk_off, mask=mk, other=0.0)
    vc = tl.load(v + v_off, mask=mv, other=0.0)
    oc = tl.load(do + v_off, mask=mv, other=0.0)
    sc = tl.load(s + sc_off, mask=mrow, other=0.0).to(tl.float32)
    lc = tl.load(lam + sc_off, mask=mrow, other=0.0).to(tl.float32)
    a = tl.load(ca + sc_off, mask=mrow, other=0.0).to(tl.float32)
    bb = tl.load(cb + sc_off, mask=mrow, other=0.0).to(tl.float32)
    g = tl.load(cg + sc_off, mask=mrow, other=0.0).to(tl.float32)

    # rows index queries t, columns keys i (both inside this chunk)
    m2 = (rows[:, None] >= rows[None, :]) & mrow[:, None] & mrow[None, :]
    A = tl.dot(qc, tl.trans(kc), input_precision=PREC)
    dA = tl.dot(oc, tl.trans(vc), input_precision=PREC)
    E = tl.exp(tl.where(m2, sc[None, :] - lc[:, None], float("-inf")))
    W = tl.where(m2, a[:, None] * E + bb[:, None] * sc[None, :] + g[:, None], 0.0)
    AdA = tl.where(m2, A * dA, 0.0)
    acc_k = tl.dot(tl.trans((W * dA).to(qc.dtype)), qc, input_precision=PREC)
    acc_v = tl.dot(tl.trans((W * A).to(oc.dtype)), oc, input_precision=PREC)
    gds = tl.sum((a[:, None] * E + bb[:, None]) * AdA, axis=0)

    # inter-chunk: reverse state of the rows after this chunk, stabilised at lam[last row of chunk]
    kappa = tl.load(lam + b * T * H + hh + (tl.minimum(c * BT + BT, T) - 1) * H).to(tl.float32)
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    h_base = dh + (bh * NT + c) * 3 * K * V + offk[:, None] * V + offv[None, :]
    sF = tl.load(h_base, mask=hmask, other=0.0).to(kc.dtype)
    sG = tl.load(h_base + K * V, mask=hmask, other=0.0).to(kc.dtype)
    sH = tl.load(h_base + 2 * K * V, mask=hmask, other=0.0).to(kc.dtype)
    eF = tl.exp(tl.where(mrow, sc - kappa, float("-inf")))
    dvF = tl.dot(kc, sF, input_precision=PREC)
    dvG = tl.dot(kc, sG, input_precision=PREC)
    dvH = tl.dot(kc, sH, input_precision=PREC)
    acc_v += eF[:, None] * dvF + sc[:, None] * dvG + dvH
    vcc = vc.to(tl.float32)
    vF = tl.dot(vc, tl.trans(sF), input_precision=PREC)
    vG = tl.dot(vc, tl.trans(sG), input_precision=PREC)
    vH = tl.dot(vc, tl.trans(sH), input_precision=PREC)
    acc_k += eF[:, None] * vF + sc[:, None] * vG + vH
    gds += eF * tl.sum(vcc * dvF, axis=1) + tl.sum(vcc * dvG, axis=1)
    tl.store(dk + qk_off, acc_k.to(dk.dtype.element_ty), mask=mk)
    tl.store(dv + v_off, acc_v.to(dv.dtype.element_ty), mask=mv)
    tl.store(ds + sc_off, gds, mask=mrow)


# ----------------------------------------------------------------------------------------------
# Launchers and autograd
# ----------------------------------------------------------------------------------------------
def _blocks(q, v, chunk):
    B, T, H, K = q.shape
    V = v.shape[-1]
    BK = max(16, triton.next_power_of_2(K))
    BV = max(16, triton.next_power_of_2(V))
    NT = triton.cdiv(T, chunk)
    prec = "ieee" if q.dtype == torch.float32 else "tf32"
    return B, T, H, K, V, BK, BV, NT, prec


def _empty(*shape, device, dtype):
    """Every buffer the kernels write comes from here (tests patch it to fill NaN)."""
    return torch.empty(*shape, device=device, dtype=dtype)


def _state_dtype(x):
    return torch.float32 if x.dtype == torch.float32 else x.dtype


def _fwd_states(k, v, s, lam, chunk):
    B, T, H, K, V, BK, BV, NT, prec = _blocks(k, v, chunk)
    h = _empty(B, H, NT, 3, K, V, device=k.device, dtype=_state_dtype(k))
    _state_fwd[(3, B * H)](k, v, s, lam, h, T, H, NT, K=K, V=V, BT=chunk, BK=BK, BV=BV, PREC=prec, INTERPRET=_INTERPRET)
    return h


class _ZeroSChunk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, s, lam, a, b, g, chunk):
        B, T, H, K, V, BK, BV, NT, prec = _blocks(q, v, chunk)
        h = _fwd_states(k, v, s, lam, chunk)
        o = _empty(B, T, H, V, device=q.device, dtype=v.dtype)
        _out_fwd[(NT, B * H)](q, k, v, s, lam, a, b, g, h, o, T, H, NT, K=K, V=V, BT=chunk, BK=BK, BV=BV, PREC=prec)
        ctx.save_for_backward(q, k, v, s, lam, a, b, g)
        ctx.chunk = chunk
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, s, lam, a, b, g = ctx.saved_tensors
        chunk = ctx.chunk
        do = do.contiguous().to(v.dtype)
        B, T, H, K, V, BK, BV, NT, prec = _blocks(q, v, chunk)
        h = _fwd_states(k, v, s, lam, chunk)
        dh = _empty(*h.shape, device=h.device, dtype=h.dtype)
        _state_bwd[(3, B * H)](q, do, lam, a, b, g, dh, T, H, NT, K=K, V=V, BT=chunk, BK=BK, BV=BV, PREC=prec,
                               INTERPRET=_INTERPRET)
        dq = _empty(*q.shape, device=q.device, dtype=q.dtype)
        dk = _empty(*k.shape, device=k.device, dtype=k.dtype)
        dv = _empty(*v.shape, device=v.device, dtype=v.dtype)
        da, db, dg, ds = (_empty(B, T, H, device=q.device, dtype=torch.float32) for _ in range(4))
        grid = (NT, B * H)
        _dq_bwd[grid](q, k, v, do, s, lam, a, b, g, h, dq, da, db, dg, T, H, NT,
                      K=K, V=V, BT=chunk, BK=BK, BV=BV, PREC=prec)
        _dkv_bwd[grid](q, k, v, do, s, lam, a, b, g, dh, dk, dv, ds, T, H, NT,
                       K=K, V=V, BT=chunk, BK=BK, BV=BV, PREC=prec)
        dlam = -a * da
        return dq, dk, dv, ds, dlam, da, db, dg, None


def step_scalars(s, sigma1, sigmah, sigma0=None):
    """Centred logits and the per-step scalars ``(s~, lam, a, b, g)`` (float32, ``[B, T, H]``).

    ``s~ = s - s_1`` (detached shift; ZeroS is shift-invariant), ``lam`` = running log-sum-exp of
    ``s~``, ``a = sigmah``, ``b = (sigma1 - sigmah)/t``, ``g = -(b P + sigmah)/t (+ sigma0/t)``.
    """
    s = s.float()
    s = s - s[:, :1].detach()
    T = s.shape[1]
    t = torch.arange(1, T + 1, device=s.device, dtype=torch.float32).view(1, T, 1)
    lam = torch.logcumsumexp(s, dim=1)
    a = sigmah.float()
    b = (sigma1.float() - a) / t
    g = -(b * s.cumsum(1) + a) / t
    if sigma0 is not None:
        g = g + sigma0.float() / t
    return s.contiguous(), lam.contiguous(), a.contiguous(), b.contiguous(), g.contiguous()


def _bidirectional(q, k, v, s, sigma1, sigmah, sigma0):
    """Every row sees all T keys: o_t = q_t (a_t F + b G + g_t H) with full-sequence states."""
    s = s.float() - s[:, :1].float().detach()
    T = s.shape[1]
    w = torch.softmax(s, dim=1)  # e^{s_i - lse_T}
    a = sigmah.float()
    b = (sigma1.float() - a) / T
    g = -(b * s.sum(1, keepdim=True) + a) / T
    if sigma0 is not None:
        g = g + sigma0.float() / T
    qf, kf, vf = q.float(), k.float(), v.float()
    Fs = torch.einsum("bth,bthd,bthe->bhde", w, kf, vf)
    Gs = torch.einsum("bth,bthd,bthe->bhde", s, kf, vf)
    Hs = torch.einsum("bthd,bthe->bhde", kf, vf)
    o = (a[..., None] * torch.einsum("bthd,bhde->bthe", qf, Fs)
         + b[..., None] * torch.einsum("bthd,bhde->bthe", qf, Gs)
         + g[..., None] * torch.einsum("bthd,bhde->bthe", qf, Hs))
    return o.to(v.dtype)


def zeros_linear_triton(q, k, v, s, sigma1, sigmah, sigma0=None, *, causal=True, chunk_size=CHUNK):
    """ZeroS attention with the chunked Triton kernels (inputs already validated by ``api``)."""
    if not causal:
        return _bidirectional(q, k, v, s, sigma1, sigmah, sigma0)
    sc, lam, a, b, g = step_scalars(s, sigma1, sigmah, sigma0)
    return _ZeroSChunk.apply(q, k, v, sc, lam, a, b, g, chunk_size)
