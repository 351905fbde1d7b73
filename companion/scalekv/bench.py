"""The GPU scale-up of paper 03 (ScaleKV), shared by ``benchmarks/scalekv_gpu.py`` and the notebook's GPU profile.

Three parts, each a function returning plain dicts (JSON-ready):

* :func:`larger_model_protocol`: a larger next-scale model on more scales (10 scales up to 16x16,
  8 layers, width 256) trained for a time budget on the digits, then the Table 1 protocol: ASI
  calibration, every method at 4 / 10 / 20 % of the cache with the official 16-token window,
  fidelity to the full cache (PSNR, token agreement, teacher-forced hidden error) and retained bytes.
* :func:`attention_latency`: one attention layer at Infinity-8B geometry (28 heads of 128, bf16) at
  every scale of the 1024^2 schedule, with the full cache and with a cache compressed to a fixed
  budget (650 tokens, the paper's 10 %) from the first scale that exceeds it; median of
  ``triton.testing.do_bench`` (wall clock on a CPU smoke run).
* :func:`selection_timing`: the fused Triton selection (window scores -> max-pool -> top-k ->
  gather) against its PyTorch reference, eager and ``torch.compile``-d, on random tensors at
  Infinity-8B geometry, with the share of kept indices both agree on.
* :func:`analytic_memory`: retained K/V bytes of ScaleKV's budgets on Infinity's 1024^2 schedule
  (40 layers, drafters = blocks 0-2 as in the shipped 8B budgets) against the full cache: pure
  arithmetic, no GPU needed.
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F

from companion.core import check_float, check_int, time_ms
from companion.scalekv.budgets import expected_retained, retained_lengths, scalekv_budgets, uniform_budget
from companion.scalekv.schedule import INFINITY_1024, INFINITY_8B, cumulative_tokens, kv_bytes, map_sizes

__all__ = ["larger_model_protocol", "attention_latency", "selection_timing", "analytic_memory"]

LARGE_SIDES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
# companion.core.time_ms settings: do_bench warm-up / repetition ms on CUDA, untimed / timed calls on a CPU.
TIMING = {"warmup": 5, "rep": 25, "cpu_warmup": 2, "cpu_reps": 5}


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
                      dtype=torch.bfloat16, log=print) -> list[dict]:
    """One layer's attention per scale: full cache vs a cache compressed to ``budget`` tokens."""
    device = torch.device(device)
    geometry = geometry or INFINITY_8B
    h, d = geometry["heads"], geometry["head_dim"]
    sizes, cum = map_sizes(sides), cumulative_tokens(sides)
    comp = _compressed_lengths(sides, budget)
    g = torch.Generator(device="cpu").manual_seed(0)
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
                     window: int = 16, dtype=torch.bfloat16, compile_reference: bool = True, log=print) -> list[dict]:
    """Fused selection vs the PyTorch reference (eager and compiled) at Infinity-8B geometry, random tensors.

    ``cases``: (keys, side of the current map). Defaults: 2,954 keys = the steady state before the
    last map at 10 % (650 kept + the 48x48 map), 6,425 = a full cache before the last map, 10,521 =
    every token of the 1024^2 schedule (current map 64x64). The window is the 16 patch centroids.
    """
    from companion.scalekv.cache import window_positions

    from companion_kernels.scalekv_select import scalekv_select

    device = torch.device(device)
    geometry = geometry or INFINITY_8B
    h, d = geometry["heads"], geometry["head_dim"]
    check_int("capacity", capacity, lo=window)
    impls = ["reference"] + (["triton"] if device.type == "cuda" else [])
    compiled = None
    if compile_reference and device.type == "cuda":
        from companion_kernels.scalekv_select.reference import scalekv_select_reference

        compiled = torch.compile(scalekv_select_reference, dynamic=False)
    rows = []
    g = torch.Generator(device="cpu").manual_seed(1)
    for n, side in cases:
        q = torch.randn(batch, h, window, d, generator=g).to(device=device, dtype=dtype)
        k = torch.randn(batch, h, n, d, generator=g).to(device=device, dtype=dtype)
        v = torch.randn(batch, h, n, d, generator=g).to(device=device, dtype=dtype)
        widx = window_positions(side, n - side * side, n, window)[0].to(device)
        label = f"N={n}, C={capacity}"
        outs = {}
        for impl in impls:
            fn = lambda impl=impl: scalekv_select(q, k, v, widx, capacity, impl=impl)  # noqa: E731
            outs[impl] = fn()[2]
            ms = time_ms(fn, device, **TIMING)
            rows.append({"label": label, "key_len": n, "capacity": capacity, "impl": impl, "ms": round(ms, 5)})
            log(f"  {label:<22} {impl:<20} {ms:.4f} ms")
        if compiled is not None:
            try:
                fn = lambda: compiled(q, k, v, widx, capacity)  # noqa: E731
                fn()
                ms = time_ms(fn, device, **TIMING)
                rows.append({"label": label, "key_len": n, "capacity": capacity, "impl": "reference (torch.compile)", "ms": round(ms, 5)})
                log(f"  {label:<22} {'reference (compile)':<20} {ms:.4f} ms")
            except Exception as exc:  # a compile failure must not cost the other rows
                rows.append({"label": label, "key_len": n, "capacity": capacity, "impl": "reference (torch.compile)", "error": repr(exc)[:300]})
        if "triton" in outs:
            a, b = outs["triton"], outs["reference"]
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
