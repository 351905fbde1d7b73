"""The one-GPU (H200) study of paper 08's Triton op ``companion_kernels.rotate_quant_whip`` (``Y = X R``, per-token
INT4 fake quantization with clip 0.9, the per-token Whip sums of Eq. 4) and the reader of its committed results.
No plotly import.

What it runs, stage by stage (bodies in :mod:`companion.dartquant.kernel_bench`; 32768 tokens × d = 4096, bf16,
QuaRot's random Hadamard R, activations with 4 massive channels):

1. ``kernel``: the peers first, ``torch.compile`` of the eager reference (its compilation's seconds recorded,
   then timed) and eager PyTorch; then ours, each variant (``fused``: one program per 128 tokens sweeping the
   width twice; ``split``: a tiled GEMM writing per-tile row partials, then a row pass; ``matmul``: ``torch.mm``
   (cuBLAS), then a row pass that takes each token's range from Y) × the tiles of
   ``tiles`` (``GPU_TILES``: pointer loads, and some tiles again with X and R loaded through TMA tensor
   descriptors; the fused pointer tiles were timed before in the ``dartquant`` study): agreement with eager
   PyTorch on the GPU, ms, TB/s, TFLOP/s, speed relative to the compiled peer and to eager;
2. ``breakdown``: where the split variant's time goes: cuBLAS's X R alone, the split GEMM with its partials
   epilogue, its row pass.

Run it with ``python -m companion.bench dartquant_kernel`` (``--smoke``: a tiny CPU run, the kernels in the
Triton interpreter, ``torch.compile`` with the ``eager`` backend). The ``dartquant`` study's recorded ``kernel``
and ``kernel_compile`` stages (``dartquant_gpu.json``, fused variant only) are the earlier record;
:func:`companion.dartquant.scale.kernel_table` reads this study's JSON when it exists.
"""

from __future__ import annotations

import torch

from companion.core.stages import Stage, not_finished, study_functions
from companion.dartquant import kernel_bench as K

RESULTS_NAME = "dartquant_kernel"
COMMAND = "python -m companion.bench dartquant_kernel"
DEADLINE_S = 145
GPU_PROFILE = {
    "tokens": 32768, "n": 4096, "bits": 4, "dtype": "bfloat16", "compile_backend": "inductor",
    # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, TMA) per variant: companion_kernels.rotate_quant_whip's
    # GPU_TILES (TMA 1: X and R loaded through tensor descriptors)
    "tiles": {"fused": [[128, 128, 64, 8, 3, 0], [64, 256, 64, 8, 3, 0], [128, 128, 64, 8, 3, 1]],
              "split": [[128, 256, 64, 8, 3, 0], [128, 128, 64, 8, 3, 0], [128, 128, 64, 4, 4, 0],
                        [128, 256, 64, 8, 3, 1], [128, 256, 64, 8, 4, 1]],
              # matmul: torch.mm, then a row pass of (tokens a program, columns a step, -, warps, -, -)
              "matmul": [[4, 1024, 0, 4, 1, 0], [1, 4096, 0, 8, 1, 0]]},
    "seed": 0,
}
# the GPU tiles run in the interpreter too (one or two programs here), on a width and token count no tile divides
SMOKE_PROFILE = {**GPU_PROFILE, "tokens": 67, "n": 40, "dtype": "float32", "compile_backend": "eager"}
# needs_s: Inductor's compilation of the reference (3.6 s on a fresh H200) + 10 tiles × (a Triton JIT compilation
# + agreement + timing): 25.4 s and 0.6 s on the H200 (2026-12-05), kept with room for a slower start
STAGES = (
    Stage("kernel", K.run_kernel, needs_s=110),
    Stage("breakdown", K.run_breakdown, needs_s=15),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def table(payload: dict) -> tuple[str, list[dict]]:
    """The notebook's view of a payload whose ``kernel`` stage is done: a caption (the shape, where and when, the
    compilation's seconds, how closely the tiles match PyTorch against the bound, the tiles the deadline left
    untimed, the bytes counted) and one row per contender, the peers first, then every tile timed: ms, TFLOP/s,
    TB/s, speed relative to the compiled peer and to eager PyTorch, and whether it matches eager PyTorch."""
    k = payload["kernel"]
    c, e = k["compiled"], k["eager"]
    head = (f"Rotate + INT{k['bits']} fake-quant + Whip, {k['tokens']} tokens × d={k['n']} {k['dtype']}, recorded on "
            f"{payload.get('device', 'an unnamed device')}, {payload.get('date', 'no date')}; torch.compile's "
            f"compilation took {c['compile_seconds']:.1f} s. Speeds are relative ones (> 1: faster than the peer).")
    tried = [r for r in k["ours"] if "ms" in r]
    if tried:
        worst = max(tried, key=lambda r: (r["agreement"]["off_frac"], r["agreement"]["max_steps"]))["agreement"]
        head += (f" Every tile tried {'matches' if k['all_match'] else 'does NOT all match'} PyTorch: at most "
                 f"{100 * worst['off_frac']:.3f} % of elements on another grid point, at most "
                 f"{max(r['agreement']['max_steps'] for r in tried):.3f} steps (bound "
                 f"{K.kernel_steps_bound(k['bits'], getattr(torch, k['dtype'])):.3f}), Whip sums within "
                 f"{max(r['agreement']['whip_rel'] for r in tried):.1e}.")
    skipped = [K.tile_name(r) for r in k["ours"] if "skipped" in r]
    if skipped:
        head += f" Not timed (the study's deadline): {', '.join(skipped)}."
    head += f" Bytes counted: {k['bytes_counted']}."

    def row(name, r, matches="reference"):
        return {"schedule": name, "ms": round(r["ms"], 3), "TFLOP/s": round(r["tflops"]), "TB/s": round(r["tbps"], 2),
                "× torch.compile": round(c["ms"] / r["ms"], 2), "× eager": round(e["ms"] / r["ms"], 2),
                "matches PyTorch": matches}
    rows = [row("torch.compile (peer)", c, "yes" if c["agreement"]["matches"] else "NO"), row("eager PyTorch", e)]
    rows += [row(K.tile_name(r), r, "yes" if r["agreement"]["matches"] else "NO") for r in k["ours"] if "ms" in r]
    return head, rows


def mismatches(payload: dict) -> list[str]:
    """The tiles of a payload's ``kernel`` stage whose output does not match eager PyTorch (``[]``: none, or the
    stage not done)."""
    if not_finished(payload, ("kernel",)):
        return []
    return [K.tile_name(row) for row in payload["kernel"]["ours"] if "ms" in row and not row["agreement"]["matches"]]
