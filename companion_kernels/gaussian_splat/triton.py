"""Triton rasteriser, forward and backward: one program per 16 × 16 tile, its list read ``BLOCK_G`` entries at a time.

Notation (gsplat's, as in :mod:`.reference`): pixel p has centre (column + ½, row + ½); Gaussian i has mean
(mx, my), conic (a, b, c) = the entries of Σ'⁻¹, opacity o and colour c_i. With dx = px + ½ − mx,
dy = py + ½ − my, σ = ½(a dx² + c dy²) + b dx dy (clamped at ≥ 0) and α_i = min(0.999, o·e^(−σ)), set to 0
below 1/255. Front to back over the Gaussians the pixel keeps, T_i = Π_{j<i} (1 − α_j) and
C = Σ_i c_i α_i T_i + T_final·bg, T_final = the product over all of them.

Forward, gsplat's rules (see :mod:`.reference`): α ≤ 0.999, α < 1/255 skipped, and a pixel stops at the first
Gaussian that would take its transmittance to ≤ 1e-4 (that one and all later ones are left out); a tile leaves
its loop once all its pixels have stopped. For the backward the forward also writes, per pixel, T_final and
the number of list entries it kept (``n_used``; gsplat keeps the index of its last entry, ``last_ids``). Two
schedules give the same render and the same saved state:

* ``"sequential"`` (:func:`_rasterize_seq_kernel`, the default) walks the list one Gaussian at a time with a
  running T per pixel, gsplat's own loop: a pair costs one exp, no scan, no division.
* ``"chunk"`` (:func:`_rasterize_kernel`): the α of the tile's 256 pixels against BLOCK_G Gaussians form a
  [256, BLOCK_G] block, each pair costing one exp; the transmittance inside the chunk is a cumulative
  *product* of (1 − α) along the Gaussians (``tl.cumprod``), T_i is that product divided by (1 − α_i)
  (≥ 0.001 since α ≤ 0.999), and the running T carries across chunks. The stop is tracked by ``TA``, the
  transmittance over *every* Gaussian so far (the stopping one included): a pixel keeps Gaussian k while
  TA·Π_{j≤k}(1 − α_j) > 1e-4, a prefix of the whole list, so a pixel that stopped in one chunk stays stopped in
  the next.

Backward: one program per tile walks its list back to front, from the largest ``n_used`` of its pixels,
recovering each T_i from T_final; the programs take the tiles longest list first (:func:`tile_order`). Two
schedules give the same gradients:

* ``"chunk"`` (:func:`_rasterize_bwd_kernel`, the default): BLOCK_G entries at a time as a [256, BLOCK_G]
  block, each pair's terms summed over the tile's pixels before one atomic add per Gaussian and attribute;
* ``"sequential"`` (:func:`_rasterize_bwd_seq_kernel`): one entry at a time, gsplat's walk, with warp sums and
  one atomic add per warp.

Timings on an H100 (100k Gaussians, one 512² view, 363k list entries; do_bench; ``benchmarks/gaussian_splat_NOTES.md``
has every variant and the ncu readings). Forward: the sequential schedule, 16 entries a step, 4 warps, tiles
row-major, 0.35 ms (the default); the chunk schedule 0.55 ms at 16 / 8 warps, 0.71 at 16 / 4; gsplat's CUDA
``rasterize_to_pixels`` 0.20 ms on the same scene. Backward: the chunk kernel at 32 / 8 warps with its tiles longest
list first 1.45 ms (the default; 1.93 row-major, 1.58 at 16), the sequential kernel 5.2–8.9 ms; gsplat's backward
about 0.47 ms (its forward + backward 0.67). ncu puts the forward at 96 registers (a third of the SM's warps, 15 %
achieved) waiting mostly on L1 loads, and the chunk backward at 255 registers, one 8-warp program an SM.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

ALPHA_MAX = tl.constexpr(0.999)
T_EPS = tl.constexpr(1e-4)  # gsplat: stop before next_T = T·(1 − α) ≤ T_EPS


@triton.jit
def _tile_pixels(pid, n_tiles_x, height, width, TILE: tl.constexpr):
    """Tile ``pid``'s TILE² pixels (row-major tiles, row-major pixels): their centres (fx, fy), flat index in the
    image and whether they lie inside it (the last tile row and column may overhang)."""
    return _tile_pixels_at(tl.arange(0, TILE * TILE), pid, n_tiles_x, height, width, TILE)


@triton.jit
def _tile_pixels_at(p, pid, n_tiles_x, height, width, TILE: tl.constexpr):
    """:func:`_tile_pixels` for the pixel numbers ``p`` of the tile, any shape."""
    px = (pid % n_tiles_x) * TILE + p % TILE
    py = (pid // n_tiles_x) * TILE + p // TILE
    return px.to(tl.float32) + 0.5, py.to(tl.float32) + 0.5, py * width + px, (px < width) & (py < height)


@triton.jit
def _program_tile(order_ptr, ORDERED: tl.constexpr):
    """The tile this program takes: ``order[program id]`` with ``ORDERED`` (:func:`tile_order`), else the program
    id (row-major)."""
    pid = tl.program_id(0)
    if ORDERED:
        pid = tl.load(order_ptr + pid)
    return pid


@triton.jit
def _store_render(out_ptr, final_t_ptr, n_used_ptr, pix, inside, acc_r, acc_g, acc_b, T, n_used, background,
                  SAVE: tl.constexpr):
    """A forward's end: colour + T·background per pixel and, with ``SAVE``, T_final and the used-entry count."""
    tl.store(out_ptr + pix * 3, acc_r + T * background, mask=inside)
    tl.store(out_ptr + pix * 3 + 1, acc_g + T * background, mask=inside)
    tl.store(out_ptr + pix * 3 + 2, acc_b + T * background, mask=inside)
    if SAVE:
        tl.store(final_t_ptr + pix, T, mask=inside)
        tl.store(n_used_ptr + pix, n_used, mask=inside)


@triton.jit
def _gaussian(gid, valid, means_ptr, conics_ptr, opac_ptr):
    """The mean (mx, my), conic (a, b, c) and opacity o of Gaussians ``gid`` (zeros where not ``valid``)."""
    mx = tl.load(means_ptr + gid * 2, mask=valid, other=0.0).to(tl.float32)
    my = tl.load(means_ptr + gid * 2 + 1, mask=valid, other=0.0).to(tl.float32)
    ca = tl.load(conics_ptr + gid * 3, mask=valid, other=0.0).to(tl.float32)
    cb = tl.load(conics_ptr + gid * 3 + 1, mask=valid, other=0.0).to(tl.float32)
    cc = tl.load(conics_ptr + gid * 3 + 2, mask=valid, other=0.0).to(tl.float32)
    o = tl.load(opac_ptr + gid, mask=valid, other=0.0).to(tl.float32)
    return mx, my, ca, cb, cc, o


@triton.jit
def _alpha(dx, dy, ca, cb, cc, o, valid, alpha_min):
    """σ before its clamp, e^(−σ) after it (the pair's one transcendental) and α (0 for skipped or unreal
    pairs), with the operands already broadcast to the pairs' shape."""
    sigma = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
    vis = tl.exp(-tl.maximum(sigma, 0.0))
    a = tl.minimum(o * vis, ALPHA_MAX)
    return sigma, vis, tl.where((a < alpha_min) | (valid == 0), 0.0, a)


@triton.jit
def _pairs(j, valid, fx, fy, means_ptr, conics_ptr, opac_ptr, ids_ptr, alpha_min):
    """The [pixels, BLOCK_G] pairs of list entries ``j`` (``valid`` marks real ones): the Gaussian ids, dx, dy,
    the conic (a, b, c), o, σ before its clamp, e^(−σ) after it, and α (0 for skipped or unreal pairs)."""
    gid = tl.load(ids_ptr + j, mask=valid, other=0).to(tl.int64)
    mx, my, ca, cb, cc, o = _gaussian(gid, valid, means_ptr, conics_ptr, opac_ptr)
    dx = fx[:, None] - mx[None, :]
    dy = fy[:, None] - my[None, :]
    sigma, vis, a = _alpha(dx, dy, ca[None, :], cb[None, :], cc[None, :], o[None, :], valid[None, :], alpha_min)
    return gid, dx, dy, ca, cb, cc, o, sigma, vis, a


@triton.jit
def _colors(gid, valid, colors_ptr):
    cr = tl.load(colors_ptr + gid * 3, mask=valid, other=0.0).to(tl.float32)
    cg = tl.load(colors_ptr + gid * 3 + 1, mask=valid, other=0.0).to(tl.float32)
    cbl = tl.load(colors_ptr + gid * 3 + 2, mask=valid, other=0.0).to(tl.float32)
    return cr, cg, cbl


@triton.jit
def _chunk(k, end, fx, fy, T, TA, n_used, acc_r, acc_g, acc_b, means_ptr, conics_ptr, opac_ptr, colors_ptr,
           ids_ptr, alpha_min, BLOCK_G: tl.constexpr):
    """Composite Gaussians k..k+BLOCK_G−1 of the tile's list over its pixels (front to back)."""
    j = k + tl.arange(0, BLOCK_G)
    valid = j < end
    gid, dx, dy, ca, cb, cc, o, sigma, vis, a = _pairs(j, valid, fx, fy, means_ptr, conics_ptr, opac_ptr, ids_ptr,
                                                       alpha_min)
    om = 1.0 - a
    incl = tl.cumprod(om, axis=1)  # Π_{l≤j} (1 − α_l) inside the chunk; it only falls along the chunk
    keep = TA[:, None] * incl > T_EPS  # gsplat: stop before next_T <= 1e-4, for good
    TA = TA * tl.min(incl, axis=1)  # the smallest incl is the chunk's whole product
    n_used += tl.sum((keep & valid[None, :]).to(tl.int32), axis=1)
    w = tl.where(keep, a * (incl / om), 0.0) * T[:, None]  # α_j T_j
    cr, cg, cbl = _colors(gid, valid, colors_ptr)
    acc_r += tl.sum(w * cr[None, :], axis=1)
    acc_g += tl.sum(w * cg[None, :], axis=1)
    acc_b += tl.sum(w * cbl[None, :], axis=1)
    T = T * tl.min(tl.where(keep, incl, 1.0), axis=1)  # the product over the kept prefix
    return T, TA, n_used, acc_r, acc_g, acc_b


@triton.jit
def _rasterize_kernel(means_ptr, conics_ptr, opac_ptr, colors_ptr, ids_ptr, offsets_ptr, order_ptr, out_ptr,
                      final_t_ptr, n_used_ptr, height, width, n_tiles_x, background, alpha_min,
                      TILE: tl.constexpr, BLOCK_G: tl.constexpr, SAVE: tl.constexpr, ORDERED: tl.constexpr):
    pid = _program_tile(order_ptr, ORDERED)
    fx, fy, pix, inside = _tile_pixels(pid, n_tiles_x, height, width, TILE)
    start = tl.load(offsets_ptr + pid)
    end = tl.load(offsets_ptr + pid + 1)
    T = tl.full([TILE * TILE], 1.0, tl.float32)
    TA = tl.full([TILE * TILE], 1.0, tl.float32)
    n_used = tl.zeros([TILE * TILE], tl.int32)
    acc_r = tl.zeros([TILE * TILE], tl.float32)
    acc_g = tl.zeros([TILE * TILE], tl.float32)
    acc_b = tl.zeros([TILE * TILE], tl.float32)
    k = start
    while (k < end) & (tl.max(TA, axis=0) > T_EPS):  # leave once every pixel of the tile has stopped
        T, TA, n_used, acc_r, acc_g, acc_b = _chunk(k, end, fx, fy, T, TA, n_used, acc_r, acc_g, acc_b, means_ptr,
                                                    conics_ptr, opac_ptr, colors_ptr, ids_ptr, alpha_min, BLOCK_G)
        k += BLOCK_G
    _store_render(out_ptr, final_t_ptr, n_used_ptr, pix, inside, acc_r, acc_g, acc_b, T, n_used, background, SAVE)


@triton.jit
def _rasterize_seq_kernel(means_ptr, conics_ptr, opac_ptr, colors_ptr, ids_ptr, offsets_ptr, order_ptr, out_ptr,
                          final_t_ptr, n_used_ptr, height, width, n_tiles_x, background, alpha_min,
                          TILE: tl.constexpr, BLOCK_G: tl.constexpr, SAVE: tl.constexpr, ORDERED: tl.constexpr):
    """The same render as :func:`_rasterize_kernel`, Gaussian by Gaussian as gsplat's CUDA kernel walks them:
    each pixel keeps its T and a flag that it stopped, and a pair costs one exp and no scan. The tile's list is
    read ``BLOCK_G`` entries per step of the outer loop (the inner one unrolled), and the tile leaves once
    every pixel has stopped (checked once per step)."""
    pid = _program_tile(order_ptr, ORDERED)
    fx, fy, pix, inside = _tile_pixels(pid, n_tiles_x, height, width, TILE)
    start = tl.load(offsets_ptr + pid)
    end = tl.load(offsets_ptr + pid + 1)
    T = tl.full([TILE * TILE], 1.0, tl.float32)
    live = tl.full([TILE * TILE], 1, tl.int1)
    n_used = tl.zeros([TILE * TILE], tl.int32)
    acc_r = tl.zeros([TILE * TILE], tl.float32)
    acc_g = tl.zeros([TILE * TILE], tl.float32)
    acc_b = tl.zeros([TILE * TILE], tl.float32)
    k = start
    while (k < end) & (tl.max(live.to(tl.int32), axis=0) > 0):
        for i in tl.static_range(BLOCK_G):
            j = k + i
            real = j < end
            gid = tl.load(ids_ptr + j, mask=real, other=0).to(tl.int64)
            mx, my, ca, cb, cc, o = _gaussian(gid, real, means_ptr, conics_ptr, opac_ptr)
            _, _, a = _alpha(fx - mx, fy - my, ca, cb, cc, o, real, alpha_min)
            next_t = T * (1.0 - a)
            live = live & (next_t > T_EPS) & real  # gsplat: stop before next_T <= 1e-4, for good
            w = tl.where(live, a * T, 0.0)
            cr, cg, cbl = _colors(gid, real, colors_ptr)
            acc_r += w * cr
            acc_g += w * cg
            acc_b += w * cbl
            n_used += live.to(tl.int32)
            T = tl.where(live, next_t, T)
        k += BLOCK_G
    _store_render(out_ptr, final_t_ptr, n_used_ptr, pix, inside, acc_r, acc_g, acc_b, T, n_used, background, SAVE)


@triton.jit
def _backward_state(pix, inside, final_t_ptr, n_used_ptr, grad_out_ptr, background):
    """A backward's start at pixels ``pix`` (any shape): T_final, the used-entry count, the output gradient g per
    channel and Σ_channels g·S with S = T_final·bg, the suffix colour after the last kept Gaussian."""
    T = tl.load(final_t_ptr + pix, mask=inside, other=1.0)
    n_used = tl.load(n_used_ptr + pix, mask=inside, other=0)
    gr = tl.load(grad_out_ptr + pix * 3, mask=inside, other=0.0)
    gg = tl.load(grad_out_ptr + pix * 3 + 1, mask=inside, other=0.0)
    gbl = tl.load(grad_out_ptr + pix * 3 + 2, mask=inside, other=0.0)
    return T, n_used, gr, gg, gbl, (gr + gg + gbl) * T * background


@triton.jit
def _rasterize_bwd_kernel(means_ptr, conics_ptr, opac_ptr, colors_ptr, ids_ptr, offsets_ptr, order_ptr, final_t_ptr,
                          n_used_ptr, grad_out_ptr, g_means_ptr, g_conics_ptr, g_opac_ptr, g_colors_ptr, height, width,
                          n_tiles_x, background, alpha_min, TILE: tl.constexpr, BLOCK_G: tl.constexpr):
    """Gradients of L given g = ∂L/∂C per pixel (3 channels), in the module docstring's notation.

    Over the Gaussians a pixel keeps, with the suffix colour S_i = Σ_{j>i} c_j α_j T_j + T_final·bg:

    * ∂C/∂c_i = α_i T_i, so ∂L/∂c_i = α_i T_i·g (per channel);
    * ∂T_j/∂α_i = −T_j/(1 − α_i) for every j > i (and for T_final), so
      ∂C/∂α_i = c_i T_i − S_i/(1 − α_i) and ∂L/∂α_i = Σ_channels (c_i T_i − S_i/(1 − α_i))·g;
    * α_i = o·e^(−σ): ∂α/∂o = e^(−σ), ∂α/∂σ = −α; both are 0 where α was capped (o·e^(−σ) > 0.999, as in
      gsplat's backward), skipped (α < 1/255) or the pixel had stopped; ∂σ = 0 where σ was clamped (σ < 0);
    * σ = ½(a dx² + c dy²) + b dx dy with dx = px + ½ − mx: ∂σ/∂a = ½dx², ∂σ/∂b = dx dy, ∂σ/∂c = ½dy²,
      ∂σ/∂mx = −(a dx + b dy), ∂σ/∂my = −(b dx + c dy).

    Walking back, T_i = T_{i+1}/(1 − α_i) is recovered from T_final (as gsplat does): inside a chunk
    T_i = T/Π_{l≥i}(1 − α_l) with T the transmittance after the chunk (a reverse ``tl.cumprod``). S_i enters
    only through Σ_channels g·S_i, one number per pixel: its value after the chunk plus a reverse cumulative
    sum of α_l T_l Σ_channels g·c_l over the chunk's l > i. Each pair's terms are summed
    over the tile's pixels (axis 0), then added to the fp32 gradients with one atomic add per Gaussian and
    attribute."""
    pid = tl.load(order_ptr + tl.program_id(0))  # the tiles in the given order (longest list first by default)
    fx, fy, pix, inside = _tile_pixels(pid, n_tiles_x, height, width, TILE)
    T, n_used, gr, gg, gbl, gs = _backward_state(pix, inside, final_t_ptr, n_used_ptr, grad_out_ptr, background)
    start = tl.load(offsets_ptr + pid)
    k = start + tl.max(n_used, axis=0) - BLOCK_G  # the last chunk ends at the tile's last used entry
    while k + BLOCK_G > start:
        j = k + tl.arange(0, BLOCK_G)
        valid = j >= start
        gid, dx, dy, ca, cb, cc, o, sigma, vis, a = _pairs(j, valid, fx, fy, means_ptr, conics_ptr, opac_ptr,
                                                           ids_ptr, alpha_min)
        kept = (j[None, :] - start < n_used[:, None]) & valid[None, :]
        a = tl.where(kept, a, 0.0)
        om = 1.0 - a
        t_i = T[:, None] / tl.cumprod(om, axis=1, reverse=True)  # T_i = T / Π_{l≥i} (1 − α_l)
        w = a * t_i  # α_i T_i
        cr, cg, cbl = _colors(gid, valid, colors_ptr)
        gc = gr[:, None] * cr[None, :] + gg[:, None] * cg[None, :] + gbl[:, None] * cbl[None, :]  # Σ_channels g·c_i
        v = w * gc  # Σ_channels g·c_i α_i T_i
        d_alpha = t_i * gc - (gs[:, None] + tl.cumsum(v, axis=1, reverse=True) - v) / om
        d_alpha = tl.where((a > 0.0) & (o[None, :] * vis <= ALPHA_MAX), d_alpha, 0.0)
        d_sigma = tl.where(sigma >= 0.0, -a * d_alpha, 0.0)
        tl.atomic_add(g_opac_ptr + gid, tl.sum(vis * d_alpha, axis=0), mask=valid)
        tl.atomic_add(g_conics_ptr + gid * 3, tl.sum(0.5 * dx * dx * d_sigma, axis=0), mask=valid)
        tl.atomic_add(g_conics_ptr + gid * 3 + 1, tl.sum(dx * dy * d_sigma, axis=0), mask=valid)
        tl.atomic_add(g_conics_ptr + gid * 3 + 2, tl.sum(0.5 * dy * dy * d_sigma, axis=0), mask=valid)
        tl.atomic_add(g_means_ptr + gid * 2, -tl.sum((ca[None, :] * dx + cb[None, :] * dy) * d_sigma, axis=0),
                      mask=valid)
        tl.atomic_add(g_means_ptr + gid * 2 + 1, -tl.sum((cb[None, :] * dx + cc[None, :] * dy) * d_sigma, axis=0),
                      mask=valid)
        tl.atomic_add(g_colors_ptr + gid * 3, tl.sum(w * gr[:, None], axis=0), mask=valid)
        tl.atomic_add(g_colors_ptr + gid * 3 + 1, tl.sum(w * gg[:, None], axis=0), mask=valid)
        tl.atomic_add(g_colors_ptr + gid * 3 + 2, tl.sum(w * gbl[:, None], axis=0), mask=valid)
        gs += tl.sum(v, axis=1)
        T = tl.max(t_i, axis=1)  # the transmittance before the chunk (T_i only grows walking back)
        k -= BLOCK_G


@triton.jit
def _rasterize_bwd_seq_kernel(means_ptr, conics_ptr, opac_ptr, colors_ptr, ids_ptr, offsets_ptr, order_ptr,
                              final_t_ptr, n_used_ptr, grad_out_ptr, g_means_ptr, g_conics_ptr, g_opac_ptr,
                              g_colors_ptr, height, width, n_tiles_x, background, alpha_min, TILE: tl.constexpr,
                              BLOCK_G: tl.constexpr):
    """The gradients of :func:`_rasterize_bwd_kernel`, Gaussian by Gaussian back to front as gsplat's backward
    walks them: per pixel T_i = T_{i+1}/(1 − α_i) and Σ_channels g·S_i grow by one entry at a time (no scan). The
    tile's pixels are held as [TILE²/32, 32], a row per warp's 32 lanes, so each Gaussian's ten sums are warp
    sums (no barrier), each added with one atomic per row that has a non-zero one, as gsplat does per warp."""
    ROWS: tl.constexpr = TILE * TILE // 32
    pid = tl.load(order_ptr + tl.program_id(0))  # the tiles in the given order (longest list first by default)
    p = tl.arange(0, ROWS)[:, None] * 32 + tl.arange(0, 32)[None, :]
    fx, fy, pix, inside = _tile_pixels_at(p, pid, n_tiles_x, height, width, TILE)
    T, n_used, gr, gg, gbl, gs = _backward_state(pix, inside, final_t_ptr, n_used_ptr, grad_out_ptr, background)
    start = tl.load(offsets_ptr + pid)
    row = tl.zeros([ROWS], tl.int64)
    k = start + tl.max(tl.max(n_used, axis=1), axis=0) - 1  # the tile's last used entry
    while k >= start:
        for i in tl.static_range(BLOCK_G):
            j = k - i
            real = j >= start
            gid = tl.load(ids_ptr + j, mask=real, other=0).to(tl.int64)
            mx, my, ca, cb, cc, o = _gaussian(gid, real, means_ptr, conics_ptr, opac_ptr)
            dx, dy = fx - mx, fy - my
            sigma, vis, a = _alpha(dx, dy, ca, cb, cc, o, real, alpha_min)
            a = tl.where(j - start < n_used, a, 0.0)
            om = 1.0 - a
            t_i = T / om
            w = a * t_i  # α_i T_i
            cr, cg, cbl = _colors(gid, real, colors_ptr)
            gc = gr * cr + gg * cg + gbl * cbl  # Σ_channels g·c_i
            d_alpha = tl.where((a > 0.0) & (o * vis <= ALPHA_MAX), t_i * gc - gs / om, 0.0)
            d_sigma = tl.where(sigma >= 0.0, -a * d_alpha, 0.0)
            _warp_add(g_opac_ptr + gid + row, tl.sum(vis * d_alpha, axis=1), real)
            _warp_add(g_conics_ptr + gid * 3 + row, tl.sum(0.5 * dx * dx * d_sigma, axis=1), real)
            _warp_add(g_conics_ptr + gid * 3 + 1 + row, tl.sum(dx * dy * d_sigma, axis=1), real)
            _warp_add(g_conics_ptr + gid * 3 + 2 + row, tl.sum(0.5 * dy * dy * d_sigma, axis=1), real)
            _warp_add(g_means_ptr + gid * 2 + row, -tl.sum((ca * dx + cb * dy) * d_sigma, axis=1), real)
            _warp_add(g_means_ptr + gid * 2 + 1 + row, -tl.sum((cb * dx + cc * dy) * d_sigma, axis=1), real)
            _warp_add(g_colors_ptr + gid * 3 + row, tl.sum(w * gr, axis=1), real)
            _warp_add(g_colors_ptr + gid * 3 + 1 + row, tl.sum(w * gg, axis=1), real)
            _warp_add(g_colors_ptr + gid * 3 + 2 + row, tl.sum(w * gbl, axis=1), real)
            gs += w * gc
            T = t_i
        k -= BLOCK_G


@triton.jit
def _warp_add(ptrs, sums, real):
    """Add each row's sum at its pointer (all rows point at one gradient entry), skipping zero sums."""
    tl.atomic_add(ptrs, sums, mask=real & (sums != 0.0))


def _placeholder_ids(ids):
    return ids if ids.numel() else torch.zeros(1, dtype=torch.int32, device=ids.device)


def tile_order(offsets, heavy_first: bool = True):
    """An order in which the programs take the tiles (int32, one per tile): longest list first with
    ``heavy_first``, else row-major. The backward's default: a few tiles hold ten times the mean list, and taken
    last they run alone at the end of the grid (on the H100 the chunk backward takes 1.58 ms with this order
    against 2.16 row-major; the forward, whose tiles stop early, gains nothing: it runs row-major)."""
    if not heavy_first:
        return torch.arange(offsets.numel() - 1, dtype=torch.int32, device=offsets.device)
    return torch.argsort(offsets.diff(), descending=True).to(torch.int32)


#: the forward's two schedules: "sequential" (:func:`_rasterize_seq_kernel`, the default: twice as fast as the
#: other on the H100, module docstring) and "chunk" (:func:`_rasterize_kernel`); the GPU study times both
#: (``raster_sweep``)
SCHEDULES = ("sequential", "chunk")


def rasterize_triton(means2d, conics, opacities, colors, offsets, ids, height, width, tile=16, background=0.0,
                     alpha_min=1.0 / 255.0, block_g=16, out=None, final_t=None, n_used=None, num_warps=4,
                     schedule="sequential", order=None):
    """Launch one program per tile (``num_warps`` warps, ``schedule`` of :data:`SCHEDULES`, tiles in ``order``
    (:func:`tile_order`), row-major when None); ``out`` ``[H, W, 3]`` float32 (allocated when None). Given ``final_t``
    ``[H, W]`` float32 and ``n_used`` ``[H, W]`` int32 (both or neither), it also writes each pixel's T_final and
    the number of its tile's list entries it used, for :func:`rasterize_backward_triton`."""
    if schedule not in SCHEDULES:
        raise ValueError(f"gaussian_splat: schedule={schedule!r} is not one of {SCHEDULES}")
    tx_n, ty_n = math.ceil(width / tile), math.ceil(height / tile)
    if out is None:
        out = torch.empty(height, width, 3, device=means2d.device, dtype=torch.float32)
    save = final_t is not None
    if save != (n_used is not None):
        raise ValueError("gaussian_splat: pass final_t and n_used together (the backward needs both) or neither")
    kernel = _rasterize_kernel if schedule == "chunk" else _rasterize_seq_kernel
    kernel[(tx_n * ty_n,)](means2d, conics, opacities, colors, _placeholder_ids(ids), offsets,
                           offsets if order is None else order, out, final_t, n_used, height, width, tx_n,
                           float(background), float(alpha_min), TILE=tile, BLOCK_G=block_g, SAVE=save,
                           ORDERED=order is not None, num_warps=num_warps)
    return out


def rasterize_backward_triton(means2d, conics, opacities, colors, offsets, ids, final_t, n_used, grad_out, height,
                              width, tile=16, background=0.0, alpha_min=1.0 / 255.0, block_g=32, num_warps=8,
                              order=None, schedule="chunk"):
    """Gradients ``(means2d [N, 2], conics [N, 3], opacities [N], colors [N, 3])`` float32 of a loss whose gradient
    with respect to the render is ``grad_out`` ``[H, W, 3]``, given the forward's ``final_t`` and ``n_used``; tiles
    in ``order`` (:func:`tile_order`, longest list first, when None), ``schedule`` of :data:`SCHEDULES`
    (:func:`_rasterize_bwd_seq_kernel` or :func:`_rasterize_bwd_kernel`). The default, the chunk kernel at
    ``block_g`` = 32 and 8 warps, was the fastest of the variants timed on the H100 (1.45 ms; 1.58 at 16; the
    sequential kernel 5.2–8.9 ms, although ptxas gives it 128 registers a thread at 8 entries a step against the
    chunk kernel's 255, 32 of them spilling 328 B)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"gaussian_splat: schedule={schedule!r} is not one of {SCHEDULES}")
    if schedule == "sequential" and tile * tile % 32:
        raise ValueError(f"gaussian_splat: tile={tile} gives {tile * tile} pixels a tile, not a multiple of 32")
    tx_n, ty_n = math.ceil(width / tile), math.ceil(height / tile)
    n, dev = means2d.shape[0], means2d.device
    grads = [torch.zeros(shape, device=dev, dtype=torch.float32) for shape in ((n, 2), (n, 3), (n,), (n, 3))]
    kernel = _rasterize_bwd_kernel if schedule == "chunk" else _rasterize_bwd_seq_kernel
    kernel[(tx_n * ty_n,)](means2d, conics, opacities, colors, _placeholder_ids(ids), offsets,
                           tile_order(offsets) if order is None else order, final_t, n_used, grad_out.contiguous(),
                           *grads, height, width, tx_n, float(background), float(alpha_min), TILE=tile,
                           BLOCK_G=block_g, num_warps=num_warps)
    return tuple(grads)
