"""Paper 16: A Unified Framework for Provably Efficient Algorithms to Estimate Shapley Values
(Chen, Seshadri, Villani et al., NeurIPS 2025, arXiv 2506.05216).

One sketching framework covers KernelSHAP, unbiased KernelSHAP and LeverageSHAP: Shapley values are
the solution of a constrained weighted least-squares problem (Thm 2.1); estimators sample its rows
(subsets S) from a distribution over subset sizes and either solve the sketched problem
(regression, "LS") or apply the sketched matrix to the right-hand side (matrix-vector, "MV").

Modules: :mod:`games` (the interventional game, exact values), :mod:`sampling` (distributions,
with/without replacement, paired), :mod:`estimators` (LS and MV, the named estimators, shap's
KernelExplainer on the same game), :mod:`experiment` (the error-vs-m study of the notebook and the
GPU scale study), :mod:`polynomial` (a game with closed-form Shapley values at any d) and
:mod:`figures` (plotly figures and the explorer's update function; the only module needing plotly).
"""

from companion.kernelshap.estimators import ESTIMATORS, estimate, kernel_explainer
from companion.kernelshap.games import InterventionalGame, exact_shapley, tree_shapley
from companion.kernelshap.polynomial import PolynomialGame
from companion.kernelshap.sampling import DISTRIBUTIONS, sample_subsets, size_distribution

__all__ = [
    "DISTRIBUTIONS",
    "ESTIMATORS",
    "InterventionalGame",
    "PolynomialGame",
    "estimate",
    "exact_shapley",
    "kernel_explainer",
    "sample_subsets",
    "size_distribution",
    "tree_shapley",
]
