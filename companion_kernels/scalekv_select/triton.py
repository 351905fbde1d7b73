"""Triton kernels for ScaleKV's in-layer token selection: window scores -> pool -> top-k -> gather.

Paper 03 (ScaleKV, arXiv 2505.19602, Sec. 3.4) and the official ``ScaleKVCluster.update_kv``. The
PyTorch path launches about ten ops (gather the window queries, matmul, mask, sum, max_pool1d,
topk, concatenate, sort, two gathers); here it is three kernels, one pass over the keys:

``_window_scores_kernel``  grid (B*H, N / BLOCK_N). The official score sums scaled *logits* over the
    window queries, so ``s_i = (sum_w q_w) . k_i / sqrt(d)``: the kernel sums the window queries
    once and streams K once (memory bound). With ``SOFTMAX`` it computes the paper's
    ``sum_w softmax_i(q_w . k / sqrt(d))`` instead, using per-query log-sum-exps from
    ``_window_lse_kernel`` (one log-sum-exp per key block, combined with ``torch.logsumexp``). Window keys get ``-inf``.
``_pool_select_kernel``  grid (B*H,). One program holds a whole score row in registers
    (``BLOCK = next_pow2(N)``): max-pool with ``kernel_size`` (padding -inf), window keys -> -inf,
    then the ``keep``-th largest pooled score is found *exactly* by a 32-step bisection on the
    order-preserving integer image of the float32 scores. The kept set is ``{score > t}`` plus
    the first ``keep - #{score > t}`` ties at ``t`` by position, plus the window; a prefix sum
    over that mask writes the kept indices already sorted by position (so top-k and the sort by
    position are a single ordered stream compaction).
``_gather_kernel``  grid (B*H, C / BLOCK_C): K and V rows at the kept indices.

Ties are broken by position (lower index first), like ``reference.py``; the official
``torch.topk`` leaves that order unspecified. Only max pooling (the code's default) is fused.
This module never imports ``reference.py``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..host import cdiv, next_power_of_2

__all__ = ["scalekv_select_triton", "MAX_TRITON_KEYS"]

MAX_TRITON_KEYS = 32768  # one score row lives in registers in _pool_select_kernel


@triton.jit
def _window_lse_kernel(
    q_ptr, k_ptr, w_ptr, lse_ptr,
    N, W, D, NBLK, sm_scale,
    WP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    # Per key block: log-sum-exp of each window query's logits over the block's non-window keys
    # (-inf when none; +inf for the padding rows w >= W, so that they add exp(.) = 0 to every score);
    # the host combines blocks with torch.logsumexp. One block per program keeps the kernel free of
    # runtime-bounded loops.
    row = tl.program_id(0)
    blk = tl.program_id(1)
    offs_w = tl.arange(0, WP)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = blk * BLOCK_N + tl.arange(0, BLOCK_N)
    wmask = offs_w < W
    nmask = offs_n < N
    dmask = offs_d < D
    q = tl.load(q_ptr + row * W * D + offs_w[:, None] * D + offs_d[None, :], mask=wmask[:, None] & dmask[None, :], other=0.0).to(tl.float32)
    k = tl.load(k_ptr + row * N * D + offs_n[:, None] * D + offs_d[None, :], mask=nmask[:, None] & dmask[None, :], other=0.0).to(tl.float32)
    widx = tl.load(w_ptr + offs_w, mask=wmask, other=-1)
    is_win = tl.sum((offs_n[:, None] == widx[None, :]).to(tl.int32), axis=1) > 0
    ok = nmask & (is_win == 0)
    logit = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale  # [WP, BLOCK_N]
    logit = tl.where(ok[None, :], logit, float("-inf"))
    m = tl.max(logit, axis=1)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(tl.exp(logit - m_safe[:, None]), axis=1)
    lse = tl.where(m == float("-inf"), float("-inf"), m_safe + tl.log(s))
    lse = tl.where(wmask, lse, float("inf"))
    tl.store(lse_ptr + (row * NBLK + blk) * WP + offs_w, lse)


@triton.jit
def _window_scores_kernel(
    q_ptr, k_ptr, w_ptr, lse_ptr, out_ptr,
    N, W, D, sm_scale,
    SOFTMAX: tl.constexpr, WP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0)
    blk = tl.program_id(1)
    offs_w = tl.arange(0, WP)
    offs_d = tl.arange(0, BLOCK_D)
    offs_n = blk * BLOCK_N + tl.arange(0, BLOCK_N)
    wmask = offs_w < W
    nmask = offs_n < N
    dmask = offs_d < D
    q = tl.load(q_ptr + row * W * D + offs_w[:, None] * D + offs_d[None, :], mask=wmask[:, None] & dmask[None, :], other=0.0).to(tl.float32)
    k = tl.load(k_ptr + row * N * D + offs_n[:, None] * D + offs_d[None, :], mask=nmask[:, None] & dmask[None, :], other=0.0).to(tl.float32)
    widx = tl.load(w_ptr + offs_w, mask=wmask, other=-1)
    is_win = tl.sum((offs_n[:, None] == widx[None, :]).to(tl.int32), axis=1) > 0
    if SOFTMAX:
        lse = tl.load(lse_ptr + row * WP + offs_w)  # +inf on padded rows -> exp(.) = 0
        logit = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale  # [WP, BLOCK_N]
        score = tl.sum(tl.exp(logit - lse[:, None]), axis=0)
    else:
        qsum = tl.sum(q, axis=0)  # [BLOCK_D]: the window's summed query
        score = tl.sum(k * qsum[None, :], axis=1) * sm_scale
    score = tl.where(is_win, float("-inf"), score)
    tl.store(out_ptr + row * N + offs_n, score, mask=nmask)


@triton.jit
def _pool_select_kernel(
    s_ptr, w_ptr, idx_ptr,
    N, W, KEEP, C,
    HALF: tl.constexpr, WP: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    valid = offs < N
    base = s_ptr + row * N
    pooled = tl.full([BLOCK], float("-inf"), tl.float32)
    for j in tl.static_range(2 * HALF + 1):
        pos = offs + (j - HALF)
        x = tl.load(base + pos, mask=valid & (pos >= 0) & (pos < N), other=float("-inf"))
        pooled = tl.maximum(pooled, x)
    is_win = offs < 0
    for j in tl.static_range(WP):
        wj = tl.load(w_ptr + j, mask=j < W, other=-1)
        is_win = is_win | (offs == wj)
    cand = valid & (is_win == 0)
    pooled = pooled + 0.0  # -0.0 -> +0.0 so that equal floats get equal keys
    bits = pooled.to(tl.int32, bitcast=True)
    skey = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # order-preserving int image of the floats
    u = tl.where(cand, skey.to(tl.int64) + 2147483648, -1)  # in [0, 2^32) for candidates
    # Largest t with #{u >= t} >= KEEP, built bit by bit: t is exactly the KEEP-th largest key.
    thr = tl.zeros([], tl.int64)
    for i in tl.static_range(32):
        c = thr | (1 << (31 - i))
        cnt = tl.sum((u >= c).to(tl.int32), axis=0)
        thr = tl.where(cnt >= KEEP, c, thr)
    gt = u > thr
    eq = (u == thr).to(tl.int32)
    need = KEEP - tl.sum(gt.to(tl.int32), axis=0)
    eq_rank = tl.cumsum(eq, axis=0) - eq
    keep = gt | ((eq > 0) & (eq_rank < need)) | (is_win & valid)
    keep_i = keep.to(tl.int32)
    dest = tl.cumsum(keep_i, axis=0) - 1
    tl.store(idx_ptr + row * C + dest, offs.to(tl.int64), mask=keep)


@triton.jit
def _gather_kernel(
    src_ptr, idx_ptr, out_ptr,
    N, C, D,
    BLOCK_C: tl.constexpr, BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0)
    blk = tl.program_id(1)
    offs_c = blk * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    cmask = offs_c < C
    dmask = offs_d < D
    idx = tl.load(idx_ptr + row * C + offs_c, mask=cmask, other=0)
    x = tl.load(src_ptr + row * N * D + idx[:, None] * D + offs_d[None, :], mask=cmask[:, None] & dmask[None, :], other=0.0)
    tl.store(out_ptr + row * C * D + offs_c[:, None] * D + offs_d[None, :], x, mask=cmask[:, None] & dmask[None, :])


def _pow2(x: int, lo: int = 1) -> int:
    return max(lo, next_power_of_2(int(x)))


def window_scores_triton(q_window: torch.Tensor, keys: torch.Tensor, widx: torch.Tensor, score: str) -> torch.Tensor:
    """Step 1 of the selection (``reference.window_scores_reference``): per-key window scores ``[B, H, N]`` in
    float32, window keys at -inf; ``widx`` int64 on the keys' device, at least one key outside the window."""
    b, h, n, d = keys.shape
    bh, w = b * h, widx.numel()
    wp, block_d = _pow2(w, 16), _pow2(d, 16)
    sm_scale = 1.0 / math.sqrt(d)
    scores = torch.empty(b, h, n, device=keys.device, dtype=torch.float32)
    softmax = score == "softmax"
    if softmax:
        nblk = cdiv(n, 64)
        part = torch.empty(bh, nblk, wp, device=keys.device, dtype=torch.float32)
        _window_lse_kernel[(bh, nblk)](q_window, keys, widx, part, n, w, d, nblk, sm_scale, WP=wp, BLOCK_N=64,
                                       BLOCK_D=block_d, num_warps=4)
        lse = torch.logsumexp(part, dim=1).contiguous()
    else:
        lse = scores  # unused
    block_n = 64 if block_d > 128 else 128
    _window_scores_kernel[(bh, cdiv(n, block_n))](
        q_window, keys, widx, lse, scores, n, w, d, sm_scale,
        SOFTMAX=softmax, WP=wp, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=4,
    )
    return scores


def scalekv_select_triton(
    q_window: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    window_idx: torch.Tensor,
    capacity: int,
    *,
    kernel_size: int = 5,
    score: str = "logits",
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused selection on contiguous inputs (no validation: use ``api.scalekv_select``).

    ``out = (keys [B,H,C,D], values [B,H,C,Dv], index [B,H,C] int64)`` are written in place when given
    (the tests pre-fill them with NaN / -1 so that an unwritten element is caught)."""
    b, h, n, d = keys.shape
    dv = values.shape[-1]
    w = window_idx.numel()
    bh = b * h
    device = keys.device
    widx = window_idx.to(device=device, dtype=torch.int64).contiguous()
    wp = _pow2(w, 16)
    block_d = _pow2(d, 16)
    keep = capacity - w
    if out is not None:
        kept_k, kept_v, index = out
    else:
        kept_k = torch.empty(b, h, capacity, d, device=device, dtype=keys.dtype)
        kept_v = torch.empty(b, h, capacity, dv, device=device, dtype=values.dtype)
        index = torch.empty(b, h, capacity, device=device, dtype=torch.int64)
    if keep > 0:
        scores = window_scores_triton(q_window, keys, widx, score)
        block = _pow2(n, 16)
        warps = 16 if block >= 8192 else (8 if block >= 2048 else 4)
        _pool_select_kernel[(bh,)](scores, widx, index, n, w, keep, capacity, HALF=kernel_size // 2, WP=wp, BLOCK=block, num_warps=warps)
    else:
        index.copy_(torch.sort(widx).values.expand(b, h, w))
    block_c = 32
    grid = (bh, cdiv(capacity, block_c))
    _gather_kernel[grid](keys, index, kept_k, n, capacity, d, BLOCK_C=block_c, BLOCK_D=block_d, num_warps=4)
    _gather_kernel[grid](values, index, kept_v, n, capacity, dv, BLOCK_C=block_c, BLOCK_D=_pow2(dv, 16), num_warps=4)
    return kept_k, kept_v, index
