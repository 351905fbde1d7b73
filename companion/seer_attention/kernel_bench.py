"""The stages of the block-sparse kernel study (``companion.seer_attention.scale_kernel``): the op of
``companion_kernels.block_sparse`` against its peers on the same inputs in the same run. No plotly here.

Protocol: B = 1, ``heads`` heads of ``head_dim``, causal, masks from ``random_block_mask`` (the same number of
kept blocks in every query-block row, the diagonal always kept) at the densities of the profile, the same mask
for every contender. Effective TFLOP/s count the kept blocks only (:func:`timing.attention_flops`).

* :func:`sweep`: the forward kernel's launch variants (``benchmarks/block_sparse_NOTES.md``) at ``sweep_len``,
  their agreement with the plain-pointer variant and their time; the fastest that agrees (geometric mean over
  ``sweep_densities``) is the configuration :func:`main` times;
* :func:`main`: per length, the dense SDPA backends first, then per density compiled FlexAttention with the same
  block mask (kept blocks below the diagonal as full blocks, the diagonal as partial ones: its fastest form),
  then ours (the kernel alone, and through the validating API);
* :func:`backward_sweep`: the backward kernels' launch variants at ``sweep_len``, time and agreement;
* :func:`backward`: forward + backward (gradients of q, k, v) of compiled FlexAttention and ours on the same masks;
* :func:`pooled`: ``pooled_attention_map`` (SeerAttention's distillation target, no [B, H, N, N] buffer) against
  the naive PyTorch version (full softmax, max-pool, normalise), time and peak memory.
"""

from __future__ import annotations

import math

import torch

from companion.core import ParameterError
from companion.core.stages import StageContext
from companion.seer_attention.timing import (
    attention_flops,
    check_backends,
    check_dtype,
    flex_block_mask,
    random_qkv,
    sdpa_causal,
    sync,
    time_call,
)

#: a launch variant agrees with the plain-pointer one when its relative error is below this (bf16 rounding)
AGREEMENT = 1e-2


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖ in float32."""
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _variants(name: str, variants) -> dict:
    if not isinstance(variants, dict) or not all(isinstance(c, dict) for c in variants.values()):
        raise ParameterError(name, variants, "a dict {variant name: launch config of the forward kernel}")
    return variants


def _inputs(ctx: StageContext, n: int, seed: int):
    p = ctx.profile
    return random_qkv(n, q_heads=p["heads"], head_dim=p["head_dim"], device=ctx.device, dtype=check_dtype("dtype", p["dtype"]),
                      seed=seed)


def _mask(ctx: StageContext, n: int, block: int, density: float, generator: torch.Generator) -> torch.Tensor:
    from companion_kernels.block_sparse import random_block_mask

    return random_block_mask(1, ctx.profile["heads"], math.ceil(n / block), density, generator=generator).to(ctx.device)


def _variant_row(ctx, name, cfg, q, k, v, lists: dict, refs: dict, block: int) -> dict:
    """One launch variant at every density of ``lists``: its error against ``refs`` and its time."""
    from triton.runtime.errors import OutOfResources

    from companion_kernels.block_sparse.triton import block_sparse_attention_triton

    row = {"variant": name, "config": cfg}
    if block != ctx.profile["block_size"]:
        row["block_size"] = block
    try:
        for dens, (idx, cnt) in lists.items():
            out = block_sparse_attention_triton(q, k, v, idx, cnt, block_size=block, config=cfg)
            row[f"err_vs_ptr_{dens}"] = rel_err(out, refs[dens])
            row[f"ms_{dens}"], _ = time_call(lambda: block_sparse_attention_triton(q, k, v, idx, cnt, block_size=block, config=cfg),
                                             ctx.device)
    except OutOfResources as err:  # a variant that does not fit the chip is an outcome of the sweep
        row["error"] = f"{type(err).__name__}: {err}"[:300]
    ctx.log(row)
    return row


def sweep(ctx: StageContext) -> dict:
    """Every launch variant of ``variants`` (block ``block_size``) at ``sweep_len`` and each of ``sweep_densities``,
    and of ``variants_b64`` (block 64) at the lowest of them: error against the plain-pointer variant and time.
    Hands the fastest agreeing configuration of block ``block_size`` to :func:`main`."""
    from companion_kernels.block_sparse import dense_to_index, index_to_dense, mask_density
    from companion_kernels.block_sparse.triton import block_sparse_attention_triton, default_config

    p = ctx.profile
    variants, variants_b64 = _variants("variants", p["variants"]), _variants("variants_b64", p["variants_b64"])
    n, block = p["sweep_len"], p["block_size"]
    g = torch.Generator().manual_seed(ctx.seed + 1)
    q, k, v = _inputs(ctx, n, ctx.seed + 1)
    rows = []
    for blk, chosen, densities in ((block, variants, p["sweep_densities"]), (64, variants_b64, [min(p["sweep_densities"])])):
        lists = {dens: dense_to_index(_mask(ctx, n, blk, dens, g)) for dens in densities}
        refs = {dens: block_sparse_attention_triton(q, k, v, *lists[dens], block_size=blk, config=dict(tma=0)) for dens in lists}
        for name, cfg in chosen.items():
            if ctx.left() <= 0:
                ctx.log(f"deadline: variant {name} and the later ones not timed")
                break
            row = _variant_row(ctx, name, cfg, q, k, v, lists, refs, blk)
            if blk != block and "error" not in row:
                dens = densities[0]
                work = attention_flops(p["heads"], p["head_dim"], n, mask_density(index_to_dense(*lists[dens], math.ceil(n / blk))))
                row[f"tflops_{dens}"] = work / row[f"ms_{dens}"] / 1e9
            rows.append(row)
    ok = [r for r in rows if "block_size" not in r and "error" not in r
          and max(r[f"err_vs_ptr_{d}"] for d in p["sweep_densities"]) < AGREEMENT]
    if ok:
        best = min(ok, key=lambda r: math.prod(r[f"ms_{d}"] for d in p["sweep_densities"]))
        ctx.shared["config"] = {**default_config(block, p["head_dim"], q.dtype), **best["config"]}
        ctx.log("best variant:", best["variant"])
    return {"n": n, "rows": rows}


def main(ctx: StageContext) -> dict:
    """Per length of ``lengths``: the dense SDPA backends of ``dense``, then per density of ``densities``
    FlexAttention (``flex``) and ours, with their speed-ups and the errors against dense SDPA (density 1) and
    FlexAttention. Times the configuration :func:`sweep` chose (the kernel's default without it)."""
    from companion_kernels.block_sparse import block_sparse_attention, dense_to_index, mask_density
    from companion_kernels.block_sparse.triton import block_sparse_attention_triton, default_config

    p = ctx.profile
    dense = check_backends("dense", p["dense"])
    block, heads, d = p["block_size"], p["heads"], p["head_dim"]
    cfg = ctx.shared.get("config") or default_config(block, d, check_dtype("dtype", p["dtype"]))
    ctx.log("config:", cfg)
    flex = None
    if p["flex"]:
        from torch.nn.attention.flex_attention import flex_attention

        flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    for n in p["lengths"]:
        if ctx.left() <= 0:
            ctx.log(f"deadline: N={n} and beyond not timed")
            break
        g = torch.Generator().manual_seed(ctx.seed + n)
        q, k, v = _inputs(ctx, n, ctx.seed + n)
        dense_ms = {}
        for b in dense:  # the peers first
            f = sdpa_causal(b)
            ms, how = time_call(lambda: f(q, k, v), ctx.device)
            dense_ms[b] = ms
            rows.append(dict(n=n, density=1.0, backend=f"sdpa_{b}", ms=ms, timing=how, tflops=attention_flops(heads, d, n) / ms / 1e9))
            ctx.log(rows[-1])
        for dens in p["densities"]:
            mask = _mask(ctx, n, block, dens, g)
            actual = mask_density(mask)
            idx, cnt = dense_to_index(mask)
            work = attention_flops(heads, d, n, actual)
            out = block_sparse_attention(q, k, v, idx, cnt, block_size=block, causal=True, impl=p["impl"])
            row = dict(n=n, density=dens, density_actual=actual, backend="ours")
            if dens == 1.0:
                row["err_vs_sdpa"] = rel_err(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
            if flex is not None:
                bm = flex_block_mask(mask, block, n)
                row["err_vs_flex"] = rel_err(out, flex(q, k, v, block_mask=bm))
                fms, how = time_call(lambda: flex(q, k, v, block_mask=bm), ctx.device)
                rows.append(dict(n=n, density=dens, density_actual=actual, backend="flex", ms=fms, timing=how,
                                 tflops=work / fms / 1e9))
                ctx.log(rows[-1])
            ms, how = time_call(lambda: block_sparse_attention_triton(q, k, v, idx, cnt, block_size=block, config=cfg), ctx.device)
            row.update(ms=ms, timing=how, tflops=work / ms / 1e9)
            row["ms_api_checked"], _ = time_call(lambda: block_sparse_attention(q, k, v, idx, cnt, block_size=block, impl=p["impl"],
                                                                                 check_index=True), ctx.device)
            if flex is not None:
                row["speedup_vs_flex"] = fms / ms
            row.update({f"speedup_vs_sdpa_{b}": t / ms for b, t in dense_ms.items()})
            ctx.log(row)
            rows.append(row)
            del out, idx, cnt, mask
        del q, k, v
        if torch.device(ctx.device).type == "cuda":
            torch.cuda.empty_cache()
    return {"config": cfg, "rows": rows}


def backward_sweep(ctx: StageContext) -> dict:
    """The backward kernels' launch variants (``backward_variants``: the options of ``backward_config``, i.e. warps,
    stages, the sub-tiles ``sub_n``/``sub_m``, TMA loads, blocks split over programs) at ``sweep_len`` and each of
    ``backward_densities``: the two kernels alone (the forward's output and log-sum-exp computed once), their time
    and the largest relative error of dq, dk, dv against the first variant's. Names the fastest agreeing one."""
    from triton.runtime.errors import OutOfResources

    from companion_kernels.block_sparse import dense_to_index
    from companion_kernels.block_sparse.triton import block_sparse_attention_backward_triton, block_sparse_attention_triton

    p = ctx.profile
    variants = _variants("backward_variants", p["backward_variants"])
    n, block = p["sweep_len"], p["block_size"]
    g = torch.Generator().manual_seed(ctx.seed + 2)
    q, k, v = _inputs(ctx, n, ctx.seed + 2)
    grad_out = torch.randn(q.shape, generator=g).to(device=q.device, dtype=q.dtype)
    cases = {}
    for dens in p["backward_densities"]:
        idx, cnt = dense_to_index(_mask(ctx, n, block, dens, g))
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        out = block_sparse_attention_triton(q, k, v, idx, cnt, block_size=block, lse=lse)
        cases[dens] = (out, lse, idx, cnt)
    refs, rows = {}, []
    for name, cfg in variants.items():
        if ctx.left() <= 0:
            ctx.log(f"deadline: backward variant {name} and the later ones not timed")
            break
        row = {"variant": name, "config": cfg}
        try:
            for dens, (out, lse, idx, cnt) in cases.items():
                run = lambda: block_sparse_attention_backward_triton(grad_out, q, k, v, out, lse, idx, cnt,  # noqa: E731
                                                                     block_size=block, config=cfg)
                grads = run()
                refs.setdefault(dens, grads)
                row[f"err_vs_first_{dens}"] = max(rel_err(a, b) for a, b in zip(grads, refs[dens]))
                row[f"ms_{dens}"], _ = time_call(run, ctx.device)
        except OutOfResources as err:  # a variant that does not fit the chip is an outcome of the sweep
            row["error"] = f"{type(err).__name__}: {err}"[:300]
        ctx.log(row)
        rows.append(row)
    ok = [r for r in rows if "error" not in r and max(r[f"err_vs_first_{d}"] for d in cases) < AGREEMENT]
    best = min(ok, key=lambda r: math.prod(r[f"ms_{d}"] for d in cases))["variant"] if ok else None
    ctx.log("fastest agreeing backward variant:", best)
    return {"n": n, "rows": rows, "fastest": best}


def backward(ctx: StageContext) -> list[dict]:
    """Forward + backward (the gradients of q, k, v of Σ dO·out, dO fixed and random) per length of
    ``backward_lengths`` and density of ``backward_densities``: compiled FlexAttention with the same block mask
    first (when ``flex``), then ours through the validating API (the Triton backward kernels); time, effective
    TFLOP/s (the forward's 2 matmuls and the backward's 5 per kept block: 3.5× the forward's work) and each
    gradient's relative error against FlexAttention's."""
    from companion_kernels.block_sparse import block_sparse_attention, dense_to_index, mask_density

    p = ctx.profile
    block, heads, d = p["block_size"], p["heads"], p["head_dim"]
    flex = None
    if p["flex"]:
        from torch.nn.attention.flex_attention import flex_attention

        flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    for n in p["backward_lengths"]:
        g = torch.Generator().manual_seed(ctx.seed + 3 * n)
        q, k, v = (t.requires_grad_(True) for t in _inputs(ctx, n, ctx.seed + 3 * n))
        grad_out = torch.randn(q.shape, generator=g).to(device=q.device, dtype=q.dtype)
        for dens in p["backward_densities"]:
            if ctx.left() <= 0:
                ctx.log(f"deadline: backward at N={n}, density {dens} and beyond not timed")
                return rows
            mask = _mask(ctx, n, block, dens, g)
            idx, cnt = dense_to_index(mask)
            work = 3.5 * attention_flops(heads, d, n, mask_density(mask))
            row = dict(n=n, density=dens, density_actual=mask_density(mask))

            def grads(attend):
                q.grad = k.grad = v.grad = None
                attend().backward(grad_out)
                return q.grad, k.grad, v.grad

            ours = lambda: block_sparse_attention(q, k, v, idx, cnt, block_size=block, impl=p["impl"])  # noqa: E731
            if flex is not None:  # the peer first
                bm = flex_block_mask(mask, block, n)
                theirs = lambda: flex(q, k, v, block_mask=bm)  # noqa: E731
                row["flex_ms"], row["flex_timing"] = time_call(lambda: grads(theirs), ctx.device)
                row["flex_tflops"] = work / row["flex_ms"] / 1e9
                want = grads(theirs)
                row.update({f"err_d{name}_vs_flex": rel_err(a, b) for name, a, b in zip("qkv", grads(ours), want)})
            row["ours_ms"], row["ours_timing"] = time_call(lambda: grads(ours), ctx.device)
            row["ours_tflops"] = work / row["ours_ms"] / 1e9
            if flex is not None:
                row["speedup_vs_flex"] = row["flex_ms"] / row["ours_ms"]
            ctx.log(row)
            rows.append(row)
        del q, k, v, grad_out
        if torch.device(ctx.device).type == "cuda":
            torch.cuda.empty_cache()
    return rows


def naive_pooled(q: torch.Tensor, k: torch.Tensor, block: int, sm_scale: float | None = None) -> torch.Tensor:
    """Plain PyTorch: the whole [B, H, N, N] causal softmax, then max_pool2d, then row normalisation."""
    n, d = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    s = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    s.masked_fill_(~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    p = torch.softmax(s, dim=-1)
    del s
    pooled = torch.nn.functional.max_pool2d(p, block, block, ceil_mode=True)
    return pooled / pooled.sum(-1, keepdim=True)


def _with_peak(fn, device) -> tuple[torch.Tensor, float | None]:
    """``fn()`` and the device memory it allocated at its peak beyond what was held before, MiB (None off CUDA)."""
    if torch.device(device).type != "cuda":
        return fn(), None
    torch.cuda.empty_cache()
    sync(device)
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    sync(device)
    return out, (torch.cuda.max_memory_allocated() - base) / 2**20


def pooled(ctx: StageContext) -> list[dict]:
    """``pooled_attention_map`` at every length of ``pooled_lengths`` and ``naive_len``, block ``pooled_block``:
    time, peak extra memory, the rows' sums; at ``naive_len`` the naive version first, then ours, and their
    largest difference."""
    from companion_kernels.block_sparse import pooled_attention_map

    p = ctx.profile
    block, rows = p["pooled_block"], []
    for n in sorted(set(p["pooled_lengths"]) | {p["naive_len"]}):
        if ctx.left() <= 0:
            ctx.log(f"deadline: N={n} and beyond not timed")
            break
        q, k, _ = _inputs(ctx, n, ctx.seed + 7)
        row = dict(n=n, block=block, official_R_buffer_mib=p["heads"] * n * math.ceil(n / block) * 2 / 2**20)
        if n == p["naive_len"]:  # the peer first
            nv, row["naive_peak_extra_mib"] = _with_peak(lambda: naive_pooled(q, k, block), ctx.device)
            row["naive_ms"], _ = time_call(lambda: naive_pooled(q, k, block), ctx.device)
        ours, row["ours_peak_extra_mib"] = _with_peak(lambda: pooled_attention_map(q, k, block_size=block, impl=p["impl"]), ctx.device)
        row["ours_ms"], _ = time_call(lambda: pooled_attention_map(q, k, block_size=block, impl=p["impl"]), ctx.device)
        row["rows_sum_to_1_maxdev"] = float((ours.sum(-1) - 1).abs().max())
        if n == p["naive_len"]:
            row["max_abs_diff_vs_naive"] = float((ours - nv).abs().max())
            row["speedup_vs_naive"] = row["naive_ms"] / row["ours_ms"]
            del nv
        ctx.log(row)
        rows.append(row)
        del q, k, ours
    return rows
