"""The one-GPU (H200) study of paper 09 (Δ Attention), the million-token prefill ladder, and the reader of its
committed results. No plotly import.

One attention layer in Llama-3.1-8B's geometry (B = 1, 32 query heads, 8 KV heads, D = 128, bf16, causal), sink
1024 + window 2048 tokens in 128-token blocks, Δ tail 128, at N = 32k … 1M; stage by stage (bodies in
:mod:`companion.delta_attention.ladder`):

1. ``tuning``: the fused Δ kernel alone at N = 256k, γ = 64, with each tile configuration; the fastest is used after;
2. ``checks``: at 32k, the kernels against the reference (query-sparse rows, dense tail, anchors, Eq. 6/7 rows) and
   fused against unfused Δ;
3. ``rows``: per N, SDPA flash and cuDNN first (K/V expanded to 32 heads), then sparse, sparse + Δ and Δ only at
   γ = 64, 128, 256, 512, and the unfused Δ at γ = 64;
4. ``summary``: per N and γ, sparse + Δ's speed-ups over the dense backends and Δ's overhead against 1/γ of SDPA flash.

Not reproduced: the RTX 4090 of the paper (an H200 here) and the RULER accuracies (Llama-3.1-8B, not offline). Run it
with ``python -m companion.bench delta_attention`` (``--smoke``: a tiny CPU run, the kernels in the Triton interpreter).
"""

from companion.core.stages import Stage, study_functions
from companion.delta_attention import ladder as L

RESULTS_NAME = "delta_attention_ladder"
DEADLINE_S = 240
GPU_PROFILE = {
    "q_heads": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16", "impl": "triton",
    "sink": 1024, "window": 2048, "block_size": 128, "tail": 128,
    "sizes": [32768, 65536, 131072, 262144, 524288, 1048576], "gammas": [64, 128, 256, 512], "dense": ["flash", "cudnn"],
    "tune_len": 262144,
    "tune_configs": {  # tiles of the query-sparse kernel (sm_90a compile: no spills)
        "m128_n64_w8_s3": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
        "m128_n128_w8_s3": {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3},
        "m64_n64_w4_s3": {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
        "m128_n64_w8_s2": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
        "m128_n64_w8_s4": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 4},
        "m64_n64_w4_s4": {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4},
        "m64_n32_w4_s3": {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3},
    },
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "q_heads": 2, "kv_heads": 1, "head_dim": 32, "dtype": "float32", "sink": 32, "window": 64,
                 "block_size": 64, "tail": 32, "sizes": [128, 192], "gammas": [32, 64], "dense": ["flash"], "tune_len": 128,
                 "tune_configs": {k: GPU_PROFILE["tune_configs"][k] for k in ("m64_n64_w4_s3", "m128_n64_w8_s3")}}
STAGES = (
    Stage("tuning", L.tuning, needs_s=25),    # 13 s on an H200 (2026-12-04), compiles included
    Stage("checks", L.checks, needs_s=10),    # 3 s
    Stage("rows", L.rows, needs_s=180),       # 123 s, 80 of them the dense peers at 512k and 1M
    Stage("summary", L.summary, needs_s=0),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
