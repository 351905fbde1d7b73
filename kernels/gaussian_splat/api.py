"""Validated entry point of the Gaussian tile rasteriser (dispatch: ``companion_kernels.dispatch``)."""

from __future__ import annotations

import torch

from ..dispatch import IMPLS, check_impl, check_int, check_same, check_tensor, resolve_impl  # noqa: F401 (IMPLS re-exported)
from .binning import bin_gaussians
from . import reference

TILE = 16
_OP = "gaussian_splat"


def rasterize(means2d: torch.Tensor, conics: torch.Tensor, opacities: torch.Tensor, colors: torch.Tensor,
              depths: torch.Tensor, height: int, width: int, *, background: float = 0.0, impl: str = "auto",
              block_g: int = 32) -> torch.Tensor:
    """``[H, W, 3]`` float32 render of N projected Gaussians (means ``[N, 2]`` in pixels, conics ``[N, 3]`` =
    (a, b, c) of Σ'⁻¹, opacities ``[N]``, colours ``[N, 3]``, depths ``[N]``)."""
    check_impl(impl, op=_OP)
    check_int("height", height, op=_OP, low=1)
    check_int("width", width, op=_OP, low=1)
    check_int("block_g", block_g, op=_OP, low=16, high=256)
    check_tensor("means2d", means2d, op=_OP, dim=2, layout="[N, 2]", dtypes=(torch.float32,))
    n = means2d.shape[0]
    for name, t, shape in (("conics", conics, (n, 3)), ("opacities", opacities, (n,)), ("colors", colors, (n, 3)),
                           ("depths", depths, (n,))):
        check_tensor(name, t, op=_OP, dtypes=(torch.float32,))
        if tuple(t.shape) != shape:
            raise ValueError(f"{_OP}: {name} must have shape {shape} for N={n} Gaussians, got {tuple(t.shape)}")
    if means2d.shape[1] != 2:
        raise ValueError(f"{_OP}: means2d must be [N, 2], got {tuple(means2d.shape)}")
    check_same("means2d", means2d, {"conics": conics, "opacities": opacities, "colors": colors, "depths": depths}, op=_OP)
    if block_g & (block_g - 1):
        raise ValueError(f"{_OP}: block_g={block_g} must be a power of two")
    impl = resolve_impl(impl, means2d.device, op=_OP)
    offsets, ids = bin_gaussians(means2d, conics, opacities, depths, height, width, TILE)
    if impl == "reference":
        return reference.rasterize_tiles_torch(means2d, conics, opacities, colors, offsets, ids, height, width,
                                               TILE, background)
    from .triton import rasterize_triton

    return rasterize_triton(means2d.contiguous(), conics.contiguous(), opacities.contiguous(), colors.contiguous(),
                            offsets, ids, height, width, TILE, background, block_g=block_g)
