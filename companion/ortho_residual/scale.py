"""The one-GPU (H200) study of paper 10 (orthogonal residual updates) and the reader of its committed results.
No plotly import.

What it runs, stage by stage (the bodies are in :mod:`companion.ortho_residual.study`); every training pair starts
from the same weights and sees the same batches:

1. ``lm_seed0``, ``lm_seed1``, ``lm_seed2``: linear vs Orthogonal-F on a small LLaMA-shaped byte-level decoder
   (``lm_model``: 6 layers, d 256, 4.8M parameters) on the Python standard library's source (12.7 MB, split by file),
   to **equal steps**, one stage per seed so that a cut keeps the seeds done. Seed 0's linear run is the pilot: it
   trains until its validation loss (every ``eval_every`` steps) improves by less than ``flat_fraction`` (1 %) over
   ``flat_window`` (500) steps, capped at ``max_steps`` and ``pilot_seconds``; that step count is every arm's and
   seed's. Per seed: training and validation curves, final validation loss, per-add stream statistics;
2. ``bf16_seed0`` ... ``bf16_seed2``: Orthogonal-F on the same decoder with a **bf16 residual stream**, the
   official bf16 projection coefficient against an fp32 one, ``bf16_steps`` steps per arm;
3. ``vit_digits``: linear vs Orthogonal-F on a pre-LN ViT (d 192, depth 6, patch 4) on scikit-learn's digits
   upsampled to 32x32 (64 tokens), 3 seeds: test accuracy, the paper's headline metric;
4. ``step_time_eager``, ``step_time_compiled``: the projection's training-step overhead on the decoder in
   SmolLM-135M's shape (30 layers, d 576, byte vocabulary: 106M parameters), eager and under ``torch.compile``.

Expected H200 seconds (from the 106M model's recorded 132 ms eager step at 16k tokens, scaled to 6 layers, d 256 and
8k tokens, with a launch-bound floor of about 7 ms per eager step): about 7 ms per linear and 9 ms per orthogonal
step, so a pilot that flattens by step 2,000 makes ``lm_seed0`` about 40 s; ``needs_s`` covers the caps.
Not reproduced: the paper trains ViTs and ResNets on ImageNet / CIFAR for hundreds of epochs; the LLaMA variant is
the official repository's OrthoLlama preset, for which no result is published.
Run it with ``python -m companion.bench ortho_residual --out-dir benchmarks/results`` (``--smoke``: a tiny CPU run;
``--stages lm_seed2 --resume benchmarks/results/ortho_residual_gpu.json`` redoes one stage).
"""

from functools import partial

from companion.core.stages import Stage, study_functions
from companion.ortho_residual import study as S
from companion.ortho_residual.models import SMOLLM_135M, byte_config

RESULTS_NAME = "ortho_residual_gpu"
DEADLINE_S = 330  # the needs_s below add up to 325 (each stage's caps); the stages usually end sooner
LM_SEEDS = BF16_SEEDS = 3  # one stage per seed: lm_seed<k>, bf16_seed<k> train seed ``seed + k``
GPU_PROFILE = {
    "lm_model": {"vocab": 256, "d": 256, "n_layers": 6, "n_heads": 4, "n_kv_heads": 4, "ffn": 688, "rope_theta": 10000.0,
                 "rms_eps": 1e-5, "tie_embeddings": True},  # max_len = seq_len + 1
    "text_max_bytes": 24_000_000,  # more than the standard library holds: all of it
    "seq_len": 256,
    "batch": 32,
    "lr": 2e-3,
    "eval_every": 100,
    "val_batches": 16,  # 16 x 32 windows of 256 bytes of held-out files, the same at every evaluation
    "flat_window": 500,
    "flat_fraction": 0.01,
    "max_steps": 2500,
    "pilot_seconds": 25,
    "bf16_steps": 800,
    "bf16_stream": "bfloat16",
    "vit": {"image_size": 32, "patch": 4, "d": 192, "depth": 6, "heads": 3, "steps": 600, "batch": 128, "lr": 1e-3,
            "seeds": 3},
    "timing_model": {k: v for k, v in byte_config(SMOLLM_135M).as_dict().items() if k != "max_len"},
    "timing_seq_len": 512,
    "timing_batch": 32,
    "compile_backend": "inductor",
    "seed": 0,
}
_TINY_LM = {**GPU_PROFILE["lm_model"], "d": 48, "n_layers": 2, "n_heads": 3, "n_kv_heads": 1, "ffn": 96}
SMOKE_PROFILE = {**GPU_PROFILE, "lm_model": _TINY_LM, "text_max_bytes": 400_000, "seq_len": 32, "batch": 4,
                 "eval_every": 2, "val_batches": 2, "flat_window": 4, "max_steps": 6, "pilot_seconds": 5, "bf16_steps": 3,
                 "vit": {**GPU_PROFILE["vit"], "image_size": 16, "d": 32, "depth": 2, "heads": 2, "steps": 3, "batch": 32,
                         "seeds": 2},
                 "timing_model": _TINY_LM, "timing_seq_len": 32, "timing_batch": 4,
                 "compile_backend": "eager"}  # Dynamo without Inductor's C++ build on the CPU
STAGES = (
    Stage("lm_seed0", partial(S.lm_seed, 0), needs_s=55),  # data, CUDA start; pilot <= 25 s; 2,500 orthogonal steps 24 s
    *(Stage(f"lm_seed{k}", partial(S.lm_seed, k), needs_s=50) for k in range(1, LM_SEEDS)),  # the same two runs
    *(Stage(f"bf16_seed{k}", partial(S.bf16_seed, k), needs_s=20) for k in range(BF16_SEEDS)),  # 2 x 800 steps
    Stage("vit_digits", S.vit_digits, needs_s=30),  # 6 runs of 600 steps at about 6 ms (launch-bound, 6 blocks)
    Stage("step_time_eager", S.step_time_eager, needs_s=20),  # two 106M models, do_bench
    Stage("step_time_compiled", S.step_time_compiled, needs_s=60),  # compiling the 106M decoder twice (last)
)
TIMINGS = ("eager", "compiled")  # the step-time stages are step_time_<timing>


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def step_times(payload: dict) -> dict:
    """``{"eager": {...}, "compiled": {...}}``: the step times (ms) and overhead of the step-time stages that are done."""
    return {k: payload[f"step_time_{k}"] for k in TIMINGS if f"step_time_{k}" in payload}


def seed_results(payload: dict, prefix: str, n: int) -> list[dict]:
    """The results of the per-seed stages ``<prefix>0`` ... ``<prefix><n-1>`` that are recorded, in seed order."""
    return [payload[f"{prefix}{k}"] for k in range(n) if f"{prefix}{k}" in payload]


def when(payload: dict, stage: str) -> str:
    """"<device>, <end time>" of the last recorded call that ran ``stage`` (a stage can be redone by a later call)."""
    ended = [r["ended"] for r in payload.get("runs", []) if stage in r.get("stages", ())]
    return f"{payload.get('device', 'GPU')}, {ended[-1] if ended else payload.get('date', '?')}"
