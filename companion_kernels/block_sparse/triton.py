"""Triton kernels: block-sparse FlashAttention forward and SeerAttention's pooled attention map.

Papers: SeerAttention (paper 01, arXiv 2410.13276; block-sparse prefill and the distillation target of
Sec. 3.2) and Delta Attention (paper 09, arXiv 2505.11254; the sparse A*V of Algorithm 1).

``_bsa_fwd`` (one program per (query block, batch*head)): FlashAttention-2's online softmax
(m_i running row max, l_i running row sum, acc rescaled by 2^(m_old - m_new)), iterating over the
*index list* of the query block (CSR, as FlexAttention's ``kv_indices``) instead of branching on one
mask bit per block as the official SeerAttention Triton kernel does; skipped blocks cost nothing.
The token-level mask (causal diagonal, ragged tail) is computed only for the blocks that need it.
Masked scores are -inf and the row max is made "safe" (0 while still -inf), so a row that never sees
an admissible key keeps l_i = 0 and is written as zeros, never NaN. GQA maps query head h to key head
h // group; K and V are never copied. Query blocks are scheduled longest-first (causal rows grow with
the block id). Loads use Hopper's tensor-memory accelerator through host tensor descriptors
(``TMA=2``: flat [B*H*N, D] descriptors when N is a multiple of the block; ``TMA=4``: rank-4
descriptors that zero-fill the ragged tail per head) or plain pointers (``TMA=0``); the TMA loads are
what Triton multi-buffers (3 stages) for this loop. Index ids are assumed distinct (a repeated id would
be counted twice); the api's ``dense_to_index`` produces distinct, ascending ids. Variants and their
H200 timings: benchmarks/block_sparse_NOTES.md. With ``STORE_LSE`` (only when a gradient is needed) it
also writes each row's log-sum-exp LSE_i = log sum_j exp(S_ij), natural log, fp32 ``[B, H, N]``; +inf for
a row with no admissible key, so that the backward's P = exp(S - LSE) is 0 there. Without it the kernel is
the tuned no-grad one, unchanged.

Backward (FlashAttention-2's, Dao 2023, Algorithm 2, restricted to the selected blocks). Per row i, over
its admissible keys j: S = scale * Q K^T, P_ij = exp(S_ij - LSE_i) (the forward's softmax, recomputed from
the stored LSE), O = P V. For a loss with upstream gradient dO:
    dV = P^T dO,   dP = dO V^T,
    dS_ij = P_ij (dP_ij - sum_l P_il dP_il) = P_ij (dP_ij - Delta_i),  Delta_i = rowsum(dO_i * O_i)
(the softmax Jacobian; sum_l P_il dP_il = dO_i . sum_l P_il v_l = dO_i . O_i), and through S = scale Q K^T
    dQ = scale * dS K,   dK = scale * dS^T Q.
A masked or unselected (i, j) has P_ij = 0, hence dS_ij = 0: it adds nothing to any gradient, and a row
with no admissible key (LSE = +inf, O = 0) gets dQ = 0 and adds nothing to dK, dV, never NaN. GQA: dK, dV
of a kv head sum over the query heads of its group. ``_bsa_bwd_dq`` (one program per (query block, or
``block_m`` rows of it, head)) computes Delta for its rows and dQ by walking the forward's index list;
``_bsa_bwd_dkdv`` (one program per (key block, or ``block_n`` keys of it, kv head)) walks the transposed
index (``transposed_index``: the (head, query block) pairs that selected the key block, built in PyTorch
once per backward call without a host sync) and accumulates dK and dV. Accumulation is fp32; P and dS are
cast to the inputs' dtype for the tensor-core products, as in the forward. The loops' tiles load through
plain pointers or TMA descriptors (``backward_config``; not yet tuned or timed on the H200).

Interpreter note: the CPU interpreter of triton 3.6 with numpy >= 2.4 cannot use a loaded scalar as a
``for`` bound (it calls ``int()`` on a 1-element array), so under ``INTERPRET`` the same loop bodies
run in ``while`` loops; compiled code keeps ``for`` loops, which Triton software-pipelines.

``_pooled_map`` (pooled attention map, no O(N^2/B) buffer): the official kernel stores each tile's row
maxima in R[N, n] and rescales after the loop. Here one program owns a whole row of blocks: pass 1
computes the row statistics (max and sum, as log2-sum-exp L_r); pass 2 recomputes each tile and takes
max_{r, c} 2^(s_rc - L_r) = the block's largest probability; pass 3 divides the row by its sum. The
price is a second Q K^T per tile (no P V product at all); the memory is only the [n, n] map.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from ..host import cdiv

try:  # host-side TMA descriptors (triton >= 3.3)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

__all__ = [
    "block_sparse_attention_triton",
    "block_sparse_attention_backward_triton",
    "pooled_attention_map_triton",
    "default_config",
    "backward_config",
    "transposed_index",
]

_LOG2E = 1.4426950408889634
_LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _load_tile(ptr, desc, row0, b, h, start, offs_n, offs_d, stride_n, N, EVEN_N: tl.constexpr,
               TMA: tl.constexpr, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr):
    """Rows [start, start + ROWS) of one head: TMA=2 flat 2-D descriptor (row0 = first row of the head),
    TMA=4 rank-4 descriptor (zero-fills the ragged tail per head), TMA=0 plain pointers."""
    if TMA == 2:
        t = desc.load([row0 + start, 0])
    elif TMA == 4:
        t = desc.load([b, h, start, 0]).reshape(ROWS, HEAD_DIM)
    else:
        ptrs = ptr + (start + offs_n)[:, None] * stride_n + offs_d[None, :]
        if EVEN_N:
            t = tl.load(ptrs)
        else:
            t = tl.load(ptrs, mask=(start + offs_n)[:, None] < N, other=0.0)
    return t


@triton.jit
def _token_mask(s, rows, cols, kb, qb, N, NB, CAUSAL: tl.constexpr, EVEN_N: tl.constexpr, ALWAYS: tl.constexpr):
    """Scores ``s`` of query tokens ``rows`` against key tokens ``cols`` (of key block ``kb``, query block ``qb``)
    with −inf where the key lies past N or, causally, after the query. Only the tiles that can hold such a pair
    pay for the test: under causal masking the key blocks from the diagonal on, and the ragged last key block
    (``ALWAYS``: every tile, a launch variant of the forward). The forward, the backward and the pooled map all
    mask through here, so they drop the same scores."""
    if CAUSAL or not EVEN_N:
        if ALWAYS:
            need = True
        else:
            need = False
            if CAUSAL:
                need = kb >= qb
            if not EVEN_N:
                need = need | (kb == NB - 1)
        if need:
            ok = cols[None, :] < N
            if CAUSAL:
                ok = ok & (rows[:, None] >= cols[None, :])
            s = tl.where(ok, s, float("-inf"))
    return s


@triton.jit
def _bsa_step(q, acc, l_i, m_i, kb, qb, k_base, v_base, desc_k, desc_v, kv_row0, b, hk, offs_m, offs_s, offs_d,
              stride_kn, stride_vn, N, NB, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, SUB_N: tl.constexpr, CAUSAL: tl.constexpr,
              EVEN_N: tl.constexpr, TMA: tl.constexpr, DOT_PREC: tl.constexpr, MASK_ALWAYS: tl.constexpr):
    """One key block of the online softmax (BLOCK // SUB_N sub-tiles)."""
    kb = tl.minimum(tl.maximum(kb, 0), NB - 1)  # memory safety for bad ids (the api checks them)
    for sub in tl.static_range(BLOCK // SUB_N):
        start_n = kb * BLOCK + sub * SUB_N
        k = _load_tile(k_base, desc_k, kv_row0, b, hk, start_n, offs_s, offs_d, stride_kn, N,
                       EVEN_N, TMA, SUB_N, HEAD_DIM)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC)
        qk = _token_mask(qk, offs_m, start_n + offs_s, kb, qb, N, NB, CAUSAL, EVEN_N, MASK_ALWAYS)
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(qk * qk_scale - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _load_tile(v_base, desc_v, kv_row0, b, hk, start_n, offs_s, offs_d, stride_vn, N,
                       EVEN_N, TMA, SUB_N, HEAD_DIM)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PREC)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _bsa_fwd(
    Q, K, V, O, LSE, IDX, CNT,
    desc_q, desc_k, desc_v,
    qk_scale,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_on,
    stride_ib, stride_ih, stride_iq,
    stride_cb, stride_ch,
    H, GROUP, N, NB,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SUB_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    EVEN_N: tl.constexpr,
    TMA: tl.constexpr,
    DOT_PREC: tl.constexpr,
    MASK_ALWAYS: tl.constexpr,
    WARP_SPEC: tl.constexpr,
    STORE_LSE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    SPLIT: tl.constexpr = BLOCK // BLOCK_M  # programs per query block (each takes BLOCK_M rows)
    qb = NB - 1 - tl.program_id(0) // SPLIT  # longest causal rows first
    row0 = qb * BLOCK + (tl.program_id(0) % SPLIT) * BLOCK_M
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    hk = h // GROUP
    hkv = H // GROUP
    q_row0 = (b * H + h) * N
    kv_row0 = (b * hkv + hk) * N

    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_s = tl.arange(0, SUB_N)

    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    o_base = O + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    idx_base = IDX + b.to(tl.int64) * stride_ib + h.to(tl.int64) * stride_ih + qb.to(tl.int64) * stride_iq
    cnt = tl.load(CNT + b * stride_cb + h * stride_ch + qb)

    q = _load_tile(q_base, desc_q, q_row0, b, h, row0, tl.arange(0, BLOCK_M), offs_d, stride_qn, N,
                   EVEN_N, TMA, BLOCK_M, HEAD_DIM)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if INTERPRET:  # the CPU interpreter cannot take a loaded scalar as a for-loop bound
        it = 0
        while it < cnt:
            kb = tl.load(idx_base + it)
            acc, l_i, m_i = _bsa_step(q, acc, l_i, m_i, kb, qb, k_base, v_base, desc_k, desc_v, kv_row0, b, hk,
                                      offs_m, offs_s, offs_d, stride_kn, stride_vn, N, NB, qk_scale, HEAD_DIM,
                                      BLOCK, SUB_N, CAUSAL, EVEN_N, TMA, DOT_PREC, MASK_ALWAYS)
            it += 1
    else:
        for it in tl.range(0, cnt, warp_specialize=WARP_SPEC):
            kb = tl.load(idx_base + it)
            acc, l_i, m_i = _bsa_step(q, acc, l_i, m_i, kb, qb, k_base, v_base, desc_k, desc_v, kv_row0, b, hk,
                                      offs_m, offs_s, offs_d, stride_kn, stride_vn, N, NB, qk_scale, HEAD_DIM,
                                      BLOCK, SUB_N, CAUSAL, EVEN_N, TMA, DOT_PREC, MASK_ALWAYS)

    l_safe = tl.where(l_i > 0.0, l_i, 1.0)
    out = (acc / l_safe[:, None]).to(O.dtype.element_ty)
    o_ptrs = o_base + offs_m[:, None] * stride_on + offs_d[None, :]
    if EVEN_N:
        tl.store(o_ptrs, out)
    else:
        tl.store(o_ptrs, out, mask=offs_m[:, None] < N)
    if STORE_LSE:  # for the backward: natural-log LSE of the scaled scores; +inf where no key is admissible
        lse = tl.where(l_i > 0.0, (m_i + tl.math.log2(l_safe)) * _LN2, float("inf"))
        lse_ptrs = LSE + (b * H + h).to(tl.int64) * N + offs_m
        if EVEN_N:
            tl.store(lse_ptrs, lse)
        else:
            tl.store(lse_ptrs, lse, mask=offs_m < N)


@triton.jit
def _bwd_probs(q, k, lse, rows, cols, kb, qb, N, NB, sm_scale,
               CAUSAL: tl.constexpr, EVEN_N: tl.constexpr, DOT_PREC: tl.constexpr):
    """P = exp(S - LSE) of one tile, S = sm_scale * Q K^T; 0 where the forward masked the score (only the
    blocks on the causal diagonal and the ragged last key block need the token mask, as there)."""
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * sm_scale
    s = _token_mask(s, rows, cols, kb, qb, N, NB, CAUSAL, EVEN_N, False)
    return tl.exp(s - lse[:, None])


@triton.jit
def _bsa_dq_step(q, do, lse, delta, dq, kb, qb, k_base, v_base, desc_k, desc_v, kv_row0, b, hk, offs_m, offs_s,
                 offs_d, stride_kn, stride_vn, N, NB, sm_scale, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                 SUB_N: tl.constexpr, CAUSAL: tl.constexpr, EVEN_N: tl.constexpr, TMA: tl.constexpr,
                 DOT_PREC: tl.constexpr):
    """dQ += dS K over one selected key block (BLOCK // SUB_N sub-tiles), dS = P * (dO V^T - Delta)."""
    kb = tl.minimum(tl.maximum(kb, 0), NB - 1)  # memory safety for bad ids, as in the forward
    for sub in tl.static_range(BLOCK // SUB_N):
        start_n = kb * BLOCK + sub * SUB_N
        k = _load_tile(k_base, desc_k, kv_row0, b, hk, start_n, offs_s, offs_d, stride_kn, N, EVEN_N, TMA, SUB_N,
                       HEAD_DIM)
        v = _load_tile(v_base, desc_v, kv_row0, b, hk, start_n, offs_s, offs_d, stride_vn, N, EVEN_N, TMA, SUB_N,
                       HEAD_DIM)
        p = _bwd_probs(q, k, lse, offs_m, start_n + offs_s, kb, qb, N, NB, sm_scale, CAUSAL, EVEN_N, DOT_PREC)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PREC)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=DOT_PREC)
    return dq


@triton.jit
def _bsa_bwd_dq(
    Q, K, V, O, DO, LSE, DELTA, DQ, IDX, CNT,
    desc_k, desc_v,
    sm_scale,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ib, stride_ih, stride_iq,
    stride_cb, stride_ch,
    H, GROUP, N, NB,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SUB_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    EVEN_N: tl.constexpr,
    TMA: tl.constexpr,
    DOT_PREC: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """One program per (BLOCK_M rows of a query block, batch*head): Delta = rowsum(dO * O) of its rows (stored
    for the dK/dV kernel, launched after this one), then dQ over the query block's index list, the forward's walk
    (the K and V tiles through ``desc_k``/``desc_v`` when ``TMA``, as in the forward). O, dO, dQ, LSE and Delta
    are contiguous ([B, H, N, D] and [B, H, N])."""
    SPLIT: tl.constexpr = BLOCK // BLOCK_M  # programs per query block
    qb = NB - 1 - tl.program_id(0) // SPLIT  # longest causal rows first, as in the forward
    row0 = qb * BLOCK + (tl.program_id(0) % SPLIT) * BLOCK_M
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    hk = h // GROUP
    kv_row0 = (b * (H // GROUP) + hk) * N
    bh = pid_bh.to(tl.int64)
    offs_r = tl.arange(0, BLOCK_M)
    offs_m = row0 + offs_r
    offs_s = tl.arange(0, SUB_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N

    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    q = _load_tile(q_base, q_base, 0, 0, 0, row0, offs_r, offs_d, stride_qn, N, EVEN_N, 0, BLOCK_M, HEAD_DIM)
    o = _load_tile(O + bh * N * HEAD_DIM, O, 0, 0, 0, row0, offs_r, offs_d, HEAD_DIM, N, EVEN_N, 0, BLOCK_M, HEAD_DIM)
    do = _load_tile(DO + bh * N * HEAD_DIM, DO, 0, 0, 0, row0, offs_r, offs_d, HEAD_DIM, N, EVEN_N, 0, BLOCK_M,
                    HEAD_DIM)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
    tl.store(DELTA + bh * N + offs_m, delta, mask=row_ok)
    lse = tl.load(LSE + bh * N + offs_m, mask=row_ok, other=float("inf"))

    idx_base = IDX + b.to(tl.int64) * stride_ib + h.to(tl.int64) * stride_ih + qb.to(tl.int64) * stride_iq
    cnt = tl.load(CNT + b * stride_cb + h * stride_ch + qb)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if INTERPRET:  # the CPU interpreter cannot take a loaded scalar as a for-loop bound
        it = 0
        while it < cnt:
            kb = tl.load(idx_base + it)
            dq = _bsa_dq_step(q, do, lse, delta, dq, kb, qb, k_base, v_base, desc_k, desc_v, kv_row0, b, hk, offs_m,
                              offs_s, offs_d, stride_kn, stride_vn, N, NB, sm_scale, HEAD_DIM, BLOCK, SUB_N, CAUSAL,
                              EVEN_N, TMA, DOT_PREC)
            it += 1
    else:
        for it in range(0, cnt):
            kb = tl.load(idx_base + it)
            dq = _bsa_dq_step(q, do, lse, delta, dq, kb, qb, k_base, v_base, desc_k, desc_v, kv_row0, b, hk, offs_m,
                              offs_s, offs_d, stride_kn, stride_vn, N, NB, sm_scale, HEAD_DIM, BLOCK, SUB_N, CAUSAL,
                              EVEN_N, TMA, DOT_PREC)

    dq_ptrs = DQ + bh * N * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(dq_ptrs, (dq * sm_scale).to(DQ.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _bsa_dkdv_step(k, v, dk, dv, code, kb, b, hk, Q, DO, LSE, DELTA, desc_q, desc_do, offs_n, offs_r, offs_d,
                   stride_qb, stride_qh, stride_qn, H, GROUP, N, NB, sm_scale, HEAD_DIM: tl.constexpr,
                   BLOCK: tl.constexpr, SUB_M: tl.constexpr, CAUSAL: tl.constexpr, EVEN_N: tl.constexpr,
                   TMA: tl.constexpr, DOT_PREC: tl.constexpr):
    """dV += P^T dO and dK += dS^T Q over one entry of the transposed index (code = g * NB + qb: query
    head hk * GROUP + g, query block qb), in BLOCK // SUB_M sub-tiles of the query block's rows."""
    qb = code % NB
    h = hk * GROUP + code // NB
    bh = (b * H + h).to(tl.int64)
    row0 = (b * H + h) * N  # the head's first row in the flat 2-D descriptors
    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    for sub in tl.static_range(BLOCK // SUB_M):
        start_m = qb * BLOCK + sub * SUB_M
        rows = start_m + offs_r
        q = _load_tile(q_base, desc_q, row0, b, h, start_m, offs_r, offs_d, stride_qn, N, EVEN_N, TMA, SUB_M,
                       HEAD_DIM)
        do = _load_tile(DO + bh * N * HEAD_DIM, desc_do, row0, b, h, start_m, offs_r, offs_d, HEAD_DIM, N, EVEN_N,
                        TMA, SUB_M, HEAD_DIM)
        lse = tl.load(LSE + bh * N + rows, mask=rows < N, other=float("inf"))
        delta = tl.load(DELTA + bh * N + rows, mask=rows < N, other=0.0)
        p = _bwd_probs(q, k, lse, rows, offs_n, kb, qb, N, NB, sm_scale, CAUSAL, EVEN_N, DOT_PREC)
        dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv, input_precision=DOT_PREC)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PREC)
        ds = p * (dp - delta[:, None])
        dk = tl.dot(tl.trans(ds.to(q.dtype)), q, dk, input_precision=DOT_PREC)
    return dk, dv


@triton.jit
def _bsa_bwd_dkdv(
    Q, K, V, DO, LSE, DELTA, DK, DV, ENTRIES, OFFSETS,
    desc_q, desc_do,
    sm_scale,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    seg_stride_b,
    H, GROUP, N, NB,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SUB_M: tl.constexpr,
    CAUSAL: tl.constexpr,
    EVEN_N: tl.constexpr,
    TMA: tl.constexpr,
    DOT_PREC: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """One program per (BLOCK_N keys of a key block, batch*kv head): walks the transposed index, the (query head
    of the group, query block) pairs whose lists hold this key block, ``ENTRIES[OFFSETS[seg]:OFFSETS[seg + 1]]`` with
    seg = b * seg_stride_b + hk * NB + kb (seg_stride_b = 0 for a batch-broadcast index). The GQA sum over
    the group happens in registers: dK and dV ([B, Hkv, N, D], contiguous) are written once, no atomics. The Q
    and dO tiles come through ``desc_q``/``desc_do`` when ``TMA``."""
    SPLIT: tl.constexpr = BLOCK // BLOCK_N  # programs per key block
    kb = tl.program_id(0) // SPLIT  # causal: the lowest key blocks have the longest lists, first
    col0 = kb * BLOCK + (tl.program_id(0) % SPLIT) * BLOCK_N
    pid = tl.program_id(1)
    hkv = H // GROUP
    b = pid // hkv
    hk = pid % hkv
    offs_k = tl.arange(0, BLOCK_N)
    offs_n = col0 + offs_k
    offs_r = tl.arange(0, SUB_M)
    offs_d = tl.arange(0, HEAD_DIM)

    k_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    k = _load_tile(k_base, k_base, 0, 0, 0, col0, offs_k, offs_d, stride_kn, N, EVEN_N, 0, BLOCK_N, HEAD_DIM)
    v = _load_tile(v_base, v_base, 0, 0, 0, col0, offs_k, offs_d, stride_vn, N, EVEN_N, 0, BLOCK_N, HEAD_DIM)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)

    seg = b * seg_stride_b + hk * NB + kb
    start = tl.load(OFFSETS + seg)
    end = tl.load(OFFSETS + seg + 1)
    if INTERPRET:  # the CPU interpreter cannot take a loaded scalar as a for-loop bound
        e = start
        while e < end:
            dk, dv = _bsa_dkdv_step(k, v, dk, dv, tl.load(ENTRIES + e), kb, b, hk, Q, DO, LSE, DELTA, desc_q, desc_do,
                                    offs_n, offs_r, offs_d, stride_qb, stride_qh, stride_qn, H, GROUP, N, NB,
                                    sm_scale, HEAD_DIM, BLOCK, SUB_M, CAUSAL, EVEN_N, TMA, DOT_PREC)
            e += 1
    else:
        for e in range(start, end):
            dk, dv = _bsa_dkdv_step(k, v, dk, dv, tl.load(ENTRIES + e), kb, b, hk, Q, DO, LSE, DELTA, desc_q, desc_do,
                                    offs_n, offs_r, offs_d, stride_qb, stride_qh, stride_qn, H, GROUP, N, NB,
                                    sm_scale, HEAD_DIM, BLOCK, SUB_M, CAUSAL, EVEN_N, TMA, DOT_PREC)

    out_off = pid.to(tl.int64) * N * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    ok = offs_n[:, None] < N
    tl.store(DK + out_off, (dk * sm_scale).to(DK.dtype.element_ty), mask=ok)
    tl.store(DV + out_off, dv.to(DV.dtype.element_ty), mask=ok)


@triton.jit
def _pool_scores(q, k_base, kb, qb, offs_m, offs_n, offs_d, stride_kn, N, NB, qk_scale,
                 HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_N: tl.constexpr,
                 DOT_PREC: tl.constexpr):
    """Scaled (base-2) scores of one tile, -inf where masked."""
    k = _load_tile(k_base, k_base, 0, 0, 0, kb * BLOCK, offs_n, offs_d, stride_kn, N, EVEN_N, 0, BLOCK, HEAD_DIM)
    qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * qk_scale
    return _token_mask(qk, offs_m, kb * BLOCK + offs_n, kb, qb, N, NB, CAUSAL, EVEN_N, False)


@triton.jit
def _pool_stats(q, k_base, kb, qb, m_i, l_i, offs_m, offs_n, offs_d, stride_kn, N, NB, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_N: tl.constexpr,
                DOT_PREC: tl.constexpr):
    qk = _pool_scores(q, k_base, kb, qb, offs_m, offs_n, offs_d, stride_kn, N, NB, qk_scale,
                      HEAD_DIM, BLOCK, CAUSAL, EVEN_N, DOT_PREC)
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    l_i = l_i * tl.math.exp2(m_i - m_safe) + tl.sum(tl.math.exp2(qk - m_safe[:, None]), 1)
    return m_new, l_i


@triton.jit
def _pool_tile(q, k_base, p_base, kb, qb, lse, row_sum, offs_m, offs_n, offs_d, stride_kn, N, NB, qk_scale,
               HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_N: tl.constexpr,
               DOT_PREC: tl.constexpr):
    qk = _pool_scores(q, k_base, kb, qb, offs_m, offs_n, offs_d, stride_kn, N, NB, qk_scale,
                      HEAD_DIM, BLOCK, CAUSAL, EVEN_N, DOT_PREC)
    best = tl.math.exp2(tl.max(tl.max(qk - lse[:, None], 1), 0))
    tl.store(p_base + kb, best)
    return row_sum + best


@triton.jit
def _pool_normalise(p_base, start, hi, NB, inv, ROW_CHUNK: tl.constexpr):
    cols = start + tl.arange(0, ROW_CHUNK)
    val = tl.load(p_base + cols, mask=cols < hi, other=0.0)
    tl.store(p_base + cols, val * inv, mask=cols < NB)


@triton.jit
def _pooled_map(
    Q, K, P,
    qk_scale,
    stride_qb, stride_qh, stride_qn,
    stride_kb, stride_kh, stride_kn,
    stride_pb, stride_ph, stride_pq,
    H, GROUP, N, NB,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    CAUSAL: tl.constexpr,
    EVEN_N: tl.constexpr,
    DOT_PREC: tl.constexpr,
    ROW_CHUNK: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    qb = NB - 1 - tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    hk = h // GROUP
    offs_m = qb * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    p_base = P + b.to(tl.int64) * stride_pb + h.to(tl.int64) * stride_ph + qb.to(tl.int64) * stride_pq

    q = _load_tile(q_base, q_base, 0, b, h, qb * BLOCK, offs_n, offs_d, stride_qn, N,
                   EVEN_N, 0, BLOCK, HEAD_DIM)
    hi = NB
    if CAUSAL:
        hi = qb + 1

    # pass 1: row statistics (base-2 log-sum-exp of the scaled scores)
    m_i = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK], dtype=tl.float32)
    if INTERPRET:  # the CPU interpreter cannot take a program-dependent for-loop bound
        kb = 0
        while kb < hi:
            m_i, l_i = _pool_stats(q, k_base, kb, qb, m_i, l_i, offs_m, offs_n, offs_d, stride_kn, N, NB, qk_scale,
                                   HEAD_DIM, BLOCK, CAUSAL, EVEN_N, DOT_PREC)
            kb += 1
    else:
        for kb in range(0, hi):
            m_i, l_i = _pool_stats(q, k_base, kb, qb, m_i, l_i, offs_m, offs_n, offs_d, stride_kn, N, NB, qk_scale,
                                   HEAD_DIM, BLOCK, CAUSAL, EVEN_N, DOT_PREC)
    # rows past N (ragged tail) must not win a max: give them L = +inf
    lse = tl.where((offs_m < N) & (l_i > 0.0), m_i + tl.math.log2(l_i), float("inf"))

    # pass 2: the largest probability inside each key block, and the row's sum of them
    row_sum = tl.full((), 0.0, tl.float32)
    if INTERPRET:
        kb = 0
        while kb < hi:
            row_sum = _pool_tile(q, k_base, p_base, kb, qb, lse, row_sum, offs_m, offs_n, offs_d, stride_kn, N, NB,
                                 qk_scale, HEAD_DIM, BLOCK, CAUSAL, EVEN_N, DOT_PREC)
            kb += 1
    else:
        for kb in range(0, hi):
            row_sum = _pool_tile(q, k_base, p_base, kb, qb, lse, row_sum, offs_m, offs_n, offs_d, stride_kn, N, NB,
                                 qk_scale, HEAD_DIM, BLOCK, CAUSAL, EVEN_N, DOT_PREC)

    # pass 3: row normalisation; blocks above the diagonal are written as 0
    tl.debug_barrier()  # pass-2 stores by other threads of this program must be visible
    inv = 1.0 / row_sum
    if INTERPRET:
        start = 0
        while start < NB:
            _pool_normalise(p_base, start, hi, NB, inv, ROW_CHUNK)
            start += ROW_CHUNK
    else:
        for start in range(0, NB, ROW_CHUNK):
            _pool_normalise(p_base, start, hi, NB, inv, ROW_CHUNK)


def default_config(block_size: int, head_dim: int, dtype: torch.dtype) -> dict:
    """Launch parameters of the forward kernel per shape (Hopper-tuned; benchmarks/block_sparse_NOTES.md).

    block_m: query rows per program (a divisor of block_size: two programs may share one query block's
    key list); tma: 0 plain pointer loads, 2 flat 2-D TMA descriptors (N a multiple of the block, B/H/N dims
    contiguous), 4 rank-4 TMA descriptors; sub_n: key sub-tile width; mask_always: compute the token
    mask on every tile instead of branching on the blocks that need it; warp_spec: Triton's automatic
    warp specialization of the key loop."""
    if block_size == 128:
        return {"num_warps": 8, "num_stages": 3, "sub_n": 128, "tma": 2, "mask_always": False, "warp_spec": False}
    return {"num_warps": 4, "num_stages": 3, "sub_n": 64, "tma": 2, "mask_always": False, "warp_spec": False}


def _flat_ok(t: torch.Tensor) -> bool:
    """[B, H, N, D] laid out as one [B*H*N, D] matrix (needed by the flat 2-D descriptors)."""
    return t.is_contiguous()


def _tma_ok(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0 and all((st * t.element_size()) % 16 == 0 for st in t.stride()[:-1])


def _tma_mode(requested: int, n: int, block_size: int, tensors) -> int:
    """The TMA mode the ``tensors`` ([B, H, N, D]) allow, at most ``requested``: 2 (flat 2-D descriptors) needs N a
    multiple of the block and contiguous tensors, else 4 (rank-4 descriptors) 16-byte aligned strides, else 0
    (plain pointer loads)."""
    tma = int(requested) if TensorDescriptor is not None else 0
    if tma == 2 and not (n % block_size == 0 and all(_flat_ok(t) for t in tensors)):
        tma = 4
    if tma == 4 and not all(_tma_ok(t) for t in tensors):
        tma = 0
    return tma


def _descriptor(t: torch.Tensor, tma: int, rows: int):
    """A TMA descriptor loading ``rows`` × D tiles of ``t`` [B, H, N, D] in mode ``tma`` (``t`` itself for 0)."""
    b, h, n, d = t.shape
    if tma == 2:
        return TensorDescriptor(t, [b * h * n, d], [d, 1], [rows, d])
    if tma == 4:
        return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, d])
    return t


def _expand_index(block_index: torch.Tensor, block_count: torch.Tensor, b: int, hq: int):
    """The index lists as [B, Hq, ...] views (size-1 batch/head dims broadcast with stride 0)."""
    idx = block_index.expand(b, hq, *block_index.shape[2:])
    cnt = block_count.expand(b, hq, block_count.shape[2])
    if idx.stride(-1) != 1:
        idx = idx.contiguous()
    if cnt.stride(-1) != 1:
        cnt = cnt.contiguous()
    return idx, cnt


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _dot_prec(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def block_sparse_attention_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_index: torch.Tensor,
    block_count: torch.Tensor,
    *,
    block_size: int = 64,
    causal: bool = True,
    sm_scale: float | None = None,
    config: dict | None = None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """Launch ``_bsa_fwd`` (inputs validated by ``api.block_sparse_attention``). ``lse``: a contiguous float32
    ``[B, Hq, N]`` buffer that then receives each query row's log-sum-exp (natural log of the scaled scores,
    +inf for a row with no admissible key), which the backward needs; None (no gradient) skips it."""
    b, hq, n, d = q.shape
    hkv = k.shape[1]
    nb = cdiv(n, block_size)
    cfg = dict(default_config(block_size, d, q.dtype))
    if config:
        cfg.update(config)
    scale = (1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)) * _LOG2E
    if out is None:
        out = torch.empty_like(q)
    idx, cnt = _expand_index(block_index, block_count, b, hq)
    sub_n = min(cfg["sub_n"], block_size)
    block_m = min(cfg.get("block_m", block_size), block_size)
    tma = _tma_mode(cfg["tma"], n, block_size, (q, k, v))
    desc_q, desc_k, desc_v = _descriptor(q, tma, block_m), _descriptor(k, tma, sub_n), _descriptor(v, tma, sub_n)
    grid = (nb * (block_size // block_m), b * hq)
    _bsa_fwd[grid](
        q, k, v, out, out if lse is None else lse, idx, cnt,
        desc_q, desc_k, desc_v,
        scale,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        idx.stride(0), idx.stride(1), idx.stride(2),
        cnt.stride(0), cnt.stride(1),
        hq, hq // hkv, n, nb,
        HEAD_DIM=d, BLOCK=block_size, BLOCK_M=block_m, SUB_N=sub_n, CAUSAL=causal, EVEN_N=(n % block_size == 0),
        TMA=tma, DOT_PREC=_dot_prec(q.dtype), MASK_ALWAYS=bool(cfg["mask_always"]),
        WARP_SPEC=bool(cfg["warp_spec"]), STORE_LSE=lse is not None, INTERPRET=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return out


def backward_config(block_size: int, head_dim: int, dtype: torch.dtype) -> dict:
    """Launch parameters of the two backward kernels (benchmarks/block_sparse_NOTES.md). Block 128: the fastest
    agreeing variant of the H200 sweep at N = 32k, D = 128 (8 warps, 2 stages, sub-tiles of 64: 5-6 % ahead of
    sub-tiles of 32, the others 5-170 % behind); block 64: from sm_90a compile reports alone (not swept). sub_n:
    key sub-tile of the dQ kernel; sub_m: query sub-tile of the dK/dV kernel; block_m: query rows per dQ program,
    block_n: keys per dK/dV program (divisors of the block: each program keeps its rows of dQ, or of dK and dV, in
    fp32); tma: how the loop's tiles load (K and V in the dQ kernel, Q and dO in the dK/dV kernel), as the
    forward's ``tma``."""
    sub = 64 if block_size == 128 else 32
    return {"num_warps": 8 if block_size == 128 else 4, "num_stages": 2, "sub_n": sub, "sub_m": sub, "tma": 0,
            "block_m": block_size, "block_n": block_size}


def transposed_index(block_index: torch.Tensor, block_count: torch.Tensor, num_heads: int, num_kv_heads: int,
                     num_blocks: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """For every (batch, kv head, key block), the (query head of the group, query block) pairs whose index
    lists hold that key block: CSR ``(entries, offsets)``, both int32, built on the index's device without a
    host sync. Segment ``seg = (b * Hkv + hk) * nKB + kb`` owns ``entries[offsets[seg]:offsets[seg + 1]]``,
    each entry ``g * nQB + qb`` (query head ``hk * group + g``). ``block_index [Bi, Hi, nQB, maxK]`` and
    ``block_count [Bi, Hi, nQB]`` as the forward takes them (Hi = 1 broadcasts over the heads; Bi = 1 gives one
    set of segments shared by the batch). Causal: a block above the diagonal (kb > qb) is left out, since
    the token mask removes all of it. Ids are clamped to [0, nKB) as in the kernels."""
    bi, _, nqb, max_k = block_index.shape
    group = num_heads // num_kv_heads
    n_seg = bi * num_kv_heads * num_blocks

    def arange(n: int) -> torch.Tensor:
        return torch.arange(n, device=block_index.device, dtype=torch.int32)

    idx = block_index.expand(bi, num_heads, nqb, max_k).clamp(0, num_blocks - 1)
    valid = arange(max_k) < block_count.expand(bi, num_heads, nqb).unsqueeze(-1)
    qb = arange(nqb).view(1, 1, nqb, 1)
    if causal:
        valid = valid & (idx <= qb)
    head = arange(num_heads).view(1, num_heads, 1, 1)
    seg = (arange(bi).view(bi, 1, 1, 1) * num_kv_heads + head // group) * num_blocks + idx
    seg = torch.where(valid, seg, n_seg).flatten()
    code = ((head % group) * nqb + qb).expand(bi, num_heads, nqb, max_k).flatten()
    seg_sorted, order = torch.sort(seg, stable=True)  # unused slots (seg = n_seg) sort to the end
    offsets = torch.searchsorted(seg_sorted, arange(n_seg + 1), out_int32=True)
    return code[order], offsets


def block_sparse_attention_backward_triton(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    block_index: torch.Tensor,
    block_count: torch.Tensor,
    *,
    block_size: int = 64,
    causal: bool = True,
    sm_scale: float | None = None,
    config: dict | None = None,
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch ``_bsa_bwd_dq`` then ``_bsa_bwd_dkdv``; returns ``(dq, dk, dv)`` in the inputs' dtypes.

    ``out`` and ``lse`` come from the forward (``block_sparse_attention_triton(..., lse=lse)``). ``grads``:
    contiguous ``(dq [B, Hq, N, D], dk, dv [B, Hkv, N, D])`` to write into (allocated here when None)."""
    b, hq, n, d = q.shape
    hkv = k.shape[1]
    nb = cdiv(n, block_size)
    cfg = dict(backward_config(block_size, d, q.dtype))
    if config:
        cfg.update(config)
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    do, out = grad_out.contiguous(), out.contiguous()
    if grads is None:
        grads = (torch.empty(q.shape, dtype=q.dtype, device=q.device),
                 torch.empty(k.shape, dtype=k.dtype, device=k.device),
                 torch.empty(v.shape, dtype=v.dtype, device=v.device))
    dq, dk, dv = grads
    delta = torch.empty(b, hq, n, dtype=torch.float32, device=q.device)
    idx, cnt = _expand_index(block_index, block_count, b, hq)
    common = dict(HEAD_DIM=d, BLOCK=block_size, CAUSAL=causal, EVEN_N=(n % block_size == 0),
                  DOT_PREC=_dot_prec(q.dtype), INTERPRET=_interpreting(),
                  num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    sub_n, sub_m = min(cfg["sub_n"], block_size), min(cfg["sub_m"], block_size)
    block_m, block_n = min(cfg["block_m"], block_size), min(cfg["block_n"], block_size)
    tma = _tma_mode(cfg["tma"], n, block_size, (k, v))
    _bsa_bwd_dq[(nb * (block_size // block_m), b * hq)](
        q, k, v, out, do, lse, delta, dq, idx, cnt,
        _descriptor(k, tma, sub_n), _descriptor(v, tma, sub_n),
        scale,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        idx.stride(0), idx.stride(1), idx.stride(2),
        cnt.stride(0), cnt.stride(1),
        hq, hq // hkv, n, nb,
        BLOCK_M=block_m, SUB_N=sub_n, TMA=tma, **common,
    )
    entries, offsets = transposed_index(block_index, block_count, hq, hkv, nb, causal)
    tma = _tma_mode(cfg["tma"], n, block_size, (q, do))
    _bsa_bwd_dkdv[(nb * (block_size // block_n), b * hkv)](
        q, k, v, do, lse, delta, dk, dv, entries, offsets,
        _descriptor(q, tma, sub_m), _descriptor(do, tma, sub_m),
        scale,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        hkv * nb if block_index.shape[0] == b else 0,
        hq, hq // hkv, n, nb,
        BLOCK_N=block_n, SUB_M=sub_m, TMA=tma, **common,
    )
    return dq, dk, dv


def pooled_attention_map_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    block_size: int = 64,
    causal: bool = True,
    sm_scale: float | None = None,
    num_warps: int | None = None,
    num_stages: int = 3,
) -> torch.Tensor:
    """Launch ``_pooled_map``; returns float32 ``[B, Hq, nB, nB]`` (rows sum to 1)."""
    b, hq, n, d = q.shape
    hkv = k.shape[1]
    nb = cdiv(n, block_size)
    scale = (1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)) * _LOG2E
    pooled = torch.empty(b, hq, nb, nb, dtype=torch.float32, device=q.device)
    if num_warps is None:
        num_warps = 8 if block_size == 128 else 4
    _pooled_map[(nb, b * hq)](
        q, k, pooled,
        scale,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        pooled.stride(0), pooled.stride(1), pooled.stride(2),
        hq, hq // hkv, n, nb,
        HEAD_DIM=d, BLOCK=block_size, CAUSAL=causal, EVEN_N=(n % block_size == 0),
        DOT_PREC=_dot_prec(q.dtype), ROW_CHUNK=128, INTERPRET=_interpreting(),
        num_warps=num_warps, num_stages=num_stages,
    )
    return pooled
