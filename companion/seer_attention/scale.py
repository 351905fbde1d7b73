"""The one-GPU (H200) study of paper 01 (SeerAttention) and the reader of its committed results. No plotly import.

What it runs, stage by stage (bodies in :mod:`companion.seer_attention.study`):

1. ``distil``: gates (block 64, d_g = 64) distilled with and without block RoPE from the planted tiny RoPE decoder
   (2 layers, 8 heads of 64, RoPE θ = 1e6, byte vocabulary; ``synthetic.py``: no long-context pretrained model is
   available offline) on 8 windows of 8k bytes of stdlib text, 300 steps; held-out KL and recall at matched sparsity
   at 8k and at 32k (4x the training length, the paper's Fig. 4 setting);
2. ``mask_densities``: the decoder on one window at 8k / 32k / 128k; layer 0's gate scores turned into block masks
   (threshold 5e-4 (RULER) and 2e-3 (LongBench) with the last two rows dense and the diagonal forced; top-k at
   50% and 90% sparsity) and their densities;
3. ``timings``: the paper's efficiency geometry (B = 1, H = 32, D = 128, bf16, causal, block 64; the 8 gate heads
   tiled 4x, random Q/K/V): dense SDPA flash and cuDNN first, then per mask compiled FlexAttention with the same
   block mask and the block-sparse Triton kernel.

Not reproduced: Llama-3.1-8B and the RULER / LongBench accuracies (no such model offline). Run it with
``python -m companion.bench seer_attention`` (``--smoke``: a tiny CPU run, the kernels in the Triton interpreter).
"""

from companion.core.stages import Stage, study_functions
from companion.seer_attention import study as S

RESULTS_NAME = "seer_attention_gpu"
DEADLINE_S = 120
GPU_PROFILE = {
    "seq_len": 8192, "long_factor": 4, "n_train": 8, "n_test": 2, "steps": 300, "lr": 3e-3,
    "block_size": 64, "gate_dim": 64, "num_heads": 8, "head_dim": 64, "num_layers": 2, "sparsities": [0.5, 0.7, 0.9],
    "lengths": [8192, 32768, 131072], "mask_layer": 0, "thresholds": [5e-4, 2e-3], "topk_sparsities": [0.5, 0.9],
    "heads": 32, "timing_head_dim": 128, "dense": ["flash", "cudnn"], "flex": True, "check_max_len": 8192,
    "dtype": "bfloat16", "impl": "triton", "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "seq_len": 256, "long_factor": 2, "n_train": 2, "n_test": 1, "steps": 3, "num_heads": 2,
                 "head_dim": 32, "num_layers": 1, "sparsities": [0.5, 0.9], "lengths": [256], "thresholds": [2e-3],
                 "topk_sparsities": [0.9], "heads": 4, "timing_head_dim": 32, "dense": ["flash"], "flex": False, "dtype": "float32"}
STAGES = (
    Stage("distil", S.distil, needs_s=30),                  # 18 s on an H200 (2026-12-04)
    Stage("mask_densities", S.mask_densities, needs_s=5),   # 0.3 s
    Stage("timings", S.timings, needs_s=50),                # 26 s, FlexAttention's compiles included
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
