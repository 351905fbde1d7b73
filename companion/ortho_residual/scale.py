"""The one-GPU (H200) study of paper 10 (orthogonal residual updates) and the reader of its committed results.
No plotly import.

What it runs, stage by stage (the bodies are in :mod:`companion.ortho_residual.study`), on a LLaMA-shaped
decoder in SmolLM-135M's shape (30 layers, d 576, 9 heads, 3 KV heads, FFN 1536) with a **byte vocabulary**
(local text has no SmolLM tokenizer: 106M parameters instead of 135M), trained on the Python standard library's
source (tens of MB, split by file):

1. ``training``: linear vs Orthogonal-F from the same weights and batches, bf16 autocast, AdamW, for
   ``train_seconds_each`` each: loss curves, validation loss, per-layer ``||x||``, rho_par, |cos(x, f)|,
   |cos(x, update)| and |cos(x, f_perp)| re-projected in fp64 / fp32 / bf16 / bf16 with an fp32 coefficient;
2. ``step_time_eager``: the projection's overhead on one training step (forward, backward, AdamW),
   ``time_ms`` (do_bench median);
3. ``bf16_coef_training``: Orthogonal-F with a bf16 residual stream, the official bf16 projection coefficient
   against an fp32 one, ``bf16_coef_seconds`` per arm, ``bf16_coef_seeds`` seeds: loss spikes (a step above
   1.5x the median of the previous 50) and validation loss;
4. ``step_time_compiled``: the overhead again under ``torch.compile`` (last: the slowest to start).

Not reproduced: the paper trains ViTs and ResNets on images; the LLaMA variant is the official repository's
OrthoLlama preset, for which no result is published, and "about 8 minutes each" is cut to what a lease allows.
Run it with ``python -m companion.bench ortho_residual`` (``--smoke``: a tiny CPU run;
``--stages bf16_coef_training --resume benchmarks/results/ortho_residual_gpu.json`` redoes one stage).
"""

from companion.core.stages import Stage, study_functions
from companion.ortho_residual import study as S
from companion.ortho_residual.models import SMOLLM_135M, byte_config

RESULTS_NAME = "ortho_residual_gpu"
DEADLINE_S = 320  # the stages' needs_s with three bf16 seeds (about 140 s instead of 50)
GPU_PROFILE = {
    "model": {k: v for k, v in byte_config(SMOLLM_135M).as_dict().items() if k != "max_len"},  # max_len = seq_len + 1
    "text_max_bytes": 24_000_000,
    "seq_len": 512,
    "batch": 32,
    "lr": 1e-3,
    "train_seconds_each": 30,
    "compile_backend": "inductor",
    "bf16_coef_seconds": 20,
    "bf16_coef_seeds": 3,
    "bf16_stream": "bfloat16",
    "seed": 0,
}
SMOKE_PROFILE = {**GPU_PROFILE, "model": {**GPU_PROFILE["model"], "d": 48, "n_layers": 2, "n_heads": 3, "n_kv_heads": 1,
                                          "ffn": 96},
                 "text_max_bytes": 400_000, "seq_len": 64, "batch": 4, "train_seconds_each": 0.3,
                 "compile_backend": "eager",  # Dynamo without Inductor's C++ build on the CPU
                 "bf16_coef_seconds": 0.2, "bf16_coef_seeds": 2}
STAGES = (
    Stage("training", S.training, needs_s=80),
    Stage("step_time_eager", S.step_time_eager, needs_s=20),
    Stage("bf16_coef_training", S.bf16_coef_training, needs_s=50),  # one seed; three take about 140 s
    Stage("step_time_compiled", S.step_time_compiled, needs_s=60),
)
TIMINGS = ("eager", "compiled")  # the step-time stages are step_time_<timing>


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def step_times(payload: dict) -> dict:
    """``{"eager": {...}, "compiled": {...}}``: the step times (ms) and overhead of the step-time stages that are done."""
    return {k: payload[f"step_time_{k}"] for k in TIMINGS if f"step_time_{k}" in payload}


def when(payload: dict, stage: str) -> str:
    """"<device>, <end time>" of the last recorded call that ran ``stage`` (a stage can be redone by a later call)."""
    ended = [r["ended"] for r in payload.get("runs", []) if stage in r.get("stages", ())]
    return f"{payload.get('device', 'GPU')}, {ended[-1] if ended else payload.get('date', '?')}"
