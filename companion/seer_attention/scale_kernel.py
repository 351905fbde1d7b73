"""The one-GPU (H200) study of the block-sparse attention kernel (papers 01 SeerAttention and 09 Δ Attention use it)
and the reader of its committed results. No plotly import.

What it runs, stage by stage (bodies in :mod:`companion.seer_attention.kernel_bench`; B = 1, H = 32, D = 128, bf16,
causal, 128×128 blocks, random masks with the same number of kept blocks per row and the diagonal kept):

1. ``sweep``: the forward kernel's launch variants (TMA or pointer loads, warps, stages, key sub-tiles, split query
   blocks; ``benchmarks/block_sparse_NOTES.md``) at N = 32k, densities 0.1 and 1.0, and two block-64 variants at
   0.1: agreement with the pointer variant and time; the fastest agreeing one is what ``main`` times;
2. ``main``: N = 8k, 32k, 128k: dense SDPA flash and cuDNN first, then per density (1.0, 0.5, 0.1, 0.02) compiled
   FlexAttention with the same block mask, then ours (kernel alone and through the validating API);
3. ``pooled``: ``pooled_attention_map`` (block 64) at 8k and 32k, and the naive PyTorch version (the whole
   [B, H, N, N] softmax) at 8k first: time, peak memory, agreement;
4. ``backward_sweep``: the backward kernels' launch variants (warps, stages, sub-tiles, TMA loads, blocks split over
   two programs) at N = 32k, densities 0.1 and 0.5: time and agreement with the first variant;
5. ``backward``: forward + backward (gradients of q, k, v) at 8k and 32k, densities 0.1 and 0.5: compiled
   FlexAttention first, then ours (the Triton backward kernels): time, effective TFLOP/s, gradient agreement.

Run it with ``python -m companion.bench block_sparse_attention`` (``--smoke``: a tiny CPU run, the kernels in the
Triton interpreter). ``benchmarks/results/block_sparse_attention_run1.json`` is the first run of the same op,
before the ``block_m`` launch option (the notes compare the two runs).
"""

from companion.core.stages import Stage, stage_dates, study_functions
from companion.seer_attention import kernel_bench as K

RESULTS_NAME = "block_sparse_attention"
DEADLINE_S = 240  # every stage: their needs_s sum to 220
GPU_PROFILE = {
    "heads": 32, "head_dim": 128, "block_size": 128, "dtype": "bfloat16", "impl": "triton",
    "sweep_len": 32768, "sweep_densities": [0.1, 1.0],
    "variants": {
        "tma2_w8_s3": {"tma": 2, "num_warps": 8, "num_stages": 3},
        "tma4_w8_s3": {"tma": 4, "num_warps": 8, "num_stages": 3},
        "tma2_w8_s2": {"tma": 2, "num_warps": 8, "num_stages": 2},
        "ptr_w8_s3": {"tma": 0, "num_warps": 8, "num_stages": 3},
        "tma2_sub64_w8_s3": {"tma": 2, "sub_n": 64, "num_warps": 8, "num_stages": 3},
        "tma2_splitm64_sub64_w4_s3": {"tma": 2, "block_m": 64, "sub_n": 64, "num_warps": 4, "num_stages": 3},
        "tma2_splitm64_w4_s2": {"tma": 2, "block_m": 64, "num_warps": 4, "num_stages": 2},
    },
    "variants_b64": {
        "b64_tma2_w4_s3": {"tma": 2, "sub_n": 64, "num_warps": 4, "num_stages": 3},
        "b64_tma2_w4_s2": {"tma": 2, "sub_n": 64, "num_warps": 4, "num_stages": 2},
    },
    "lengths": [8192, 32768, 131072], "densities": [1.0, 0.5, 0.1, 0.02], "dense": ["flash", "cudnn"], "flex": True,
    "pooled_lengths": [8192, 32768], "naive_len": 8192, "pooled_block": 64,
    "backward_lengths": [8192, 32768], "backward_densities": [0.1, 0.5],
    # the backward kernels' launch variants (the first is the reference of the others' agreement)
    "backward_variants": {
        "w8_s2_sub32": {"num_warps": 8, "num_stages": 2, "sub_n": 32, "sub_m": 32},
        "w8_s3_sub32": {"num_warps": 8, "num_stages": 3, "sub_n": 32, "sub_m": 32},
        "w4_s2_sub32": {"num_warps": 4, "num_stages": 2, "sub_n": 32, "sub_m": 32},
        "w8_s2_sub16": {"num_warps": 8, "num_stages": 2, "sub_n": 16, "sub_m": 16},
        "w8_s2_sub64": {"num_warps": 8, "num_stages": 2, "sub_n": 64, "sub_m": 64},
        "tma2_w8_s2_sub32": {"tma": 2, "num_warps": 8, "num_stages": 2, "sub_n": 32, "sub_m": 32},
        "split64_w4_s2_sub32": {"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2, "sub_n": 32, "sub_m": 32},
        "split64_tma2_w8_s2_sub32": {"block_m": 64, "block_n": 64, "tma": 2, "num_warps": 8, "num_stages": 2,
                                     "sub_n": 32, "sub_m": 32},
    },
    "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE, "heads": 2, "head_dim": 32, "dtype": "float32", "sweep_len": 256,
    "variants": dict(list(GPU_PROFILE["variants"].items())[:2]), "variants_b64": dict(list(GPU_PROFILE["variants_b64"].items())[:1]),
    "lengths": [256], "densities": [1.0, 0.5], "dense": ["flash"], "flex": False,
    "pooled_lengths": [128], "naive_len": 128, "backward_lengths": [256], "backward_densities": [0.5],
    # the default and the variant with every option (TMA loads, split blocks), in the interpreter
    "backward_variants": {k: GPU_PROFILE["backward_variants"][k] for k in ("w8_s2_sub32", "split64_tma2_w8_s2_sub32")},
}
STAGES = (
    Stage("sweep", K.sweep, needs_s=30),    # 20 s on an H200 (2026-12-04), compiles included
    Stage("main", K.main, needs_s=60),      # 36 s
    Stage("pooled", K.pooled, needs_s=10),  # 2 s
    Stage("backward_sweep", K.backward_sweep, needs_s=90),  # 29 s on an H200 (2026-12-05): 8 variants, 2 kernels each
    Stage("backward", K.backward, needs_s=30),  # 20 s: FlexAttention's backward compiles
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def summary(run: dict) -> str:
    """One line on a recorded run for the notebook: where and when, the forward's speed-up over compiled
    FlexAttention (range over the lengths and densities timed, and at ≤ 10 % of the blocks), and forward +
    backward when its stage is recorded (else the command that records it)."""
    fwd = [r for r in (run.get("main") or {}).get("rows", []) if r.get("speedup_vs_flex")]
    bwd = [r for r in run.get("backward") or [] if r.get("speedup_vs_flex")]

    def span(rows):
        xs = [r["speedup_vs_flex"] for r in rows]
        return f"{min(xs):.2f}–{max(xs):.2f}×" if xs else "not timed"

    sparse = [r for r in fwd if r["density"] <= 0.1]
    dates = stage_dates(run)
    when = {name: dates.get(name, run.get("date", "no date")) for name in ("main", "backward")}
    text = (f"Kernel study, recorded on {run.get('device', 'an unnamed device')}: the forward ({when['main']}) runs at "
            f"{span(fwd)} the speed of compiled FlexAttention on the same masks ({span(sparse)} at ≤ 10 % of the "
            "blocks)")
    if bwd:
        return text + f"; forward + backward ({when['backward']}) at {span(bwd)} its speed."
    return text + ("; forward + backward not recorded yet (its `backward` stage: "
                   "python -m companion.bench block_sparse_attention).")
