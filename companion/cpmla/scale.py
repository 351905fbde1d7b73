"""The one-GPU (H200) study of paper 14 (CPMLA) and the reader of its committed results. No plotly import.

No image data set can be downloaded, so scikit-learn's bundled 8×8 digits are upsampled to 16×16 (d = 256) and
scaled to [-1, 1]. Stages (bodies in :mod:`companion.cpmla.study`):

1. ``seed_0``, ``seed_1``, ``seed_2``: one seed each (model initialisation, data order, sampling noise): CPMLA (an
   EBM, a 4-layer Swish MLP with the energy regulariser λ·E[f²], and one CP-Flow block, trained cooperatively with
   the diagonal Hessian and the L-BFGS inverse) and CP-Flow alone, ``epochs`` epochs; f_θ on data and on samples
   per epoch; the energy distance and KID of CPMLA, Langevin (EBM + ULA) and CP-Flow alone drawn from the same
   starting points (:mod:`companion.cpmla.study` says what that means per sampler), against one half of the data,
   with the noise floor (the other half); the inverse's final residuals. A seed per stage, so a deadline cut keeps
   the seeds that finished and ``--resume`` runs the rest;
2. ``sampling_time``: seconds per 1k samples against T ∈ {10, 20, 30};
3. ``lbfgs_ablation``: the L-BFGS iteration cap of ∇G*;
4. ``hessian_ablation``: the full, exact diagonal and Hutchinson diagonal Hessian, on ``n_ablation`` = 200 chains
   (the full Hessian's eigendecomposition took 27 s per 1k samples in the run of 2026-12-01, too much for 1k here).

The recipe (``recipe`` 2, :data:`RECIPE`) runs every chain -- in training and in the comparison -- at temperature
τ = 0.01 (noise √(2ητ) instead of the paper's √(2η); the drift η∇f is the paper's). Recipe 1 (τ = 1, the run of
2026-12-04: 3 seeds, 15 epochs, λ = 1e-2, lr_ebm 5e-4) could not test the paper: energy distance to the data CPMLA
5.71, Langevin 5.57, CP-Flow alone 5.10, the common start x₀ 5.20 (noise floor 0.019), so both chains made their
start worse. Its EBM was a saturated discriminator by epoch 4 (mean f +50 on data, −50 on samples: the regulariser's
ceiling ±1/(2λ)), and a noise of 0.14 per coordinate and step over T = 10 steps outweighs a drift capped that low.
The short-run EBM samplers (Nijkamp et al. 2019, CoopFlow) keep the drift and shrink the noise, so that the EBM learns
a drift that moves its samples toward the data. The CPU pilot (d = 64, one seed, hidden 64/128, 500 samples): at
τ = 1 after 5 epochs start 4.30, Langevin 4.47, CPMLA 4.60 (worse, as on the GPU); at τ = 0.01 start 4.29, Langevin
4.26, CPMLA 4.23 after 5 epochs and start 2.77, Langevin 2.56, CPMLA 2.46 after 10 (floor 0.017), so both chains now
improve on their start. A payload of recipe 1 (:func:`recipe_stale`) does not measure this sampler.

Stages 2-4 sample the first seed's models, so they run in the same call as a seed stage. The inverse runs in float64
at tolerance 1e-3 with at most 50 L-BFGS iterations: in the run of 2026-12-01 (float32, cap 20) it stopped at
residuals 0.16-0.29; on the CPU (d = 64) torch's L-BFGS at cap 20 stops at its evaluation budget (1.25 × the cap)
with a third of the samples above 1e-3, and converges within about 30 evaluations, while a float32 Newton solve
stalls near 1.5e-3 (the rounding floor of ‖∇G(x) − y‖ with ‖y‖ ≈ √d). Not reproduced: CIFAR-10 and FID, and the
multi-scale flow with invertible down-sampling -- the mirror map is one CP-Flow block over the flattened image,
since a composition of convex-potential gradients is not itself the gradient of a convex potential and the mirror
Langevin scheme would lose its meaning. Run it with ``python -m companion.bench cpmla`` (``--smoke``: a tiny CPU
run).
"""

from __future__ import annotations

from functools import partial

from companion.core.stages import Stage, study_functions
from companion.cpmla import study as E

RESULTS_NAME = "cpmla_gpu"
DEADLINE_S = 220
RECIPE = 2  # 1: chains at temperature 1 (the paper's noise); 2: temperature 0.01 (module docstring)
N_SEEDS = 3

GPU_PROFILE = {
    "size": 16,                 # digits upsampled to size × size (d = size²)
    "epochs": 15,               # passes over the 1,797 digits (7 updates each at batch 256)
    "batch": 256,
    "T": 10,                    # mirror steps per update (paper: 10)
    "eta": 1e-2,                # step size (paper: 1e-2)
    "temperature": 1e-2,        # noise √(2ητ); the paper's τ = 1 made every chain worse than its start (docstring)
    "recipe": RECIPE,
    "hessian": "diagonal",      # the paper's practice
    "inverse": "lbfgs",
    "inverse_tol": 1e-3,        # on ‖∇G(x) − y‖, ‖y‖ ≈ √d = 16
    "inverse_max_iter": 50,     # the run of 2026-12-01 capped it at 20 and never converged
    "dtype": "float64",         # float32 leaves ‖∇G(x) − y‖ near its rounding floor, about the tolerance
    "flow_hidden": 256,
    "ebm_hidden": 512,
    "lr_flow": 5e-3,            # paper: 5e-3 (toy), 5e-4 (images, 200 epochs); 5e-4 leaves the flow unfitted in 105 updates
    "lr_ebm": 5e-4,
    "energy_reg": 1e-2,         # λ·E[f²] on the CD loss; the run recorded on 2026-12-01 had none (0) and its EBM diverged
    "n_eval": 1000,             # samples per sampler (at most half the data: 898)
    "T_grid": [10, 20, 30],
    "lbfgs_caps": [5, 10, 20, 50],
    "hessians": ["diagonal", "hutchinson", "full"],
    "n_ablation": 200,
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "size": 8, "epochs": 1, "batch": 64, "flow_hidden": 16, "ebm_hidden": 32, "n_eval": 32,
                 "T_grid": [2, 4], "lbfgs_caps": [2, 5], "T": 2, "n_ablation": 8}
STAGES = (
    *(Stage(f"seed_{i}", partial(E.seed_run, index=i), needs_s=50) for i in range(N_SEEDS)),  # ≈ 25-40 s training + 3 s sampling each
    Stage("sampling_time", E.sampling_time, needs_s=6),
    Stage("lbfgs_ablation", E.lbfgs_ablation, needs_s=6),
    Stage("hessian_ablation", E.hessian_ablation, needs_s=20),  # the full Hessian on 200 chains: ≈ 6-12 s
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def recipe_stale(gpu: dict) -> bool:
    """True when a payload was sampled with an older recipe than this code's (its profile names none, or an older
    ``recipe``): its sample-quality numbers do not measure this sampler until the study is rerun."""
    return gpu.get("profile", {}).get("recipe", 1) < RECIPE
