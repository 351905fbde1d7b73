"""PyTorch oracles of the Gaussian tile rasteriser.

* :func:`rasterize_dense` — every Gaussian at every pixel, ``[P, N]``: the exact compositing
  (small images only);
* :func:`rasterize_tiles_torch` — the same per 16 × 16 tile over the binned lists, padded to the longest
  list and processed in chunks of tiles (the PyTorch splatter used at GPU scale).

gsplat's conventions (``RasterizeToPixels3DGSFwd.cu``): α' = min(0.999, o·exp(−σ)), σ = ½ dᵀ Σ'⁻¹ d at the
pixel centre (column + ½, row + ½); α' < 1/255 skipped; a pixel stops before the first Gaussian that would
take its transmittance to ≤ 1e-4 (that Gaussian and all later ones are left out); colour + T·background.
"""

from __future__ import annotations

import math

import torch

ALPHA_MAX = 0.999
T_EPS = 1e-4  # gsplat: stop before next_T = T·(1 − α') ≤ T_EPS


def _alpha(px, py, mx, my, ca, cb, cc, o, alpha_min):
    dx, dy = px - mx, py - my
    power = (-0.5 * (ca * dx * dx + cc * dy * dy) - cb * dx * dy).clamp(max=0.0)
    a = (o * torch.exp(power)).clamp(max=ALPHA_MAX)
    return torch.where(a < alpha_min, torch.zeros_like(a), a)


def _composite(a, col, background):
    """Front to back along the last axis of α' ``[..., K]``, with gsplat's early stop: Gaussian k counts
    while T_k·(1 − α'_k) > T_EPS (a prefix, since T only falls)."""
    keep = torch.exp(torch.cumsum(torch.log1p(-a), -1)) > T_EPS
    a = a * keep.to(a.dtype)
    log1m = torch.log1p(-a)
    log_t = torch.cumsum(log1m, -1)
    return (a * torch.exp(log_t - log1m)) @ col + background * torch.exp(log_t[..., -1:])


def rasterize_dense(means2d, conics, opacities, colors, depths, height, width, background=0.0,
                    alpha_min=1.0 / 255.0):
    order = torch.argsort(depths, stable=True)
    m, c, o, col = means2d[order], conics[order], opacities[order], colors[order]
    ys, xs = torch.meshgrid(torch.arange(height, device=m.device, dtype=m.dtype) + 0.5,
                            torch.arange(width, device=m.device, dtype=m.dtype) + 0.5, indexing="ij")
    px, py = xs.reshape(-1, 1), ys.reshape(-1, 1)
    a = _alpha(px, py, m[None, :, 0], m[None, :, 1], c[None, :, 0], c[None, :, 1], c[None, :, 2], o[None], alpha_min)
    return _composite(a, col, background).reshape(height, width, 3)


def rasterize_tiles_torch(means2d, conics, opacities, colors, offsets, ids, height, width, tile=16,
                          background=0.0, alpha_min=1.0 / 255.0, tiles_per_chunk=256):
    """Per-tile compositing over binned, depth-ordered lists (``binning.bin_gaussians``)."""
    dev, dt = means2d.device, means2d.dtype
    tx_n, ty_n = math.ceil(width / tile), math.ceil(height / tile)
    n_tiles = tx_n * ty_n
    counts = (offsets[1:] - offsets[:-1]).long()
    parts = []
    p = torch.arange(tile * tile, device=dev)
    for t0 in range(0, n_tiles, tiles_per_chunk):
        t1 = min(n_tiles, t0 + tiles_per_chunk)
        k = max(1, int(counts[t0:t1].max()) if t1 > t0 else 1)
        j = torch.arange(k, device=dev)
        valid = j[None, :] < counts[t0:t1, None]
        gid = ids.long()[(offsets[t0:t1, None].long() + j[None, :]).clamp(max=max(ids.numel() - 1, 0))] \
            if ids.numel() else torch.zeros(t1 - t0, k, dtype=torch.long, device=dev)
        tid = torch.arange(t0, t1, device=dev)
        px = ((tid % tx_n)[:, None] * tile + p[None] % tile).to(dt) + 0.5  # [B, 256]
        py = ((tid // tx_n)[:, None] * tile + p[None] // tile).to(dt) + 0.5
        m, c, o, col = means2d[gid], conics[gid], opacities[gid], colors[gid]  # [B, K, ...]
        a = _alpha(px[:, :, None], py[:, :, None], m[:, None, :, 0], m[:, None, :, 1], c[:, None, :, 0],
                   c[:, None, :, 1], c[:, None, :, 2], o[:, None, :], alpha_min)
        img = _composite(a * valid[:, None, :].to(dt), col, background)  # [B, 256, 3]
        parts.append(img.reshape(t1 - t0, tile, tile, 3))
    out = torch.cat(parts).reshape(ty_n, tx_n, tile, tile, 3).permute(0, 2, 1, 3, 4)
    return out.reshape(ty_n * tile, tx_n * tile, 3)[:height, :width]
