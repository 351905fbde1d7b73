"""The one-GPU (H200) study of paper 14 (CPMLA) and the reader of its committed results. No plotly import.

No image data set can be downloaded, so scikit-learn's bundled 8×8 digits are upsampled to 16×16 (d = 256) and
scaled to [-1, 1]. Stages (bodies in :mod:`companion.cpmla.study`):

1. ``train``: CPMLA (an EBM, a 4-layer Swish MLP, and one CP-Flow block, trained cooperatively with the diagonal
   Hessian and the L-BFGS inverse) and CP-Flow alone, 40 epochs; seconds, parameter counts, inverse residual;
2. ``quality``: KID and MMD on a fixed random-feature extractor (no Inception weights) for CPMLA, CP-Flow alone
   and EBM + ULA, beside two halves of the data;
3. ``sampling_time``: seconds per 1k samples against T ∈ {10, 20, 30};
4. ``hessian_ablation``: the full, exact diagonal and Hutchinson diagonal Hessian;
5. ``lbfgs_ablation``: the L-BFGS iteration cap of ∇G* ∈ {2, 5, 10, 20, 50}.

Stages 2-5 sample the models of ``train``, so they run in the same call. Not reproduced: CIFAR-10 and FID, and the
multi-scale flow with invertible down-sampling -- the mirror map is one CP-Flow block over the flattened image,
since a composition of convex-potential gradients is not itself the gradient of a convex potential and the mirror
Langevin scheme would lose its meaning. Run it with ``python -m companion.bench cpmla`` (``--smoke``: a tiny CPU
run).
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.cpmla import study as E

RESULTS_NAME = "cpmla_gpu"
DEADLINE_S = 180

GPU_PROFILE = {
    "size": 16,                 # digits upsampled to size × size (d = size²)
    "epochs": 40,               # passes over the 1,797 digits (7 updates each at batch 256)
    "batch": 256,
    "T": 10,                    # mirror steps per update (paper: 10)
    "eta": 1e-2,                # step size (paper: 1e-2)
    "hessian": "diagonal",      # the paper's practice
    "inverse": "lbfgs",
    "inverse_tol": 1e-3,
    "inverse_max_iter": 20,
    "flow_hidden": 256,
    "ebm_hidden": 512,
    "lr_flow": 5e-4,            # paper (images): 5e-4
    "lr_ebm": 5e-4,
    "energy_reg": 1e-2,         # λ·E[f²] on the CD loss; the run recorded on 2026-12-01 had none (0) and its EBM diverged
    "n_eval": 1000,
    "T_grid": [10, 20, 30],
    "lbfgs_caps": [2, 5, 10, 20, 50],
    "hessians": ["full", "diagonal", "hutchinson"],
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "size": 8, "epochs": 1, "batch": 64, "flow_hidden": 16, "ebm_hidden": 32, "n_eval": 64,
                 "T_grid": [2, 4], "lbfgs_caps": [2, 5], "T": 2}
STAGES = (
    Stage("train", E.train, needs_s=80),                   # 72 s + 3 s on the H200
    Stage("quality", E.quality, needs_s=5),
    Stage("sampling_time", E.sampling_time, needs_s=5),
    Stage("hessian_ablation", E.hessian_ablation, needs_s=35),  # the full Hessian: 27 s per 1k samples
    Stage("lbfgs_ablation", E.lbfgs_ablation, needs_s=5),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
