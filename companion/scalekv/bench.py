"""The GPU study of paper 03 (ScaleKV): the stage bodies of :mod:`companion.scalekv.scale`.

``python -m companion.bench scalekv`` runs them in this order (each ``fn(ctx) -> JSON-able``, the profile's
part of the same name as its knobs):

* :func:`analytic_memory_stage` (:func:`analytic_memory`): retained K/V bytes of ScaleKV's budgets on
  Infinity's 1024^2 schedule (40 layers, drafters = blocks 0-2 as in the shipped 8B budgets) against the
  full cache: pure arithmetic, no GPU needed.
* :func:`larger_model_stage` (:func:`larger_model_protocol`): a larger next-scale model on more scales
  (10 scales up to 16x16, 8 layers, width 256) trained for a time budget on the digits, then the Table 1
  protocol: ASI calibration, every method at 4 / 10 / 20 % of the cache with the official 16-token window,
  fidelity to the full cache (PSNR, token agreement, teacher-forced hidden error) and retained bytes.
* :func:`latency_stage` (:func:`attention_latency`): one attention layer at Infinity-8B geometry (28 heads
  of 128, bf16) at every scale of the 1024^2 schedule, with the full cache (timed first) and with a cache
  compressed to a fixed budget (650 tokens, the paper's 10 %) from the first scale that exceeds it; median
  of ``triton.testing.do_bench`` (wall clock on a CPU smoke run).
* :func:`selection_stage` (:func:`selection_timing`): the PyTorch reference of the token selection (window
  scores -> max-pool -> top-k -> gather), eager and ``torch.compile``-d, then our fused Triton kernel, on
  random tensors at Infinity-8B geometry, with the share of kept indices both agree on.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from companion.core import check_choice, check_float, check_int, time_ms
from companion.scalekv.budgets import expected_retained, retained_lengths, scalekv_budgets, uniform_budget
from companion.scalekv.schedule import INFINITY_1024, INFINITY_8B, cumulative_tokens, kv_bytes, map_sizes

__all__ = ["larger_model_protocol", "attention_latency", "selection_timing", "analytic_memory", "analytic_memory_stage",
           "larger_model_stage", "latency_stage", "selection_stage"]

LARGE_SIDES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
# companion.core.time_ms settings: do_bench warm-up / repetition ms on CUDA, untimed / timed calls on a CPU.
TIMING = {"warmup": 5, "rep": 25, "cpu_warmup": 2, "cpu_reps": 5}
DTYPES = ("bfloat16", "float16", "float32")
COMPILED = "reference (torch.compile)"


def larger_model_protocol(device, *, sides=LARGE_SIDES, layers: int = 8, dim: int = 256, heads: int = 8, train_seconds: float = 60.0,
                          max_steps: int = 3000, batch_size: int = 64, lr: float = 2e-3, fractions=(0.04, 0.1, 0.2),
                          n_cal: int = 20, n_eval: int = 100, temperature: float = 0.6, window_size: int = 16, delta: float = 0.1,
                          drafters_per_scale: int = 1, seed: int = 0, log=print) -> dict:
    """Train the larger model for about ``train_seconds`` and run the Table 1 protocol on it."""
    from companion.scalekv.data import load_digit_tokens
    from companion.scalekv.experiment import calibrate, sweep
    from companion.scalekv.model import TinyVAR, VARConfig
    from companion.scalekv.train import train_var

    device = torch.device(device)
    check_float("train_seconds", train_seconds, lo=0.0, lo_open=True)
    data = load_digit_tokens(sides)
    torch.manual_seed(seed)
    model = TinyVAR(VARConfig(sides=tuple(sides), layers=layers, dim=dim, heads=heads)).to(device)
    probe = TinyVAR(VARConfig(sides=tuple(sides), layers=layers, dim=dim, heads=heads)).to(device)
    t0 = time.perf_counter()
    train_var(probe, data.tokens, data.labels, steps=3, batch_size=batch_size, lr=lr, seed=seed)  # warm-up and step time
    if device.type == "cuda":
        torch.cuda.synchronize()
    t1 = time.perf_counter()
    train_var(probe, data.tokens, data.labels, steps=5, batch_size=batch_size, lr=lr, seed=seed)
    if device.type == "cuda":
        torch.cuda.synchronize()
    per_step = (time.perf_counter() - t1) / 5
    del probe
    steps = int(max(10, min(max_steps, train_seconds / max(per_step, 1e-6))))
    log(f"larger model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, {model.num_tokens} tokens, "
        f"{per_step * 1e3:.1f} ms/step -> {steps} steps")
    t2 = time.perf_counter()
    losses = train_var(model, data.tokens, data.labels, steps=steps, batch_size=batch_size, lr=lr, seed=seed)
    train_s = time.perf_counter() - t2
    log(f"trained in {train_s:.1f} s, final loss {sum(losses[-20:]) / len(losses[-20:]):.3f}")
    cal = calibrate(model, torch.arange(n_cal) % 10, seed=seed + 100, temperature=temperature)
    labels = torch.arange(n_eval) % 10
    t3 = time.perf_counter()
    res = sweep(model, labels, cal.z, fractions, seed=seed, temperature=temperature, window_size=window_size, delta=delta,
                drafters_per_scale=drafters_per_scale)
    rows = res.table.drop(columns=["label"]).to_dict(orient="records")
    drafters = {f: res.budgets[("scalekv", f)].drafters.nonzero().tolist() for f in fractions}
    return {
        "config": {"sides": list(sides), "layers": layers, "dim": dim, "heads": heads, "tokens": model.num_tokens,
                   "parameters": sum(p.numel() for p in model.parameters()), "batch_size": batch_size, "lr": lr,
                   "steps": steps, "train_seconds": round(train_s, 2), "setup_seconds": round(t2 - t0, 2),
                   "final_loss": float(sum(losses[-20:]) / len(losses[-20:])), "n_cal": n_cal, "n_eval": n_eval,
                   "temperature": temperature, "window_size": window_size, "delta": delta,
                   "drafters_per_scale": drafters_per_scale},
        "z": [[None if math.isnan(v) else round(v, 4) for v in row] for row in cal.z.tolist()],
        "drafters": {f"{f:g}": v for f, v in drafters.items()},
        "rows": rows,
        "sweep_seconds": round(time.perf_counter() - t3, 2),
        "loss_curve": [round(float(x), 4) for x in losses[:: max(1, len(losses) // 200)]],
    }


def _compressed_lengths(sides, budget: int) -> list[int]:
    """Keys each scale's queries attend with a cache compressed to ``budget`` (the uniform rule)."""
    held = retained_lengths(sides, budget, [budget] * len(sides))
    return [prev + n for prev, n in zip([0] + held[:-1], map_sizes(sides))]


def attention_latency(device, *, sides=INFINITY_1024, geometry=None, batch: int = 2, budget: int = 650,
                      dtype=torch.bfloat16, seed: int = 0, log=print) -> list[dict]:
    """One layer's attention per scale: full cache vs a cache compressed to ``budget`` tokens."""
    device = torch.device(device)
    geometry = geometry or INFINITY_8B
    h, d = geometry["heads"], geometry["head_dim"]
    sizes, cum = map_sizes(sides), cumulative_tokens(sides)
    comp = _compressed_lengths(sides, budget)
    g = torch.Generator(device="cpu").manual_seed(seed)
    kk = torch.randn(batch, h, cum[-1], d, generator=g).to(device=device, dtype=dtype)
    vv = torch.randn(batch, h, cum[-1], d, generator=g).to(device=device, dtype=dtype)
    rows = []
    for k, (n, nf, nc) in enumerate(zip(sizes, cum, comp)):
        q = torch.randn(batch, h, n, d, generator=g).to(device=device, dtype=dtype)
        kf, vf = kk[:, :, :nf], vv[:, :, :nf]
        kc, vc = kk[:, :, :nc].contiguous(), vv[:, :, :nc].contiguous()
        full_ms = time_ms(lambda: F.scaled_dot_product_attention(q, kf, vf), device, **TIMING)
        comp_ms = time_ms(lambda: F.scaled_dot_product_attention(q, kc, vc), device, **TIMING)
        rows.append({"scale": k, "side": sides[k], "queries": n, "full_keys": nf, "compressed_keys": nc,
                     "full_ms": round(full_ms, 5), "compressed_ms": round(comp_ms, 5)})
        log(f"  scale {k:2d} ({sides[k]:2d}x{sides[k]:<2d}) keys {nf:6d} -> {nc:6d}: {full_ms:.4f} -> {comp_ms:.4f} ms")
    return rows


def selection_timing(device, *, geometry=None, batch: int = 2, cases=((2954, 48), (6425, 48), (10521, 64)), capacity: int = 650,
                     window: int = 16, dtype=torch.bfloat16, compile_reference: bool = True, seed: int = 1, log=print) -> list[dict]:
    """The PyTorch reference (eager, then ``torch.compile``-d on CUDA) and the fused kernel (on CUDA, or in the
    Triton interpreter) at Infinity-8B geometry, random tensors: the peers first at every size.

    ``cases``: (keys, side of the current map). Defaults: 2,954 keys = the steady state before the
    last map at 10 % (650 kept + the 48x48 map), 6,425 = a full cache before the last map, 10,521 =
    every token of the 1024^2 schedule (current map 64x64). The window is the 16 patch centroids.
    """
    from companion.scalekv.cache import window_positions

    from companion_kernels.dispatch import interpreting
    from companion_kernels.scalekv_select import scalekv_select

    device = torch.device(device)
    geometry = geometry or INFINITY_8B
    h, d = geometry["heads"], geometry["head_dim"]
    check_int("capacity", capacity, lo=window)
    compiled = None
    if compile_reference and device.type == "cuda":
        from companion_kernels.scalekv_select.reference import scalekv_select_reference

        compiled = torch.compile(scalekv_select_reference, dynamic=False)
    rows = []
    g = torch.Generator(device="cpu").manual_seed(seed)
    for n, side in cases:
        q = torch.randn(batch, h, window, d, generator=g).to(device=device, dtype=dtype)
        k = torch.randn(batch, h, n, d, generator=g).to(device=device, dtype=dtype)
        v = torch.randn(batch, h, n, d, generator=g).to(device=device, dtype=dtype)
        widx = window_positions(side, n - side * side, n, window)[0].to(device)
        label = f"N={n}, C={capacity}"
        contenders = {"reference": lambda: scalekv_select(q, k, v, widx, capacity, impl="reference")}
        if compiled is not None:
            contenders[COMPILED] = lambda: compiled(q, k, v, widx, capacity)
        if device.type == "cuda" or interpreting():
            contenders["triton"] = lambda: scalekv_select(q, k, v, widx, capacity, impl="triton")
        kept = {}
        for impl, fn in contenders.items():
            row = {"label": label, "key_len": n, "capacity": capacity, "impl": impl}
            try:
                kept[impl] = fn()[2]
                row["ms"] = round(time_ms(fn, device, **TIMING), 5)
            except Exception as exc:  # noqa: BLE001 - a failing compile must not cost the other contenders' rows
                if impl != COMPILED:
                    raise
                row["error"] = repr(exc)[:300]
            rows.append(row)
            log(f"  {label:<22} {impl:<26} {row.get('ms', row.get('error'))}")
        if "triton" in kept:
            a, b = kept["triton"], kept["reference"]
            same = torch.stack([torch.isin(a[i, j], b[i, j]) for i in range(a.shape[0]) for j in range(a.shape[1])]).float().mean().item()
            for r in rows:
                if r["label"] == label:
                    r["index_agreement"] = round(same, 6)
    return rows


def analytic_memory(*, sides=INFINITY_1024, geometry=None, fraction: float = 0.1, drafter_layers=(0, 1, 2), batch: int = 8,
                    cfg: bool = True, delta: float = 70 / 650, bytes_per_element: int = 2, window_size: int = 16) -> dict:
    """Retained K/V bytes per scale of ScaleKV's budgets vs the full cache on Infinity's schedule (arithmetic)."""
    geometry = geometry or INFINITY_8B
    nl, h, d = geometry["layers"], geometry["heads"], geometry["head_dim"]
    b_eff = batch * (2 if cfg else 1)
    drafters = torch.zeros(nl, len(sides), dtype=torch.bool)
    drafters[list(drafter_layers), :] = True
    b = scalekv_budgets(drafters, fraction, sides, delta=delta, window_size=window_size)
    kept = expected_retained(b)
    cum = cumulative_tokens(sides)
    per_token = kv_bytes(1, h, d, batch=b_eff, bytes_per_element=bytes_per_element)
    rows = [{"scale": k, "side": s, "full_bytes": nl * cum[k] * per_token, "scalekv_bytes": int(kept[:, k].sum()) * per_token}
            for k, s in enumerate(sides)]
    return {"fraction": fraction, "budget_tokens": uniform_budget(fraction, sides), "batch": batch, "cfg": cfg, "layers": nl,
            "heads": h, "head_dim": d, "rows": rows,
            "drafter_budget_range": [int(b.table[:, b.first:][b.drafters[:, b.first:]].min()), int(b.table[:, b.first:][b.drafters[:, b.first:]].max())],
            "refiner_budget_range": [int(b.table[:, b.first:][~b.drafters[:, b.first:]].min()), int(b.table[:, b.first:][~b.drafters[:, b.first:]].max())]}


# ---------------------------------------------------------------- the stages of companion.scalekv.scale
def _dtype(name: str, key: str) -> torch.dtype:
    return getattr(torch, check_choice(key, name, DTYPES))


def analytic_memory_stage(ctx) -> dict:
    """Retained K/V bytes per scale of ScaleKV's budgets vs the full cache at Infinity-8B scale (arithmetic)."""
    p = ctx.profile["analytic_memory"]
    return analytic_memory(fraction=p["fraction"], batch=p["batch"])


def larger_model_stage(ctx) -> dict:
    """The larger model trained for ``train_seconds`` and the Table 1 protocol on it (:func:`larger_model_protocol`)."""
    p = ctx.profile["larger_model"]
    if ctx.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    out = larger_model_protocol(ctx.device, **{**p, "sides": tuple(p["sides"]), "fractions": tuple(p["fractions"])},
                                seed=ctx.seed, log=ctx.log)
    for r in out["rows"]:
        ctx.log(f"  {r['method']:<10} {r['fraction']:.0%}: PSNR {r['psnr']:6.2f} dB, agreement {r['agreement']:.3f}, "
                f"hidden error {r['hidden_error']:.4f}, memory {r['memory_fraction']:.3f}")
    return out


def latency_stage(ctx) -> dict:
    """One attention layer per scale, full vs compressed cache (:func:`attention_latency`): ``rows`` and their
    sum over the scales, ``total`` (``speedup`` = full / compressed)."""
    p = ctx.profile["latency"]
    rows = attention_latency(ctx.device, sides=tuple(p["sides"]), geometry={"heads": p["heads"], "head_dim": p["head_dim"]},
                             batch=p["batch"], budget=p["budget"], dtype=_dtype(p["dtype"], "latency.dtype"), seed=ctx.seed,
                             log=ctx.log)
    full_ms, comp_ms = sum(r["full_ms"] for r in rows), sum(r["compressed_ms"] for r in rows)
    ctx.log(f"  all scales: {full_ms:.3f} ms full vs {comp_ms:.3f} ms compressed ({full_ms / comp_ms:.2f}x)")
    return {"rows": rows, "total": {"full_ms": round(full_ms, 4), "compressed_ms": round(comp_ms, 4),
                                    "speedup": round(full_ms / comp_ms, 3)}}


def selection_stage(ctx) -> list[dict]:
    """The fused selection against its reference at every batch of the profile (:func:`selection_timing`); rows
    carry their ``batch``. A batch is started only while the stage has time left."""
    p = ctx.profile["selection"]
    rows: list[dict] = []
    for batch in p["batches"]:
        if rows and ctx.left() <= 0:
            ctx.log(f"  selection: no time left, batches after B={rows[-1]['batch']} not timed")
            break
        part = selection_timing(ctx.device, geometry={"heads": p["heads"], "head_dim": p["head_dim"]}, batch=batch,
                                cases=[tuple(c) for c in p["cases"]], capacity=p["capacity"], window=p["window"],
                                dtype=_dtype(p["dtype"], "selection.dtype"), compile_reference=p["compile_reference"],
                                seed=ctx.seed + 1, log=ctx.log)
        rows += [{**r, "batch": batch, "label": f"B={batch}, {r['label']}"} for r in part]
    return rows
