"""The one-GPU (H200) study of paper 16 (unified Shapley estimators) and the reader of its committed results.
No plotly import.

At d = 784 and 3072 enumeration and TreeExplainer are out of reach, so the study uses the sparse cubic
:class:`~companion.kernelshap.polynomial.PolynomialGame` (2d random monomials of order 3 plus a linear part;
closed-form Shapley values). Stage by stage (bodies in :mod:`companion.kernelshap.study`): ``studies`` runs every
named estimator of the paper's framework (LS: KernelSHAP, LeverageSHAP, modified ℓ2; MV: unbiased KernelSHAP, MV
leverage), paired sampling with replacement, m ∈ {500, 5000, 50000, 100000}, at d = 784 (10 seeds) and 3072 (5
seeds): coalitions drawn, evaluated and solved on the device (the weighted Gram in float64), normalised MSE,
Spearman rank correlation and wall time split into sampling / evaluation / solve; ``cpu_peer`` times the same
LeverageSHAP estimate with NumPy on the machine's CPU at d = 784, m = 50000. Timing is wall clock with CUDA
synchronisation (medians over seeds), not ``do_bench``: one estimate includes host-side sampling of subset sizes
and a fresh random draw, which is the thing measured. shap's KernelExplainer is CPU only:
:mod:`companion.kernelshap.scale_cpu` compares with it. Run it with ``python -m companion.bench kernelshap``
(``--smoke``: a tiny CPU run). The notebook's own GPU profile runs more seeds (:data:`NOTEBOOK_GPU`).
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.kernelshap import study as E

__all__ = ["DEADLINE_S", "GPU_PROFILE", "NOTEBOOK_GPU", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "recorded", "run_scale_up"]

RESULTS_NAME = "kernelshap_gpu"
DEADLINE_S = 150

GPU_PROFILE = {
    "game": {"order": 3, "terms_per_feature": 2},  # the polynomial game; its seed is the study's
    "plan": [[784, 10], [3072, 5]],  # (d, seeds)
    "budgets": [500, 5000, 50_000, 100_000],
    "cpu_peer": {"d": 784, "m": 50_000},
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "plan": [[24, 3], [40, 2]], "budgets": [100, 400], "cpu_peer": {"d": 24, "m": 2000}}
STAGES = (
    Stage("studies", E.studies_stage, needs_s=60),
    Stage("cpu_peer", E.cpu_peer_stage, needs_s=10),
)

#: The notebook's GPU profile: its error curves over at least this many seeds.
NOTEBOOK_GPU = {"min_seeds": 30}


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
