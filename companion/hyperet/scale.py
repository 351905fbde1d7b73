"""The GPU section of the HyperET companion (paper 02) (used by ``benchmarks/hyperet_gpu.py`` and the notebook's GPU profile).

1. :func:`kernel_benchmark` — the fused HRA kernel (:mod:`companion_kernels.hra`) on a CLIP ViT-L stack
   (24 layers × {q, v} × 1024², bf16 weights) for the diagonal, block-4 and banded-2 structures:
   forward and forward+backward time (``triton.testing.do_bench``, median) against the eager PyTorch
   chain (the official formula sequence, dense W_s) and the closed forms ``W0 W_sᵀ`` (dense bf16
   matmul, and the structured product a user who knows the identity would write); plus each
   output's deviation from the fp64 identity and the kernel's agreement with the reference.
2. :func:`scaled_alignment` — the alignment experiment of :mod:`companion.hyperet.align` on the
   procedural shapes hierarchy (family → shape → shape+colour) with a larger ViT, bf16 autocast.

No plotly, geoopt or MiniLM here: the prompt embeddings come from the committed cache.
"""

from __future__ import annotations

import math
import time

import torch

from companion.core import recorded_results, time_ms
from companion.hyperet.align import DEFAULT_VARIANTS, VARIANTS, AlignConfig, run_alignment, summary_rows
from companion.hyperet.data import load_prompt_embeddings, shapes_task

STRUCTURES = {"diagonal": 1, "block": 4, "banded": 5}  # kind -> K (block side 4; bandwidth 2 -> 5 diagonals)

__all__ = ["GPU_PROFILE", "RESULTS_NAME", "kernel_benchmark", "kernel_speedups", "recorded", "scaled_alignment", "structured_closed_form"]

#: What the GPU profile runs (``benchmarks/hyperet_gpu.py`` with its defaults).
GPU_PROFILE = {
    "script": "benchmarks/hyperet_gpu.py",
    "kernel": {"layers": 24, "width": 1024, "dtype": "bfloat16", "c": 0.01, "structures": dict(STRUCTURES)},
    "alignment": {"task": "shapes", "images": 24000, "size": 32, "dim": 192, "depth": 6, "heads": 3,
                  "pretrain_steps": 800, "align_steps": 400, "batch": 256, "amp": "bfloat16", "time_budget_s": 100.0},
}
RESULTS_NAME = "hyperet_gpu"


def recorded() -> dict | None:
    """The committed GPU results (``benchmarks/results/hyperet_gpu.json``), or None."""
    return recorded_results(RESULTS_NAME)


def kernel_speedups(kernel: dict) -> dict[str, float]:
    """``{structure: eager fwd+bwd ms / fused fwd+bwd ms}`` from :func:`kernel_benchmark`'s result (both timed in one run)."""
    eager = {r["structure"]: r["fwd_bwd_ms"] for r in kernel["rows"] if r["impl"].startswith("eager")}
    return {r["structure"]: eager[r["structure"]] / r["fwd_bwd_ms"] for r in kernel["rows"]
            if r["impl"] == "triton fused" and r["structure"] in eager}


def _coef(g: int, k: int, n: int, kind: str, device, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    coef = 0.05 * torch.randn(g, k, n, generator=gen)
    if kind == "block":
        rows = torch.arange(n)
        coef[:, rows % k, rows] += 1.0  # identity blocks
    else:
        coef[:, (k - 1) // 2, :] += 1.0  # main diagonal
    return coef.to(device)


def structured_closed_form(w0: torch.Tensor, coef: torch.Tensor, kind: str) -> torch.Tensor:
    """``W0 W_sᵀ`` from the structured coefficients without forming W_s (in W0's dtype)."""
    c = coef.to(w0.dtype)
    g, k, n = coef.shape
    if kind == "diagonal":
        return w0 * c[:, 0][:, None, :]
    if kind == "block":
        # out[r, i] = Σ_k coef[k, i] · w0[r, b⌊i/b⌋ + k]
        wb = w0.view(g, w0.shape[1], n // k, k)  # [g, R, blocks, k]
        cb = c.view(g, k, n // k, k).permute(0, 2, 3, 1)  # [g, blocks, i_in_block, k]
        return torch.einsum("grbk,gbik->grbi", wb, cb).reshape(w0.shape)
    d = (k - 1) // 2
    out = torch.zeros_like(w0)
    for j in range(k):
        off = j - d
        lo, hi = max(0, -off), min(n, n - off)
        out[..., lo:hi] += c[:, j, lo:hi][:, None, :] * w0[..., lo + off : hi + off]
    return out


def _bench(fn, smoke: bool) -> float:
    """Median milliseconds (``companion.core.time_ms``): do_bench on the GPU, three perf_counter runs on the CPU."""
    return time_ms(fn, "cpu" if smoke else "cuda", warmup=25, rep=100, cpu_warmup=0, cpu_reps=3)


def kernel_benchmark(layers: int = 24, width: int = 1024, dtype=torch.bfloat16, c: float = 0.01, device="cuda", smoke: bool = False) -> dict:
    """Time and check the fused HRA op on ``layers`` × {q, v} frozen ``width²`` weights (see module doc)."""
    from companion_kernels.hra import closed_form, hra_fused, hra_reference

    g, n = 2 * layers, width
    gen = torch.Generator(device="cpu").manual_seed(0)
    w0 = torch.randn(g, n, n, generator=gen)
    w0 = (w0 / w0.norm(dim=-1, keepdim=True) * 0.64).to(device=device, dtype=dtype)  # CLIP-like row norms
    rows = []
    for kind, k in STRUCTURES.items():
        coef = _coef(g, k, n, kind, device).requires_grad_()
        grad_out = torch.randn(w0.shape, generator=gen).to(device=device, dtype=dtype)
        impls = {
            "triton fused": lambda: hra_fused(w0, coef, kind=kind, c=c, impl="triton"),
            "eager PyTorch (official chain, dense W_s)": lambda: hra_reference(w0, coef, kind, c),
            "closed form W0·W_sᵀ (dense matmul)": lambda: closed_form(w0, coef, kind),
            "closed form W0·W_sᵀ (structured)": lambda: structured_closed_form(w0, coef, kind),
        }
        exact = closed_form(w0.double(), coef.detach().double(), kind).double()
        # agreement of the kernel with the fp32 reference (forward and coefficient gradient)
        out_k = impls["triton fused"]()
        (out_k.float() * grad_out.float()).sum().backward()
        gk, coef.grad = coef.grad.clone(), None
        out_r = hra_reference(w0.float(), coef, kind, c)
        (out_r * grad_out.float()).sum().backward()
        gr, coef.grad = coef.grad.clone(), None
        check = {
            "fwd_rel_err_vs_reference_fp32": float((out_k.float() - out_r).detach().norm() / out_r.detach().norm()),
            "grad_rel_err_vs_reference_fp32": float((gk - gr).norm() / gr.norm()),
        }
        for name, fn in impls.items():
            with torch.no_grad():
                out = fn()
                dev = float((out.double() - exact).norm() / exact.norm())
            fwd = _bench(lambda: fn(), smoke)

            def step(fn=fn):
                out = fn()
                out.backward(grad_out)
                coef.grad = None

            fb = _bench(step, smoke)
            rows.append({"structure": kind, "impl": name, "fwd_ms": fwd, "fwd_bwd_ms": fb, "rel_dev_from_fp64_identity": dev, **(check if name == "triton fused" else {})})
    bytes_moved = 2 * g * n * n * torch.tensor([], dtype=dtype).element_size()
    return {"layers": layers, "width": width, "matrices": g, "dtype": str(dtype).replace("torch.", ""), "c": c, "min_bytes_fwd": bytes_moved, "rows": rows}


def scaled_alignment(device="cuda", smoke: bool = False, time_budget_s: float = 100.0, fused_variant: bool = True) -> dict:
    """Alignment variants on the procedural shapes hierarchy with a ViT-Tiny-sized encoder (bf16 autocast).

    HRA variants run the official eager chain (its Möbius matvec is a bf16 matmul under autocast, which
    is where a Euclidean-vs-Möbius gap can appear); ``fused_variant`` adds HRA-diag through the fused
    kernel (fp32 inside). Variants are dropped from the end when the time budget runs out.
    """
    start = time.perf_counter()
    if smoke:
        task = shapes_task(n=400, size=16, device=device)
        cfg = AlignConfig(dim=16, depth=1, heads=2, patch=4, pretrain_level="coarse", pretrain_steps=6, align_steps=4, batch=32, eval_every=2)
    else:
        task = shapes_task(n=24000, size=32, device=device)
        cfg = AlignConfig(dim=192, depth=6, heads=3, patch=4, mlp_ratio=4, pretrain_level="coarse", pretrain_steps=800, align_steps=400,
                          batch=256, lr=1e-3, pretrain_lr=1e-3, eval_every=50, amp=True)
    cfg.variants = list(DEFAULT_VARIANTS) + (["HRA diag (q,v) fused"] if fused_variant else [])
    text = load_prompt_embeddings("shapes")
    # pre-train, then one variant at a time while the time budget allows (slowest variant so far × 1.3)
    run = run_alignment(task, text, AlignConfig(**{**cfg.__dict__, "variants": cfg.variants[:1]}), device=device)
    slowest = run["results"][cfg.variants[0]]["seconds"]
    for variant in cfg.variants[1:]:
        if time.perf_counter() - start + 1.3 * slowest > time_budget_s:
            break
        one = run_alignment(task, text, AlignConfig(**{**cfg.__dict__, "variants": [variant]}), device=device, encoder=run["encoder"])
        run["results"].update(one["results"])
        slowest = max(slowest, one["results"][variant]["seconds"])
    skipped = [v for v in cfg.variants if v not in run["results"]]
    rows = summary_rows(run)
    curves = {name: {"curve": res["curve"], "loss_every_10": res["losses"][::10]} for name, res in run["results"].items()}
    gap = None
    if "Euclidean diag (q,v)" in run["results"] and "HRA diag (q,v)" in run["results"]:
        a, b = run["results"]["Euclidean diag (q,v)"]["losses"], run["results"]["HRA diag (q,v)"]["losses"]
        gap = {"max_abs_loss_gap": max(abs(x - y) for x, y in zip(a, b)), "final_loss_gap": a[-1] - b[-1],
               "acc_gap": {lv: run["results"]["HRA diag (q,v)"]["accuracy"][lv] - run["results"]["Euclidean diag (q,v)"]["accuracy"][lv] for lv in ("fine", "mid", "coarse")}}
    return {
        "task": f"shapes {task.image_shape}, {len(task.x_train)} train / {len(task.x_test)} test",
        "config": {k: v for k, v in cfg.__dict__.items() if k != "variants"},
        "pretrain_accuracy": run["pretrain_accuracy"],
        "radius_before": run["radius_before"],
        "rows": rows,
        "curves": curves,
        "euclid_vs_hra_bf16": gap,
        "skipped_variants": skipped,
        "seconds": time.perf_counter() - start,
        "all_variants": list(VARIANTS),
        "finite": all(math.isfinite(r["final_loss"]) for r in rows),
    }
