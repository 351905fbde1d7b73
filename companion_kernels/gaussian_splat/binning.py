"""Tile binning shared by the Triton kernel and the per-tile PyTorch reference.

A Gaussian touches every tile that holds a pixel centre where its α' can reach ``alpha_min``:
o·exp(−½ dᵀ Σ'⁻¹ d) ≥ α_min ⇔ dᵀ Σ'⁻¹ d ≤ r² with r² = 2 ln(o / α_min), whose bounding box has half-extents
r·√Σ'_xx and r·√Σ'_yy (Σ' = the inverse of the conic). One extra pixel of margin guards against rounding:
a Gaussian listed in a tile where it does not reach α_min contributes nothing (the per-pixel rule drops it).

Returns ``(offsets [n_tiles + 1] int32, ids [M] int32)``: tile k's Gaussians are ``ids[offsets[k]:offsets[k+1]]``
in depth order (ties by index), tiles row-major.
"""

from __future__ import annotations

import math

import torch


def bin_gaussians(means2d, conics, opacities, depths, height: int, width: int, tile: int = 16,
                  alpha_min: float = 1.0 / 255.0):
    dev = means2d.device
    n = means2d.shape[0]
    tx_n, ty_n = math.ceil(width / tile), math.ceil(height / tile)
    a, b, c = conics[:, 0].float(), conics[:, 1].float(), conics[:, 2].float()
    det = (a * c - b * b).clamp(min=1e-20)
    o = opacities.float()
    r2 = 2 * torch.log((o / alpha_min).clamp(min=1.0))
    ext_x = torch.sqrt(r2 * c / det) + 1.0
    ext_y = torch.sqrt(r2 * a / det) + 1.0
    mx, my = means2d[:, 0].float(), means2d[:, 1].float()
    x0r, x1r = torch.ceil(mx - ext_x - 0.5), torch.floor(mx + ext_x - 0.5)
    y0r, y1r = torch.ceil(my - ext_y - 0.5), torch.floor(my + ext_y - 0.5)
    ok = ((o >= alpha_min) & (x1r >= x0r) & (y1r >= y0r) & (x1r >= 0) & (x0r <= width - 1) & (y1r >= 0)
          & (y0r <= height - 1) & torch.isfinite(mx) & torch.isfinite(my) & (det > 1e-20))
    x0, x1 = x0r.clamp(0, width - 1), x1r.clamp(0, width - 1)
    y0, y1 = y0r.clamp(0, height - 1), y1r.clamp(0, height - 1)
    tx0 = torch.div(x0, tile, rounding_mode="floor").long()
    tx1 = torch.div(x1, tile, rounding_mode="floor").long()
    ty0 = torch.div(y0, tile, rounding_mode="floor").long()
    ty1 = torch.div(y1, tile, rounding_mode="floor").long()
    w = (tx1 - tx0 + 1).clamp(min=0)
    h = (ty1 - ty0 + 1).clamp(min=0)
    cnt = torch.where(ok, w * h, torch.zeros_like(w))
    total = int(cnt.sum())
    n_tiles = tx_n * ty_n
    if total == 0:
        return torch.zeros(n_tiles + 1, dtype=torch.int32, device=dev), torch.zeros(0, dtype=torch.int32, device=dev)
    gid = torch.repeat_interleave(torch.arange(n, device=dev), cnt)
    start = torch.cumsum(cnt, 0) - cnt
    local = torch.arange(total, device=dev) - start[gid]
    tx = tx0[gid] + local % w[gid]
    ty = ty0[gid] + torch.div(local, w[gid], rounding_mode="floor")
    tile_id = ty * tx_n + tx
    rank = torch.empty(n, dtype=torch.long, device=dev)
    rank[torch.argsort(depths, stable=True)] = torch.arange(n, device=dev)
    order = torch.argsort(tile_id * n + rank[gid])
    ids = gid[order].to(torch.int32)
    counts = torch.bincount(tile_id, minlength=n_tiles)
    offsets = torch.zeros(n_tiles + 1, dtype=torch.long, device=dev)
    offsets[1:] = torch.cumsum(counts, 0)
    return offsets.to(torch.int32), ids
