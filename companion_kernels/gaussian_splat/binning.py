"""Tile binning shared by the Triton kernel and the per-tile PyTorch reference.

A Gaussian touches every tile that holds a pixel centre where its α' can reach ``alpha_min``:
o·exp(−½ dᵀ Σ'⁻¹ d) ≥ α_min ⇔ dᵀ Σ'⁻¹ d ≤ r² with r² = 2 ln(o / α_min), whose bounding box has half-extents
r·√Σ'_xx and r·√Σ'_yy (Σ' = the inverse of the conic). One extra pixel of margin guards against rounding:
a Gaussian listed in a tile where it does not reach α_min contributes nothing (the per-pixel rule drops it).
The box is computed in float64 from the inputs (α_min rounded to float32, as the float32 opacities it is
compared with), so that the PyTorch and the Triton binning agree exactly (:mod:`.triton_binning`); a conic
whose determinant is not above ``DET_MIN`` is not invertible and touches no tile.

Returns ``(offsets [n_tiles + 1] int32, ids [M] int32)``: tile k's Gaussians are ``ids[offsets[k]:offsets[k+1]]``
in depth order (ties by index), tiles row-major.
"""

from __future__ import annotations

import math

import torch

from ..dispatch import check_impl, check_int, check_same, check_scale, check_tensor, resolve_impl

DET_MIN = 2.0 ** -66  # ≈ 1.4e-20, a power of two so that float32 and float64 hold it exactly
_OP = "bin_gaussians"


def bin_torch(means2d, conics, opacities, depths, height: int, width: int, tile: int = 16,
              alpha_min: float = 1.0 / 255.0):
    """The binning in PyTorch ops (any device, any float dtype): the oracle of the Triton path."""
    dev = means2d.device
    n = means2d.shape[0]
    tx_n, ty_n = math.ceil(width / tile), math.ceil(height / tile)
    amin = torch.tensor(alpha_min, dtype=torch.float32).item()
    a, b, c = conics[:, 0].double(), conics[:, 1].double(), conics[:, 2].double()
    det = a * c - b * b
    det_c = det.clamp(min=DET_MIN)
    o = opacities.double()
    r2 = 2 * torch.log((o / amin).clamp(min=1.0))
    ext_x = torch.sqrt(r2 * c / det_c) + 1.0
    ext_y = torch.sqrt(r2 * a / det_c) + 1.0
    mx, my = means2d[:, 0].double(), means2d[:, 1].double()
    x0r, x1r = torch.ceil(mx - ext_x - 0.5), torch.floor(mx + ext_x - 0.5)
    y0r, y1r = torch.ceil(my - ext_y - 0.5), torch.floor(my + ext_y - 0.5)
    ok = ((o >= amin) & (x1r >= x0r) & (y1r >= y0r) & (x1r >= 0) & (x0r <= width - 1) & (y1r >= 0)
          & (y0r <= height - 1) & torch.isfinite(mx) & torch.isfinite(my) & (det > DET_MIN))
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
    # every NaN as the positive NaN, which argsort puts last on every device (CUDA's sort puts a NaN with its
    # sign bit set first)
    depths = torch.where(depths.isnan(), torch.full_like(depths, math.nan), depths)
    rank[torch.argsort(depths, stable=True)] = torch.arange(n, device=dev)
    order = torch.argsort(tile_id * n + rank[gid])
    ids = gid[order].to(torch.int32)
    counts = torch.bincount(tile_id, minlength=n_tiles)
    offsets = torch.zeros(n_tiles + 1, dtype=torch.long, device=dev)
    offsets[1:] = torch.cumsum(counts, 0)
    return offsets.to(torch.int32), ids


def bin_gaussians(means2d, conics, opacities, depths, height: int, width: int, tile: int = 16,
                  alpha_min: float = 1.0 / 255.0, *, impl: str = "auto"):
    """Tile lists of N projected Gaussians (means ``[N, 2]`` in pixels, conics ``[N, 3]`` = (a, b, c) of Σ'⁻¹,
    opacities ``[N]``, depths ``[N]``) for a ``height`` × ``width`` image of ``tile`` × ``tile`` tiles (module
    docstring). ``impl`` as in ``companion_kernels.dispatch``: the Triton kernels take float32 inputs;
    both give identical lists."""
    check_impl(impl, op=_OP)
    check_int("height", height, op=_OP, low=1)
    check_int("width", width, op=_OP, low=1)
    check_int("tile", tile, op=_OP, low=1)
    check_scale("alpha_min", alpha_min, op=_OP, allow_none=False)
    check_tensor("means2d", means2d, op=_OP, dim=2, layout="[N, 2]", floating=True)
    n = means2d.shape[0]
    if means2d.shape[1] != 2:
        raise ValueError(f"{_OP}: means2d must be [N, 2], got {tuple(means2d.shape)}")
    for name, t, shape in (("conics", conics, (n, 3)), ("opacities", opacities, (n,)), ("depths", depths, (n,))):
        check_tensor(name, t, op=_OP, floating=True)
        if tuple(t.shape) != shape:
            raise ValueError(f"{_OP}: {name} must have shape {shape} for N={n} Gaussians, got {tuple(t.shape)}")
    inputs = {"conics": conics, "opacities": opacities, "depths": depths}
    check_same("means2d", means2d, inputs, op=_OP, dtype=False)
    other = ", ".join(f"{name} {str(t.dtype).replace('torch.', '')}"
                      for name, t in {"means2d": means2d, **inputs}.items() if t.dtype != torch.float32)
    unsupported = f"the Triton binning takes float32 inputs, got {other}" if other else None
    if resolve_impl(impl, means2d.device, op=_OP, unsupported=unsupported) == "reference":
        return bin_torch(means2d, conics, opacities, depths, height, width, tile, alpha_min)
    from .triton_binning import bin_triton

    return bin_triton(means2d.contiguous(), conics.contiguous(), opacities.contiguous(), depths.contiguous(),
                      height, width, tile, alpha_min)
