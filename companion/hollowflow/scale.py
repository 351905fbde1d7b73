"""The one-GPU (H200) study of paper 13 and the reader of its committed results. No plotly import.

:func:`run_scale_up` (``benchmarks/hollowflow_gpu.py``):

1. **Likelihood step time** against n ∈ {13, 55, 100, 200}: one fixed-step RK4 step with the exact
   likelihood (4 velocity + divergence evaluations, graph, line graph and pruning rebuilt at each), for the
   fully connected EGNN baseline (n·d VJPs, batched through ``is_grads_batched``) -- measured first -- and
   the NoBGNN with k = 7 and k = ⌈√n⌉ (d VJPs). Timed with :func:`companion.core.time_ms` (``do_bench``).
   Where the baseline's n·d VJPs would not fit the budget, it times the forward and ``vjp_sample`` VJPs and
   scales the VJP part by n·d / vjp_sample (recorded in the JSON). Forward-only times give the
   forward / divergence split (Fig. 3 analogue). Fitted log-log exponents against Theorem 2.
2. **Briefly trained LJ13 models** (MALA data on the device): hollow k = 6 and the baseline, flow matching
   with OT pairing for ``train_seconds`` each; samples with RK4 (20 steps) likelihoods; ESS, ESS_rem with
   68 % bootstrap intervals, seconds per sample, EffSU.

Deviations: EGNN-style blocks instead of PaiNN (hidden 64; 2 line-graph steps, baseline 3 steps, as the
paper's LJ13 setup); no Triton segment-sum kernel yet (``index_add_`` is used).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from companion.core import recorded_results, time_ms
from companion.hollowflow.divergence import divergence_bruteforce, divergence_hollow, rk4_likelihood
from companion.hollowflow.experiments import fitted_slope
from companion.hollowflow.lj import bootstrap_interval, ess_rem, kish_ess, lj_samples, log_weights, train_cfm
from companion.hollowflow.nobgnn import EGNN, NoBGNN

RESULTS_NAME = "hollowflow_gpu"
GPU_PROFILE = {
    "script": "benchmarks/hollowflow_gpu.py",
    "sizes": (13, 55, 100, 200),
    "ks": ("k = 7", "k = ⌈√n⌉"),
    "batch": 1000,
    "hidden": 64,
    "line_graph_steps": 2,
    "baseline_steps": 3,
    "vjp_sample": 96,
    "train_seconds_each": 20,
    "toy": "LJ13, hollow k = 6 vs fully connected, 1000 samples, RK4 20 steps",
}


def recorded() -> dict | None:
    """The committed results of ``benchmarks/hollowflow_gpu.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def _rk4_step_fn(model, x, method, vjp_sample=None):
    """One RK4 step's 4 evaluations of velocity + divergence (the x updates are negligible)."""
    h = 0.05

    def div(y):
        if method == "hollow":
            return divergence_hollow(model, y, 0.5)
        if vjp_sample is None:
            return divergence_bruteforce(model, y, 0.5, vectorize=True, chunk=96)
        yy = y.detach().requires_grad_(True)  # forward + vjp_sample VJPs (scaled by the caller)
        with torch.enable_grad():
            b = model(yy, 0.5).reshape(y.shape[0], -1)
            basis = torch.zeros(vjp_sample, *b.shape, dtype=b.dtype, device=b.device)
            basis[torch.arange(vjp_sample), :, torch.arange(vjp_sample)] = 1.0
            torch.autograd.grad(b, yy, basis, is_grads_batched=True)
        return b.detach().reshape(y.shape), None

    def step():
        k1, _ = div(x)
        k2, _ = div(x + h / 2 * k1)
        k3, _ = div(x + h / 2 * k2)
        div(x + h * k3)

    return step


def _fwd_fn(model, x):
    def fwd():
        with torch.no_grad():
            for _ in range(4):
                model(x, 0.5)
    return fwd


def likelihood_timing(sizes, *, batch, hidden, device, vjp_sample, log=print, left=lambda: math.inf) -> list[dict]:
    rows = []
    for n in sizes:
        if left() < 20:
            log(f"[timing] n = {n} skipped: time budget")
            break
        torch.manual_seed(0)
        base_batch = min(batch, max(8, int(2e7 // (n * n))))
        x = torch.randn(batch, n, 3, device=device)
        xb = x[:base_batch]
        base = EGNN(hidden=hidden, steps=3).to(device)
        N = 3 * n
        m = min(N, vjp_sample)
        t_fwd_b = time_ms(_fwd_fn(base, xb), device, warmup=5, rep=20)
        if m == N:
            t_b = time_ms(_rk4_step_fn(base, xb, "brute"), device, warmup=5, rep=20)
        else:
            t_part = time_ms(_rk4_step_fn(base, xb, "brute", vjp_sample=m), device, warmup=5, rep=20)
            t_b = t_fwd_b + (t_part - t_fwd_b) * N / m
        t_b_full = t_b * batch / base_batch  # per `batch` samples
        for k_label, k in (("k = 7", 7), ("k = ⌈√n⌉", math.ceil(math.sqrt(n)))):
            k = min(k, n - 1)
            mh = NoBGNN(hidden=hidden, steps=2, k=k).to(device)
            t_h = time_ms(_rk4_step_fn(mh, x, "hollow"), device, warmup=5, rep=20)
            t_fwd_h = time_ms(_fwd_fn(mh, x), device, warmup=5, rep=20)
            row = {"n": n, "k": k, "k_label": k_label, "batch": batch, "baseline_batch": base_batch,
                   "baseline_vjps_timed": m, "baseline_ms": round(t_b_full, 3),
                   "baseline_forward_ms": round(t_fwd_b * batch / base_batch, 3),
                   "hollow_ms": round(t_h, 3), "hollow_forward_ms": round(t_fwd_h, 3),
                   "speedup": round(t_b_full / t_h, 2)}
            rows.append(row)
            log(f"[timing] {row}")
    return rows


def exponents(rows) -> dict:
    out = {}
    base = {r["n"]: r["baseline_ms"] for r in rows}
    if len(base) >= 2:
        out["baseline"] = round(fitted_slope(list(base), list(base.values())), 3)
    for kl in sorted({r["k_label"] for r in rows}):
        sel = [r for r in rows if r["k_label"] == kl]
        if len(sel) >= 2:
            out[kl] = round(fitted_slope([r["n"] for r in sel], [r["hollow_ms"] for r in sel]), 3)
    return out


def toy_study(*, device, hidden, train_seconds, samples, iterations_cap=10**9, log=print) -> dict:
    data = lj_samples("LJ13", 4096, seed=0, chains=256, device=device).float()
    x0 = torch.randn(samples, 13, 3, device=device, generator=torch.Generator(device=device).manual_seed(11))
    out = {}
    for name, model in (("hollow", NoBGNN(hidden=hidden, steps=2, k=6)), ("baseline", EGNN(hidden=hidden, steps=3))):
        model.to(device)
        t0, its, losses = time.perf_counter(), 0, []
        while time.perf_counter() - t0 < train_seconds and its < iterations_cap:
            losses += train_cfm(model, data, iterations=50, batch=256, lr=5e-4, seed=its)
            its += 50
        method = "hollow" if name == "hollow" else "bruteforce"
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        x1, lq = rk4_likelihood(model, x0, steps=20, method=method)
        if device.type == "cuda":
            torch.cuda.synchronize()
        secs = time.perf_counter() - t0
        lw = log_weights("LJ13", x1.double().cpu(), lq.double().cpu())
        out[name] = {"iterations": its, "final_loss": round(float(np.mean(losses[-50:])), 4), "sample_seconds": round(secs, 3),
                     "seconds_per_sample": secs / samples, "ess": kish_ess(lw), "ess_rem": ess_rem(lw),
                     "ess_ci": bootstrap_interval(lw, kish_ess), "ess_rem_ci": bootstrap_interval(lw, ess_rem)}
        log(f"[toy] {name}: {out[name]}")
    h, b = out["hollow"], out["baseline"]
    out["effsu"] = (h["ess"] / h["seconds_per_sample"]) / max(1e-300, b["ess"] / b["seconds_per_sample"])
    out["effsu_rem"] = (h["ess_rem"] / h["seconds_per_sample"]) / max(1e-300, b["ess_rem"] / b["seconds_per_sample"])
    return out


def run_scale_up(*, smoke=False, device=None, deadline_s=None, log=print, save=None) -> dict:
    t_start = time.perf_counter()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    P = dict(GPU_PROFILE)
    if smoke:
        P.update(sizes=(6, 9), batch=4, hidden=8, vjp_sample=6, train_seconds_each=1)
    left = (lambda: deadline_s - (time.perf_counter() - t_start)) if deadline_s else (lambda: math.inf)
    save = save or (lambda p: None)
    payload = {"smoke": smoke, "profile": {k: list(v) if isinstance(v, tuple) else v for k, v in P.items()}, "batch": P["batch"]}
    rows = likelihood_timing(P["sizes"], batch=P["batch"], hidden=P["hidden"], device=device, vjp_sample=P["vjp_sample"],
                             log=log, left=left)
    payload["likelihood_step"] = rows
    payload["exponents"] = exponents(rows)
    save(payload)
    if left() > 2 * P["train_seconds_each"] + 30:
        payload["toy"] = toy_study(device=device, hidden=P["hidden"], train_seconds=P["train_seconds_each"],
                                   samples=8 if smoke else 1000, iterations_cap=50 if smoke else 10**9, log=log)
    else:
        payload["toy"] = "skipped: time budget"
    payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
    save(payload)
    return payload
