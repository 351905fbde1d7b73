"""Triton kernel of the fused rotate-quantize-Whip op (DartQuant, Eq. 4 and the per-token INT-b quantizer).

One program owns ``BLOCK_M`` tokens (rows of X) and sweeps the whole width n twice:

1. for each column block: ``acc = X[rows] @ R[:, cols]`` (fp32 accumulation over K blocks with ``tl.dot``),
   rounded to X's dtype (the value eager PyTorch's matmul returns) and written to the output; the row
   maximum, minimum and ``Σ exp(−|y|)`` are updated from the rounded values. After the sweep the Whip sums
   are stored and each row's scale ``s = clip·(max(y_max,0) − min(y_min,0))/(2^b − 1)`` and zero point
   ``z = round(−y_min/s)`` are computed, exactly as the reference does (IEEE division, round half to even).
2. a barrier, then for each column block: the rounded Y the program wrote is read back (it is still in
   L2 for the most part), fake-quantized ``s·(clamp(round(y/s) + z, 0, 2^b − 1) − z)`` and overwritten.

So X is read once, R once per row block (from L2), and Y written, read and written again; no fp32 copy of
Y, no separate max/min/exp passes. Per-token quantization needs the whole row's range before any element
can be quantized, hence the second sweep (recomputing X R instead would double the FLOPs).

Tiles (bf16/fp16 on a GPU): 128 tokens × 128 columns × 64 of K, 8 warps, the K loop software-pipelined
over 3 stages (``tl.range(..., num_stages)``). Compiled ahead of time for sm_90 (Hopper) this gives wgmma,
asynchronous copies into 3 shared-memory buffers (96 KiB) and 243 registers without spills; a 128 × 256
tile spills, so it is not used. Each program re-reads its X row panel once per column block (from L2 when
it is still there), so X traffic is n/128 times X's size.

``round`` is written with ``floor`` (exact for |v| < 2^22, here |v| ≤ (2^b − 1)/clip): ``libdevice.rint``
does not run in the CPU interpreter. fp32 inputs use ``input_precision="ieee"`` (no TF32), matching
PyTorch with ``allow_tf32`` off.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rint(v):
    """Round half to even (torch.round) for |v| < 2^22."""
    f = tl.floor(v)
    d = v - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) == 1.0
    up = (d > 0.5) | ((d == 0.5) & odd)
    return f + up.to(tl.float32)


@triton.jit
def _rqw_kernel(
    x_ptr, r_ptr, y_ptr, w_ptr, T, clip, maxq,
    stride_xm, stride_xk, stride_rk, stride_rn, stride_ym, stride_yn,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
    STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < T
    rows64 = rows.to(tl.int64)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rmax = tl.full([BLOCK_M], float("-inf"), tl.float32)
    rmin = tl.full([BLOCK_M], float("inf"), tl.float32)
    whip = tl.zeros([BLOCK_M], tl.float32)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + offs_n
        col_ok = cols < N
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for k0 in tl.range(0, N, BLOCK_K, num_stages=STAGES):
            ks = k0 + offs_k
            k_ok = ks < N
            a = tl.load(x_ptr + rows64[:, None] * stride_xm + ks[None, :] * stride_xk,
                        mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(r_ptr + ks[:, None] * stride_rk + cols[None, :] * stride_rn,
                        mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            if IEEE:
                acc = tl.dot(a, b, acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
        m = row_ok[:, None] & col_ok[None, :]
        y = acc.to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + rows64[:, None] * stride_ym + cols[None, :] * stride_yn, y, mask=m)
        yf = y.to(tl.float32)
        rmax = tl.maximum(rmax, tl.max(tl.where(m, yf, float("-inf")), axis=1))
        rmin = tl.minimum(rmin, tl.min(tl.where(m, yf, float("inf")), axis=1))
        whip += tl.sum(tl.where(m, tl.exp(-tl.abs(yf)), 0.0), axis=1)
    tl.store(w_ptr + rows, whip, mask=row_ok)
    ymax = tl.maximum(rmax, 0.0) * clip
    ymin = tl.minimum(rmin, 0.0) * clip
    both0 = (ymax == 0.0) & (ymin == 0.0)
    ymax = tl.where(both0, 1.0, ymax)
    ymin = tl.where(both0, -1.0, ymin)
    scale = tl.math.div_rn(ymax - ymin, tl.zeros([BLOCK_M], tl.float32) + maxq)
    zero = _rint(tl.math.div_rn(-ymin, scale))
    tl.debug_barrier()  # the second sweep reads what other threads of this program wrote
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + offs_n
        m = row_ok[:, None] & (cols < N)[None, :]
        ptrs = y_ptr + rows64[:, None] * stride_ym + cols[None, :] * stride_yn
        yf = tl.load(ptrs, mask=m, other=0.0).to(tl.float32)
        q = _rint(tl.math.div_rn(yf, scale[:, None] + tl.zeros([BLOCK_M, BLOCK_N], tl.float32))) + zero[:, None]
        q = tl.minimum(tl.maximum(q, 0.0), maxq)
        tl.store(ptrs, (scale[:, None] * (q - zero[:, None])).to(y_ptr.dtype.element_ty), mask=m)


def _meta(n: int, dtype: torch.dtype, interp: bool):
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)."""
    p2 = max(16, triton.next_power_of_2(n))
    if interp:  # the interpreter runs one program at a time in numpy: small tiles keep tests fast
        return 16, min(32, p2), min(32, p2), 4, 1
    if dtype == torch.float32:
        return 64, min(128, p2), min(32, p2), 8, 3
    return 128, min(128, p2), min(64, p2), 8, 3


#: tiles (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) the GPU benchmark tries for 16-bit inputs: the
#: default, and a wider column block that halves X's re-reads (255 registers, no spills ahead of time)
GPU_TILES = ((128, 128, 64, 8, 3), (64, 256, 64, 8, 3))


def rotate_quant_whip_triton(x: torch.Tensor, r: torch.Tensor, bits: int, clip: float, *,
                             out: torch.Tensor | None = None, whip: torch.Tensor | None = None,
                             interpret: bool = False, tiles: tuple | None = None):
    """``(Q(X R), whip)`` for 2-D ``x`` [T, n] and ``r`` [n, n] of one dtype (no checks: see ``api.py``).

    ``out`` ([T, n], x's dtype) and ``whip`` ([T], fp32) may be given (the tests pre-fill them with NaN);
    ``tiles`` overrides the tile choice (see :data:`GPU_TILES`).
    """
    t, n = x.shape
    out = torch.empty_like(x) if out is None else out
    whip = torch.empty(t, device=x.device, dtype=torch.float32) if whip is None else whip
    bm, bn, bk, warps, stages = tiles or _meta(n, x.dtype, interpret)
    grid = (triton.cdiv(t, bm),)
    _rqw_kernel[grid](
        x, r, out, whip, t, float(clip), float(2 ** bits - 1),
        x.stride(0), x.stride(1), r.stride(0), r.stride(1), out.stride(0), out.stride(1),
        N=n, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=x.dtype == torch.float32, STAGES=stages, num_warps=warps, num_stages=stages,
    )
    return out, whip
