"""Chunked Triton kernels for ZeroS attention (forward and backward), scalars computed in-kernel.

Paper: Lu et al., *ZeroS: Zero-Sum Linear Attention for Efficient Transformers*, NeurIPS 2025.
The paper ships no GPU kernel; this one is ours. It uses the identity (spec 04, "Chunked form")
that ZeroS is one un-normalised causal linear attention with a 3d-wide key::

    o_t = sum_{i<=t} (q^_t . k^_i) v_i [ a_t e^{s_i - lam_t} + b_t s_i + g_t ]

with the per-step scalars (Sec. 3, the prefix scan with alpha, beta, gamma)::

    lam_t = log sum_{j<=t} e^{s_j}          (running log-sum-exp: non-decreasing, >= every s_j, j<=t)
    P_t   = sum_{j<=t} s_j
    a_t = sigmah_t,  b_t = (sigma1_t - sigmah_t)/t,  g_t = -(b_t P_t + sigmah_t)/t (+ sigma0_t/t)

so ``a_t e^{s_i - lam_t} = sigmah_t softmax_t(s)_i``. Every exponent the kernels take is <= 0.

**The scalars never leave the kernels as O(T) scans in PyTorch** (ATen runs a scan along a
non-innermost dimension with one thread per (b, h), 30 of 31 ms at T=64k). They are computed in
chunks, as a chunk-local scan plus a value carried across chunks, in the manner of
flash-linear-attention's ``chunk_local_cumsum`` and state passing:

* ``_chunk_totals`` (grid chunks/16 x B*H) reduces each chunk to its log-sum-exp and sum;
  ``_chunk_scan`` (grid B*H) scans those totals, ``tl.associative_scan`` with a log-sum-exp combine
  and ``tl.cumsum``, in blocks of up to 1024 chunks linked by a carry, into ``Lam_c, P_c``
  ``[B*H, NT]``; ``_row_scalars`` (grid chunks/16 x B*H) turns the carried ``Lam_{c-1}, P_{c-1}`` and the
  chunk-local inclusive scans into every row's ``lam_t, a_t, b_t, g_t`` (``rows4 [B*H, 4, T]``, fp32,
  saved for the backward); up to T = 8192 one launch does all three (``_scalars_one_program``, one program a
  head scanning its whole row: short sequences are launch-bound). Each pass is exact and stable (the combine is
  ``max(x, y) + log1p(e^{-|x - y|})``); together they read the logits and gates once;
* the sequential state kernel then only loads ``Lam_c`` per chunk (like fla's ``g_last``), and the
  chunk-parallel kernels load their rows' scalars;
* the backward of the scalar chain is a reverse chunked scan: the dq kernel forms the per-row
  gradients (``dlam_t = -a_t dL/da_t``, ``dP_t = -b_t dL/dg_t / t`` and the gate gradients) and
  their chunk-local reverse sums; the reverse state kernel carries the suffix sums across chunks
  (``C_c = sum_{t after c} dlam_t e^{Lam_c - lam_t}``, ``Y_c = sum_{t after c} dP_t``); the dk/dv
  kernel adds ``e^{s_j - Lam_c} C_c + Y_c`` to ``ds_j``.

Kernels (flash-linear-attention's ``chunk`` pattern: a sequential state pass parallel over
(K-tiles, V-tiles, B*H), then chunk-parallel passes):

* ``_chunk_totals``, ``_chunk_scan``, ``_row_scalars`` (or ``_scalars_one_program``): the per-step scalars (above);
* ``_state_fwd``  grid (3 parts x K-tiles, V-tiles, B*H x segments): the state before each chunk, three
  ``[d x dv]`` parts F~ = sum e^{s_i - Lam_c} k_i v_i^T (only this part is rescaled, by
  ``exp(Lam_old - Lam_new) <= 1``), G = sum s_i k_i v_i^T, H = sum k_i v_i^T;
* ``_out_fwd``    grid (chunks, B*H): intra-chunk masked product, and the inter-chunk
  term as one accumulated product ``[fF q | b q | g q] @ [F; G; H]`` (K = 3d);
* ``_state_out_fwd`` grid (1, V-tiles, B*H x segments), the default forward (``fused``): the storing walk
  and ``_out_fwd`` in one, the three state parts in registers and each chunk's output written as it goes; in one
  segment it computes the per-step scalars on its walk too (a chunk-local scan from the carried ``Lam, P``), so
  that forward is a single launch;
* ``_dq_bwd``     grid (chunks, B*H): dq, the gate gradients, the scalar chain's local part;
* ``_state_bwd``  grid (3 parts x K-tiles, V-tiles, B*H x segments): the reverse state of
  ``sum_t coef_t q_t do_t^T`` and the reverse carries C, Y;
* ``_dkv_bwd``    grid (chunks, B*H): dk, dv, ds.

**The sequential state passes walk the sequence in segments side by side** (as flash-linear-attention's
split state kernels do for long sequences): at B*H = 16 one walk per (part, tile, head) is about 100
programs for 132 SMs, each through T/64 dependent steps. With ``NSEG`` segments a first launch walks every
segment but one from a zero state and stores its total (fp32); the second starts each segment from the
sum of the totals before it (after it, in reverse), the log-sum-exp frames brought into line by factors
``<= 1``, and stores the states. Each launch takes T/(64 NSEG) dependent steps on NSEG times the programs.

The backward recomputes the forward states (only inputs, ``rows4`` and two ``[B*H, NT]`` vectors are
saved), so activation memory is linear in T: two state buffers ``[B*H, NT, 3d, dv]`` in the input
dtype plus a few fp32 ``[B, T, H]`` vectors. The last chunk may be partial (T not a multiple of the chunk).

Logits are shifted by their first value (``s - s_1``, no gradient through the shift) before anything
else: ZeroS is invariant to adding a constant to every logit, and the shift keeps ``b s + g`` free of
a large common offset. The bidirectional (``causal=False``) form needs no kernel: every row reads the
same full state, two dense contractions in PyTorch.

This module never imports ``reference.py`` (the oracle it is tested against).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..host import cdiv, next_power_of_2

__all__ = ["zeros_linear_triton", "CHUNK", "FUSED_MAX_DIM", "fused_by_default"]

CHUNK = 64
FUSED_MAX_DIM = 128  # head dims the fused forward takes (three fp32 [d x BV] states in registers)
_SCAN_BLOCK = 1024  # chunks per block of the scan over chunk totals (a carry links the blocks)
_ONE_PROGRAM_T = 8192  # up to this T one launch computes the scalars (one program a head scans the whole row)
_CHUNKS_PER_PROGRAM = 16  # chunks a program of the two chunk-parallel scalar passes takes (tiny programs otherwise)
_MIN_SEGMENT = 16  # chunks: the shortest segment the automatic split of the state passes makes
# the fused walk's automatic split: 16 segments at B*H = 16 on an H200's 132 SMs, the fastest of 1, 4, 8, 11 and
# 16 at T = 2k to 64k (benchmarks/zeros_attention_NOTES.md, variant 3)
_FUSED_PAIRS_PER_SM = 2
_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _seq_configs():
    """Sequential state passes: V-tile width, warps and pipeline stages (fla tunes the same three); tuned per
    number of segments, which sets how many programs share the SMs."""
    if _INTERPRET:
        return [triton.Config({"BV": 16}, num_warps=4, num_stages=1)]
    return [triton.Config({"BV": bv}, num_warps=w, num_stages=st)
            for bv in (32, 64) for w in (2, 4) for st in (2, 3)]


def _fused_configs():
    """The fused forward walk: V-tile width, warps and stages. Compiled for sm_90a every one sits at 255
    registers (the intra-chunk tiles); 2 warps spill kilobytes and are not tried; V-tiles of 16 at 8 warps
    and 3 stages do not spill."""
    if _INTERPRET:
        return [triton.Config({"BV": 16}, num_warps=4, num_stages=1)]
    return [triton.Config({"BV": bv}, num_warps=w, num_stages=st) for bv in (32, 64) for w in (4, 8)
            for st in (2, 3)] + [triton.Config({"BV": 16}, num_warps=8, num_stages=3)]


def _par_configs():
    if _INTERPRET:
        return [triton.Config({}, num_warps=4, num_stages=1)]
    return [triton.Config({}, num_warps=4, num_stages=1), triton.Config({}, num_warps=8, num_stages=1),
            triton.Config({}, num_warps=4, num_stages=2)]


def _prune_bv(configs, named_args, **kwargs):
    """Drop V tiles wider than the padded value width (keep at least the narrowest)."""
    bvf = kwargs.get("BVF", named_args.get("BVF"))
    keep = [c for c in configs if bvf is None or c.kwargs["BV"] <= bvf]
    return keep or [min(configs, key=lambda c: c.kwargs["BV"])]


# ----------------------------------------------------------------------------------------------
# Shared pieces
# ----------------------------------------------------------------------------------------------
@triton.jit
def _lse_combine(x, y):
    """log(e^x + e^y), the associative step of the log-sum-exp scan (y may be -inf, x finite)."""
    return tl.maximum(x, y) + tl.log(1.0 + tl.exp(-tl.abs(x - y)))


@triton.jit
def _shifted_logits(s, b, hh, rows, mrow, T, H):
    """``s_t - s_1`` on this head's rows (0 on padded rows)."""
    base = b * T * H + hh
    sc = tl.load(s + base + rows * H, mask=mrow, other=0.0).to(tl.float32) - tl.load(s + base).to(tl.float32)
    return tl.where(mrow, sc, 0.0)


# ----------------------------------------------------------------------------------------------
# The per-step scalars: chunk totals -> scan over chunks -> rows (three chunk-parallel passes)
# ----------------------------------------------------------------------------------------------
@triton.jit
def _chunk_totals(s, lt, st, T, H, NT, BT: tl.constexpr, CB: tl.constexpr):
    """lt[c], st[c] = log-sum-exp and sum of the shifted logits of chunk c (CB chunks a program)."""
    cs = tl.program_id(0) * CB + tl.arange(0, CB)
    bh = tl.program_id(1).to(tl.int64)
    rows = cs[:, None] * BT + tl.arange(0, BT)[None, :]
    mrow = rows < T
    mc = cs < NT  # every chunk below NT has at least one row
    sc = _shifted_logits(s, bh // H, bh % H, rows, mrow, T, H)
    smax = tl.where(mc, tl.max(tl.where(mrow, sc, float("-inf")), axis=1), 0.0)
    lse = smax + tl.log(tl.sum(tl.where(mrow, tl.exp(sc - smax[:, None]), 0.0), axis=1))
    tl.store(lt + bh * NT + cs, lse, mask=mc)
    tl.store(st + bh * NT + cs, tl.sum(sc, axis=1), mask=mc)


@triton.jit
def _chunk_scan_block(lt, st, lb, pb, i, lam_c, p_c, NT, NB: tl.constexpr):
    idx = i * NB + tl.arange(0, NB)
    m = idx < NT
    lam = _lse_combine(tl.associative_scan(tl.load(lt + idx, mask=m, other=0.0), 0, _lse_combine), lam_c)
    P = p_c + tl.cumsum(tl.load(st + idx, mask=m, other=0.0), 0)
    tl.store(lb + idx, lam, mask=m)
    tl.store(pb + idx, P, mask=m)
    last = tl.minimum(NT, (i + 1) * NB) - 1
    return tl.max(tl.where(idx == last, lam, float("-inf")), axis=0), tl.sum(tl.where(idx == last, P, 0.0), axis=0)


@triton.jit
def _chunk_scan(lt, st, lb, pb, NT, NB: tl.constexpr, INTERPRET: tl.constexpr):
    """lb[c], pb[c] = Lam_c, P_c: the inclusive scans of the chunk totals (blocks of NB chunks, carried)."""
    bh = tl.program_id(0).to(tl.int64)
    off = bh * NT
    p_c = tl.load(st + off) * 0.0
    lam_c = p_c + float("-inf")
    nblk = tl.cdiv(NT, NB)
    if INTERPRET:  # the CPU interpreter (NumPy >= 2.4) cannot use a runtime int as a range() bound
        i = nblk * 0
        while i < nblk:
            lam_c, p_c = _chunk_scan_block(lt + off, st + off, lb + off, pb + off, i, lam_c, p_c, NT, NB)
            i += 1
    else:
        for i in range(nblk):
            lam_c, p_c = _chunk_scan_block(lt + off, st + off, lb + off, pb + off, i, lam_c, p_c, NT, NB)


@triton.jit
def _gate_scalars(s1, sh, s0, P, b, hh, rows, mrow, T, H, HAS_S0: tl.constexpr):
    """``a_t, b_t, g_t`` on these rows from the gates and ``P_t``: ``a = sigmah``, ``b = (sigma1 - sigmah)/t``,
    ``g = -(b P + sigmah)/t (+ sigma0/t)`` (0 on padded rows)."""
    tpos = (rows + 1).to(tl.float32)
    off = b * T * H + hh + rows * H
    a = tl.load(sh + off, mask=mrow, other=0.0).to(tl.float32)
    bb = (tl.load(s1 + off, mask=mrow, other=0.0).to(tl.float32) - a) / tpos
    g = -(bb * P + a) / tpos
    if HAS_S0:
        g += tl.load(s0 + off, mask=mrow, other=0.0).to(tl.float32) / tpos
    return a, bb, g


@triton.jit
def _store_rows(rows4, lam, a, bb, g, bh, rows, mrow, T):
    """rows4[bh] = [lam_t, a_t, b_t, g_t] on these rows (``mrow``)."""
    r = rows4 + bh * 4 * T + rows
    tl.store(r, lam, mask=mrow)
    tl.store(r + T, a, mask=mrow)
    tl.store(r + 2 * T, bb, mask=mrow)
    tl.store(r + 3 * T, g, mask=mrow)


@triton.jit
def _row_scalars(s, s1, sh, s0, lb, pb, rows4, T, H, NT, BT: tl.constexpr, CB: tl.constexpr, HAS_S0: tl.constexpr):
    """rows4[bh] = [lam_t, a_t, b_t, g_t], each contiguous in T, from the carried ``Lam_{c-1}, P_{c-1}``
    and the chunk-local inclusive scans (``tl.associative_scan`` of log-sum-exp, ``tl.cumsum``), CB
    chunks a program."""
    cs = tl.program_id(0) * CB + tl.arange(0, CB)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    hh = bh % H
    rows = cs[:, None] * BT + tl.arange(0, BT)[None, :]
    mrow = rows < T
    sc = _shifted_logits(s, b, hh, rows, mrow, T, H)
    has_prev = (cs > 0) & (cs < NT)
    lam_prev = tl.load(lb + bh * NT + cs - 1, mask=has_prev, other=float("-inf"))
    p_prev = tl.load(pb + bh * NT + cs - 1, mask=has_prev, other=0.0)
    lam = _lse_combine(tl.associative_scan(sc, 1, _lse_combine), lam_prev[:, None])
    P = p_prev[:, None] + tl.cumsum(sc, 1)
    a, bb, g = _gate_scalars(s1, sh, s0, P, b, hh, rows, mrow, T, H, HAS_S0)
    _store_rows(rows4, lam, a, bb, g, bh, rows, mrow, T)


@triton.jit
def _scalars_one_program(s, s1, sh, s0, lb, pb, rows4, T, H, NT, BT: tl.constexpr, TP: tl.constexpr,
                         HAS_S0: tl.constexpr):
    """The three scalar passes in one launch for a short sequence (``T <= TP``): one program a head scans
    all its T logits at once and stores the rows and, at each chunk's last row, ``Lam_c, P_c``."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    hh = bh % H
    rows = tl.arange(0, TP)
    mrow = rows < T
    sc = _shifted_logits(s, b, hh, rows, mrow, T, H)
    lam = tl.associative_scan(sc, 0, _lse_combine)  # padded rows (0) come after every real one
    P = tl.cumsum(sc, 0)
    chunk_end = mrow & (((rows + 1) % BT == 0) | (rows == T - 1))
    tl.store(lb + bh * NT + rows // BT, lam, mask=chunk_end)
    tl.store(pb + bh * NT + rows // BT, P, mask=chunk_end)
    a, bb, g = _gate_scalars(s1, sh, s0, P, b, hh, rows, mrow, T, H, HAS_S0)
    _store_rows(rows4, lam, a, bb, g, bh, rows, mrow, T)


@triton.jit
def _load_rows(rows4, lb, bh, c, rows, mrow, T, NT):
    """This chunk's ``lam, a, b, g`` (0 on padded rows) and the frame ratio ``e^{Lam_{c-1} - lam_t}`` of the
    carried state (<= 1; 0 in the first chunk and on padded rows)."""
    r = rows4 + bh * 4 * T + rows
    lam = tl.load(r, mask=mrow, other=0.0)
    a = tl.load(r + T, mask=mrow, other=0.0)
    bb = tl.load(r + 2 * T, mask=mrow, other=0.0)
    g = tl.load(r + 3 * T, mask=mrow, other=0.0)
    lam_prev = tl.where(c > 0, tl.load(lb + bh * NT + tl.maximum(c - 1, 0)), float("-inf"))
    return lam, a, bb, g, tl.exp(tl.where(mrow, lam_prev - lam, float("-inf")))


# ----------------------------------------------------------------------------------------------
# Forward
# ----------------------------------------------------------------------------------------------
@triton.jit
def _state_fwd_step(acc, lam, c, k_base, v_base, s_base, s_first, h_base, lb_base, hmask, is_f, is_g, offk, offv,
                    offt, T, H, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr,
                    STORE: tl.constexpr):
    if STORE:
        tl.store(h_base + c * 3 * K * V + offk[:, None] * V + offv[None, :], acc.to(h_base.dtype.element_ty),
                 mask=hmask)
    rows = c * BT + offt
    mrow = rows < T
    kc = tl.load(k_base + rows[:, None] * H * K + offk[None, :], mask=mrow[:, None] & (offk[None, :] < K), other=0.0)
    vc = tl.load(v_base + rows[:, None] * H * V + offv[None, :], mask=mrow[:, None] & (offv[None, :] < V), other=0.0)
    sc = tl.load(s_base + rows * H, mask=mrow, other=0.0).to(tl.float32) - s_first
    if STORE:
        lam_new = tl.load(lb_base + c)  # Lam_c, from the scan over chunk totals
    else:
        lam_new = lam  # a segment's total is summed in one frame, its last chunk's: no rescaling chain
    coef_f = tl.exp(tl.where(mrow, sc - lam_new, float("-inf")))
    coef = tl.where(is_f, coef_f, tl.where(is_g, tl.where(mrow, sc, 0.0), tl.where(mrow, 1.0, 0.0)))
    kw = (kc.to(tl.float32) * coef[:, None]).to(vc.dtype)
    if STORE:
        acc = acc * tl.where(is_f, tl.exp(lam - lam_new), 1.0)
    acc += tl.dot(tl.trans(kw), vc, input_precision=PREC)
    return acc, lam_new


@triton.jit
def _state_fwd_carry(acc, m, tot_base, lb_base, lam_to, is_f, hmask, SEG, K: tl.constexpr, V: tl.constexpr):
    """Add the total of (earlier) segment m, stored in the frame ``Lam_{(m+1) SEG - 1}``, in the frame ``lam_to``
    (only the F part carries a frame; G and H add as they are)."""
    return acc + tl.load(tot_base + m * 3 * K * V, mask=hmask, other=0.0) * tl.where(
        is_f, tl.exp(tl.load(lb_base + (m + 1) * SEG - 1) - lam_to), 1.0)


@triton.jit
def _segment(NT, SEG, NSEG, STORE: tl.constexpr, REVERSE: tl.constexpr):
    """``(bh, j, c0, c1)`` of a sequential state program: grid axis 2 is ``B*H x segments``. The totals pass
    (``STORE=False``) skips the one segment whose total no other segment needs: the last one going
    forward, the first one in reverse."""
    nsg = NSEG if STORE else NSEG - 1
    pid = tl.program_id(2)
    bh = (pid // nsg).to(tl.int64)
    j = pid % nsg
    if not STORE and REVERSE:
        j += 1
    c0 = j * SEG
    return bh, j, c0, tl.minimum(c0 + SEG, NT)


@triton.autotune(configs=_seq_configs(), key=["BT", "K", "V", "STORE", "NSEG"],
                 prune_configs_by={"early_config_prune": _prune_bv})
@triton.jit
def _state_fwd(k, v, s, h, lb, tot, T, H, NT, SEG, NSEG,
               K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, NKT: tl.constexpr,
               BVF: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
               STORE: tl.constexpr):
    """h[c] = state of the keys before chunk c (F part in the frame Lam_{c-1}); reads Lam_c from lb.

    The chunks are walked in ``NSEG`` segments of ``SEG`` chunks, side by side (one segment: the plain
    sequential pass). ``STORE=False`` (segments 0..NSEG-2) sums a segment's keys into ``tot[bh, j]``
    (fp32; F in the frame of the segment's last chunk from the start, so a plain accumulation);
    ``STORE=True`` starts segment j from the sum of the earlier segments' totals, F brought to the frame
    ``Lam_{c0-1}`` by factors ``e^{Lam_end - Lam_{c0-1}} <= 1``, and stores h[c] for its chunks. Both
    passes run ``SEG`` dependent steps instead of ``NT``."""
    i_k = tl.program_id(0)
    i_v = tl.program_id(1)
    bh, j, c0, c1 = _segment(NT, SEG, NSEG, STORE, False)
    part = i_k // NKT
    kt = i_k % NKT
    b = bh // H
    hh = bh % H
    offk = kt * BK + tl.arange(0, BK)
    offv = i_v * BV + tl.arange(0, BV)
    offt = tl.arange(0, BT)
    k_base = k + b * T * H * K + hh * K
    v_base = v + b * T * H * V + hh * V
    s_base = s + b * T * H + hh
    s_first = tl.load(s_base).to(tl.float32)
    h_base = h + bh * NT * 3 * K * V + part * K * V
    lb_base = lb + bh * NT
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    tot_base = tot + (bh * NSEG * 3 + part) * K * V + offk[:, None] * V + offv[None, :]
    is_f = part == 0
    is_g = part == 1
    acc = tl.zeros([BK, BV], dtype=tl.float32)
    if STORE:
        lam = tl.where(j > 0, tl.load(lb_base + tl.maximum(c0 - 1, 0)), float("-inf"))
    else:
        lam = tl.load(lb_base + c1 - 1)
    if INTERPRET:  # the CPU interpreter (NumPy >= 2.4) cannot use a runtime int as a range() bound
        if STORE:
            m = j * 0
            while m < j:
                acc = _state_fwd_carry(acc, m, tot_base, lb_base, lam, is_f, hmask, SEG, K, V)
                m += 1
        c = c0
        while c < c1:
            acc, lam = _state_fwd_step(acc, lam, c, k_base, v_base, s_base, s_first, h_base, lb_base, hmask,
                                       is_f, is_g, offk, offv, offt, T, H, K, V, BT, PREC, STORE)
            c += 1
    else:
        if STORE:
            for m in range(0, j):
                acc = _state_fwd_carry(acc, m, tot_base, lb_base, lam, is_f, hmask, SEG, K, V)
        for c in range(c0, c1):
            acc, lam = _state_fwd_step(acc, lam, c, k_base, v_base, s_base, s_first, h_base, lb_base, hmask,
                                       is_f, is_g, offk, offv, offt, T, H, K, V, BT, PREC, STORE)
    if not STORE:
        tl.store(tot_base + j * 3 * K * V, acc, mask=hmask)


@triton.jit
def _chunk_inputs(q, k, v, s, b, hh, rows, mrow, offk, offv, T, H, K: tl.constexpr, V: tl.constexpr):
    """A chunk's q and k tiles (the head's K columns ``offk``), its v tile (the V columns ``offv``), 0 past T;
    its shifted logits; and the offsets and mask of its output tile (v's)."""
    mk = mrow[:, None] & (offk[None, :] < K)
    mv = mrow[:, None] & (offv[None, :] < V)
    qk_off = b * T * H * K + hh * K + rows[:, None] * H * K + offk[None, :]
    v_off = b * T * H * V + hh * V + rows[:, None] * H * V + offv[None, :]
    qc = tl.load(q + qk_off, mask=mk, other=0.0)
    kc = tl.load(k + qk_off, mask=mk, other=0.0)
    vc = tl.load(v + v_off, mask=mv, other=0.0)
    return qc, kc, vc, _shifted_logits(s, b, hh, rows, mrow, T, H), v_off, mv


@triton.jit
def _chunk_out(qc, kc, vc, sc, lam, a, bb, g, eF, rows, mrow, hF, hG, hH, PREC: tl.constexpr):
    """A chunk's output rows (fp32): the intra-chunk masked product, plus the inter-chunk term
    ``[fF q | b q | g q] @ [F~; G; H]``, one K = 3d product accumulated in fp32, from the state parts before
    the chunk (in q's dtype; F~ in the frame Lam_{c-1} <= lam_t, so ``fF = a e^{Lam_{c-1} - lam_t} <= a``)."""
    m2q = (rows[:, None] >= rows[None, :]) & mrow[:, None] & mrow[None, :]
    A = tl.dot(qc, tl.trans(kc), input_precision=PREC)
    E = tl.exp(tl.where(m2q, sc[None, :] - lam[:, None], float("-inf")))
    W = a[:, None] * E + bb[:, None] * sc[None, :] + g[:, None]
    W = tl.where(m2q, W * A, 0.0)
    acc = tl.dot(W.to(vc.dtype), vc, input_precision=PREC)
    qf = qc.to(tl.float32)
    acc = tl.dot((qf * (a * eF)[:, None]).to(qc.dtype), hF, acc, input_precision=PREC)
    acc = tl.dot((qf * bb[:, None]).to(qc.dtype), hG, acc, input_precision=PREC)
    acc = tl.dot((qf * g[:, None]).to(qc.dtype), hH, acc, input_precision=PREC)
    return acc


@triton.autotune(configs=_par_configs(), key=["BT", "K", "V"])
@triton.jit
def _out_fwd(q, k, v, s, rows4, h, lb, o, T, H, NT,
             K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
             PREC: tl.constexpr):
    """o of chunk c (grid chunks x B*H) from the stored state h[c]."""
    c = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // H
    hh = bh % H
    offk = tl.arange(0, BK)
    offv = tl.arange(0, BV)
    rows = c * BT + tl.arange(0, BT)
    mrow = rows < T
    qc, kc, vc, sc, v_off, mv = _chunk_inputs(q, k, v, s, b, hh, rows, mrow, offk, offv, T, H, K, V)
    lam, a, bb, g, eF = _load_rows(rows4, lb, bh, c, rows, mrow, T, NT)
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    h_base = h + (bh * NT + c) * 3 * K * V + offk[:, None] * V + offv[None, :]
    hF = tl.load(h_base, mask=hmask, other=0.0).to(qc.dtype)
    hG = tl.load(h_base + K * V, mask=hmask, other=0.0).to(qc.dtype)
    hH = tl.load(h_base + 2 * K * V, mask=hmask, other=0.0).to(qc.dtype)
    acc = _chunk_out(qc, kc, vc, sc, lam, a, bb, g, eF, rows, mrow, hF, hG, hH, PREC)
    tl.store(o + v_off, acc.to(o.dtype.element_ty), mask=mv)


@triton.jit
def _state_out_step(F, G, Hs, lam, P, c, q, k, v, s, s1, sh, s0, rows4, lb, pb, o, bh, b, hh, i_v, offk, offv, offt, T,
                    H, NT, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, PREC: tl.constexpr, SCAN: tl.constexpr,
                    HAS_S0: tl.constexpr):
    """Chunk c of the fused walk: its output (this V-tile) from the state parts in registers, then the chunk
    folded into them (as ``_state_fwd_step`` does for one part). ``lam, P``: ``Lam_{c-1}, P_{c-1}``. With ``SCAN``
    (one segment) the walk computes its rows' scalars itself, the chunk-local scans of ``_row_scalars`` from the
    carried ``Lam_{c-1}, P_{c-1}``, and the V-tile-0 program stores them (``rows4``, ``lb``, ``pb``) for the backward;
    otherwise it loads them."""
    rows = c * BT + offt
    mrow = rows < T
    qc, kc, vc, sc, v_off, mv = _chunk_inputs(q, k, v, s, b, hh, rows, mrow, offk, offv, T, H, K, V)
    if SCAN:
        lam_r = _lse_combine(tl.associative_scan(sc, 0, _lse_combine), lam)  # padded rows come after every real one
        P_r = P + tl.cumsum(sc, 0)
        a, bb, g = _gate_scalars(s1, sh, s0, P_r, b, hh, rows, mrow, T, H, HAS_S0)
        eF = tl.exp(tl.where(mrow, lam - lam_r, float("-inf")))
        lam_new = tl.max(tl.where(mrow, lam_r, float("-inf")), axis=0)  # lam is non-decreasing: the last row's
        P_new = P + tl.sum(sc, axis=0)  # padded rows add 0
        first = i_v == 0
        _store_rows(rows4, lam_r, a, bb, g, bh, rows, mrow & first, T)
        tl.store(lb + bh * NT + c, lam_new, mask=first)
        tl.store(pb + bh * NT + c, P_new, mask=first)
    else:
        lam_r, a, bb, g, eF = _load_rows(rows4, lb, bh, c, rows, mrow, T, NT)
        lam_new = tl.load(lb + bh * NT + c)  # Lam_c
        P_new = P
    acc = _chunk_out(qc, kc, vc, sc, lam_r, a, bb, g, eF, rows, mrow, F.to(qc.dtype), G.to(qc.dtype),
                     Hs.to(qc.dtype), PREC)
    tl.store(o + v_off, acc.to(o.dtype.element_ty), mask=mv)
    kf = kc.to(tl.float32)
    kF = (kf * tl.exp(tl.where(mrow, sc - lam_new, float("-inf")))[:, None]).to(vc.dtype)
    F = F * tl.exp(lam - lam_new) + tl.dot(tl.trans(kF), vc, input_precision=PREC)
    G += tl.dot(tl.trans((kf * sc[:, None]).to(vc.dtype)), vc, input_precision=PREC)
    Hs += tl.dot(tl.trans(kc), vc, input_precision=PREC)
    return F, G, Hs, lam_new, P_new


@triton.jit
def _state_out_carry(F, G, Hs, m, tot_base, lb_base, lam_to, hmask, SEG, K: tl.constexpr, V: tl.constexpr):
    """The three parts of :func:`_state_fwd_carry` at once (the fused walk keeps them all)."""
    base = tot_base + m * 3 * K * V
    F += tl.load(base, mask=hmask, other=0.0) * tl.exp(tl.load(lb_base + (m + 1) * SEG - 1) - lam_to)
    G += tl.load(base + K * V, mask=hmask, other=0.0)
    Hs += tl.load(base + 2 * K * V, mask=hmask, other=0.0)
    return F, G, Hs


@triton.autotune(configs=_fused_configs(), key=["BT", "K", "V", "NSEG", "SCAN"],
                 prune_configs_by={"early_config_prune": _prune_bv})
@triton.jit
def _state_out_fwd(q, k, v, s, s1, sh, s0, rows4, lb, pb, tot, o, T, H, NT, SEG, NSEG,
                   K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BVF: tl.constexpr,
                   BV: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr, SCAN: tl.constexpr,
                   HAS_S0: tl.constexpr):
    """The storing pass of ``_state_fwd`` fused with ``_out_fwd`` (flash-linear-attention's "fused chunk" form):
    program (1, V-tile, B*H x segment) keeps the three state parts of its V-tile, the whole head's K, in registers,
    starts from the earlier segments' totals (``tot``, from ``_state_fwd``'s totals launch) and walks its
    chunks, writing each chunk's output instead of the states: no state goes through memory. ``SCAN`` (one segment
    only): the walk also computes the per-step scalars and stores them, so the whole forward is this one launch."""
    i_v = tl.program_id(1)
    bh, j, c0, c1 = _segment(NT, SEG, NSEG, True, False)
    b = bh // H
    hh = bh % H
    offk = tl.arange(0, BK)
    offv = i_v * BV + tl.arange(0, BV)
    offt = tl.arange(0, BT)
    lb_base = lb + bh * NT
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    tot_base = tot + bh * NSEG * 3 * K * V + offk[:, None] * V + offv[None, :]
    F = tl.zeros([BK, BV], dtype=tl.float32)
    G = tl.zeros([BK, BV], dtype=tl.float32)
    Hs = tl.zeros([BK, BV], dtype=tl.float32)
    P = tl.load(s).to(tl.float32) * 0.0  # P_{-1} = 0 (only the scan reads it)
    if SCAN:
        lam = P + float("-inf")  # Lam_{-1}: no key yet (one segment)
    else:
        lam = tl.where(j > 0, tl.load(lb_base + tl.maximum(c0 - 1, 0)), float("-inf"))
    if INTERPRET:  # the CPU interpreter (NumPy >= 2.4) cannot use a runtime int as a range() bound
        m = j * 0
        while m < j:
            F, G, Hs = _state_out_carry(F, G, Hs, m, tot_base, lb_base, lam, hmask, SEG, K, V)
            m += 1
        c = c0
        while c < c1:
            F, G, Hs, lam, P = _state_out_step(F, G, Hs, lam, P, c, q, k, v, s, s1, sh, s0, rows4, lb, pb, o, bh, b,
                                               hh, i_v, offk, offv, offt, T, H, NT, K, V, BT, PREC, SCAN, HAS_S0)
            c += 1
    else:
        for m in range(0, j):
            F, G, Hs = _state_out_carry(F, G, Hs, m, tot_base, lb_base, lam, hmask, SEG, K, V)
        for c in range(c0, c1):
            F, G, Hs, lam, P = _state_out_step(F, G, Hs, lam, P, c, q, k, v, s, s1, sh, s0, rows4, lb, pb, o, bh, b,
                                               hh, i_v, offk, offv, offt, T, H, NT, K, V, BT, PREC, SCAN, HAS_S0)


# ----------------------------------------------------------------------------------------------
# Backward
# ----------------------------------------------------------------------------------------------
@triton.autotune(configs=_par_configs(), key=["BT", "K", "V"])
@triton.jit
def _dq_bwd(q, k, v, do, s, rows4, h, lb, pb, dq, ds, ds1, dsh, ds0, xc, yc, T, H, NT,
            K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
            HAS_S0: tl.constexpr, PREC: tl.constexpr):
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
    sc = _shifted_logits(s, b, hh, rows, mrow, T, H)
    lam, a, bb, g, eF = _load_rows(rows4, lb, bh, c, rows, mrow, T, NT)
    P = tl.where(c > 0, tl.load(pb + bh * NT + tl.maximum(c - 1, 0)), 0.0) + tl.cumsum(sc, 0)
    m2q = (rows[:, None] >= rows[None, :]) & mrow[:, None] & mrow[None, :]

    A = tl.dot(qc, tl.trans(kc), input_precision=PREC)
    dA = tl.dot(oc, tl.trans(vc), input_precision=PREC)
    E = tl.exp(tl.where(m2q, sc[None, :] - lam[:, None], float("-inf")))
    W = tl.where(m2q, a[:, None] * E + bb[:, None] * sc[None, :] + g[:, None], 0.0)
    AdA = tl.where(m2q, A * dA, 0.0)
    acc = tl.dot((W * dA).to(kc.dtype), kc, input_precision=PREC)
    gda = tl.sum(E * AdA, axis=1)
    gdb = tl.sum(AdA * sc[None, :], axis=1)
    gdg = tl.sum(AdA, axis=1)

    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    h_base = h + (bh * NT + c) * 3 * K * V + offk[:, None] * V + offv[None, :]
    hF = tl.load(h_base, mask=hmask, other=0.0).to(oc.dtype)
    hG = tl.load(h_base + K * V, mask=hmask, other=0.0).to(oc.dtype)
    hH = tl.load(h_base + 2 * K * V, mask=hmask, other=0.0).to(oc.dtype)
    dqF = tl.dot(oc, tl.trans(hF), input_precision=PREC)
    dqG = tl.dot(oc, tl.trans(hG), input_precision=PREC)
    dqH = tl.dot(oc, tl.trans(hH), input_precision=PREC)
    acc += (a * eF)[:, None] * dqF + bb[:, None] * dqG + g[:, None] * dqH
    qf = qc.to(tl.float32)
    gda += eF * tl.sum(qf * dqF, axis=1)
    gdb += tl.sum(qf * dqG, axis=1)
    gdg += tl.sum(qf * dqH, axis=1)

    # the scalar chain: b = (s1 - sh)/t, g = -(b P + sh)/t (+ s0/t), E = e^{s_i - lam_t}
    tpos = (rows + 1).to(tl.float32)
    Db = gdb - gdg * P / tpos
    d_sh = gda - Db / tpos - gdg / tpos
    dP = tl.where(mrow, -gdg * bb / tpos, 0.0)
    dlam = tl.where(mrow, -a * gda, 0.0)
    # chunk-local reverse scans (sum over t >= j in this chunk) and the chunk totals for the carry
    ds_loc = tl.sum(tl.where(m2q, dlam[:, None] * E + dP[:, None], 0.0), axis=0)
    X = tl.sum(dlam * eF, axis=0)
    Y = tl.sum(dP, axis=0)

    tl.store(dq + qk_off, acc.to(dq.dtype.element_ty), mask=mk)
    tl.store(ds + sc_off, ds_loc, mask=mrow)
    tl.store(ds1 + sc_off, Db / tpos, mask=mrow)
    tl.store(dsh + sc_off, d_sh, mask=mrow)
    if HAS_S0:
        tl.store(ds0 + sc_off, gdg / tpos, mask=mrow)
    tl.store(xc + bh * NT + c, X)
    tl.store(yc + bh * NT + c, Y)


@triton.jit
def _state_bwd_step(acc, C, Y, c, lam_seg, q_base, o_base, r_base, lb_base, dh_base, xc_base, yc_base, cc_base,
                    ys_base, hmask, writer, is_f, is_g, offk, offv, offt, T, H, K: tl.constexpr, V: tl.constexpr,
                    BT: tl.constexpr, PREC: tl.constexpr, STORE: tl.constexpr):
    """One chunk of the reverse state walk. ``STORE``: store the state of the chunks after c (frame Lam_c),
    then fold chunk c in (frame Lam_{c-1}). Otherwise sum chunk c into a segment total kept in the one frame
    ``lam_seg`` (= Lam_{c0-1} <= lam_t of every row t of the segment): no rescaling chain."""
    if STORE:
        tl.store(dh_base + c * 3 * K * V + offk[:, None] * V + offv[None, :], acc.to(dh_base.dtype.element_ty),
                 mask=hmask)
        tl.store(cc_base + c, C, mask=writer)
        tl.store(ys_base + c, Y, mask=writer)
    rows = c * BT + offt
    mrow = rows < T
    qc = tl.load(q_base + rows[:, None] * H * K + offk[None, :], mask=mrow[:, None] & (offk[None, :] < K), other=0.0)
    oc = tl.load(o_base + rows[:, None] * H * V + offv[None, :], mask=mrow[:, None] & (offv[None, :] < V), other=0.0)
    lam_r = tl.load(r_base + rows, mask=mrow, other=0.0)
    lam_prev = tl.where(c > 0, tl.load(lb_base + tl.maximum(c - 1, 0)), float("-inf"))
    frame = lam_prev if STORE else lam_seg
    coef_f = tl.load(r_base + T + rows, mask=mrow, other=0.0) * tl.exp(tl.where(mrow, frame - lam_r, float("-inf")))
    coef = tl.where(is_f, coef_f, tl.where(is_g, tl.load(r_base + 2 * T + rows, mask=mrow, other=0.0),
                                           tl.load(r_base + 3 * T + rows, mask=mrow, other=0.0)))
    qw = (qc.to(tl.float32) * coef[:, None]).to(oc.dtype)
    if STORE:
        resc_l = tl.exp(lam_prev - tl.load(lb_base + c))
        acc = acc * tl.where(is_f, resc_l, 1.0)
        C = C * resc_l + tl.load(xc_base + c)
    else:
        C += tl.load(xc_base + c) * tl.exp(lam_seg - lam_prev)
    acc += tl.dot(tl.trans(qw), oc, input_precision=PREC)
    Y = Y + tl.load(yc_base + c)
    return acc, C, Y


@triton.jit
def _state_bwd_carry(acc, C, Y, m, tot_base, totc_base, lb_base, lam_to, is_f, hmask, SEG, K: tl.constexpr,
                     V: tl.constexpr):
    """Add the total of (later) segment m, stored in the frame ``Lam_{m SEG - 1}``, in the frame ``lam_to``."""
    f = tl.exp(lam_to - tl.load(lb_base + m * SEG - 1))  # <= 1: Lam is non-decreasing
    acc += tl.load(tot_base + m * 3 * K * V, mask=hmask, other=0.0) * tl.where(is_f, f, 1.0)
    C += tl.load(totc_base + 2 * m) * f
    Y += tl.load(totc_base + 2 * m + 1)
    return acc, C, Y


@triton.autotune(configs=_seq_configs(), key=["BT", "K", "V", "STORE", "NSEG"],
                 prune_configs_by={"early_config_prune": _prune_bv})
@triton.jit
def _state_bwd(q, do, rows4, lb, dh, xc, yc, cc, ys, tot, totc, T, H, NT, SEG, NSEG,
               K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr, NKT: tl.constexpr,
               BVF: tl.constexpr, BV: tl.constexpr, PREC: tl.constexpr, INTERPRET: tl.constexpr,
               STORE: tl.constexpr):
    """dh[c] = sum over rows t in chunks > c of coef_t q_t do_t^T (F part in the frame Lam_c);
    cc[c], ys[c] = the reverse carries of the scalar chain.

    Segments as in ``_state_fwd``, walked backwards: ``STORE=False`` (segments 1..NSEG-1) sums each
    segment's total (F and C in the frame ``Lam_{c0-1}``) into ``tot``, ``totc``; ``STORE=True`` starts
    segment j from the sum of the later segments' totals in the frame ``Lam_{c1-1}``."""
    i_k = tl.program_id(0)
    i_v = tl.program_id(1)
    bh, j, c0, c1 = _segment(NT, SEG, NSEG, STORE, True)
    part = i_k // NKT
    kt = i_k % NKT
    b = bh // H
    hh = bh % H
    offk = kt * BK + tl.arange(0, BK)
    offv = i_v * BV + tl.arange(0, BV)
    offt = tl.arange(0, BT)
    q_base = q + b * T * H * K + hh * K
    o_base = do + b * T * H * V + hh * V
    r_base = rows4 + bh * 4 * T  # [lam, a, b, g] rows of this head
    dh_base = dh + bh * NT * 3 * K * V + part * K * V
    lb_base = lb + bh * NT
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    tot_base = tot + (bh * NSEG * 3 + part) * K * V + offk[:, None] * V + offv[None, :]
    totc_base = totc + bh * NSEG * 2
    xc_base, yc_base, cc_base, ys_base = xc + bh * NT, yc + bh * NT, cc + bh * NT, ys + bh * NT
    is_f = part == 0
    is_g = part == 1
    writer = (i_k == 0) & (i_v == 0)
    acc = tl.zeros([BK, BV], dtype=tl.float32)
    C = tl.load(lb_base) * 0.0
    Y = C
    lam_end = tl.load(lb_base + c1 - 1)
    lam_seg = tl.load(lb_base + tl.maximum(c0 - 1, 0))  # the totals pass's frame (segments j >= 1 only)
    if INTERPRET:  # the CPU interpreter (NumPy >= 2.4) cannot use a runtime int as a range() bound
        if STORE:
            m = j + 1
            while m < NSEG:
                acc, C, Y = _state_bwd_carry(acc, C, Y, m, tot_base, totc_base, lb_base, lam_end, is_f, hmask, SEG,
                                             K, V)
                m += 1
        c = c1 - 1
        while c >= c0:
            acc, C, Y = _state_bwd_step(acc, C, Y, c, lam_seg, q_base, o_base, r_base, lb_base, dh_base, xc_base,
                                        yc_base, cc_base, ys_base, hmask, writer, is_f, is_g, offk, offv, offt, T, H,
                                        K, V, BT, PREC, STORE)
            c -= 1
    else:
        if STORE:
            for m in range(j + 1, NSEG):
                acc, C, Y = _state_bwd_carry(acc, C, Y, m, tot_base, totc_base, lb_base, lam_end, is_f, hmask, SEG,
                                             K, V)
        for i in range(c1 - c0):
            acc, C, Y = _state_bwd_step(acc, C, Y, c1 - 1 - i, lam_seg, q_base, o_base, r_base, lb_base, dh_base,
                                        xc_base, yc_base, cc_base, ys_base, hmask, writer, is_f, is_g, offk, offv,
                                        offt, T, H, K, V, BT, PREC, STORE)
    if not STORE:
        tl.store(tot_base + j * 3 * K * V, acc, mask=hmask)
        tl.store(totc_base + 2 * j, C, mask=writer)
        tl.store(totc_base + 2 * j + 1, Y, mask=writer)


@triton.autotune(configs=_par_configs(), key=["BT", "K", "V"], restore_value=["ds"])  # ds accumulates
@triton.jit
def _dkv_bwd(q, k, v, do, s, rows4, dh, lb, cc, ys, dk, dv, ds, T, H, NT,
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
    s_first = tl.load(s + b * T * H + hh).to(tl.float32)
    sc = tl.where(mrow, tl.load(s + sc_off, mask=mrow, other=0.0).to(tl.float32) - s_first, 0.0)
    r_base = rows4 + bh * 4 * T + rows
    lam = tl.load(r_base, mask=mrow, other=0.0)
    a = tl.load(r_base + T, mask=mrow, other=0.0)
    bb = tl.load(r_base + 2 * T, mask=mrow, other=0.0)
    g = tl.load(r_base + 3 * T, mask=mrow, other=0.0)

    # rows index queries t, columns keys i (both inside this chunk)
    m2q = (rows[:, None] >= rows[None, :]) & mrow[:, None] & mrow[None, :]
    A = tl.dot(qc, tl.trans(kc), input_precision=PREC)
    dA = tl.dot(oc, tl.trans(vc), input_precision=PREC)
    E = tl.exp(tl.where(m2q, sc[None, :] - lam[:, None], float("-inf")))
    W = tl.where(m2q, a[:, None] * E + bb[:, None] * sc[None, :] + g[:, None], 0.0)
    AdA = tl.where(m2q, A * dA, 0.0)
    acc_k = tl.dot(tl.trans((W * dA).to(qc.dtype)), qc, input_precision=PREC)
    acc_v = tl.dot(tl.trans((W * A).to(oc.dtype)), oc, input_precision=PREC)
    gds = tl.sum((a[:, None] * E + bb[:, None]) * AdA, axis=0)

    # inter-chunk: reverse state of the rows after this chunk, F part in the frame Lam_c
    lam_c = tl.load(lb + bh * NT + c)
    hmask = (offk[:, None] < K) & (offv[None, :] < V)
    h_base = dh + (bh * NT + c) * 3 * K * V + offk[:, None] * V + offv[None, :]
    sF = tl.load(h_base, mask=hmask, other=0.0).to(kc.dtype)
    sG = tl.load(h_base + K * V, mask=hmask, other=0.0).to(kc.dtype)
    sH = tl.load(h_base + 2 * K * V, mask=hmask, other=0.0).to(kc.dtype)
    eF = tl.exp(tl.where(mrow, sc - lam_c, float("-inf")))
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
    # the scalar chain: local part (from _dq_bwd) + carries of the later chunks
    gds += tl.load(ds + sc_off, mask=mrow, other=0.0) + eF * tl.load(cc + bh * NT + c) + tl.load(ys + bh * NT + c)
    tl.store(dk + qk_off, acc_k.to(dk.dtype.element_ty), mask=mk)
    tl.store(dv + v_off, acc_v.to(dv.dtype.element_ty), mask=mv)
    tl.store(ds + sc_off, gds, mask=mrow)


# ----------------------------------------------------------------------------------------------
# Launchers and autograd
# ----------------------------------------------------------------------------------------------
def _geometry(q, v, chunk):
    B, T, H, K = q.shape
    V = v.shape[-1]
    BK = max(16, next_power_of_2(K))  # chunk-parallel kernels: the whole head
    BV = max(16, next_power_of_2(V))
    BKS = min(64, BK)  # sequential kernels: K tiles of at most 64 (x3 parts), V tiles tuned
    NT = cdiv(T, chunk)
    prec = "ieee" if q.dtype == torch.float32 else "tf32"
    return dict(B=B, T=T, H=H, K=K, V=V, BK=BK, BV=BV, BKS=BKS, NKT=cdiv(K, BKS), NT=NT, prec=prec)


def _empty(*shape, device, dtype):
    """Every buffer the kernels write comes from here (tests patch it to fill NaN)."""
    return torch.empty(*shape, device=device, dtype=dtype)


def _segments(g, device, segments, fused=False):
    """``(SEG, NSEG)``: chunks per segment and segments of the sequential state passes. ``segments=None``
    picks one segment off CUDA; on CUDA, for the stored-states passes about four programs per SM (at least
    ``_MIN_SEGMENT`` chunks each), for the fused walk (one 8-warp program of 255 registers an SM) about
    ``_FUSED_PAIRS_PER_SM`` (head, segment) pairs per SM (at least two chunks each), and one segment where
    either gives fewer than three (two launches of NT/2 steps walk as many steps as one of NT); an int asks
    for that many (at most one per chunk)."""
    NT = g["NT"]
    if segments is None:
        segments = 1
        if device.type == "cuda":
            sms = torch.cuda.get_device_properties(device).multi_processor_count
            if fused:
                segments = min(round(_FUSED_PAIRS_PER_SM * sms / (g["B"] * g["H"])), NT // 2)
            else:
                programs = 3 * g["NKT"] * cdiv(g["V"], 64) * g["B"] * g["H"]
                segments = min(round(4 * sms / programs), NT // _MIN_SEGMENT)
            segments = segments if segments >= 3 else 1
    seg = cdiv(NT, max(1, min(segments, NT)))
    return seg, cdiv(NT, seg)


def _totals(g, nseg, device):
    """fp32 room for every segment's three state parts, ``[B*H, NSEG, 3, d, dv]`` (one unused element when there
    is a single segment)."""
    return _empty(g["B"] * g["H"] * nseg * 3 * g["K"] * g["V"] if nseg > 1 else 1, device=device, dtype=torch.float32)


def _run_segmented(kernel, g, nseg, args, kw, store=True):
    """Launch a sequential state kernel: the totals pass (when there is more than one segment), then, with
    ``store``, the pass that stores the states. Grid: (3 parts x K-tiles, V-tiles, B*H x segments)."""
    for st in ((False,) if nseg > 1 else ()) + ((True,) if store else ()):
        nsg = nseg if st else nseg - 1
        grid = lambda meta, n=nsg: (3 * g["NKT"], cdiv(g["V"], meta["BV"]), g["B"] * g["H"] * n)  # noqa: E731
        kernel[grid](*args, **kw, STORE=st)


def _scalars(s, sigma1, sigmah, sigma0, chunk):
    """The per-step scalars: ``rows4 [B*H, 4, T]`` (lam, a, b, g per row) and the chunk-end carries
    ``lb, pb [B*H, NT]`` (Lam_c, P_c), by three chunk-parallel passes (totals, scan, rows), or by one
    launch up to ``T = _ONE_PROGRAM_T`` (short sequences are launch-bound)."""
    B, T, H = s.shape
    NT = cdiv(T, chunk)
    dev, f32 = s.device, torch.float32
    lb, pb = (_empty(B * H, NT, device=dev, dtype=f32) for _ in range(2))
    rows4 = _empty(B * H, 4, T, device=dev, dtype=f32)
    has_s0 = sigma0 is not None
    gates = (sigma1, sigmah, sigma0 if has_s0 else sigmah)
    if T <= _ONE_PROGRAM_T:
        TP = next_power_of_2(T)  # warps: no spills compiled for sm_90 (TP 8192: 16 warps, 112 registers)
        _scalars_one_program[(B * H,)](s, *gates, lb, pb, rows4, T, H, NT, BT=chunk, TP=TP, HAS_S0=has_s0,
                                       num_warps=max(4, min(16, TP // 512)))
        return rows4, lb, pb
    lt, st = (_empty(B * H, NT, device=dev, dtype=f32) for _ in range(2))
    CB = min(_CHUNKS_PER_PROGRAM, next_power_of_2(NT))
    grid = (cdiv(NT, CB), B * H)
    _chunk_totals[grid](s, lt, st, T, H, NT, BT=chunk, CB=CB)
    _chunk_scan[(B * H,)](lt, st, lb, pb, NT, NB=min(_SCAN_BLOCK, next_power_of_2(NT)), INTERPRET=_INTERPRET)
    _row_scalars[grid](s, *gates, lb, pb, rows4, T, H, NT, BT=chunk, CB=CB, HAS_S0=has_s0)
    return rows4, lb, pb


def _seq_meta(g, chunk):
    return dict(K=g["K"], V=g["V"], BT=chunk, BK=g["BKS"], NKT=g["NKT"], BVF=g["BV"], PREC=g["prec"],
                INTERPRET=_INTERPRET)


def _fwd_states(k, v, s, lb, chunk, segments=None):
    """The chunk states ``h [B*H, NT, 3, d, dv]`` (in the input dtype)."""
    g = _geometry(k, v, chunk)
    seg, nseg = _segments(g, k.device, segments)
    h = _empty(g["B"] * g["H"], g["NT"], 3, g["K"], g["V"], device=k.device, dtype=k.dtype)
    tot = _totals(g, nseg, k.device)
    _run_segmented(_state_fwd, g, nseg, (k, v, s, h, lb, tot, g["T"], g["H"], g["NT"], seg, nseg),
                   _seq_meta(g, chunk))
    return h


def _bwd_states(q, do, rows4, lb, xc, yc, chunk, segments=None):
    """The reverse states ``dh [B*H, NT, 3, d, dv]`` and the reverse carries ``cc, ys [B*H, NT]``."""
    g = _geometry(q, do, chunk)
    seg, nseg = _segments(g, q.device, segments)
    BH, NT, dev = g["B"] * g["H"], g["NT"], q.device
    dh = _empty(BH, NT, 3, g["K"], g["V"], device=dev, dtype=q.dtype)
    cc, ys = (_empty(BH, NT, device=dev, dtype=torch.float32) for _ in range(2))
    tot = _totals(g, nseg, dev)
    totc = _empty(BH * nseg * 2 if nseg > 1 else 1, device=dev, dtype=torch.float32)
    _run_segmented(_state_bwd, g, nseg, (q, do, rows4, lb, dh, xc, yc, cc, ys, tot, totc, g["T"], g["H"], NT, seg,
                                         nseg), _seq_meta(g, chunk))
    return dh, cc, ys


def _fwd_out(q, k, v, s, rows4, h, lb, chunk):
    g = _geometry(q, v, chunk)
    o = _empty(g["B"], g["T"], g["H"], g["V"], device=q.device, dtype=v.dtype)
    _out_fwd[(g["NT"], g["B"] * g["H"])](q, k, v, s, rows4, h, lb, o, g["T"], g["H"], g["NT"], K=g["K"], V=g["V"],
                                         BT=chunk, BK=g["BK"], BV=g["BV"], PREC=g["prec"])
    return o


def _fwd_out_fused(q, k, v, s, sigma1, sigmah, sigma0, chunk, segments=None):
    """``(o, rows4, lb, pb)`` through the fused walk (``_state_out_fwd``): the chunk states never go to memory. In
    one segment the walk computes the per-step scalars too, and the forward is one launch; in several, the scalar
    passes and the totals launch of ``_state_fwd`` come first."""
    g = _geometry(q, v, chunk)
    seg, nseg = _segments(g, q.device, segments, fused=True)
    B, T, H, NT, dev = g["B"], g["T"], g["H"], g["NT"], q.device
    has_s0 = sigma0 is not None
    gates = (sigma1, sigmah, sigma0 if has_s0 else sigmah)
    if nseg == 1:
        rows4 = _empty(B * H, 4, T, device=dev, dtype=torch.float32)
        lb, pb = (_empty(B * H, NT, device=dev, dtype=torch.float32) for _ in range(2))
    else:
        rows4, lb, pb = _scalars(s, sigma1, sigmah, sigma0, chunk)
    o = _empty(B, T, H, g["V"], device=dev, dtype=v.dtype)
    tot = _totals(g, nseg, dev)
    _run_segmented(_state_fwd, g, nseg, (k, v, s, k, lb, tot, T, H, NT, seg, nseg), _seq_meta(g, chunk),
                   store=False)  # h unused (k in its place): the walk below keeps the states
    _state_out_fwd[lambda m: (1, cdiv(g["V"], m["BV"]), B * H * nseg)](
        q, k, v, s, *gates, rows4, lb, pb, tot, o, T, H, NT, seg, nseg, K=g["K"], V=g["V"], BT=chunk, BK=g["BK"],
        BVF=g["BV"], PREC=g["prec"], INTERPRET=_INTERPRET, SCAN=nseg == 1, HAS_S0=has_s0)
    return o, rows4, lb, pb


class _ZeroSChunk(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, s, sigma1, sigmah, sigma0, chunk, segments, fused):
        if fused:
            o, rows4, lb, pb = _fwd_out_fused(q, k, v, s, sigma1, sigmah, sigma0, chunk, segments)
        else:
            rows4, lb, pb = _scalars(s, sigma1, sigmah, sigma0, chunk)
            o = _fwd_out(q, k, v, s, rows4, _fwd_states(k, v, s, lb, chunk, segments), lb, chunk)
        ctx.save_for_backward(q, k, v, s, sigma0, rows4, lb, pb)
        ctx.chunk, ctx.segments = chunk, segments
        ctx.gate_dtypes = (sigma1.dtype, sigmah.dtype)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, s, sigma0, rows4, lb, pb = ctx.saved_tensors
        chunk, has_s0 = ctx.chunk, sigma0 is not None
        do = do.contiguous().to(v.dtype)
        g = _geometry(q, v, chunk)
        B, T, H, NT = g["B"], g["T"], g["H"], g["NT"]
        dev = q.device
        h = _fwd_states(k, v, s, lb, chunk, ctx.segments)
        f32 = torch.float32
        dq = _empty(*q.shape, device=dev, dtype=q.dtype)
        dk = _empty(*k.shape, device=dev, dtype=k.dtype)
        dv = _empty(*v.shape, device=dev, dtype=v.dtype)
        ds, ds1, dsh = (_empty(B, T, H, device=dev, dtype=f32) for _ in range(3))
        ds0 = _empty(B, T, H, device=dev, dtype=f32) if has_s0 else dsh
        xc, yc = (_empty(B * H, NT, device=dev, dtype=f32) for _ in range(2))
        par = dict(K=g["K"], V=g["V"], BT=chunk, BK=g["BK"], BV=g["BV"], PREC=g["prec"])
        _dq_bwd[(NT, B * H)](q, k, v, do, s, rows4, h, lb, pb, dq, ds, ds1, dsh, ds0, xc, yc, T, H, NT,
                             HAS_S0=has_s0, **par)
        del h
        dh, cc, ys = _bwd_states(q, do, rows4, lb, xc, yc, chunk, ctx.segments)
        _dkv_bwd[(NT, B * H)](q, k, v, do, s, rows4, dh, lb, cc, ys, dk, dv, ds, T, H, NT, **par)
        return (dq, dk, dv, ds.to(s.dtype), ds1.to(ctx.gate_dtypes[0]), dsh.to(ctx.gate_dtypes[1]),
                ds0.to(sigma0.dtype) if has_s0 else None, None, None, None)


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


def fused_by_default(d: int, dv: int) -> bool:
    """Whether ``fused=None`` takes the fused forward: head dims up to ``FUSED_MAX_DIM``."""
    return max(d, dv) <= FUSED_MAX_DIM


def zeros_linear_triton(q, k, v, s, sigma1, sigmah, sigma0=None, *, causal=True, chunk_size=CHUNK, segments=None,
                        fused=None):
    """ZeroS attention with the chunked Triton kernels (inputs already validated by ``api``). ``segments``: how
    many parts of the sequence the sequential state passes walk side by side (None: the automatic split of
    :func:`_segments`); ``fused``: the forward's states stay in registers, the output written from the walk
    (``_state_out_fwd``; head dims up to ``FUSED_MAX_DIM``; None: fused wherever the head dims allow it, the
    faster forward from 32k in the H200 run; checked against the float64 oracle in the interpreter and against the
    stored-states path by the GPU tests on an H200). The result is the same up to rounding either way."""
    if not causal:
        return _bidirectional(q, k, v, s, sigma1, sigmah, sigma0)
    s, sigma1, sigmah = (x.contiguous() for x in (s, sigma1, sigmah))
    sigma0 = sigma0.contiguous() if sigma0 is not None else None
    if fused is None:
        fused = fused_by_default(q.shape[-1], v.shape[-1])
    elif fused and not fused_by_default(q.shape[-1], v.shape[-1]):
        raise ValueError(f"zeros_linear: the fused forward keeps three [d x dv-tile] states in registers, for head "
                         f"dims up to {FUSED_MAX_DIM}; got d={q.shape[-1]}, dv={v.shape[-1]}")
    return _ZeroSChunk.apply(q, k, v, s, sigma1, sigmah, sigma0, chunk_size, segments, fused)
