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
   epochs to the target (start + ``target_gain``, :data:`~companion.gain_rl.study.TARGET_GAIN`), the trained
   prompts' mean angle rank per epoch, and for GAIN μ after every update.

The learning rate (``recipe`` 2, :data:`~companion.gain_rl.study.GRPO_RECIPE`) scales with the width: AdamW's
first steps move every weight by about lr, so the same lr changes a wider layer's output more. The H200 run of
recipe 1 (lr 1e-4 at d 512) lost the warm start: held-out accuracy fell from 0.479 to 0.24-0.32 within the first
epochs for every sampler; uniform crawled back to 0.458 / 0.479 / 0.434 after 135-150 epochs, filtering ended at
0.486-0.519, GAIN at 0.282-0.318, so no run reached the target 0.579 and every comparison was void. On the CPU,
uniform GRPO (32 prompts per epoch) from a d-64 warm start rises at lr 1e-4 (0.484 → 0.69 in 40 epochs) and
collapses at 1e-3 (→ 0.15); from a d-192, 4-layer warm start it dips at 1e-4 (0.50 → 0.30, then recovers) and rises
steadily at 3.3e-5 (0.50 → 0.64 in 24 epochs). Hence lr = 1e-4 · 64 / d: 1.25e-5 at d 512 (the paper's 1e-6 is
for 0.5B-7B models).

The schedule is the paper's per subset (:func:`~companion.gain_rl.study.gpu_schedule`: σ = 1000, n = 500,
adj ∈ [0, 1000] per 256 prompts, here σ = 125, n = 62.5 for 32), and the pool is large against that step:
8192 prompts are 131 steps of n. μ's step is n·(tanh(2(acc − 0.5)) + tanh(2·ang)); recipe 1 moved μ about 20
ranks per epoch (training reward ≈ 0.33, angle signal ≈ 0.38; μ at 2650-3130 after 150 epochs). A policy that
learns raises the reward term: at training reward 0.8 and the same angle signal the step is about 74 ranks, so
``epochs`` is 100 (≤ 7400 ranks, inside the pool). An earlier run scaled σ and n to a 4096-prompt pool (n = N/16)
instead: μ reached the last rank at epochs 48-59 and GAIN then trained only on the least concentrated prompts.
The pool is drawn with replacement from the 8100 two-term sums, so it repeats some problems.

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
    "terms": 2, "pool": 8192, "eval": 1024, "subset": 32, "group": 8, "epochs": 100, "run_seconds": 12.0,
    "lr": 1.25e-5, "recipe": S.GRPO_RECIPE, "minibatches": 2, "n_seeds": 3,
    "sft_seconds": 40.0, "sft_batch": 256, "sft_lr": 1e-3,
    "target_gain": S.TARGET_GAIN, "timing": {"batch": 16, "T": 1024, "d": 896}, "seed": 0,
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
    Stage("grpo", S.grpo, needs_s=110),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
