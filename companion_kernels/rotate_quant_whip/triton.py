"""Triton kernels of the rotate-quantize-Whip op (DartQuant, Eq. 4 and the per-token INT-b quantizer), three variants.

**"fused"** (:func:`_rqw_kernel`): one program owns ``BLOCK_M`` tokens (rows of X) and sweeps the whole width n twice:

1. for each column block: ``acc = X[rows] @ R[:, cols]`` (fp32 accumulation over K blocks with ``tl.dot``),
   rounded to X's dtype (the value eager PyTorch's matmul returns) and written to the output; the row
   maximum, minimum and ``Σ exp(−|y|)`` are updated from the rounded values. After the sweep the Whip sums
   are stored and each row's scale ``s = clip·(max(y_max,0) − min(y_min,0))/(2^b − 1)`` and zero point
   ``z = round(−y_min/s)`` are computed, exactly as the reference does (IEEE division, round half to even).
2. a barrier, then for each column block: the rounded Y the program wrote is read back (it is still in
   L2 for the most part), fake-quantized ``s·(clamp(round(y/s) + z, 0, 2^b − 1) − z)`` and overwritten.

So X is read once, R once per row block (from L2), and Y written, read and written again; no fp32 copy of
Y, no separate max/min/exp passes. Per-token quantization needs the whole row's range before any element
can be quantized, hence the second sweep (recomputing X R instead would double the FLOPs). Its grid has only
T/BLOCK_M programs (256 at 32768 tokens), each running the whole width's GEMM.

Tiles (bf16/fp16 on a GPU): 128 tokens × 128 columns × 64 of K, 8 warps, the K loop software-pipelined
over 3 stages (``tl.range(..., num_stages)``). Compiled ahead of time for sm_90 (Hopper) this gives wgmma,
asynchronous copies into 3 shared-memory buffers (96 KiB) and 243 registers without spills; a 128 × 256
tile spills, so it is not used. Each program re-reads its X row panel once per column block (from L2 when
it is still there), so X traffic is n/128 times X's size. Timed on one H200 at 32768 × 4096 bf16: 2.94 ms
(64 × 256 tile), where ``torch.compile`` of the eager reference took 1.66 ms; with its helpers shared with the
split variant (``_dot_tile``, ``_store_y``, ``_scale_zero``, ``_quantize_y``) 2.92 ms against 1.63 ms in the
``dartquant_kernel`` study (2026-12-05): the 256 programs of one row panel each do not fill the GPU.

**"split"** (:func:`_rotate_partials_kernel`, then :func:`_quantize_rows_kernel`): the GEMM as an ordinary 2-D
tiled matmul, so that it fills the GPU, and the per-token range as a reduction of per-tile partials:

1. a ``(T/BLOCK_M) × (n/BLOCK_N)`` grid, launched in grouped order (``GROUP_M`` row blocks sweep the column
   blocks together, so R's column panels and X's row panels are reused from L2, as in the Triton matmul
   tutorial); each program accumulates its tile of X R in fp32, rounds it to X's dtype, stores it, and writes
   the tile's row maximum, minimum and ``Σ exp(−|y|)`` of the rounded values to ``[T, n/BLOCK_N]`` fp32
   buffers: one slot per (token, column block), no atomics, so the result does not depend on the schedule;
2. a row-wise pass, ``QUANT_ROWS`` tokens a program: it reduces each token's partials (``tl.sum`` over the
   column blocks: a fixed order for a given tile), computes s and z exactly as the fused variant, and
   fake-quantizes Y in place.

Y goes to memory once in X's dtype, is read back once and written once more (at 32768 × 4096 bf16: 512 MiB of
extra traffic against the fused variant's L2 read-back). Quantized values equal the fused variant's wherever
the two GEMMs round y alike. The Whip sums differ by the order of the fp32 additions only: each side is a sum of
n positive terms, within (n − 1)·2^-24 of the exact sum relatively (the classical bound for recursive
summation), so the two differ by at most 2(n − 1)·2^-24 relatively (4.9e-4 at n = 4096; measured in the
interpreter at 64 × 1024 fp32, 32 column blocks: 2.4e-7). The default variant: on one H200 at 32768 × 4096 bf16
(``dartquant_kernel`` study, 2026-12-05) 1.576 ms with the 128 × 256 × 64 TMA tile, 8 warps, 4 stages, against
``torch.compile``'s 1.634 ms in the same run; its GEMM with the partials epilogue 1.463 ms (cuBLAS's X R alone
1.411 ms), the row pass 0.439 ms when launched alone.

**Loads.** Both variants read X and R through masked pointers (on Hopper the K loop's tiles go through
``cp.async`` into ``STAGES`` shared-memory buffers), or, for a tile whose sixth entry ``TMA`` is 1, through
host-built tensor descriptors (Hopper's TMA: one asynchronous bulk copy a tile, zero-filled past the edges, no
address arithmetic in registers; rows must be a multiple of 16 bytes). Compiled ahead of time for sm_90a as the
JIT specialises them, the split 128 × 256 × 64 tile takes 223 registers with pointers and 222 with TMA, the fused
128 × 128 × 64 tile 244 and 198, none spilling. The split default loads through TMA on Hopper, 4 stages deep
(1.576 ms; the same tile 1.649 ms at 3 stages, 1.785 ms with pointer loads at 3 stages); elsewhere it uses
pointers.

**"matmul"**: the GEMM by ``torch.mm`` into Y (cuBLAS on a GPU; the Y eager PyTorch computes, bit for bit), then
the row pass of the split variant with each token's range and Whip sum taken from a sweep over its Y instead of
partials. Y is written by the GEMM, read twice by the row pass (the second time mostly from L2) and written once
more: likely the schedule ``torch.compile`` generates for the reference (a cuBLAS GEMM, then fused row kernels),
with the row work in one launch: 1.630 ms on the H200 (rows of 4096 columns, 8 warps), level with the compiled
peer.

``round`` is written with ``floor`` (exact for |v| < 2^22, here |v| ≤ (2^b − 1)/clip): ``libdevice.rint``
does not run in the CPU interpreter. fp32 inputs use ``input_precision="ieee"`` (no TF32), matching
PyTorch with ``allow_tf32`` off.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..host import cdiv, next_power_of_2

try:  # host-side tensor descriptors (TMA loads on Hopper; triton >= 3.3)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover
    TensorDescriptor = None

#: row blocks that sweep the column blocks together in the split variant's GEMM (grouped launch order)
GROUP_M = 8


@triton.jit
def _rint(v):
    """Round half to even (torch.round) for |v| < 2^22."""
    f = tl.floor(v)
    d = v - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) == 1.0
    up = (d > 0.5) | ((d == 0.5) & odd)
    return f + up.to(tl.float32)


@triton.jit
def _scale_zero(rmax, rmin, clip, maxq):
    """Each token's step s and zero point z from its range, as ``reference.fake_quant_rows``: the range clamped
    to include 0 and scaled by ``clip``, an all-zero token given [−1, 1], IEEE division, z rounded half to even."""
    ymax = tl.maximum(rmax, 0.0) * clip
    ymin = tl.minimum(rmin, 0.0) * clip
    both0 = (ymax == 0.0) & (ymin == 0.0)
    ymax = tl.where(both0, 1.0, ymax)
    ymin = tl.where(both0, -1.0, ymin)
    scale = tl.math.div_rn(ymax - ymin, tl.zeros_like(ymax) + maxq)
    return scale, _rint(tl.math.div_rn(-ymin, scale))


@triton.jit
def _fake_quant(yf, scale, zero, maxq):
    """``s·(clamp(round(y/s) + z, 0, maxq) − z)`` for a [rows, cols] fp32 tile and per-row ``scale``, ``zero``."""
    q = _rint(tl.math.div_rn(yf, scale[:, None] + tl.zeros_like(yf))) + zero[:, None]
    q = tl.minimum(tl.maximum(q, 0.0), maxq)
    return scale[:, None] * (q - zero[:, None])


@triton.jit
def _store_y(acc, y_ptr, rows64, row_ok, cols, col_ok, stride_ym, stride_yn):
    """A tile of X R rounded to Y's dtype (the value eager matmul returns) and stored; its rows' maximum, minimum
    and Σ exp(−|y|) of the rounded values."""
    m = row_ok[:, None] & col_ok[None, :]
    y = acc.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + rows64[:, None] * stride_ym + cols[None, :] * stride_yn, y, mask=m)
    yf = y.to(tl.float32)
    return (tl.max(tl.where(m, yf, float("-inf")), axis=1), tl.min(tl.where(m, yf, float("inf")), axis=1),
            tl.sum(tl.where(m, tl.exp(-tl.abs(yf)), 0.0), axis=1))


@triton.jit
def _quantize_y(y_ptr, rows64, row_ok, scale, zero, maxq, stride_ym, stride_yn, N: tl.constexpr,
                BLOCK: tl.constexpr):
    """Fake-quantize the rows' Y in place, ``BLOCK`` columns at a time (:func:`_fake_quant`)."""
    for c0 in range(0, N, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        m = row_ok[:, None] & (cols < N)[None, :]
        ptrs = y_ptr + rows64[:, None] * stride_ym + cols[None, :] * stride_yn
        yf = tl.load(ptrs, mask=m, other=0.0).to(tl.float32)
        tl.store(ptrs, _fake_quant(yf, scale, zero, maxq).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _dot_tile(x_ptr, r_ptr, x_desc, r_desc, row0, col0, rows64, row_ok, cols, col_ok, stride_xm, stride_xk,
              stride_rk, stride_rn, N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, IEEE: tl.constexpr, STAGES: tl.constexpr, TMA: tl.constexpr):
    """``X[rows] @ R[:, cols]`` accumulated in fp32 over K blocks, the K loop pipelined over ``STAGES``; the tiles
    loaded through masked pointers, or (``TMA``) through tensor descriptors, which zero-fill past the edges."""
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in tl.range(0, N, BLOCK_K, num_stages=STAGES):
        if TMA:
            a = x_desc.load([row0, k0])
            b = r_desc.load([k0, col0])
        else:
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
    return acc


@triton.jit
def _rqw_kernel(
    x_ptr, r_ptr, x_desc, r_desc, y_ptr, w_ptr, T, clip, maxq,
    stride_xm, stride_xk, stride_rk, stride_rn, stride_ym, stride_yn,
    N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
    STAGES: tl.constexpr, TMA: tl.constexpr,
):
    """The fused variant: one program per ``BLOCK_M`` tokens, two sweeps over the width (module docstring)."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < T
    rows64 = rows.to(tl.int64)
    offs_n = tl.arange(0, BLOCK_N)
    rmax = tl.full([BLOCK_M], float("-inf"), tl.float32)
    rmin = tl.full([BLOCK_M], float("inf"), tl.float32)
    whip = tl.zeros([BLOCK_M], tl.float32)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + offs_n
        col_ok = cols < N
        acc = _dot_tile(x_ptr, r_ptr, x_desc, r_desc, pid * BLOCK_M, n0, rows64, row_ok, cols, col_ok, stride_xm,
                        stride_xk, stride_rk, stride_rn, N, BLOCK_M, BLOCK_N, BLOCK_K, IEEE, STAGES, TMA)
        tmax, tmin, twhip = _store_y(acc, y_ptr, rows64, row_ok, cols, col_ok, stride_ym, stride_yn)
        rmax = tl.maximum(rmax, tmax)
        rmin = tl.minimum(rmin, tmin)
        whip += twhip
    tl.store(w_ptr + rows, whip, mask=row_ok)
    scale, zero = _scale_zero(rmax, rmin, clip, maxq)
    tl.debug_barrier()  # the second sweep reads what other threads of this program wrote
    _quantize_y(y_ptr, rows64, row_ok, scale, zero, maxq, stride_ym, stride_yn, N, BLOCK_N)


@triton.jit
def _rotate_partials_kernel(
    x_ptr, r_ptr, x_desc, r_desc, y_ptr, pmax_ptr, pmin_ptr, pwhip_ptr, T,
    stride_xm, stride_xk, stride_rk, stride_rn, stride_ym, stride_yn,
    N: tl.constexpr, NB: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    IEEE: tl.constexpr, STAGES: tl.constexpr, GROUP: tl.constexpr, TMA: tl.constexpr,
):
    """The split variant's GEMM: tile (pid_m, pid_n) of Y = X R in X's dtype, and its per-row partials
    (max, min, Σ exp(−|y|) of the rounded values) in slot ``pid_n`` of the ``[T, NB]`` buffers."""
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(T, BLOCK_M)
    in_group = GROUP * NB
    first_m = (pid // in_group) * GROUP
    group_m = tl.minimum(blocks_m - first_m, GROUP)  # the last group may hold fewer row blocks
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < T
    rows64 = rows.to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    acc = _dot_tile(x_ptr, r_ptr, x_desc, r_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, rows64, row_ok, cols, col_ok,
                    stride_xm, stride_xk, stride_rk, stride_rn, N, BLOCK_M, BLOCK_N, BLOCK_K, IEEE, STAGES, TMA)
    tmax, tmin, twhip = _store_y(acc, y_ptr, rows64, row_ok, cols, col_ok, stride_ym, stride_yn)
    slot = rows64 * NB + pid_n
    tl.store(pmax_ptr + slot, tmax, mask=row_ok)
    tl.store(pmin_ptr + slot, tmin, mask=row_ok)
    tl.store(pwhip_ptr + slot, twhip, mask=row_ok)


@triton.jit
def _quantize_rows_kernel(
    y_ptr, pmax_ptr, pmin_ptr, pwhip_ptr, w_ptr, T, clip, maxq, stride_ym, stride_yn,
    N: tl.constexpr, NB: tl.constexpr, NB_P2: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
    FROM_Y: tl.constexpr,
):
    """The row pass of the split and matmul variants: ``BLOCK_R`` tokens' range and Whip sums, from the GEMM's
    per-tile partials (split) or (``FROM_Y``: matmul) from a sweep over their Y, ``BLOCK_C`` columns at a time;
    then their rounded Y fake-quantized in place (a second sweep, which finds the rows in L2)."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < T
    rows64 = rows.to(tl.int64)
    if FROM_Y:
        rmax = tl.full([BLOCK_R], float("-inf"), tl.float32)
        rmin = tl.full([BLOCK_R], float("inf"), tl.float32)
        whip = tl.zeros([BLOCK_R], tl.float32)
        for c0 in range(0, N, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            m = row_ok[:, None] & (cols < N)[None, :]
            yf = tl.load(y_ptr + rows64[:, None] * stride_ym + cols[None, :] * stride_yn, mask=m, other=0.0)
            yf = yf.to(tl.float32)
            rmax = tl.maximum(rmax, tl.max(tl.where(m, yf, float("-inf")), axis=1))
            rmin = tl.minimum(rmin, tl.min(tl.where(m, yf, float("inf")), axis=1))
            whip += tl.sum(tl.where(m, tl.exp(-tl.abs(yf)), 0.0), axis=1)
    else:
        blocks = tl.arange(0, NB_P2)
        pm = row_ok[:, None] & (blocks < NB)[None, :]
        slots = rows64[:, None] * NB + blocks[None, :]
        rmax = tl.max(tl.load(pmax_ptr + slots, mask=pm, other=float("-inf")), axis=1)
        rmin = tl.min(tl.load(pmin_ptr + slots, mask=pm, other=float("inf")), axis=1)
        whip = tl.sum(tl.load(pwhip_ptr + slots, mask=pm, other=0.0), axis=1)
    tl.store(w_ptr + rows, whip, mask=row_ok)
    scale, zero = _scale_zero(rmax, rmin, clip, maxq)
    _quantize_y(y_ptr, rows64, row_ok, scale, zero, maxq, stride_ym, stride_yn, N, BLOCK_C)


#: the row pass of the split and matmul variants: tokens a program, columns a step (32 in the interpreter), warps
QUANT_ROWS, QUANT_COLS, QUANT_WARPS = 4, 1024, 4


def _meta(x: torch.Tensor, interp: bool, variant: str = "split"):
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, TMA) of ``variant``'s GEMM for ``x`` [T, n] (pointer
    loads: TMA 0)."""
    n, dtype = x.shape[1], x.dtype
    p2 = max(16, next_power_of_2(n))
    if variant == "matmul":  # (tokens a program, columns a step, -, warps, -, -) of its row pass
        return QUANT_ROWS, QUANT_COLS, 0, QUANT_WARPS, 1, 0
    if interp:  # the interpreter runs one program at a time in numpy: small tiles keep tests fast
        return 16, min(32, p2), min(32, p2), 4, 1, 0
    if dtype == torch.float32:
        return 64, min(128, p2), min(32, p2), 8, 3, 0
    if variant == "split":  # the fastest tile of the dartquant_kernel study on an H200: TMA loads where Hopper has them
        tma = (TensorDescriptor is not None and x.is_cuda and torch.cuda.get_device_capability(x.device) >= (9, 0)
               and (n * x.element_size()) % 16 == 0)
        return (128, min(256, p2), min(64, p2), 8, 4, 1) if tma else (128, min(256, p2), min(64, p2), 8, 3, 0)
    return 128, min(128, p2), min(64, p2), 8, 3, 0


#: tiles (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, TMA) the GPU benchmark tries for 16-bit inputs, per
#: variant. fused: its default, and a wider column block that halves X's re-reads (255 registers, no spills ahead
#: of time); split: the tutorial tile, two 128 × 128 tiles (fewer registers in the epilogue, more programs) and the
#: 128 × 256 tile with X and R loaded through tensor descriptors (TMA 1: Hopper's asynchronous bulk copies, no
#: address arithmetic in registers) at 3 and 4 stages, the fastest (1.576 ms on an H200) and the default
GPU_TILES = {
    "fused": ((128, 128, 64, 8, 3, 0), (64, 256, 64, 8, 3, 0), (128, 128, 64, 8, 3, 1)),
    "split": ((128, 256, 64, 8, 3, 0), (128, 128, 64, 8, 3, 0), (128, 128, 64, 4, 4, 0), (128, 256, 64, 8, 3, 1),
              (128, 256, 64, 8, 4, 1)),
    "matmul": ((4, 1024, 0, 4, 1, 0), (1, 4096, 0, 8, 1, 0)),
}


def _operands(x: torch.Tensor, r: torch.Tensor, tiles: tuple):
    """What the kernels read X and R through: the tensors themselves, or (a tile with TMA 1) tensor descriptors of
    their ``[BLOCK_M, BLOCK_K]`` and ``[BLOCK_K, BLOCK_N]`` tiles, over a row-major copy of a tensor that is not
    row-major (a transposed R, say)."""
    bm, bn, bk, _, _, tma = tiles
    if not tma:
        return x, r
    if TensorDescriptor is None:  # pragma: no cover
        raise RuntimeError("rotate_quant_whip: tiles with TMA loads need triton >= 3.3 (tensor descriptors)")
    descs = []
    for t, block in ((x, [bm, bk]), (r, [bk, bn])):
        t = t if t.stride(1) == 1 and t.data_ptr() % 16 == 0 else t.contiguous()
        if (t.stride(0) * t.element_size()) % 16:
            raise ValueError(f"rotate_quant_whip: tiles with TMA loads need rows of a multiple of 16 bytes; a width "
                             f"of {t.shape[1]} in {t.dtype} is {t.shape[1] * t.element_size()} bytes")
        descs.append(TensorDescriptor(t, list(t.shape), list(t.stride()), block))
    return descs



def _fused(x, r, out, whip, bits, clip, tiles):
    t, n = x.shape
    bm, bn, bk, warps, stages, tma = tiles
    _rqw_kernel[(cdiv(t, bm),)](
        x, r, *_operands(x, r, tiles), out, whip, t, float(clip), float(2 ** bits - 1),
        x.stride(0), x.stride(1), r.stride(0), r.stride(1), out.stride(0), out.stride(1),
        N=n, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=x.dtype == torch.float32, STAGES=stages, TMA=bool(tma),
        num_warps=warps, num_stages=stages,
    )


def split_partials(x: torch.Tensor, r: torch.Tensor, out: torch.Tensor, tiles: tuple) -> torch.Tensor:
    """The split variant's GEMM (:func:`_rotate_partials_kernel`): ``out`` ← X R in x's dtype; returns the fp32
    partials ``[3, T, n/BLOCK_N]`` (each token's max, min and Σ exp(−|y|) per column block)."""
    t, n = x.shape
    bm, bn, bk, warps, stages, tma = tiles
    nb = cdiv(n, bn)
    part = torch.empty(3, t, nb, device=x.device, dtype=torch.float32)
    _rotate_partials_kernel[(cdiv(t, bm) * nb,)](
        x, r, *_operands(x, r, tiles), out, part[0], part[1], part[2], t,
        x.stride(0), x.stride(1), r.stride(0), r.stride(1), out.stride(0), out.stride(1),
        N=n, NB=nb, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=x.dtype == torch.float32, STAGES=stages, GROUP=GROUP_M,
        TMA=bool(tma), num_warps=warps, num_stages=stages,
    )
    return part


def split_quantize(out: torch.Tensor, part: torch.Tensor | None, whip: torch.Tensor, bits: int, clip: float,
                   interpret: bool = False, rows: tuple = (QUANT_ROWS, QUANT_COLS, QUANT_WARPS)) -> None:
    """The row pass (:func:`_quantize_rows_kernel`) of the split variant (``part``: the reduced partials give
    ``whip`` and the range) or of the matmul variant (``part=None``: both from a sweep over ``out``); ``out``
    fake-quantized in place. ``rows``: tokens a program, columns a step (32 in the interpreter) and warps."""
    t, n = out.shape
    block_r, block_c, warps = rows
    from_y = part is None
    partials = (whip, whip, whip) if from_y else (part[0], part[1], part[2])  # not read from Y: any fp32 pointer
    nb = 1 if from_y else part.shape[2]
    cols = min(32 if interpret else block_c, next_power_of_2(n))
    _quantize_rows_kernel[(cdiv(t, block_r),)](
        out, *partials, whip, t, float(clip), float(2 ** bits - 1), out.stride(0), out.stride(1),
        N=n, NB=nb, NB_P2=next_power_of_2(nb), BLOCK_R=block_r, BLOCK_C=cols, FROM_Y=from_y, num_warps=warps,
    )


def rotate_quant_whip_triton(x: torch.Tensor, r: torch.Tensor, bits: int, clip: float, *,
                             out: torch.Tensor | None = None, whip: torch.Tensor | None = None,
                             interpret: bool = False, tiles: tuple | None = None, variant: str = "split"):
    """``(Q(X R), whip)`` for 2-D ``x`` [T, n] and ``r`` [n, n] of one dtype (no checks: see ``api.py``).

    ``variant``: ``"split"``, ``"fused"`` or ``"matmul"`` (module docstring). ``out`` ([T, n], x's dtype) and
    ``whip`` ([T], fp32) may be given (the tests pre-fill them with NaN); ``tiles`` overrides the GEMM's tile
    choice (see :data:`GPU_TILES`).
    """
    t = x.shape[0]
    out = torch.empty_like(x) if out is None else out
    whip = torch.empty(t, device=x.device, dtype=torch.float32) if whip is None else whip
    tiles = tiles or _meta(x, interpret, variant)
    if variant == "split":
        split_quantize(out, split_partials(x, r, out, tiles), whip, bits, clip, interpret)
    elif variant == "matmul":
        torch.mm(x, r, out=out)
        split_quantize(out, None, whip, bits, clip, interpret, rows=(tiles[0], tiles[1], tiles[3]))
    elif variant == "fused":
        _fused(x, r, out, whip, bits, clip, tiles)
    else:
        raise ValueError(f"rotate_quant_whip: variant={variant!r} is not allowed; choose 'fused', 'split' or 'matmul'")
    return out, whip
