"""Paper 10: the orthogonal residual update.

Oh, Cho, Kim, Choi, Yu, *Revisiting Residual Connections: Orthogonal Updates for Stable and Efficient
Deep Networks*, NeurIPS 2025 (arXiv 2505.11881; official code
https://github.com/BootsofLagrangian/ortho-residual).

A residual block adds only the part of its update orthogonal to the stream,
``x_{n+1} = x_n + f - <x_n, f> / (||x_n||^2 + eps) x_n``.

* :mod:`~companion.ortho_residual.residual` -- the projection (Orthogonal-F / -G, eps, coefficient
  precision), the block pattern and update probability, the per-connection statistics;
* :mod:`~companion.ortho_residual.models` -- the tiny pre-LN ViT, a ResNetV2 block, the LLaMA-shaped
  decoder (SmolLM-135M preset), the timm ``Block`` wrapper;
* :mod:`~companion.ortho_residual.experiments` -- digits ViT and char-LM training with statistics
  snapshots, the precision table;
* :mod:`~companion.ortho_residual.study` -- the stages of the one-GPU study (a decoder to equal steps per seed,
  the bf16 stream, the digits ViT, step time);
* :mod:`~companion.ortho_residual.scale` -- its profiles, stage list and recorded results (no plotly);
* :mod:`~companion.ortho_residual.claims`, :mod:`~companion.ortho_residual.explorer`,
  :mod:`~companion.ortho_residual.figures` -- the notebook's rows, explorer and figures.
"""

from companion.core import Paper
from companion.ortho_residual.models import (
    SMOLLM_135M,
    LlamaConfig,
    LlamaDecoder,
    OrthoTimmBlock,
    PreActBlock,
    TinyViT,
    byte_config,
    connections,
    recording,
    set_coef_dtype,
    wrap_timm_block,
    wrap_timm_vit,
)
from companion.ortho_residual.residual import (
    COEF_DTYPES,
    EPS,
    MODES,
    OrthogonalResidual,
    block_methods,
    connection_stats,
    decompose,
    orthogonal_component,
    projection_coefficient,
    residual_update,
    stream_growth,
)

PAPER = Paper(
    number="10",
    slug="ortho_residual",
    title="Revisiting Residual Connections: Orthogonal Updates for Stable and Efficient Deep Networks",
    arxiv="2505.11881",
    code="https://github.com/BootsofLagrangian/ortho-residual",
)

__all__ = [
    "COEF_DTYPES",
    "EPS",
    "MODES",
    "PAPER",
    "SMOLLM_135M",
    "LlamaConfig",
    "LlamaDecoder",
    "OrthoTimmBlock",
    "OrthogonalResidual",
    "PreActBlock",
    "TinyViT",
    "block_methods",
    "byte_config",
    "connection_stats",
    "connections",
    "decompose",
    "orthogonal_component",
    "projection_coefficient",
    "recording",
    "residual_update",
    "set_coef_dtype",
    "stream_growth",
    "wrap_timm_block",
    "wrap_timm_vit",
]
