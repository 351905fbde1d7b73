"""Validated entry point of the Gaussian tile rasteriser (dispatch: ``companion_kernels.dispatch``).

Both paths are differentiable in ``means2d``, ``conics``, ``opacities`` and ``colors`` (the background is a
constant): the reference by autograd, the Triton path by its backward kernel (:mod:`.triton`), once: a
double backward (``create_graph=True``) of the Triton path raises, use ``impl="reference"`` for that.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ..dispatch import IMPLS, check_impl, check_int, check_same, check_tensor, resolve_impl  # noqa: F401 (IMPLS re-exported)
from .binning import bin_gaussians
from . import reference

TILE = 16
_OP = "gaussian_splat"


def _check_projected(means2d, conics, opacities, colors, height, width, block_g, extra):
    check_int("height", height, op=_OP, low=1)
    check_int("width", width, op=_OP, low=1)
    check_int("block_g", block_g, op=_OP, low=16, high=256)
    check_tensor("means2d", means2d, op=_OP, dim=2, layout="[N, 2]", dtypes=(torch.float32,))
    n = means2d.shape[0]
    for name, t, shape in (("conics", conics, (n, 3)), ("opacities", opacities, (n,)), ("colors", colors, (n, 3)),
                           *extra):
        check_tensor(name, t, op=_OP, dtypes=(torch.float32,))
        if tuple(t.shape) != shape:
            raise ValueError(f"{_OP}: {name} must have shape {shape} for N={n} Gaussians, got {tuple(t.shape)}")
    if means2d.shape[1] != 2:
        raise ValueError(f"{_OP}: means2d must be [N, 2], got {tuple(means2d.shape)}")
    check_same("means2d", means2d, {"conics": conics, "opacities": opacities, "colors": colors,
                                    **{name: t for name, t, _ in extra}}, op=_OP)
    if block_g & (block_g - 1):
        raise ValueError(f"{_OP}: block_g={block_g} must be a power of two")


class _Rasterize(torch.autograd.Function):
    """The Triton forward (reading ``block_g`` list entries at a time), which also keeps each pixel's T_final and
    used-entry count, and the backward kernel at its own default launch (:func:`.triton.rasterize_backward_triton`)."""

    @staticmethod
    def forward(ctx, means2d, conics, opacities, colors, offsets, ids, height, width, background, block_g):
        from .triton import rasterize_triton

        final_t = torch.empty(height, width, device=means2d.device, dtype=torch.float32)
        n_used = torch.empty(height, width, device=means2d.device, dtype=torch.int32)
        out = rasterize_triton(means2d, conics, opacities, colors, offsets, ids, height, width, TILE, background,
                               block_g=block_g, final_t=final_t, n_used=n_used)
        ctx.save_for_backward(means2d, conics, opacities, colors, offsets, ids, final_t, n_used)
        ctx.args = (height, width, background)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        from .triton import rasterize_backward_triton

        height, width, background = ctx.args
        means2d, conics, opacities, colors, offsets, ids, final_t, n_used = ctx.saved_tensors
        grads = rasterize_backward_triton(means2d, conics, opacities, colors, offsets, ids, final_t, n_used,
                                          grad_out, height, width, TILE, background)
        grads = [g if need else None for g, need in zip(grads, ctx.needs_input_grad)]
        return (*grads, None, None, None, None, None, None)  # offsets, ids, height, width, background, block_g


def rasterize(means2d: torch.Tensor, conics: torch.Tensor, opacities: torch.Tensor, colors: torch.Tensor,
              depths: torch.Tensor, height: int, width: int, *, background: float = 0.0, impl: str = "auto",
              block_g: int = 16) -> torch.Tensor:
    """``[H, W, 3]`` float32 render of N projected Gaussians (means ``[N, 2]`` in pixels, conics ``[N, 3]`` =
    (a, b, c) of Σ'⁻¹, opacities ``[N]``, colours ``[N, 3]``, depths ``[N]``): tile binning, then
    :func:`rasterize_binned`."""
    check_impl(impl, op=_OP)
    _check_projected(means2d, conics, opacities, colors, height, width, block_g, (("depths", depths, (means2d.shape[0],)),))
    offsets, ids = bin_gaussians(means2d.detach(), conics.detach(), opacities.detach(), depths.detach(), height, width,
                                 TILE, impl=impl)
    return rasterize_binned(means2d, conics, opacities, colors, offsets, ids, height, width, background=background,
                            impl=impl, block_g=block_g)


def rasterize_binned(means2d: torch.Tensor, conics: torch.Tensor, opacities: torch.Tensor, colors: torch.Tensor,
                     offsets: torch.Tensor, ids: torch.Tensor, height: int, width: int, *, background: float = 0.0,
                     impl: str = "auto", block_g: int = 16) -> torch.Tensor:
    """The same render from given 16 × 16 tile lists: tile k (row-major) composites
    ``ids[offsets[k]:offsets[k+1]]`` in that order (front to back). ``offsets`` int32 ``[n_tiles + 1]``,
    ``ids`` int32 ``[M]`` indices into the N Gaussians; :func:`.binning.bin_gaussians` makes them, and so
    does gsplat (``isect_offset_encode`` with the total count appended, ``flatten_ids``)."""
    check_impl(impl, op=_OP)
    _check_projected(means2d, conics, opacities, colors, height, width, block_g, ())
    n_tiles = math.ceil(height / TILE) * math.ceil(width / TILE)
    for name, t, n in (("offsets", offsets, n_tiles + 1), ("ids", ids, None)):
        check_tensor(name, t, op=_OP, dim=1, layout="1-D", dtypes=(torch.int32,))
        if n is not None and t.shape[0] != n:
            raise ValueError(f"{_OP}: offsets must have n_tiles + 1 = {n} entries for a {height} x {width} image, "
                             f"got {t.shape[0]}")
    check_same("means2d", means2d, {"offsets": offsets, "ids": ids}, op=_OP, dtype=False)
    impl = resolve_impl(impl, means2d.device, op=_OP)
    if impl == "reference":
        return reference.rasterize_tiles_torch(means2d, conics, opacities, colors, offsets, ids, height, width,
                                               TILE, background)
    args = (means2d.contiguous(), conics.contiguous(), opacities.contiguous(), colors.contiguous(),
            offsets.contiguous(), ids.contiguous(), height, width)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (means2d, conics, opacities, colors)):
        return _Rasterize.apply(*args, float(background), block_g)
    from .triton import rasterize_triton

    return rasterize_triton(*args, TILE, background, block_g=block_g)
