"""HyperET (Peng et al., NeurIPS 2025): hyperbolic radius adjustment of a frozen encoder's weights.

Modules: :mod:`.poincare` (Poincaré-ball operations, the official numerical guards), :mod:`.hra` (the HRA
module and its Euclidean twin), :mod:`.vit` (a tiny CLIP-style ViT whose q/v projections take adapters),
:mod:`.data` (multi-granularity toy data, MiniLM prompt embeddings), :mod:`.align` (pre-training, the
alignment stage and its variants). :mod:`.explorer` holds the plotly figures (imported separately: it
needs plotly, which the GPU machine lacks).
"""

from companion.hyperet.hra import GEOMETRIES, HRA, STRUCTURES, hra_weight, structured_param_count
from companion.hyperet.poincare import (
    check_curvature,
    check_in_ball,
    dist,
    dist0,
    expmap0,
    logmap0,
    mobius_add,
    mobius_matvec,
    mobius_scalar_mul,
    project,
    radius,
)

__all__ = [
    "GEOMETRIES",
    "HRA",
    "STRUCTURES",
    "check_curvature",
    "check_in_ball",
    "dist",
    "dist0",
    "expmap0",
    "hra_weight",
    "logmap0",
    "mobius_add",
    "mobius_matvec",
    "mobius_scalar_mul",
    "project",
    "radius",
    "structured_param_count",
]
