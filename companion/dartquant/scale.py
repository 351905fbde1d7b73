"""The one-GPU (H200) study of paper 08 (DartQuant) and the reader of its committed results. No plotly import.

Stages (bodies in :mod:`companion.dartquant.study`):

1. ``step_cost``: one Whip step with QR-Orth (Alg. 1) and with the Cayley parametrisation (the peer, first) at
   n = 4096 and 8192, fp32, 2048 tokens a step: median time and peak memory (paper: (4/3)n³ vs ≈6n³, ≈1.4×);
2. ``kernel``: the fused ``companion_kernels.rotate_quant_whip`` (X R, per-token INT4 fake quantization with
   clip 0.9, the per-token Whip sums of Eq. 4) at 32768 tokens × d = 4096 in bf16 against eager PyTorch, for
   each GPU tile shape: agreement on the GPU, ms, TB/s, TFLOP/s;
3. ``models``: two byte-level LLaMA-layout models (d 512 and 1024, GQA) trained for 12 s and 16 s on the
   standard library's source; W4A4KV4 perplexity on held-out source and on docstrings for no rotation, QuaRot,
   DartQuant and end-to-end R1 training, and the calibration cost (time, peak memory) of DartQuant against the
   end-to-end training;
4. ``kernel_compile``: ``torch.compile`` of the eager reference on the kernel's inputs (last: its compile time
   is hard to bound).

Not reproduced, for one lease: the paper's 7–70B pretrained LLMs (here 25–150M parameters trained for seconds;
such models have few massive activations, so the gaps are expected to be smaller), GPTQ weights (RTN instead:
the GPTQ column loop in Python would cost more than the lease), the paper's calibration schedules (shorter
here). Run it with ``python -m companion.bench dartquant`` (``--smoke``: a tiny CPU run, the kernel in the
Triton interpreter).
"""

from __future__ import annotations

import torch

from companion.core.stages import Stage, not_finished, study_functions
from companion.dartquant import study as E

RESULTS_NAME = "dartquant_gpu"
COMMAND = "python -m companion.bench dartquant"
DEADLINE_S = 150
GPU_PROFILE = {
    "models": [
        {"name": "d512-L8", "hidden": 512, "layers": 8, "heads": 8, "kv_heads": 4, "ffn": 1536, "train_seconds": 12},
        {"name": "d1024-L12", "hidden": 1024, "layers": 12, "heads": 16, "kv_heads": 8, "ffn": 3072, "train_seconds": 16},
    ],
    "train_seconds": 12,  # default for a model without its own
    "text_bytes": 16_000_000,  # of the standard library's source, split by file into train and validation
    "seq_len": 512,
    "batch": 32,
    "lr": 1e-3,
    "calib_samples": 128,
    "calib_tokens_per_sample": 64,
    "r1_steps": 300, "r2_steps": 100, "rot_lr": 1e-2, "rot_batch": 1024,
    "e2e_steps": 60, "e2e_lr": 2e-3, "e2e_batch": 8,
    "eval_samples": 32,
    "bits": {"w": 4, "a": 4, "kv": 4},
    "step_cost_n": [4096, 8192], "step_cost_tokens": 2048,
    "kernel_tokens": 32768, "kernel_n": 4096, "kernel_bits": 4, "kernel_dtype": "bfloat16",
    "compile_backend": "inductor",
    "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE,
    "models": [{"name": "smoke-d64", "hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 128}],
    "train_seconds": 0.3, "text_bytes": 400_000, "seq_len": 64, "batch": 4, "calib_samples": 8,
    "calib_tokens_per_sample": 16, "r1_steps": 5, "r2_steps": 3, "rot_batch": 64, "e2e_steps": 3, "e2e_batch": 2,
    "eval_samples": 4, "step_cost_n": [64], "step_cost_tokens": 128,
    "kernel_tokens": 67, "kernel_n": 32, "kernel_dtype": "float32", "compile_backend": "eager",
}
STAGES = (
    Stage("step_cost", E.run_step_cost, needs_s=15),
    Stage("kernel", E.run_kernel, needs_s=10),
    Stage("models", E.run_models, needs_s=90),
    Stage("kernel_compile", E.run_kernel_compile, needs_s=35),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def missing(gpu: dict | None, stage: str) -> str | None:
    """None when the recorded payload ``gpu`` holds ``stage``'s result; else why not (no run, or the stage's state)."""
    if not gpu:
        return f"no GPU run recorded ({COMMAND})"
    left = not_finished(gpu, (stage,))
    return f"the recorded run's stage {left[0]}" if left else None


def kernel_summary(gpu: dict | None) -> str:
    """One line on the fused kernel for the notebook: its TB/s and speed-ups when recorded, else why not."""
    if missing(gpu, "kernel"):
        return f"Fused rotate + INT4 fake-quant + Whip kernel: not recorded ({missing(gpu, 'kernel')})."
    k, a = gpu["kernel"], gpu["kernel"]["agreement"]
    dtype = getattr(torch, k["dtype"])
    txt = (f"Fused rotate + INT{k['bits']} fake-quant + Whip kernel, {k['tokens']} tokens × d={k['n']} {k['dtype']}: "
           f"{k['triton_ms']:.3f} ms ({k['triton_tbps']:.2f} TB/s, {k['triton_tflops']:.0f} TFLOP/s) vs eager PyTorch "
           f"{k['eager_ms']:.3f} ms ({k['eager_tbps']:.2f} TB/s): speed-up {k['speedup_vs_eager']:.2f}×"
           + (f" (best tile {k['best_tile']})" if isinstance(k.get("best_tile"), list) else ""))
    c = gpu.get("kernel_compile") or {}
    if c.get("speedup_vs_compiled"):
        txt += (f"; torch.compile of the same function {c['compiled_ms']:.3f} ms (the kernel runs at "
                f"{c['speedup_vs_compiled']:.2f}× its speed)")
    else:
        txt += f"; torch.compile not timed beside it ({missing(gpu, 'kernel_compile') or 'another call of the study'})"
    ok = E.kernel_matches(a, k["bits"], dtype)
    txt += (f". Matches PyTorch: {'yes' if ok else 'NO'} ({100 * a['off_frac']:.3f} % of elements on another grid "
            f"point, at most {a['max_steps']:.3f} steps (bound {E.kernel_steps_bound(k['bits'], dtype):.3f}); "
            f"Whip sums within {a['whip_rel']:.1e})")
    return txt + f". Bytes counted: {k['bytes_counted']}."
