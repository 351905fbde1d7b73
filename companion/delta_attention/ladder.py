"""The stages of Δ Attention's prefill ladder (``companion.delta_attention.scale``): one attention layer of
Llama-3.1-8B's geometry (B = 1, ``q_heads`` query heads, ``kv_heads`` KV heads, ``head_dim``, causal) at every
N of ``sizes``, all contenders on the same random q, k, v in the same run. No plotly here.

Contenders (:mod:`companion.delta_attention.gpu`), timed by :func:`companion.seer_attention.timing.time_call`:

* SDPA flash, SDPA cuDNN: dense causal attention, K/V expanded to ``q_heads`` heads (the peers, timed first);
* ``sparse``: the block-sparse sink + window pass alone (``block_size``-token blocks);
* ``sparse + Δ``: the same pass, then the fused Δ kernel (anchors every γ-th row, Eq. 6/7, and the dense tail
  by the official cut_n rule), for every γ of ``gammas``;
* ``Δ only``: the fused Δ kernel alone on a ready sparse output (its overhead, measured directly);
* ``sparse + Δ (unfused)``: the first γ, in the official order of operations (dense rows to a buffer, then
  gather / subtract / reshape-add in PyTorch).

Stages: :func:`tuning` (the Δ kernel's tile configurations at ``tune_len``), :func:`checks` (kernels against the
reference at the first size), :func:`rows` (the ladder) and :func:`summary` (speed-ups and Δ's overhead per N, γ).
"""

from __future__ import annotations

import torch

from companion.core import ParameterError
from companion.core.stages import StageContext
from companion.delta_attention.attention import delta_plan
from companion.delta_attention.gpu import (
    GiB,
    check_free_memory,
    delta_prefill,
    delta_prefill_unfused,
    sparse_index,
    sparse_prefill,
)
from companion.seer_attention.timing import (
    SDPA_LABELS,
    SINGLE_MS,
    check_backends,
    check_dtype,
    random_qkv,
    sdpa_causal,
    time_call,
)

#: rows of the correctness checks: random rows of the query-sparse kernel, last tail rows, last anchors
CHECK_ROWS, CHECK_TAIL, CHECK_ANCHORS = 96, 300, 200


def _cuda(ctx: StageContext) -> bool:
    return torch.device(ctx.device).type == "cuda"


def _inputs(ctx: StageContext, n: int):
    p = ctx.profile
    q, k, v = random_qkv(n, q_heads=p["q_heads"], kv_heads=p["kv_heads"], head_dim=p["head_dim"], device=ctx.device,
                         dtype=check_dtype("dtype", p["dtype"]), seed=ctx.seed + n)
    index, count, kept = sparse_index(n, sink=p["sink"], window=p["window"], block_size=p["block_size"], device=ctx.device)
    return q, k, v, index, count, kept


def delta_rows_share(n: int, gamma: int, tail: int) -> float:
    """Share of the causal scores the Δ kernel computes: the anchor rows and the dense tail."""
    rows = delta_plan(n, gamma, tail).dense_rows().double()
    return float((rows + 1).sum() / (n * (n + 1) / 2))


def tuning(ctx: StageContext) -> dict:
    """``Δ only`` at ``tune_len`` tokens and the first γ with every tile configuration of ``tune_configs``;
    hands the fastest to the later stages (the kernel's default without this stage)."""
    from triton.runtime.errors import OutOfResources

    from companion_kernels.query_sparse import query_sparse_delta_

    p = ctx.profile
    configs = p["tune_configs"]
    if not isinstance(configs, dict) or not configs or not all(isinstance(c, dict) for c in configs.values()):
        raise ParameterError("tune_configs", configs, "a non-empty dict {name: tile configuration of the Δ kernel}")
    n = min(p["tune_len"], max(p["sizes"]))
    q, k, v, index, count, _ = _inputs(ctx, n)
    buf = sparse_prefill(q, k, v, index, count, block_size=p["block_size"], impl=p["impl"])
    plan = delta_plan(n, p["gammas"][0], p["tail"])
    rows = []
    for name, cfg in configs.items():
        if ctx.left() <= 0:
            ctx.log(f"deadline: configuration {name} and the later ones not timed")
            break
        row = {"config": name, "N": n, "gamma": plan.gamma, **cfg}
        try:
            row["ms"], row["timing"] = time_call(lambda: query_sparse_delta_(
                buf, q, k, v, gamma=plan.gamma, num_delta_rows=plan.s_p, impl=p["impl"], config=cfg), ctx.device)
        except OutOfResources as err:  # a tile that does not fit the chip is an outcome of the sweep
            row["error"] = f"{type(err).__name__}: {err}"[:400]
        ctx.log(f"tune {name}: {row.get('ms', row.get('error'))}")
        rows.append(row)
    timed = [r for r in rows if "ms" in r]
    best = min(timed, key=lambda r: r["ms"])["config"] if timed else None
    if best is not None:
        ctx.shared["kernel_config"] = configs[best]
    return {"rows": rows, "best": best}


def checks(ctx: StageContext) -> dict:
    """At the first size: query-sparse rows against the reference, fused against unfused Δ, the dense tail and the
    anchor rows against the reference, and the rows inside Δ blocks against Eq. 6/7 (sparse + anchor Δ)."""
    from companion_kernels.query_sparse import query_sparse_attention
    from companion_kernels.query_sparse import reference as qs_reference

    p = ctx.profile
    config, n, gm, impl = ctx.shared.get("kernel_config"), p["sizes"][0], p["gammas"][0], p["impl"]
    q, k, v, index, count, _ = _inputs(ctx, n)
    out = {}
    sel = torch.randperm(n, generator=torch.Generator().manual_seed(ctx.seed))[:CHECK_ROWS].sort().values.to(ctx.device)
    got = query_sparse_attention(q, k, v, sel, impl=impl, config=config)
    out["rows_vs_reference_max_abs"] = float((got.float() - qs_reference.query_sparse_attention(q, k, v, sel).float()).abs().max())
    kw = dict(gamma=gm, tail=p["tail"], block_size=p["block_size"], impl=impl, config=config)
    sparse = sparse_prefill(q, k, v, index, count, block_size=p["block_size"], impl=impl)
    fused = delta_prefill(q, k, v, index, count, **kw)
    unfused = delta_prefill_unfused(q, k, v, index, count, **kw)
    out["fused_vs_unfused_max_abs"] = float((fused.float() - unfused.float()).abs().max())
    plan = delta_plan(n, gm, p["tail"])
    tail = plan.dense_rows(device=ctx.device)[-CHECK_TAIL:]
    want = qs_reference.query_sparse_attention(q, k, v, tail)
    out["tail_rows_vs_reference_max_abs"] = float((fused[:, :, tail].float() - want.float()).abs().max())
    anc = plan.anchors(device=ctx.device)[-CHECK_ANCHORS:]
    want_anc = qs_reference.query_sparse_attention(q, k, v, anc)
    out["anchor_rows_vs_reference_max_abs"] = float((fused[:, :, anc].float() - want_anc.float()).abs().max())
    inside = anc + gm // 2                                        # rows inside Δ blocks: Eq. 6/7
    want_mid = sparse[:, :, inside].float() + want_anc.float() - sparse[:, :, anc].float()
    out["delta_rows_eq67_max_abs"] = float((fused[:, :, inside].float() - want_mid).abs().max())
    out["N"] = n
    ctx.log("checks:", out)
    return out


def _timed(ctx: StageContext, rows: list, n: int, name: str, fn, *, gamma=None, extra=None, warm=True, needs_s=0.0):
    """Time ``fn`` as contender ``name`` at ``n`` into ``rows``; skipped when fewer than ``needs_s`` seconds are left."""
    row = {"N": n, "contender": name, "gamma": gamma, **(extra or {})}
    if ctx.left() <= 0 or ctx.left() < needs_s:
        row["skipped"] = f"deadline: {max(ctx.left(), 0):.0f} s left, would need ~{needs_s:.0f} s"
    else:
        try:
            row["ms"], row["timing"] = time_call(fn, ctx.device, warm=warm)
        except torch.OutOfMemoryError as err:  # a size too large for this contender; the others still run
            row["error"] = f"{type(err).__name__}: {err}"[:300]
            torch.cuda.empty_cache()
    ctx.log(f"N={n:>8} {name:<24} γ={gamma} " + (f"{row['ms']:10.2f} ms ({row['timing']})" if "ms" in row
                                                else row.get("skipped") or row["error"]))
    rows.append(row)
    return row.get("ms")


def rows(ctx: StageContext) -> list[dict]:
    """The ladder: at every N of ``sizes`` the dense backends of ``dense`` first (skipped when their time, estimated
    from the size before by the N² law, would not fit before the deadline; timed once, without a warm-up, over
    :data:`~companion.seer_attention.timing.SINGLE_MS`), then sparse, sparse + Δ and Δ only at every γ, and the
    unfused Δ at the first γ. A size the GPU's free memory cannot hold, or reached after the deadline, is skipped."""
    from companion_kernels.query_sparse import query_sparse_delta_

    p = ctx.profile
    dense = check_backends("dense", p["dense"])
    config, impl, block, tail = ctx.shared.get("kernel_config"), p["impl"], p["block_size"], p["tail"]
    out = []
    for n in p["sizes"]:
        if ctx.left() <= 0:
            out.append({"N": n, "contender": "all", "skipped": "deadline"})
            ctx.log(f"N={n}: skipped (deadline)")
            continue
        if _cuda(ctx):
            try:
                need, free = check_free_memory(n, hq=p["q_heads"], hkv=p["kv_heads"], d=p["head_dim"],
                                               dtype=check_dtype("dtype", p["dtype"]))
            except MemoryError as err:
                out.append({"N": n, "contender": "all", "skipped": str(err)})
                ctx.log(f"skipped: {err}")
                continue
            ctx.log(f"N={n}: needs ~{need / GiB:.1f} GiB of GPU memory at its peak; {free / GiB:.1f} GiB free")
        q, k, v, index, count, kept = _inputs(ctx, n)
        kk, vv = (x.repeat_interleave(p["q_heads"] // p["kv_heads"], dim=1) for x in (k, v))
        for b in dense:
            f = sdpa_causal(b)
            timed = [(r["N"], r["ms"]) for r in out if r["contender"] == SDPA_LABELS[b] and r.get("ms")]
            est_s = timed[-1][1] / 1e3 * (n / timed[-1][0]) ** 2 if timed else None   # seconds, by the N² law
            big = est_s is not None and est_s * 1e3 >= SINGLE_MS
            _timed(ctx, out, n, SDPA_LABELS[b], lambda f=f: f(q, kk, vv), warm=not big, extra={"compute_fraction": 1.0},
                   needs_s=0.0 if est_s is None else est_s * (1 if big else 5))
        del kk, vv
        _timed(ctx, out, n, "sparse", lambda: sparse_prefill(q, k, v, index, count, block_size=block, impl=impl),
               extra={"kept_share_sparse": kept, "compute_fraction": kept})
        buf = sparse_prefill(q, k, v, index, count, block_size=block, impl=impl)
        for gm in (g for g in p["gammas"] if g <= n):
            plan = delta_plan(n, gm, tail)
            share = delta_rows_share(n, gm, tail)
            _timed(ctx, out, n, "sparse + Δ", lambda gm=gm: delta_prefill(q, k, v, index, count, gamma=gm, tail=tail, block_size=block,
                                                                           impl=impl, config=config),
                   gamma=gm, extra={"kept_share_sparse": kept, "compute_fraction": kept + share})
            _timed(ctx, out, n, "Δ only", lambda plan=plan: query_sparse_delta_(buf, q, k, v, gamma=plan.gamma, num_delta_rows=plan.s_p,
                                                                                 impl=impl, config=config),
                   gamma=gm, extra={"delta_rows_share": share})
        gm = p["gammas"][0]
        _timed(ctx, out, n, "sparse + Δ (unfused)", lambda: delta_prefill_unfused(q, k, v, index, count, gamma=gm, tail=tail,
                                                                                   block_size=block, impl=impl, config=config),
               gamma=gm)
        del q, k, v, index, count, buf
        if _cuda(ctx):
            torch.cuda.empty_cache()
    return out


def summary(ctx: StageContext) -> list[dict]:
    """Per N and γ: sparse + Δ's time, its speed-ups over the dense backends, and Δ's overhead (sparse + Δ − sparse)
    against the 1/γ share of SDPA flash (the paper's cost claim), from the ``rows`` stage's result."""
    if "rows" not in ctx.results:
        raise RuntimeError("summary needs the rows stage's result: run it with the stage rows (or --resume a file that has it)")
    p, out = ctx.profile, []
    for n in p["sizes"]:
        at = {(r["contender"], r.get("gamma")): r.get("ms") for r in ctx.results["rows"] if r["N"] == n}
        flash, cudnn, sp = at.get(("SDPA flash", None)), at.get(("SDPA cuDNN", None)), at.get(("sparse", None))
        for gm in p["gammas"]:
            t = at.get(("sparse + Δ", gm))
            if t is None:
                continue
            s = {"N": n, "gamma": gm, "sparse_delta_ms": t, "sparse_ms": sp,
                 "speedup_vs_flash": flash / t if flash else None, "speedup_vs_cudnn": cudnn / t if cudnn else None}
            if sp is not None and flash:
                s["delta_overhead_ms"] = t - sp
                s["dense_share_ms"] = flash / gm                 # 1/γ of the dense (FA2) work
            out.append(s)
    return out
