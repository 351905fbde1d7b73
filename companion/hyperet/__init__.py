"""HyperET (paper 02): hyperbolic radius adjustment of a frozen encoder's weights.

Paper: *HyperET: Efficient Training in Hyperbolic Space for Multi-modal Large Language Models* (Peng,
Xu, Liu, Yang, Shen; NeurIPS 2025), arXiv 2510.20322; official code https://github.com/godlin-sjtu/HyperET.

Modules: :mod:`.poincare` (Poincaré-ball operations, the official numerical guards), :mod:`.hra` (the HRA
module and its Euclidean twin), :mod:`.vit` (the q/v adapters on the shared tiny CLIP-style ViT),
:mod:`.data` (multi-granularity toy data, MiniLM prompt embeddings), :mod:`.align` (pre-training, the
alignment stage and its variants). :mod:`.explorer` holds the explorers and :mod:`.figures` the static
figures (imported separately: they need plotly, which the GPU machine lacks); :mod:`.claims` builds the
claims table; :mod:`.scale` holds the GPU study's profiles and recorded results, :mod:`.study` its stages
(kernel timing, a larger alignment run).
"""

from companion.core import Paper
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

PAPER = Paper(
    number="02",
    slug="hyperet",
    title="HyperET: Efficient Training in Hyperbolic Space for Multi-modal Large Language Models",
    arxiv="2510.20322",
    code="https://github.com/godlin-sjtu/HyperET",
)

__all__ = [
    "GEOMETRIES",
    "PAPER",
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
