"""Tile-based rasterisation of depth-sorted 2-D Gaussians, forward and backward (3DGS compositing; paper 05, 4DGCPro).

``rasterize(means2d, conics, opacities, colors, depths, height, width)`` renders ``[H, W, 3]``:
c = Σ_i c_i α'_i Π_{j<i} (1 − α'_j) over the Gaussians in depth order, α' = min(0.999, o·exp(−½ dᵀ Σ'⁻¹ d)),
α' < 1/255 dropped, a pixel stopping before its transmittance would fall to ≤ 1e-4 (gsplat's conventions).
Gaussians are binned into 16 × 16 pixel tiles (:mod:`.binning`; ``rasterize_binned`` takes tile lists made
elsewhere, e.g. by gsplat) and each tile is one Triton program (:mod:`.triton`); :mod:`.reference` holds
the dense PyTorch oracle and a padded per-tile PyTorch version for large scenes. Both paths are differentiable
in the means, conics, opacities and colours: the reference by autograd, the Triton path by a backward kernel
that walks each tile's list back to front (gsplat's ``rasterize_to_pixels`` backward). The steps before, the
EWA projection of 3-D Gaussians and the binning, run in Triton too (:mod:`.project`, :mod:`.triton_binning`):
``project_and_bin`` then ``rasterize_binned`` is the whole forward path on the GPU.
"""

from .api import IMPLS, TILE, rasterize, rasterize_binned
from .binning import bin_gaussians, bin_torch
from .project import BLUR, NEAR_PLANE, project_and_bin, project_gaussians, project_torch
from .reference import rasterize_dense, rasterize_tiles_torch

__all__ = ["BLUR", "IMPLS", "NEAR_PLANE", "TILE", "bin_gaussians", "bin_torch", "project_and_bin", "project_gaussians",
           "project_torch", "rasterize", "rasterize_binned", "rasterize_dense", "rasterize_tiles_torch"]
