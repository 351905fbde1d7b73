"""HollowFlow: Efficient Sample Likelihood Evaluation using Hollow Message Passing (paper 13).

Paper: Gloy and Olsson, *HollowFlow: Efficient Sample Likelihood Evaluation using Hollow Message Passing*,
NeurIPS 2025, arXiv 2510.21542; official code https://github.com/olsson-group/hollowflow.

A continuous normalizing flow needs log q(x₁) = log p₀(x₀) − ∫₀¹ ∇·b(x(t), t) dt, and the exact divergence
of a dense network costs N = n·d backward passes per ODE step. HollowFlow builds b from a
non-backtracking GNN (NoBGNN) on the line graph of a kNN graph, pruned with a backtracking array so that
no line-node state h_ij ever depends on x_j. Then J_b = J_c + J_τ with J_c block-hollow and J_τ block
diagonal (Theorem 1), and ∇·b = Σ_{c=1}^{d} v_cᵀ J_τ v_c (v_c = e_c ⊗ 1_n) costs d backward passes.

* :mod:`~companion.hollowflow.graph` -- symmetrised kNN graph G, non-backtracking line graph L(G), the
  backtracking array B and the pruned line-edge lists per step (§3 steps 1, 2, 5);
* :mod:`~companion.hollowflow.nobgnn` -- the NoBGNN velocity (EGNN-style φ, ψ, optional attention; §3
  steps 3, 4, 6) and the fully connected EGNN baseline;
* :mod:`~companion.hollowflow.divergence` -- brute-force (n·d VJPs), hollow (d VJPs, Theorem 1) and
  Hutchinson divergences; fixed-step RK4 likelihoods;
* :mod:`~companion.hollowflow.hollownet` -- HollowNet (Chen & Duvenaud 2019) on an MLP, the idea in 2-D;
* :mod:`~companion.hollowflow.lj` -- LJ13/LJ55/DW4 energies, MALA samples, flow matching with OT pairing,
  Kish ESS, ESS_rem, EffSU and bootstrap intervals;
* :mod:`~companion.hollowflow.experiments` -- the notebook's runs (cost scaling, toy flow, checks);
* :mod:`~companion.hollowflow.explorer`, :mod:`~companion.hollowflow.figures`,
  :mod:`~companion.hollowflow.claims`, :mod:`~companion.hollowflow.scale` -- explorer, figures, claim rows,
  the GPU study's profiles and stages, and its recorded results;
* :mod:`~companion.hollowflow.study` -- the GPU study's stage bodies (likelihood-step timing with a memory model
  and an out-of-memory guard, the segment-sum kernel against ``index_add_``, the LJ13 / LJ55 toys).
"""

from companion.core import Paper

PAPER = Paper(
    number='13',
    slug='hollowflow',
    title='HollowFlow: Efficient Sample Likelihood Evaluation using Hollow Message Passing',
    arxiv='2510.21542',
    code='https://github.com/olsson-group/hollowflow',
    venue='NeurIPS 2025',
)

from companion.hollowflow.divergence import (  # noqa: E402
    divergence_bruteforce,
    divergence_hollow,
    divergence_hutchinson,
    jacobian,
    rk4_likelihood,
)
from companion.hollowflow.graph import HollowGraph, build_graph, knn_adjacency, line_graph  # noqa: E402
from companion.hollowflow.nobgnn import EGNN, NoBGNN  # noqa: E402

__all__ = ["EGNN", "PAPER", "HollowGraph", "NoBGNN", "build_graph", "divergence_bruteforce", "divergence_hollow",
           "divergence_hutchinson", "jacobian", "knn_adjacency", "line_graph", "rk4_likelihood"]
