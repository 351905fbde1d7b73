"""The one-GPU (H200) study of paper 03 (ScaleKV) and the reader of its committed results. No plotly import.

What it runs, stage by stage (the bodies are in :mod:`companion.scalekv.bench`):

1. ``analytic_memory``: retained K/V bytes of ScaleKV's 10 % budgets against the full cache on Infinity-8B's
   1024^2 schedule at the paper's batch (arithmetic);
2. ``larger_model``: a larger ``TinyVAR`` (10 scales up to 16x16 = 655 tokens, 8 layers, width 256) trained
   on the digits for ``train_seconds``, then the Table 1 protocol on it (every method at 4 / 10 / 20 % with
   the official 16-token window; fidelity to the full cache);
3. ``latency``: one SDPA layer at Infinity-8B geometry (28 heads of 128, bf16, batch 16) at every scale of
   the 1024^2 schedule, full cache (first) vs a 650-token cache;
4. ``selection``: the token selection's PyTorch reference, eager and compiled, then the fused Triton kernel,
   at batch 2 and 16 on random tensors.

Not reproduced: FID, GenEval and the end-to-end speed-up need Infinity's weights (not available offline).
Run it with ``python -m companion.bench scalekv`` (``--smoke``: a tiny CPU run, the kernel in the Triton
interpreter). The notebook's own GPU profile trains its tiny model longer (:data:`NOTEBOOK_GPU`).
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.scalekv import bench as E
from companion.scalekv.schedule import INFINITY_1024, INFINITY_8B

__all__ = ["DEADLINE_S", "GPU_PROFILE", "NOTEBOOK_GPU", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "notebook_sizes",
           "recorded", "run_scale_up"]

RESULTS_NAME = "scalekv_gpu"
DEADLINE_S = 180

GPU_PROFILE = {
    "analytic_memory": {"fraction": 0.1, "batch": 8},
    "larger_model": {"sides": [1, 2, 3, 4, 5, 6, 8, 10, 12, 16], "layers": 8, "dim": 256, "heads": 8, "train_seconds": 60.0,
                     "max_steps": 3000, "batch_size": 64, "lr": 2e-3, "fractions": [0.04, 0.1, 0.2], "n_cal": 20, "n_eval": 100,
                     "temperature": 0.6, "window_size": 16, "delta": 0.1, "drafters_per_scale": 1},
    "latency": {"sides": list(INFINITY_1024), "heads": INFINITY_8B["heads"], "head_dim": INFINITY_8B["head_dim"], "batch": 16,
                "budget": 650, "dtype": "bfloat16"},
    "selection": {"heads": INFINITY_8B["heads"], "head_dim": INFINITY_8B["head_dim"], "batches": [2, 16],
                  "cases": [[2954, 48], [6425, 48], [10521, 64]], "capacity": 650, "window": 16, "dtype": "bfloat16",
                  "compile_reference": True},
    "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE,
    "larger_model": {**GPU_PROFILE["larger_model"], "sides": [1, 2, 3, 4, 6, 8], "layers": 2, "dim": 32, "heads": 2,
                     "train_seconds": 0.5, "max_steps": 10, "batch_size": 8, "fractions": [0.1, 0.3], "n_cal": 2, "n_eval": 3,
                     "window_size": 4},
    "latency": {"sides": [1, 2, 4, 6, 8], "heads": 2, "head_dim": 16, "batch": 1, "budget": 30, "dtype": "float32"},
    "selection": {"heads": 2, "head_dim": 16, "batches": [1], "cases": [[60, 6]], "capacity": 20, "window": 4, "dtype": "float32",
                  "compile_reference": False},
}
STAGES = (
    Stage("analytic_memory", E.analytic_memory_stage, needs_s=0),
    Stage("larger_model", E.larger_model_stage, needs_s=90),
    Stage("latency", E.latency_stage, needs_s=15),
    Stage("selection", E.selection_stage, needs_s=45),
)

#: The notebook's GPU profile: its own tiny model trained at least this long, on at least this batch, scored on
#: at least this many images (the study above is separate).
NOTEBOOK_GPU = {"min_train_steps": 3000, "min_batch_size": 64, "min_eval_images": 200}


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def notebook_sizes(profile: str, train_steps: int, batch_size: int, eval_images: int) -> tuple[int, int, int]:
    """``(train_steps, batch_size, eval_images)`` the notebook runs under ``profile`` ("cpu": as given)."""
    if profile != "gpu":
        return train_steps, batch_size, eval_images
    return (max(train_steps, NOTEBOOK_GPU["min_train_steps"]), max(batch_size, NOTEBOOK_GPU["min_batch_size"]),
            max(eval_images, NOTEBOOK_GPU["min_eval_images"]))
