"""GMV: A Unified and Efficient Graph Multi-View Learning Framework (paper 07).

Zhu, Chen, Pu, Zhang, *GMV: A Unified and Efficient Graph Multi-View Learning Framework*, NeurIPS 2025
(OpenReview LfncIaLHnI; no arXiv id; official code https://github.com/smurf-1119/GMV, not inspectable when
this was written).

GMV trains one GNN with M prediction heads (sub-networks) on *mixed views*: ST-PPR (Alg. 1) samples a
structure-preserving subgraph of a source and of a target graph; ST-SubMix (Alg. 2) replaces the target's
subgraph by the source's through a PPR-ordered map φ, weighting the two labels by edge shares (Eq. 2); the
mixed graph's node embeddings H are decomposed by the assignment matrices into views ``E_kᵀ H``, and
``ℓ = ℓ_mix + α ℓ_view + R(θ)`` trains head k on view k. Inference is one plain forward pass averaging the
heads.

* :mod:`~companion.graph_multiview.sampling` — ST-PPR (PPR matrix, the two readings of the size formula);
* :mod:`~companion.graph_multiview.submix` — ST-SubMix (φ, replacement, Eq. 2 weights, E_src / E_trg);
* :mod:`~companion.graph_multiview.models` — shared GCN / GIN / GraphGPS encoder, M-head MLP, view pooling,
  the loss, one-pass inference, the G-MIMO shapes;
* :mod:`~companion.graph_multiview.training` — one trainer for GMV, the baselines and the ablations, cached
  views, D_disagree and symmetric KL;
* :mod:`~companion.graph_multiview.data` — planted-motif graphs (local ``InMemoryDataset``) and the DGCNN-format
  TU loader;
* :mod:`~companion.graph_multiview.experiments` — the stages of the one-GPU study;
* :mod:`~companion.graph_multiview.explorer`, :mod:`~companion.graph_multiview.claims`,
  :mod:`~companion.graph_multiview.figures`, :mod:`~companion.graph_multiview.scale` — the notebook's explorer,
  rows, figures, and the study's profiles and recorded results.
"""

from companion.core import Paper

PAPER = Paper(
    number="07",
    slug="graph_multiview",
    title="GMV: A Unified and Efficient Graph Multi-View Learning Framework",
    arxiv=None,
    code="https://github.com/smurf-1119/GMV",
    venue="NeurIPS 2025",
)

from companion.graph_multiview.data import MOTIFS, MotifDataset, TUFormatError, dataset_stats, load_dgcnn_txt  # noqa: E402
from companion.graph_multiview.models import MultiHeadGNN, gmv_loss, multi_head_ce  # noqa: E402
from companion.graph_multiview.sampling import BETA, READINGS, ppr_matrix, ppr_size, st_ppr  # noqa: E402
from companion.graph_multiview.submix import MixedGraph, st_submix  # noqa: E402
from companion.graph_multiview.training import (  # noqa: E402
    METHODS,
    RunResult,
    TrainConfig,
    build_views,
    compare,
    head_diversity,
    kfold,
    train_method,
)

__all__ = [
    "BETA", "METHODS", "MOTIFS", "PAPER", "READINGS", "MixedGraph", "MotifDataset", "MultiHeadGNN", "RunResult",
    "TUFormatError", "TrainConfig", "build_views", "compare", "dataset_stats", "gmv_loss", "head_diversity", "kfold",
    "load_dgcnn_txt", "multi_head_ce", "ppr_matrix", "ppr_size", "st_ppr", "st_submix", "train_method",
]
