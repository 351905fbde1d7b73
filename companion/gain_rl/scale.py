"""The one-GPU (H200) study of paper 17 (GAIN-RL) and the reader of its committed results. No plotly import.

What it runs, stage by stage (bodies in :mod:`companion.gain_rl.study`):

1. ``angle_timing``: the angle metric at a Qwen2.5-0.5B-like size (hidden 896, 1024-token prompts, batch 16,
   bf16): the released code's explicit masked T×T cosine matrix (timed first) against the segment sums;
2. ``sft``: the warm start, the Qwen-shaped character policy at ~25M parameters (d 512, 6 layers, 8 heads,
   SwiGLU 4d) trained on sums of ``terms`` two-digit numbers until 30 % held-out greedy accuracy or
   ``sft_seconds``. ``terms`` is 2: an H200 run with three-term sums ended its 30 s of SFT at 4.9 % held-out
   accuracy, and GRPO with a binary reward then had almost no group with a correct completion (no signal to
   any sampler), so the warm start uses the task the policy can learn within the budget;
3. ``layer_correlation``: Spearman(C, ‖∇_W L‖_F of each layer's ``up_proj``) over the 4096-prompt pool;
4. ``grpo``: 3 seeds × {uniform, GAIN, filter} GRPO runs from the warm start (group 8, β = 0.005, 128 prompts
   per epoch), each for 150 epochs or 10 s: held-out accuracy per epoch, wall-clock, epochs to the target
   (start + ``target_gain``), and for GAIN μ after every update and the epoch it reached the last rank (with
   ``adj_min = 0`` μ never moves back, so from then on GAIN draws only around the least concentrated prompts).

Not reproduced: the paper's 0.5B-7B Qwen / Llama models, GSM8K / MATH / DeepScaleR and vLLM sampling (none
offline); batched sampling uses the model's own key/value cache. Run it with ``python -m companion.bench
gain_rl`` (``--smoke``: a tiny CPU run).
"""

from companion.core.stages import Stage, study_functions
from companion.gain_rl import study as S

__all__ = ["DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "recorded", "run_scale_up"]

RESULTS_NAME = "gain_rl_gpu"
DEADLINE_S = 180
GPU_PROFILE = {
    "model": "Qwen-shaped char policy, d 512, 6 layers, 8 heads, SwiGLU 4d (~25M parameters)",
    "d": 512, "layers": 6, "heads": 8, "mlp_ratio": 4,
    "terms": 2, "pool": 4096, "eval": 1024, "subset": 128, "group": 8, "epochs": 150, "run_seconds": 10.0,
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
    Stage("sft", S.warm_start, needs_s=50),
    Stage("layer_correlation", S.layer_correlation, needs_s=10),
    Stage("grpo", S.grpo, needs_s=90),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
