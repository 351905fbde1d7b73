"""The one-GPU (H200) study of paper 02 (HyperET) and the reader of its committed results. No plotly import.

What it runs, stage by stage (bodies in :mod:`companion.hyperet.study`):

1. ``kernel``: the fused HRA kernel (:mod:`companion_kernels.hra`: one structured matvec per row plus a per-row
   scalar from two norms, since the whole chain is radial) on a CLIP ViT-L stack (24 layers × {q, v} × 1024²,
   bf16 weights) for the diagonal, block-4 and banded-2 structures: forward and forward+backward time of the
   peers first (the eager PyTorch chain, the official formula sequence with a dense W_s; the closed forms
   ``W0 W_sᵀ``, dense and structured), then the kernel; each output's deviation from the fp64 identity and the
   kernel's agreement with the fp32 reference;
2. ``alignment``: the multi-granularity alignment of :mod:`companion.hyperet.align` on 24,000 procedural 32×32
   shapes (family → shape → shape and colour) with a ViT-Tiny-sized encoder (width 192, depth 6) under bf16
   autocast, variants run while a 100 s budget allows (with HRA-diag through the fused kernel last, when the
   kernel matched its reference).

Not reproduced: the paper's MLLM training runs (CLIP ViT-L inside a multi-modal LLM, its benchmarks): no such
model or data offline; the fused kernel is ours (the paper ships none). Run it with ``python -m companion.bench
hyperet`` (``--smoke``: a tiny CPU run, the kernel in the Triton interpreter).
"""

from companion.core.stages import Stage, study_functions
from companion.hyperet import study as S

__all__ = ["DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "kernel_speedups", "recorded",
           "run_scale_up"]

RESULTS_NAME = "hyperet_gpu"
DEADLINE_S = 150
GPU_PROFILE = {
    "kernel": {"layers": 24, "width": 1024, "dtype": "bfloat16", "c": 0.01, "structures": ["diagonal", "block", "banded"]},
    "alignment": {"images": 24000, "size": 32, "dim": 192, "depth": 6, "heads": 3, "patch": 4, "mlp_ratio": 4,
                  "pretrain_level": "coarse", "pretrain_steps": 800, "pretrain_lr": 1e-3, "align_steps": 400, "lr": 1e-3,
                  "batch": 256, "tau": 0.05, "c": 0.01, "eval_every": 50, "impl": "eager", "amp": True,
                  "time_budget_s": 100.0, "fused_variant": True},
    "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE,
    # the Triton interpreter takes ~0.3 s a launch: one structure, and no training through the kernel
    "kernel": {**GPU_PROFILE["kernel"], "layers": 1, "width": 8, "dtype": "float32", "structures": ["block"]},
    "alignment": {**GPU_PROFILE["alignment"], "images": 400, "size": 16, "dim": 16, "depth": 1, "heads": 2,
                  "pretrain_steps": 6, "align_steps": 4, "batch": 32, "eval_every": 2, "amp": False,
                  "fused_variant": False},
}
STAGES = (
    Stage("kernel", S.kernel, needs_s=15),
    Stage("alignment", S.alignment, needs_s=100),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def kernel_speedups(kernel: dict) -> dict[str, float]:
    """``{structure: eager fwd+bwd ms / fused fwd+bwd ms}`` from the ``kernel`` stage's result (both timed in one run)."""
    eager = {r["structure"]: r["fwd_bwd_ms"] for r in kernel["rows"] if r["impl"].startswith("eager")}
    return {r["structure"]: eager[r["structure"]] / r["fwd_bwd_ms"] for r in kernel["rows"]
            if r["impl"] == "triton fused" and r["structure"] in eager}
