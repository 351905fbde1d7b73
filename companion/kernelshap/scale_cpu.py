"""The CPU study of paper 16: our LeverageSHAP against shap's KernelExplainer, same game, same run. No plotly import.

The notebook's protocol on scikit-learn's bundled data: ``DecisionTreeRegressor(max_depth=10)`` on an ordered
80/20 split, baseline = first training row, query = first test row, exact values from the interventional
TreeExplainer. Both estimators see exactly the same function: shap gets the game as a mask function
(``KernelExplainer(f, zeros).shap_values(ones, nsamples=m, l1_reg=False)``), ours calls the same game object;
both evaluate m coalitions in one predict call. Stage by stage (bodies in :mod:`companion.kernelshap.study`):
``rows`` measures, at each budget m and seed, shap first, then ours with and without replacement: the normalised
MSE ‖φ̂ − φ*‖²/‖φ*‖² and the wall time of one whole estimate (sampling, model evaluation, solve; for shap also
building the explainer), on one BLAS thread as the notebooks run; ``comparison`` gives shap's median time over
ours and the error ratio. The project's target (not a paper claim): ≥ 5× faster at equal m on breast
cancer and digits with equal or lower median error. Run it with ``python -m companion.bench kernelshap_cpu``
(``--smoke``: a tiny run). On a GPU, :mod:`companion.kernelshap.scale`.
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.kernelshap import study as E

__all__ = ["DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "recorded", "run_scale_up"]

RESULTS_NAME = "kernelshap_cpu"
DEADLINE_S = 240

GPU_PROFILE = {  # the full CPU run (the name every study module shares)
    "plan": {"breast_cancer": [256, 1024, 4096], "digits": [1024, 4096, 16384]},
    "ours": E.LEVERAGE,
    "seeds": 20,
    "threads": 1,  # BLAS and torch threads of every estimate
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "plan": {"breast_cancer": [64], "digits": [128]}, "seeds": 2}
STAGES = (
    Stage("rows", E.shap_rows_stage, needs_s=120),
    Stage("comparison", E.comparison_stage, needs_s=0),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
