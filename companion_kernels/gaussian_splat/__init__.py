"""Tile-based forward rasterisation of depth-sorted 2-D Gaussians (3DGS compositing; paper 05, 4DGCPro).

``rasterize(means2d, conics, opacities, colors, depths, height, width)`` renders ``[H, W, 3]``:
c = Σ_i c_i α'_i Π_{j<i} (1 − α'_j) over the Gaussians in depth order, α' = min(0.999, o·exp(−½ dᵀ Σ'⁻¹ d)),
α' < 1/255 dropped, a pixel stopping before its transmittance would fall to ≤ 1e-4 (gsplat's conventions).
Gaussians are binned into 16 × 16 pixel tiles (:mod:`.binning`; ``rasterize_binned`` takes tile lists made
elsewhere, e.g. by gsplat) and each tile is one Triton program (:mod:`.triton`); :mod:`.reference` holds
the dense PyTorch oracle and a padded per-tile PyTorch version for large scenes.
"""

from .api import IMPLS, TILE, rasterize, rasterize_binned
from .binning import bin_gaussians
from .reference import rasterize_dense, rasterize_tiles_torch

__all__ = ["IMPLS", "TILE", "bin_gaussians", "rasterize", "rasterize_binned", "rasterize_dense", "rasterize_tiles_torch"]
