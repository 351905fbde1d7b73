"""The stages of paper 02's one-GPU study (:mod:`companion.hyperet.scale` lists them) and the structured closed
form they time as a peer.

Each stage is ``fn(ctx) -> JSON-able result`` (:class:`companion.core.stages.StageContext`). No plotly, geoopt or
MiniLM here: the prompt embeddings come from the committed cache.
"""

from __future__ import annotations

import math
import time

import torch

from companion.core import ParameterError, check_choice, time_ms
from companion.hyperet.align import DEFAULT_VARIANTS, VARIANTS, AlignConfig, run_alignment, summary_rows
from companion.hyperet.data import load_prompt_embeddings, shapes_task

__all__ = ["MATCH_TOL", "STRUCTURES", "alignment", "kernel", "structured_closed_form"]

STRUCTURES = {"diagonal": 1, "block": 4, "banded": 5}  # kind -> K (block side 4; bandwidth 2 -> 5 diagonals)
MATCH_TOL = 1e-2  # the fused kernel "matches" when its forward and gradient are within this of the fp32 reference
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


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


def kernel(ctx) -> dict:
    """The fused HRA op on ``layers`` × {q, v} frozen ``width²`` weights (CLIP ViT-L: 24 × 2 × 1024², bf16), per
    structure of ``structures``: forward and forward+backward milliseconds (``time_ms``: do_bench median on the
    GPU) of the peers first, the eager PyTorch chain (the official formula sequence, dense W_s) and the closed
    forms ``W0 W_sᵀ`` (dense matmul; the structured product a user who knows the identity would write), then the
    Triton kernel; each output's deviation from the fp64 identity; the kernel's forward and coefficient-gradient
    error against the fp32 reference, and ``matches_reference`` (both within :data:`MATCH_TOL` for every
    structure)."""
    from companion_kernels.hra import closed_form, hra_fused, hra_reference

    p = ctx.profile["kernel"]
    check_choice("kernel.dtype", p["dtype"], DTYPES)
    for kind in p["structures"]:
        check_choice("kernel.structures", kind, STRUCTURES)
    dtype, c, device = DTYPES[p["dtype"]], p["c"], ctx.device
    g, n = 2 * p["layers"], p["width"]
    gen = torch.Generator(device="cpu").manual_seed(ctx.seed)
    w0 = torch.randn(g, n, n, generator=gen)
    w0 = (w0 / w0.norm(dim=-1, keepdim=True) * 0.64).to(device=device, dtype=dtype)  # CLIP-like row norms
    rows = []
    for kind in p["structures"]:
        coef = _coef(g, STRUCTURES[kind], n, kind, device, ctx.seed).requires_grad_()
        grad_out = torch.randn(w0.shape, generator=gen).to(device=device, dtype=dtype)
        impls = {  # the peers first
            "eager PyTorch (official chain, dense W_s)": lambda: hra_reference(w0, coef, kind, c),
            "closed form W0·W_sᵀ (dense matmul)": lambda: closed_form(w0, coef, kind),
            "closed form W0·W_sᵀ (structured)": lambda: structured_closed_form(w0, coef, kind),
            "triton fused": lambda: hra_fused(w0, coef, kind=kind, c=c, impl="triton"),
        }
        exact = closed_form(w0.double(), coef.detach().double(), kind).double()
        out_k = impls["triton fused"]()
        (out_k.float() * grad_out.float()).sum().backward()
        gk, coef.grad = coef.grad.clone(), None
        out_r = hra_reference(w0.float(), coef, kind, c)
        (out_r * grad_out.float()).sum().backward()
        gr, coef.grad = coef.grad.clone(), None
        check = {"fwd_rel_err_vs_reference_fp32": float((out_k.float() - out_r).detach().norm() / out_r.detach().norm()),
                 "grad_rel_err_vs_reference_fp32": float((gk - gr).norm() / gr.norm())}
        for name, fn in impls.items():
            with torch.no_grad():
                dev = float((fn().double() - exact).norm() / exact.norm())
            fwd = time_ms(fn, device, warmup=25, rep=100, cpu_warmup=0, cpu_reps=1)  # the CPU: a smoke run

            def step(fn=fn):
                fn().backward(grad_out)
                coef.grad = None

            fb = time_ms(step, device, warmup=25, rep=100, cpu_warmup=0, cpu_reps=1)
            rows.append({"structure": kind, "impl": name, "fwd_ms": fwd, "fwd_bwd_ms": fb, "rel_dev_from_fp64_identity": dev,
                         **(check if name == "triton fused" else {})})
            ctx.log(f"{kind:>8}  {name:<45} fwd {fwd:8.3f} ms  fwd+bwd {fb:8.3f} ms  dev {dev:.1e}")
    matches = all(r.get(key, 0) < MATCH_TOL for r in rows
                  for key in ("fwd_rel_err_vs_reference_fp32", "grad_rel_err_vs_reference_fp32"))
    return {"layers": p["layers"], "width": n, "matrices": g, "dtype": p["dtype"], "c": c,
            "min_bytes_fwd": 2 * g * n * n * torch.tensor([], dtype=dtype).element_size(), "rows": rows,
            "matches_reference": matches}


def alignment(ctx) -> dict:
    """The alignment experiment of :mod:`companion.hyperet.align` on the procedural shapes hierarchy (family →
    shape → shape + colour; ``images`` of ``size``²) with a ViT-Tiny-sized encoder pre-trained on one level, under
    bf16 autocast (``amp``: the Möbius matvec becomes a bf16 matmul, where a Euclidean-vs-Möbius gap could
    appear). The default variants, plus HRA-diag through the fused kernel (``fused_variant``) when this call's
    ``kernel`` stage matched its reference, run one at a time while ``time_budget_s`` (and ``ctx.left()``) allows
    the slowest so far × 1.3; the others are listed in ``skipped_variants``."""
    start = time.perf_counter()
    p = dict(ctx.profile["alignment"])
    images, size, budget, fused = p.pop("images"), p.pop("size"), p.pop("time_budget_s"), p.pop("fused_variant")
    fields = set(AlignConfig.__dataclass_fields__) - {"seed", "variants"}
    if set(p) - fields:
        raise ParameterError("alignment", sorted(set(p) - fields), f"fields of AlignConfig: {', '.join(sorted(fields))}")
    fused = fused and bool((ctx.results.get("kernel") or {}).get("matches_reference"))
    cfg = AlignConfig(**p, seed=ctx.seed, variants=list(DEFAULT_VARIANTS) + (["HRA diag (q,v) fused"] if fused else []))
    cfg.validate()
    task = shapes_task(n=images, size=size, seed=ctx.seed, device=ctx.device)
    text = load_prompt_embeddings("shapes")
    # pre-train, then one variant at a time while the time budget allows (slowest variant so far × 1.3)
    run = run_alignment(task, text, AlignConfig(**{**cfg.__dict__, "variants": cfg.variants[:1]}), device=ctx.device)
    slowest = run["results"][cfg.variants[0]]["seconds"]
    for variant in cfg.variants[1:]:
        if 1.3 * slowest > min(budget - (time.perf_counter() - start), ctx.left()):
            break
        one = run_alignment(task, text, AlignConfig(**{**cfg.__dict__, "variants": [variant]}), device=ctx.device,
                            encoder=run["encoder"])
        run["results"].update(one["results"])
        slowest = max(slowest, one["results"][variant]["seconds"])
    rows = summary_rows(run)
    for row in rows:
        ctx.log(f"{row['variant']:<24} fine {row['acc_fine']:.3f} mid {row['acc_mid']:.3f} coarse {row['acc_coarse']:.3f} "
                f"share {row['trainable_share_%']:.2f}% step {row['step_ms']:.1f} ms")
    res = run["results"]
    gap = None
    if "Euclidean diag (q,v)" in res and "HRA diag (q,v)" in res:
        a, b = res["Euclidean diag (q,v)"]["losses"], res["HRA diag (q,v)"]["losses"]
        gap = {"max_abs_loss_gap": max(abs(x - y) for x, y in zip(a, b)), "final_loss_gap": a[-1] - b[-1],
               "acc_gap": {lv: res["HRA diag (q,v)"]["accuracy"][lv] - res["Euclidean diag (q,v)"]["accuracy"][lv]
                           for lv in ("fine", "mid", "coarse")}}
    return {
        "task": f"shapes {task.image_shape}, {len(task.x_train)} train / {len(task.x_test)} test",
        "config": {k: v for k, v in cfg.__dict__.items() if k != "variants"},
        "pretrain_accuracy": run["pretrain_accuracy"],
        "radius_before": run["radius_before"],
        "rows": rows,
        "curves": {name: {"curve": r["curve"], "loss_every_10": r["losses"][::10]} for name, r in res.items()},
        "euclid_vs_hra_bf16": gap,
        "skipped_variants": [v for v in cfg.variants if v not in res],
        "seconds": time.perf_counter() - start,
        "all_variants": list(VARIANTS),
        "finite": all(math.isfinite(r["final_loss"]) for r in rows),
    }
