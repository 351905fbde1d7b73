"""Paper 16: A Unified Framework for Provably Efficient Algorithms to Estimate Shapley Values
(Chen, Seshadri, Villani et al., NeurIPS 2025, arXiv 2506.05216). Official code: none released (the
paper's checklist says the experiment code will not be shared); the nearest public code is
LeverageSHAP's, https://github.com/rtealwitter/leverageshap.

One sketching framework covers KernelSHAP, unbiased KernelSHAP and LeverageSHAP: Shapley values are
the solution of a constrained weighted least-squares problem (Thm 2.1); estimators sample its rows
(subsets S) from a distribution over subset sizes and either solve the sketched problem
(regression, "LS") or apply the sketched matrix to the right-hand side (matrix-vector, "MV").

Modules: :mod:`games` (the interventional game, exact values), :mod:`sampling` (distributions,
with/without replacement, paired), :mod:`estimators` (LS and MV, the named estimators, shap's
KernelExplainer on the same game), :mod:`experiment` (the error-vs-m study of the notebook and the
GPU scale study), :mod:`polynomial` (a game with closed-form Shapley values at any d), :mod:`study` (the
stage bodies of the two studies), and the role files :mod:`explorer` (the estimator explorer),
:mod:`figures` (plotly figures), :mod:`claims` (the claims table), :mod:`scale` (the GPU study and its
recorded results) and :mod:`scale_cpu` (the CPU study against shap). Only ``explorer`` and
``figures`` import plotly.
"""

from companion.core import Paper

from companion.kernelshap.estimators import ESTIMATORS, estimate, kernel_explainer
from companion.kernelshap.games import InterventionalGame, exact_shapley, tree_shapley
from companion.kernelshap.polynomial import PolynomialGame
from companion.kernelshap.sampling import DISTRIBUTIONS, sample_subsets, size_distribution

PAPER = Paper(
    number="16",
    slug="kernelshap",
    title="A Unified Framework for Provably Efficient Algorithms to Estimate Shapley Values",
    arxiv="2506.05216",
    code=None,
)

__all__ = [
    "DISTRIBUTIONS",
    "ESTIMATORS",
    "InterventionalGame",
    "PAPER",
    "PolynomialGame",
    "estimate",
    "exact_shapley",
    "kernel_explainer",
    "sample_subsets",
    "size_distribution",
    "tree_shapley",
]
