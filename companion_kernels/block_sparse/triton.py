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
H200 timings: benchmarks/block_sparse_NOTES.md.

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

try:  # host-side TMA descriptors (triton >= 3.3)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

__all__ = ["block_sparse_attention_triton", "pooled_attention_map_triton", "default_config"]

_LOG2E = 1.4426950408889634


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
        if CAUSAL or not EVEN_N:
            cols = start_n + offs_s
            if MASK_ALWAYS:
                ok = cols[None, :] < N
                if CAUSAL:
                    ok = ok & (offs_m[:, None] >= cols[None, :])
                qk = tl.where(ok, qk, float("-inf"))
            else:
                need = False
                if CAUSAL:
                    need = kb >= qb
                if not EVEN_N:
                    need = need | (kb == NB - 1)
                if need:
                    ok = cols[None, :] < N
                    if CAUSAL:
                        ok = ok & (offs_m[:, None] >= cols[None, :])
                    qk = tl.where(ok, qk, float("-inf"))
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
    Q, K, V, O, IDX, CNT,
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


@triton.jit
def _pool_scores(q, k_base, kb, qb, offs_m, offs_n, offs_d, stride_kn, N, NB, qk_scale,
                 HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, CAUSAL: tl.constexpr, EVEN_N: tl.constexpr,
                 DOT_PREC: tl.constexpr):
    """Scaled (base-2) scores of one tile, -inf where masked."""
    k = _load_tile(k_base, k_base, 0, 0, 0, kb * BLOCK, offs_n, offs_d, stride_kn, N, EVEN_N, 0, BLOCK, HEAD_DIM)
    qk = tl.dot(q, tl.trans(k), input_precision=DOT_PREC) * qk_scale
    need = False
    if CAUSAL:
        need = kb == qb
    if not EVEN_N:
        need = need | (kb == NB - 1)
    if need:
        cols = kb * BLOCK + offs_n
        ok = cols[None, :] < N
        if CAUSAL:
            ok = ok & (offs_m[:, None] >= cols[None, :])
        qk = tl.where(ok, qk, float("-inf"))
    return qk


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
) -> torch.Tensor:
    """Launch ``_bsa_fwd`` (inputs validated by ``api.block_sparse_attention``)."""
    b, hq, n, d = q.shape
    hkv = k.shape[1]
    nb = triton.cdiv(n, block_size)
    cfg = dict(default_config(block_size, d, q.dtype))
    if config:
        cfg.update(config)
    scale = (1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)) * _LOG2E
    if out is None:
        out = torch.empty_like(q)
    idx = block_index.expand(b, hq, *block_index.shape[2:])
    cnt = block_count.expand(b, hq, block_count.shape[2])
    if idx.stride(-1) != 1:
        idx = idx.contiguous()
    if cnt.stride(-1) != 1:
        cnt = cnt.contiguous()
    sub_n = min(cfg["sub_n"], block_size)
    block_m = min(cfg.get("block_m", block_size), block_size)
    tma = int(cfg["tma"]) if TensorDescriptor is not None else 0
    if tma == 2 and not (n % block_size == 0 and _flat_ok(q) and _flat_ok(k) and _flat_ok(v)):
        tma = 4
    if tma == 4 and not all(_tma_ok(t) for t in (q, k, v)):
        tma = 0
    if tma == 2:
        desc_q = TensorDescriptor(q, [b * hq * n, d], [d, 1], [block_m, d])
        desc_k = TensorDescriptor(k, [b * hkv * n, d], [d, 1], [sub_n, d])
        desc_v = TensorDescriptor(v, [b * hkv * n, d], [d, 1], [sub_n, d])
    elif tma == 4:
        desc_q = TensorDescriptor(q, list(q.shape), list(q.stride()), [1, 1, block_m, d])
        desc_k = TensorDescriptor(k, list(k.shape), list(k.stride()), [1, 1, sub_n, d])
        desc_v = TensorDescriptor(v, list(v.shape), list(v.stride()), [1, 1, sub_n, d])
    else:
        desc_q = desc_k = desc_v = q
    grid = (nb * (block_size // block_m), b * hq)
    _bsa_fwd[grid](
        q, k, v, out, idx, cnt,
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
        WARP_SPEC=bool(cfg["warp_spec"]), INTERPRET=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return out


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
    nb = triton.cdiv(n, block_size)
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
