"""The one-GPU (H200) study of paper 17 (GAIN-RL) and the reader of its committed results. No plotly import.

What it runs, stage by stage (bodies in :mod:`companion.gain_rl.study`):

1. ``angle_timing``: the angle metric at a Qwen2.5-0.5B-like size (hidden 896, 1024-token prompts, batch 16,
   bf16): the released code's explicit masked T×T cosine matrix (timed first) against the segment sums;
2. ``sft``: the warm start, the Qwen-shaped character policy at ~25M parameters (d 512, 6 layers, 8 heads,
   SwiGLU 4d) trained on sums of ``terms`` two-digit numbers until 45 % held-out greedy accuracy (the paper's
   regime: an instruct model solving 30-60 % of its RL prompts) or ``sft_seconds``. ``terms`` is 2: an H200 run
   with three-term sums ended its 30 s of SFT at 4.9 % held-out accuracy;
3. ``layer_correlation``: Spearman(C, ‖∇_W L‖_F of each layer's ``up_proj``) over the ``pool`` prompts;
4. ``grpo``: 3 seeds × {uniform, GAIN, filter} GRPO runs from the warm start (group 8, β = 0.005, ``subset``
   prompts per epoch), each for ``epochs`` epochs or ``run_seconds``: held-out accuracy per epoch, wall-clock,
   epochs to the target (start + ``target_gain``), the trained prompts' mean angle rank per epoch, and for GAIN
   μ after every update.

The schedule is the paper's per subset (:func:`~companion.gain_rl.study.gpu_schedule`: σ = 1000, n = 500,
adj ∈ [0, 1000] per 256 prompts, here σ = 125, n = 62.5 for 32), and the pool is large against that step:
8192 prompts are 131 steps of n, while at the paper's accuracy (≈ β) and the angle signal an earlier run
measured (0.4-0.7) μ moves about 0.5-0.8 n per epoch, so 150 epochs stay inside the ranking. An earlier run
scaled σ and n to a 4096-prompt pool (n = N/16) instead: μ reached the last rank at epochs 48-59 and GAIN then
trained only on the least concentrated prompts. The pool is drawn with replacement from the 8100 two-term sums,
so it repeats some problems.

Not reproduced: the paper's 0.5B-7B Qwen / Llama models, GSM8K / MATH / DeepScaleR and vLLM sampling (none
offline); batched sampling uses the model's own key/value cache. Run it with ``python -m companion.bench
gain_rl`` (``--smoke``: a tiny CPU run).
"""

from companion.core.stages import Stage, study_functions
from companion.gain_rl import study as S

__all__ = ["DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "recorded", "run_scale_up"]

RESULTS_NAME = "gain_rl_gpu"
DEADLINE_S = 250
GPU_PROFILE = {
    "model": "Qwen-shaped char policy, d 512, 6 layers, 8 heads, SwiGLU 4d (~25M parameters)",
    "d": 512, "layers": 6, "heads": 8, "mlp_ratio": 4,
    "terms": 2, "pool": 8192, "eval": 1024, "subset": 32, "group": 8, "epochs": 150, "run_seconds": 14.0,
    "lr": 1e-4, "minibatches": 2, "n_seeds": 3, "sft_seconds": 40.0, "sft_batch": 256, "sft_lr": 1e-3,
    "target_gain": 0.10, "timing": {"batch": 16, "T": 1024, "d": 896}, "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE, "model": "smoke: d 32, 1 layer", "d": 32, "layers": 1, "heads": 2, "mlp_ratio": 2,
    "pool": 32, "eval": 16, "subset": 4, "group": 4, "epochs": 2, "run_seconds": 0.5, "n_seeds": 1,
    "sft_seconds": 0.3, "sft_batch": 16, "timing": {"batch": 2, "T": 64, "d": 32},
}
STAGES = (
    Stage("angle_timing", S.angle_timing, needs_s=5),
    Stage("sft", S.warm_start, needs_s=45),
    Stage("layer_correlation", S.layer_correlation, needs_s=15),
    Stage("grpo", S.grpo, needs_s=135),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
