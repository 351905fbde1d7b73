"""Triton projection and tile binning of 3-D Gaussians (paper 05, 4DGCPro), gsplat's pipeline in four steps.

1. :func:`_project_kernel`, one program per ``BLOCK`` Gaussians: EWA projection (the rules of
   :func:`.project.project_torch`) and, fused, the first step of the binning: each Gaussian's tile rectangle
   and tile count (the rule of :func:`.binning.bin_gaussians`, 0 for a culled Gaussian). :func:`_count_kernel`
   does the binning step alone for Gaussians projected elsewhere.
2. ``torch.cumsum`` of the counts gives each Gaussian its offset; the total is the one host sync.
3. :func:`_emit_kernel`: Gaussian i writes one 64-bit key per tile it touches at its offset, the tile id in
   the high 32 bits and its depth's order in the low 32 (:func:`_depth_bits`), and i beside it. Keys are
   written in Gaussian order, so ``torch.sort(stable=True)`` (gsplat: a radix sort on the same key) leaves
   equal depths in a tile by index, as the PyTorch binning does.
4. :func:`_ranges_kernel`: offsets[t] = the number of sorted keys with a tile id below t (a binary search
   per tile), so a tile without Gaussians gets an empty range and offsets[n_tiles] = the total.

The depth order is the float's bits, mapped so that unsigned order is float order for every value (the
radix-sort trick: flip all bits of a negative, the sign bit of a positive), with −0 read as +0 and every NaN
as one NaN above +inf, as ``torch.argsort`` orders them. A rank from an argsort of the depths would be exact
too, but costs a second sort of N; the bits cost nothing and give the same order.

The tile rectangle is computed in float64 from the float32 inputs, as the reference does. In float32 the
box edges would depend on which log, square root and division ran (Triton's fast GPU versions, PyTorch's,
NumPy's in the interpreter differ in the last bit), and an edge within a rounding of a pixel boundary would
move. In float64 the products in the determinant are exact, division and square root are correctly rounded
on both sides, and only the log may differ, in its last bit (~1e-16 relative): an edge moves only if it lies
within ~1e-13 px of a boundary, so the two binnings give identical lists (``tests/kernels/test_gaussian_binning.py``).

On an H100 (100k Gaussians, 512², 363k keys) the whole call takes 0.22–0.57 ms under do_bench (host time
between launches and around the host sync varies that much between machines of one kind), of which the GPU is
busy 143 µs: 81 µs in the radix sort's passes over the 64-bit keys, 5 µs in the projection kernel, 8 in the
emit kernel, 10 in the ranges kernel (torch.profiler; the ``raster_sweep`` stage of the decode study). gsplat's
``rasterization`` less its ``rasterize_to_pixels`` (its projection and binning) took 0.36–0.59 ms in the same runs.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..host import cdiv

BLOCK = 128  # Gaussians (or tiles) per program
DET_MIN = tl.constexpr(2.0 ** -66)  # the conic's determinant floor, as .binning.DET_MIN


@triton.jit
def _tile_rect(mx, my, ca, cb, cc, o, alpha_min, height, width, tile):
    """(tx0, ty0, tiles wide, count) of :func:`.binning.bin_gaussians`: the α' ≥ α_min box of half-extents
    r·√Σ'_xx + 1, r·√Σ'_yy + 1 px (r² = 2 ln(o/α_min), Σ' the inverse conic), over the pixel centres it
    holds, clamped to the image; count 0 when the box holds no pixel, o < α_min or the conic is not invertible."""
    mx, my = mx.to(tl.float64), my.to(tl.float64)
    ca, cb, cc, o = ca.to(tl.float64), cb.to(tl.float64), cc.to(tl.float64), o.to(tl.float64)
    det = ca * cc - cb * cb
    r2 = 2.0 * tl.log(tl.maximum(o / alpha_min, 1.0))
    det_c = tl.maximum(det, DET_MIN)
    ext_x = tl.sqrt(r2 * cc / det_c) + 1.0
    ext_y = tl.sqrt(r2 * ca / det_c) + 1.0
    x0 = tl.math.ceil(mx - ext_x - 0.5)
    x1 = tl.math.floor(mx + ext_x - 0.5)
    y0 = tl.math.ceil(my - ext_y - 0.5)
    y1 = tl.math.floor(my + ext_y - 0.5)
    ok = ((o >= alpha_min) & (x1 >= x0) & (y1 >= y0) & (x1 >= 0) & (x0 <= width - 1) & (y1 >= 0)
          & (y0 <= height - 1) & (tl.abs(mx) < float("inf")) & (tl.abs(my) < float("inf")) & (det > DET_MIN))
    tx0 = tl.where(ok, tl.minimum(tl.maximum(x0, 0.0), width - 1.0), 0.0).to(tl.int32) // tile
    tx1 = tl.where(ok, tl.minimum(tl.maximum(x1, 0.0), width - 1.0), 0.0).to(tl.int32) // tile
    ty0 = tl.where(ok, tl.minimum(tl.maximum(y0, 0.0), height - 1.0), 0.0).to(tl.int32) // tile
    ty1 = tl.where(ok, tl.minimum(tl.maximum(y1, 0.0), height - 1.0), 0.0).to(tl.int32) // tile
    tw = tx1 - tx0 + 1
    return tx0, ty0, tw, tl.where(ok, tw * (ty1 - ty0 + 1), 0)


@triton.jit
def _store_rect(i, m, tx0, ty0, tw, cnt, rects_ptr, counts_ptr):
    tl.store(rects_ptr + i * 3, tx0, mask=m)
    tl.store(rects_ptr + i * 3 + 1, ty0, mask=m)
    tl.store(rects_ptr + i * 3 + 2, tw, mask=m)
    tl.store(counts_ptr + i, cnt, mask=m)


@triton.jit
def _count_kernel(means2d_ptr, conics_ptr, opac_ptr, rects_ptr, counts_ptr, n, height, width, tile, alpha_min,
                  BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    i64 = i.to(tl.int64)
    tx0, ty0, tw, cnt = _tile_rect(tl.load(means2d_ptr + i64 * 2, mask=m, other=0.0),
                                   tl.load(means2d_ptr + i64 * 2 + 1, mask=m, other=0.0),
                                   tl.load(conics_ptr + i64 * 3, mask=m, other=0.0),
                                   tl.load(conics_ptr + i64 * 3 + 1, mask=m, other=0.0),
                                   tl.load(conics_ptr + i64 * 3 + 2, mask=m, other=0.0),
                                   tl.load(opac_ptr + i64, mask=m, other=0.0), alpha_min, height, width, tile)
    _store_rect(i64, m, tx0, ty0, tw, cnt, rects_ptr, counts_ptr)


@triton.jit
def _project_kernel(means_ptr, quats_ptr, scales_ptr, opac_ptr, view_ptr, K_ptr, means2d_ptr, conics_ptr,
                    depths_ptr, visible_ptr, rects_ptr, counts_ptr, n, height, width, near_plane, blur, tile,
                    alpha_min, BIN: tl.constexpr, BLOCK: tl.constexpr):
    """:func:`.project.project_torch` for Gaussians i of this block, written out per component as gsplat's
    ``ProjectionEWA3DGSFused`` does; with ``BIN``, also their tile rectangles and counts."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    i64 = i.to(tl.int64)
    # Σ = M Mᵀ, M = R(q) diag(s) (3DGS), q = (w, x, y, z) normalised
    qw = tl.load(quats_ptr + i64 * 4, mask=m, other=1.0)
    qx = tl.load(quats_ptr + i64 * 4 + 1, mask=m, other=0.0)
    qy = tl.load(quats_ptr + i64 * 4 + 2, mask=m, other=0.0)
    qz = tl.load(quats_ptr + i64 * 4 + 3, mask=m, other=0.0)
    qn = tl.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
    qw, qx, qy, qz = qw / qn, qx / qn, qy / qn, qz / qn
    sx = tl.load(scales_ptr + i64 * 3, mask=m, other=0.0)
    sy = tl.load(scales_ptr + i64 * 3 + 1, mask=m, other=0.0)
    sz = tl.load(scales_ptr + i64 * 3 + 2, mask=m, other=0.0)
    m00, m01, m02 = (1 - 2 * (qy * qy + qz * qz)) * sx, 2 * (qx * qy - qw * qz) * sy, 2 * (qx * qz + qw * qy) * sz
    m10, m11, m12 = 2 * (qx * qy + qw * qz) * sx, (1 - 2 * (qx * qx + qz * qz)) * sy, 2 * (qy * qz - qw * qx) * sz
    m20, m21, m22 = 2 * (qx * qz - qw * qy) * sx, 2 * (qy * qz + qw * qx) * sy, (1 - 2 * (qx * qx + qy * qy)) * sz
    s00 = m00 * m00 + m01 * m01 + m02 * m02
    s01 = m00 * m10 + m01 * m11 + m02 * m12
    s02 = m00 * m20 + m01 * m21 + m02 * m22
    s11 = m10 * m10 + m11 * m11 + m12 * m12
    s12 = m10 * m20 + m11 * m21 + m12 * m22
    s22 = m20 * m20 + m21 * m21 + m22 * m22
    # camera space t = W μ + w
    w00, w01, w02, w03 = tl.load(view_ptr), tl.load(view_ptr + 1), tl.load(view_ptr + 2), tl.load(view_ptr + 3)
    w10, w11, w12, w13 = tl.load(view_ptr + 4), tl.load(view_ptr + 5), tl.load(view_ptr + 6), tl.load(view_ptr + 7)
    w20, w21, w22, w23 = tl.load(view_ptr + 8), tl.load(view_ptr + 9), tl.load(view_ptr + 10), tl.load(view_ptr + 11)
    px = tl.load(means_ptr + i64 * 3, mask=m, other=0.0)
    py = tl.load(means_ptr + i64 * 3 + 1, mask=m, other=0.0)
    pz = tl.load(means_ptr + i64 * 3 + 2, mask=m, other=0.0)
    tx = w00 * px + w01 * py + w02 * pz + w03
    ty = w10 * px + w11 * py + w12 * pz + w13
    depth = w20 * px + w21 * py + w22 * pz + w23
    tz = tl.maximum(depth, 1e-6)
    # EWA: J at (t_x/t_z, t_y/t_z) clamped to the field of view + 30 % of its half-width (gsplat persp_proj)
    fx, fy, cx, cy = tl.load(K_ptr), tl.load(K_ptr + 4), tl.load(K_ptr + 2), tl.load(K_ptr + 5)
    jx = tl.minimum(tl.maximum(tx / tz, -(cx / fx + 0.15 * width / fx)), (width - cx) / fx + 0.15 * width / fx)
    jy = tl.minimum(tl.maximum(ty / tz, -(cy / fy + 0.15 * height / fy)), (height - cy) / fy + 0.15 * height / fy)
    # rows of J W: J = [[f_x/t_z, 0, −f_x j_x/t_z], [0, f_y/t_z, −f_y j_y/t_z]]
    a0, a1, a2 = fx / tz * (w00 - jx * w20), fx / tz * (w01 - jx * w21), fx / tz * (w02 - jx * w22)
    b0, b1, b2 = fy / tz * (w10 - jy * w20), fy / tz * (w11 - jy * w21), fy / tz * (w12 - jy * w22)
    # Σ' = (J W) Σ (J W)ᵀ + blur·I
    sa0, sa1, sa2 = s00 * a0 + s01 * a1 + s02 * a2, s01 * a0 + s11 * a1 + s12 * a2, s02 * a0 + s12 * a1 + s22 * a2
    A = a0 * sa0 + a1 * sa1 + a2 * sa2 + blur
    B = b0 * sa0 + b1 * sa1 + b2 * sa2
    C = b0 * (s00 * b0 + s01 * b1 + s02 * b2) + b1 * (s01 * b0 + s11 * b1 + s12 * b2) \
        + b2 * (s02 * b0 + s12 * b1 + s22 * b2) + blur
    det = A * C - B * B
    vis = m & (depth >= near_plane) & (det > 0.0)
    det = tl.where(vis, det, 1.0)
    ca, cb, cc = tl.where(vis, C / det, 0.0), tl.where(vis, -B / det, 0.0), tl.where(vis, A / det, 0.0)
    mx = tl.where(vis, fx * tx / tz + cx, 0.0)
    my = tl.where(vis, fy * ty / tz + cy, 0.0)
    tl.store(means2d_ptr + i64 * 2, mx, mask=m)
    tl.store(means2d_ptr + i64 * 2 + 1, my, mask=m)
    tl.store(conics_ptr + i64 * 3, ca, mask=m)
    tl.store(conics_ptr + i64 * 3 + 1, cb, mask=m)
    tl.store(conics_ptr + i64 * 3 + 2, cc, mask=m)
    tl.store(depths_ptr + i64, depth, mask=m)
    tl.store(visible_ptr + i64, vis.to(tl.int8), mask=m)
    if BIN:
        o = tl.load(opac_ptr + i64, mask=m, other=0.0)
        tx0, ty0, tw, cnt = _tile_rect(mx, my, ca, cb, cc, o, alpha_min, height, width, tile)
        _store_rect(i64, m, tx0, ty0, tw, cnt, rects_ptr, counts_ptr)


@triton.jit
def _depth_bits(d):
    """A 32-bit key, as int64 in [0, 2³²), whose order is ``torch.argsort``'s order of the float32 depths d."""
    d = tl.where(d == 0.0, 0.0, d)  # −0 → +0
    d = tl.where(d != d, float("nan"), d)  # every NaN → the positive quiet NaN, above +inf
    bits = d.to(tl.int32, bitcast=True)
    return (bits ^ ((bits >> 31) | -2147483648)).to(tl.uint32, bitcast=True).to(tl.int64)


@triton.jit
def _emit_kernel(rects_ptr, counts_ptr, ends_ptr, depths_ptr, keys_ptr, gids_ptr, n, tiles_x, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    i64 = i.to(tl.int64)
    cnt = tl.load(counts_ptr + i64, mask=m, other=0)
    start = tl.load(ends_ptr + i64, mask=m, other=0) - cnt
    tx0 = tl.load(rects_ptr + i64 * 3, mask=m, other=0)
    ty0 = tl.load(rects_ptr + i64 * 3 + 1, mask=m, other=0)
    tw = tl.maximum(tl.load(rects_ptr + i64 * 3 + 2, mask=m, other=1), 1)
    low = _depth_bits(tl.load(depths_ptr + i64, mask=m, other=0.0))
    k = 0
    while k < tl.max(cnt, axis=0):  # the block's Gaussians write their k-th tile together
        on = k < cnt
        tile = (ty0 + k // tw) * tiles_x + tx0 + k % tw
        tl.store(keys_ptr + start + k, (tile.to(tl.int64) << 32) | low, mask=on)
        tl.store(gids_ptr + start + k, i, mask=on)
        k += 1


@triton.jit
def _ranges_kernel(keys_ptr, offsets_ptr, n_keys, n_tiles, BLOCK: tl.constexpr):
    t = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    lo = tl.zeros([BLOCK], tl.int64)
    hi = tl.zeros([BLOCK], tl.int64) + n_keys
    while tl.max(hi - lo, axis=0) > 0:  # lower bound of t in the sorted tile ids: ⌈log2(n_keys + 1)⌉ halvings
        mid = (lo + hi) // 2
        live = lo < hi
        below = (tl.load(keys_ptr + mid, mask=live, other=0) >> 32) < t
        lo = tl.where(live & below, mid + 1, lo)
        hi = tl.where(live & (below == 0), mid, hi)
    tl.store(offsets_ptr + t, lo.to(tl.int32), mask=t <= n_tiles)


def _grid(n: int):
    return (cdiv(n, BLOCK),)


def _lists(rects, counts, depths, n_tiles: int, tiles_x: int):
    """Steps 2–4 (module docstring) from the tile rectangles and counts: ``(offsets [n_tiles + 1], ids [M])``
    int32."""
    dev, n = counts.device, counts.shape[0]
    ends = torch.cumsum(counts, 0)
    total = int(ends[-1]) if n else 0  # the one host sync: the size of the lists
    if total >= 2 ** 31:
        raise ValueError(f"gaussian_splat: {total} (tile, Gaussian) pairs exceed the int32 lists (< 2**31)")
    offsets = torch.empty(n_tiles + 1, dtype=torch.int32, device=dev)
    keys = torch.empty(max(total, 1), dtype=torch.int64, device=dev)
    gids = torch.empty(total, dtype=torch.int32, device=dev)
    if total:
        _emit_kernel[_grid(n)](rects, counts, ends, depths, keys, gids, n, tiles_x, BLOCK=BLOCK)
        keys, order = torch.sort(keys, stable=True)
        gids = gids[order]
    _ranges_kernel[_grid(n_tiles + 1)](keys, offsets, total, n_tiles, BLOCK=BLOCK)
    return offsets, gids


def bin_triton(means2d, conics, opacities, depths, height: int, width: int, tile: int, alpha_min: float):
    """:func:`.binning.bin_gaussians` with the kernels (float32, contiguous inputs on one device)."""
    n, dev = means2d.shape[0], means2d.device
    tiles_x = math.ceil(width / tile)
    rects = torch.empty(n, 3, dtype=torch.int32, device=dev)
    counts = torch.empty(n, dtype=torch.int32, device=dev)
    if n:
        _count_kernel[_grid(n)](means2d, conics, opacities, rects, counts, n, height, width, tile, alpha_min,
                                BLOCK=BLOCK)
    return _lists(rects, counts, depths, tiles_x * math.ceil(height / tile), tiles_x)


def project_triton(means, quats, scales, viewmat, K, height: int, width: int, near_plane: float, blur: float,
                   opacities=None, tile: int = 16, alpha_min: float = 1.0 / 255.0):
    """``(means2d, conics, depths, visible)`` of :func:`.project.project_torch`; with ``opacities``, also binned:
    ``(means2d, conics, depths, offsets, ids)`` (float32, contiguous inputs on one device)."""
    n, dev = means.shape[0], means.device
    means2d = torch.empty(n, 2, dtype=torch.float32, device=dev)
    conics = torch.empty(n, 3, dtype=torch.float32, device=dev)
    depths = torch.empty(n, dtype=torch.float32, device=dev)
    visible = torch.empty(n, dtype=torch.int8, device=dev)
    binned = opacities is not None
    rects = torch.empty(n, 3, dtype=torch.int32, device=dev) if binned else None
    counts = torch.empty(n, dtype=torch.int32, device=dev) if binned else None
    if n:
        _project_kernel[_grid(n)](means, quats, scales, opacities, viewmat, K, means2d, conics, depths, visible, rects,
                                  counts, n, height, width, near_plane, blur, tile, alpha_min, BIN=binned, BLOCK=BLOCK)
    if not binned:
        return means2d, conics, depths, visible.view(torch.bool)
    tiles_x = math.ceil(width / tile)
    return (means2d, conics, depths) + _lists(rects, counts, depths, tiles_x * math.ceil(height / tile), tiles_x)
