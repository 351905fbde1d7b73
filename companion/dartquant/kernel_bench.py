"""The stage bodies of the rotate-quantize-Whip kernel study (:mod:`companion.dartquant.scale_kernel`) and the
agreement measure of ``companion_kernels.rotate_quant_whip`` against eager PyTorch.

The op: ``Y = X R`` rounded to X's dtype, its per-token asymmetric INT-b fake quantization with clip 0.9, and the
per-token Whip sums ``Σ exp(−|y|)`` of Eq. 4. Each stage body takes a
:class:`companion.core.stages.StageContext` and returns the stage's JSON-able result:

* :func:`run_kernel` (stage ``kernel``): at ``tokens`` × ``n`` in ``dtype``, the peers first: ``torch.compile``
  of the eager reference (the first call's seconds, i.e. the compilation, recorded), then eager PyTorch; then
  ours, each variant × each tile of the profile: agreement with eager PyTorch on the device, median ms, TB/s,
  TFLOP/s, and the speed relative to the compiled peer and to eager (``> 1``: ours is faster);
* :func:`run_breakdown` (stage ``breakdown``): where the split variant's time goes: cuBLAS's ``X R`` alone (what
  any schedule that writes Y in X's dtype costs at least), the split variant's GEMM with its partials
  epilogue, and its row pass (a bandwidth-bound sweep: TB/s).

:func:`kernel_matches` judges a recorded agreement; the notebook's summary reads it through
:func:`companion.dartquant.scale.kernel_table`.
"""

from __future__ import annotations

import time

import torch

from companion.core import check_choice, time_ms
from companion_kernels.dispatch import interpreting
from companion_kernels.rotate_quant_whip import VARIANTS  # the api (no triton import)

#: the kernel's output counts as matching PyTorch when at most this fraction of elements sits on another
#: grid point than eager PyTorch's (GEMM accumulation order moves a few y values across a rounding
#: boundary), none by more than :func:`kernel_steps_bound` quantization steps, and the Whip sums agree to
#: this relative error
KERNEL_MAX_OFF_FRAC = 0.02
KERNEL_WHIP_RTOL = 1e-3
KERNEL_DTYPES = ("bfloat16", "float16", "float32")
COMPILE_BACKENDS = ("inductor", "eager")  # "eager": Dynamo without Inductor (the CPU smoke run)
CLIP = 0.9              # the activation quantizer's clip ratio (paper Sec. 4.1)
MIN_TILE_S = 5          # seconds a tile needs (its JIT compilation, agreement and timing); fewer left: skipped


def kernel_steps_bound(bits: int, dtype: torch.dtype) -> float:
    """The largest kernel-vs-PyTorch difference, in quantization steps s, of two correct implementations:
    one grid point (a y near a rounding boundary), plus the rounding of each side's dequantized output
    s·(q − z) to ``dtype``: |q − z| ≤ 2^b − 1 steps, each rounded with relative error at most u = eps/2,
    so 1 + 2(2^b − 1)u (bf16, 4 bits: 1.117; fp32: 1 + 1.8e-6)."""
    return 1.0 + 2 * (2 ** bits - 1) * torch.finfo(dtype).eps / 2


def kernel_matches(agreement: dict, bits: int, dtype: torch.dtype) -> bool:
    """Whether a :func:`kernel_agreement` record is within the three tolerances above."""
    return bool(agreement["off_frac"] <= KERNEL_MAX_OFF_FRAC and agreement["max_steps"] <= kernel_steps_bound(bits, dtype)
                and agreement["whip_rel"] <= KERNEL_WHIP_RTOL)


def kernel_inputs(tokens: int, n: int, dtype: torch.dtype, device, seed: int = 0):
    """Post-RMSNorm-like activations (Gaussian, 4 massive channels ×20) and QuaRot's random Hadamard R."""
    from companion.dartquant.hadamard import random_hadamard

    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, n, device=device, generator=g)
    x[:, :4] *= 20.0
    return x.to(dtype), random_hadamard(n, seed).to(device=device, dtype=dtype)


def kernel_agreement(yk: torch.Tensor, wk: torch.Tensor, yr: torch.Tensor, wr: torch.Tensor, y: torch.Tensor,
                     bits: int, clip: float = CLIP) -> dict:
    """How far the kernel's ``(Q(XR), whip)`` is from the reference's, given the rounded ``y = X R``.

    ``off_frac``: fraction of elements on another grid point (difference above 1e-3 of the token's step s);
    ``max_steps``: the largest difference in units of s; ``whip_rel``: the largest relative Whip-sum error;
    ``matches``: :func:`kernel_matches` at the kernel output's dtype.
    """
    yf = y.float()
    hi = yf.amax(-1, keepdim=True).clamp(min=0) * clip
    lo = yf.amin(-1, keepdim=True).clamp(max=0) * clip
    step = ((hi - lo) / (2 ** bits - 1)).clamp_min(1e-30)
    d = (yk.float() - yr.float()).abs() / step
    out = {"off_frac": float((d > 1e-3).float().mean()), "max_steps": float(d.max()),
           "whip_rel": float(((wk.double() - wr.double()).abs() / wr.double().abs().clamp_min(1e-12)).max()),
           "elements": int(y.numel())}
    out["matches"] = kernel_matches(out, bits, yk.dtype)
    return out


def kernel_bytes(tokens: int, n: int, itemsize: int) -> int:
    """Compulsory bytes of the op: X read, R read once, quantized Y written, fp32 Whip sums written."""
    return 2 * tokens * n * itemsize + n * n * itemsize + 4 * tokens


def rates(ms: float, tokens: int, n: int, itemsize: int) -> dict:
    """``ms`` with the compulsory bytes' TB/s (:func:`kernel_bytes`) and the GEMM's TFLOP/s (2·T·n² FLOP)."""
    return {"ms": ms, "tbps": round(kernel_bytes(tokens, n, itemsize) / ms / 1e9, 4),
            "tflops": round(2 * tokens * n * n / ms / 1e9, 2)}


def _setup(ctx):
    """The profile, the device (TF32 off: fp32 stays fp32), the dtype and the timer (median ms); on a CPU the
    kernels need the interpreter (checked before a stage imports them: ``triton.jit`` reads it then)."""
    P = ctx.profile
    dtype = getattr(torch, check_choice("dtype", P["dtype"], KERNEL_DTYPES))
    device = torch.device(ctx.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    elif not interpreting():
        raise RuntimeError("the kernel study needs a CUDA device, or TRITON_INTERPRET=1 on the CPU "
                           "(python -m companion.bench dartquant_kernel --smoke sets it)")
    reps = {} if device.type == "cuda" else {"cpu_reps": 1}  # the interpreter: one timed call

    def timed(fn) -> float:
        return round(time_ms(fn, device, **reps), 4)

    return P, device, dtype, timed


def tile_name(row: dict) -> str:
    """``"split 128×256×64 w8 s3"`` (``" TMA"`` appended where X and R are loaded through tensor descriptors): a
    row of :func:`run_kernel`'s ``ours`` (its variant and tile)."""
    bm, bn, bk, warps, stages, *tma = row["tile"]  # records before the TMA option have five entries
    if row["variant"] == "matmul":  # torch.mm, then a row pass of bm tokens a program, bn columns a step
        return f"matmul + rows {bm}×{bn} w{warps}"
    return f"{row['variant']} {bm}×{bn}×{bk} w{warps} s{stages}" + (" TMA" if tma and tma[0] else "")


def run_kernel(ctx) -> dict:
    """Stage ``kernel``: the compiled peer and eager PyTorch, then each variant × tile of ``tiles`` (module
    docstring). Bytes counted for TB/s: X read + R read once + quantized Y written + the fp32 Whip sums written
    (Y's read-back, R's re-reads from L2 and the split variant's partials are not counted); at n = 4096 the op
    is compute-bound (2n FLOP per 4 bytes), so TFLOP/s is reported too. A tile with fewer than
    :data:`MIN_TILE_S` seconds left is recorded as skipped; ``all_match``: every tile timed matches."""
    P, device, dtype, timed = _setup(ctx)
    tokens, n, bits = P["tokens"], P["n"], P["bits"]
    backend = check_choice("compile_backend", P["compile_backend"], COMPILE_BACKENDS)
    for variant in P["tiles"]:
        check_choice("tiles", variant, VARIANTS)  # the keys of ``tiles``: the kernel's variants
    from companion_kernels.rotate_quant_whip.reference import rotate_quant_whip_reference
    from companion_kernels.rotate_quant_whip.triton import rotate_quant_whip_triton

    itemsize = torch.empty((), dtype=dtype).element_size()
    out = {"tokens": tokens, "n": n, "bits": bits, "dtype": P["dtype"], "clip": CLIP,
           "bytes": kernel_bytes(tokens, n, itemsize), "flop": 2 * tokens * n * n,
           "bytes_counted": "X read + R read once + quantized Y written + fp32 Whip sums written"}
    x, r = kernel_inputs(tokens, n, dtype, device, ctx.seed)
    yr, wr = rotate_quant_whip_reference(x, r, bits, CLIP)
    y = x @ r

    # the peers first: torch.compile of the eager reference (its first call compiles), then eager PyTorch
    compiled = torch.compile(rotate_quant_whip_reference, backend=backend)
    t0 = time.perf_counter()
    yc, wc = compiled(x, r, bits, CLIP)
    if device.type == "cuda":
        torch.cuda.synchronize()
    peer = {"backend": backend, "compile_seconds": round(time.perf_counter() - t0, 1),
            "agreement": kernel_agreement(yc, wc, yr, wr, y, bits)}
    del yc, wc
    out["compiled"] = {**peer, **rates(timed(lambda: compiled(x, r, bits, CLIP)), tokens, n, itemsize)}
    out["eager"] = rates(timed(lambda: rotate_quant_whip_reference(x, r, bits, CLIP)), tokens, n, itemsize)
    ctx.log(f"[kernel] peers: compiled {out['compiled']}, eager {out['eager']}")

    out["ours"] = []
    for variant, tiles in P["tiles"].items():
        for tile in tiles:
            row = {"variant": variant, "tile": list(tile)}
            if ctx.left() < MIN_TILE_S:
                row["skipped"] = f"deadline: {max(ctx.left(), 0):.0f} s left, needs {MIN_TILE_S} s"
            else:
                def ours(variant=variant, tile=tuple(tile)):
                    return rotate_quant_whip_triton(x, r, bits, CLIP, interpret=device.type != "cuda", tiles=tile,
                                                    variant=variant)

                yk, wk = ours()
                row["agreement"] = kernel_agreement(yk, wk, yr, wr, y, bits)
                del yk, wk
                row.update(rates(timed(ours), tokens, n, itemsize))
                row["vs_compiled"] = round(out["compiled"]["ms"] / row["ms"], 3)
                row["vs_eager"] = round(out["eager"]["ms"] / row["ms"], 3)
            ctx.log(f"[kernel] {tile_name(row)}: {row}")
            out["ours"].append(row)
    tried = [row for row in out["ours"] if "ms" in row]
    out["all_match"] = bool(tried) and all(row["agreement"]["matches"] for row in tried)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def _best_split_tile(ctx) -> list:
    """The fastest matching split tile of this payload's ``kernel`` stage, else the profile's first."""
    rows = [row for row in (ctx.results.get("kernel") or {}).get("ours", [])
            if row["variant"] == "split" and "ms" in row and row["agreement"]["matches"]]
    return min(rows, key=lambda row: row["ms"])["tile"] if rows else ctx.profile["tiles"]["split"][0]


def run_breakdown(ctx) -> dict:
    """Stage ``breakdown``: at the kernel stage's shape, cuBLAS's ``X R`` into a preallocated Y (TFLOP/s), the
    split variant's GEMM + partials kernel (TFLOP/s) and its row pass (TB/s of the bytes it must move: Y read and
    written, the partials read, the Whip sums written), with the split tile that was fastest in ``kernel``."""
    P, device, dtype, timed = _setup(ctx)
    tokens, n, bits = P["tokens"], P["n"], P["bits"]
    from companion_kernels.rotate_quant_whip.triton import split_partials, split_quantize

    tile = _best_split_tile(ctx)
    x, r = kernel_inputs(tokens, n, dtype, device, ctx.seed)
    y = torch.empty_like(x)
    whip = torch.empty(tokens, device=device, dtype=torch.float32)
    interp = device.type != "cuda"
    flop = 2 * tokens * n * n
    out = {"tile": tile, "cublas_ms": timed(lambda: torch.mm(x, r, out=y))}  # the floor first
    out["gemm_ms"] = timed(lambda: split_partials(x, r, y, tuple(tile)))
    part = split_partials(x, r, y, tuple(tile))
    out["rows_ms"] = timed(lambda: split_quantize(y, part, whip, bits, CLIP, interp))
    rows_bytes = 2 * y.numel() * y.element_size() + part.numel() * 4 + 4 * tokens
    out.update({"cublas_tflops": round(flop / out["cublas_ms"] / 1e9, 2),
                "gemm_tflops": round(flop / out["gemm_ms"] / 1e9, 2),
                "rows_tbps": round(rows_bytes / out["rows_ms"] / 1e9, 4), "rows_bytes": rows_bytes})
    ctx.log(f"[breakdown] {out}")
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out
