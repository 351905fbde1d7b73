"""Triton kernel: query-sparse, key-dense attention with a fused Δ epilogue (paper 09, Δ Attention).

Paper: Willette, Lee, Hwang, "Δ Attention", NeurIPS 2025 (arXiv 2505.11254), Algorithm 1 lines
`ÃV ← f_dense(Q̃, K, V)` and Eq. 6/7 `out_i = (A*V)_i + Δ_{⌊i/γ⌋}`.

One program handles BLOCK_M selected query rows of one (batch, query head). Each row carries its
absolute position p (gathered straight from q, no copy of Q̃) and attends keys 0 … p (causal) or all
keys. The key loop is FlashAttention-2's online softmax, split in two phases: key blocks below the
smallest position of the tile need no mask; the blocks from there to the tile's largest position are
masked per row (the official kernel masks every block). GQA: query head h reads kv head h // group,
so K/V are never expanded. Programs of the heads that share a kv head are launched next to each
other (L2 reuse) and the tiles with the largest positions first (load balance).

MODE 0 writes the rows to a compact `[B, Hq, M, D]` output. MODE 1 (Δ) and MODE 2 (recompute)
update the sparse output `[B, Hq, N, D]` in place: for an anchor row a < s_p the epilogue reads the
sparse row out[a], forms Δ = dense − sparse in float32, adds it to out[a+1 … a+γ−1] (MODE 1 only) and
writes the dense row to out[a]; tail rows (≥ s_p) are overwritten with their dense row. Anchors are γ
apart, so no two programs touch the same output row. This fuses the official code's gather /
subtract / reshape-add into the attention kernel (no Δ tensor round trip, one launch).

Never imports reference.py. Works with the CPU interpreter (TRITON_INTERPRET=1, fp32/fp16).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..host import cdiv, next_power_of_2


@triton.jit
def _attend_block(acc, m_i, l_i, q, k_base, v_base, start_n, limit, N,
                  stride_kn, stride_kd, stride_vn, stride_vd,
                  offs_n, offs_d, mask_d, qk_scale,
                  MASKED: tl.constexpr, IEEE: tl.constexpr):
    """One FlashAttention-2 online-softmax step over the key block [start_n, start_n + BLOCK_N)."""
    kn = start_n + offs_n
    if MASKED:
        kv_mask = (kn < N)[:, None] & mask_d[None, :]
    else:
        kv_mask = mask_d[None, :]
    k = tl.load(k_base + kn[:, None] * stride_kn + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0)
    if IEEE:
        qk = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        qk = tl.dot(q, tl.trans(k))
    qk = qk * qk_scale
    if MASKED:                                           # key j allowed iff j <= limit of the row
        qk = tl.where(kn[None, :] <= limit[:, None], qk, float("-inf"))
    m_ij = tl.maximum(m_i, tl.max(qk, 1))
    p = tl.math.exp2(qk - m_ij[:, None])
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_base + kn[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0)
    if IEEE:
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="ieee")
    else:
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, m_ij, l_i


@triton.jit
def _query_sparse_kernel(
    Q, K, V, Rows, Out,
    sm_scale,
    stride_qb, stride_qh, stride_qn, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_on, stride_od,
    H, GROUP, N, M, S_P,
    GAMMA: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    MODE: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    tile = tl.num_programs(1) - 1 - tl.program_id(1)   # largest positions first
    b = pid_bh // H
    h = pid_bh % H
    hk = h // GROUP

    row0 = tile * BLOCK_M
    offs_m = row0 + tl.arange(0, BLOCK_M)
    valid_m = offs_m < M
    pos = tl.load(Rows + offs_m, mask=valid_m, other=0)
    pos64 = pos.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    offs_n = tl.arange(0, BLOCK_N)

    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh

    q = tl.load(q_base + pos64[:, None] * stride_qn + offs_d[None, :] * stride_qd,
                mask=valid_m[:, None] & mask_d[None, :], other=0.0)

    # Rows are strictly increasing (checked by the API): the tile's smallest and largest positions
    # are its first and last valid rows, read as scalars.
    if CAUSAL:
        limit = pos                                      # row attends keys 0 ... pos
        first = tl.load(Rows + row0)
        last = tl.load(Rows + tl.minimum(row0 + BLOCK_M, M) - 1)
    else:
        limit = tl.zeros([BLOCK_M], dtype=tl.int32) + (N - 1)
        first = N - 1
        last = N - 1
    lo = (first + 1) // BLOCK_N * BLOCK_N                # blocks below lo: no row needs a mask
    hi = last + 1

    qk_scale = sm_scale * 1.4426950408889634             # exp2 trick
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    if INTERPRET:
        # The CPU interpreter cannot use a tensor as a range() bound (NumPy >= 2.4 refuses int() of
        # its 1-element arrays); a while loop over the same bounds runs the same steps.
        start_n = lo * 0
        while start_n < lo:
            acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_base, v_base, start_n, limit, N,
                                          stride_kn, stride_kd, stride_vn, stride_vd,
                                          offs_n, offs_d, mask_d, qk_scale, False, IEEE)
            start_n += BLOCK_N
        while start_n < hi:
            acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_base, v_base, start_n, limit, N,
                                          stride_kn, stride_kd, stride_vn, stride_vd,
                                          offs_n, offs_d, mask_d, qk_scale, True, IEEE)
            start_n += BLOCK_N
    else:
        for start_n in range(0, lo, BLOCK_N):            # phase 1: unmasked
            acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_base, v_base, start_n, limit, N,
                                          stride_kn, stride_kd, stride_vn, stride_vd,
                                          offs_n, offs_d, mask_d, qk_scale, False, IEEE)
        for start_n in range(lo, hi, BLOCK_N):           # phase 2: per-row causal mask
            acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_base, v_base, start_n, limit, N,
                                          stride_kn, stride_kd, stride_vn, stride_vd,
                                          offs_n, offs_d, mask_d, qk_scale, True, IEEE)

    o = acc / l_i[:, None]

    o_base = Out + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    if MODE == 0:
        o_ptrs = o_base + offs_m.to(tl.int64)[:, None] * stride_on + offs_d[None, :] * stride_od
        tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=valid_m[:, None] & mask_d[None, :])
    else:
        row_ptrs = o_base + pos64[:, None] * stride_on + offs_d[None, :] * stride_od
        is_anchor = valid_m & (pos < S_P)
        if MODE == 1:
            amask = is_anchor[:, None] & mask_d[None, :]
            sparse_a = tl.load(row_ptrs, mask=amask, other=0.0).to(tl.float32)
            delta = o - sparse_a                         # Δ_j = (ÃV)_j − (A*V)_{jγ}
            for t in range(1, GAMMA):                    # out_{jγ+t} += Δ_j  (Eq. 6/7)
                ptrs = row_ptrs + t * stride_on
                x = tl.load(ptrs, mask=amask, other=0.0).to(tl.float32)
                tl.store(ptrs, (x + delta).to(Out.dtype.element_ty), mask=amask)
        # anchors: exactly the dense row; tail rows: dense (official cut_n rule)
        tl.store(row_ptrs, o.to(Out.dtype.element_ty), mask=valid_m[:, None] & mask_d[None, :])


# triton.jit picks the CPU interpreter at decoration time when TRITON_INTERPRET=1 is set.
_INTERPRETED = type(_query_sparse_kernel).__name__ == "InterpretedFunction"


def default_config(head_dim: int, device: torch.device) -> dict:
    """Tile sizes: small in the interpreter (speed), FA2-like on a GPU."""
    if device.type != "cuda":
        return {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}
    # H200, D = 128, bf16, fused Δ at N = 32k, γ = 64 (the tuning stage of `python -m companion.bench delta_attention`,
    # 2026-11-30): 64x64 / 4 warps / 3 stages 0.65 ms, 128x128 / 8 w 0.77, 128x64 / 8 w 0.79.
    return {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}


def _launch(q, k, v, rows, out, *, mode, s_p, gamma, causal, sm_scale, config):
    b, hq, n, d = q.shape
    hkv = k.shape[1]
    m = rows.numel()
    cfg = dict(default_config(d, q.device))
    if config:
        cfg.update(config)
    block_m, block_n = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"])
    block_d = max(16, next_power_of_2(d))
    scale = 1.0 / math.sqrt(d) if sm_scale is None else float(sm_scale)
    grid = (b * hq, cdiv(m, block_m))
    if m == 0:
        return out
    _query_sparse_kernel[grid](
        q, k, v, rows, out,
        scale,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        hq, hq // hkv, n, m, s_p,
        GAMMA=gamma if mode == 1 else 1, HEAD_DIM=d, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n,
        CAUSAL=bool(causal), MODE=mode, IEEE=(q.dtype == torch.float32),
        INTERPRET=_INTERPRETED,
        num_warps=int(cfg.get("num_warps", 4)), num_stages=int(cfg.get("num_stages", 2)),
    )
    return out


def query_sparse_attention(q, k, v, rows, *, causal=True, sm_scale=None, config=None, out=None):
    """Dense attention of the rows `rows` (int32, on q's device). Returns [B, Hq, M, D]."""
    b, hq, _, d = q.shape
    if out is None:
        out = torch.empty(b, hq, rows.numel(), d, device=q.device, dtype=q.dtype)
    return _launch(q, k, v, rows, out, mode=0, s_p=0, gamma=1, causal=causal,
                   sm_scale=sm_scale, config=config)


def query_sparse_delta_(out, q, k, v, *, gamma, num_delta_rows, propagate=True, causal=True,
                        sm_scale=None, config=None):
    """In-place Δ correction (propagate=True) or recompute (False) of the sparse output `out`."""
    n = q.shape[2]
    rows = torch.cat([
        torch.arange(0, num_delta_rows, gamma, device=q.device, dtype=torch.int32),
        torch.arange(num_delta_rows, n, device=q.device, dtype=torch.int32),
    ])
    return _launch(q, k, v, rows, out, mode=1 if propagate else 2, s_p=int(num_delta_rows),
                   gamma=int(gamma), causal=causal, sm_scale=sm_scale, config=config)
