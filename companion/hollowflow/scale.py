"""The one-GPU (H200) study of paper 13 and the reader of its committed results. No plotly import.

:func:`run_scale_up` (``benchmarks/hollowflow_gpu.py``):

1. **Likelihood step time** against n ∈ {13, 55, 100, 200}: one fixed-step RK4 step with the exact
   likelihood (4 velocity + divergence evaluations, graph, line graph and pruning rebuilt at each), for the
   fully connected EGNN baseline (n·d VJPs, batched through ``is_grads_batched``) -- measured first -- and
   the NoBGNN with k = 7 and k = ⌈√n⌉ (d VJPs). Timed with :func:`companion.core.time_ms` (``do_bench``).
   Where the baseline's n·d VJPs would not fit the budget, it times the forward and ``vjp_sample`` VJPs and
   scales the VJP part by n·d / vjp_sample (recorded in the JSON). Forward-only times give the
   forward / divergence split (Fig. 3 analogue). Fitted log-log exponents against Theorem 2.
   **Batch per n**: memory grows with n²·(VJPs) for the baseline and with n·k² for HollowFlow, so a batch
   of 1,000 does not fit at n ≥ 55 (the first H200 run ran out of memory there). Each call is timed at the
   largest batch ≤ 1,000 that :func:`bytes_per_sample` fits into ``MEM_FRACTION`` of the free device
   memory, shrunk when one call exceeds ``MAX_CALL_S`` (do_bench calls it ~7 times), and guarded:
   ``torch.cuda.OutOfMemoryError`` empties the cache and halves the batch, down to one sample, after which
   the size is recorded under ``skipped`` with the reason. Times are scaled linearly to 1,000 samples
   (the device is saturated at these sizes); the batches used are recorded in every row.
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
    "train_seconds_each": 15,
    "toy": "LJ13, hollow k = 6 vs fully connected, 1000 samples, RK4 20 steps",
}


def recorded() -> dict | None:
    """The committed results of ``benchmarks/hollowflow_gpu.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


# ------------------------------------------------------------------ batch sizes per n and the OOM guard

MEM_FRACTION = 0.35   # share of the device memory free at the start that one timed call may plan to use
CPU_MEM_BUDGET = 2e9  # bytes a smoke run on the CPU may plan to use
MAX_CALL_S = 0.25     # a timed call longer than this (at the planned batch) shrinks the batch: do_bench calls it ~7 times
MIN_BATCH = 1


def bytes_per_sample(method: str, n: int, k: int | None, *, hidden: int, steps: int, vjps: int = 0) -> float:
    """Memory model (bytes per sample, float32) of one timed call; generous on purpose.

    * ``"baseline"`` (fully connected EGNN, E = n(n−1) edges): the forward keeps ≈12 edge tensors of width
      ``hidden`` per step (+ readout), and the batched VJP (``is_grads_batched``, ``vjps`` at once) holds
      ≈6 more per VJP: 4·hidden·E·(12·(steps + 1) + 6·vjps) — O(n²·vjps), O(n³) when vjps = n·d.
    * ``"hollow"`` (NoBGNN on the pruned line graph of the symmetrised kNN graph, E ≤ 1.5·n·k edges,
      L ≈ E·(1.5·k − 1) line edges): line states under no_grad (one step's ≈10 tensors of width hidden
      live at a time), the readout's graph over E, and the int64 index tensors of the line graph:
      4·hidden·(10·L + 16·E) + 64·L.
    """
    if method == "baseline":
        E = n * (n - 1)
        return 4.0 * hidden * E * (12 * (steps + 1) + 6 * vjps)
    kk = n - 1 if k is None else min(k, n - 1)
    E = min(n * (n - 1), 1.5 * n * kk)
    L = E * max(1.0, min(n - 1, 1.5 * kk) - 1)
    return 4.0 * hidden * (10 * L + 16 * E) + 64.0 * L


def planned_batch(method: str, n: int, k: int | None, *, target: int, budget_bytes: float, hidden: int, steps: int,
                  vjps: int = 0) -> int:
    """The largest batch ≤ ``target`` whose modelled memory fits ``budget_bytes`` (at least 1)."""
    per = bytes_per_sample(method, n, k, hidden=hidden, steps=steps, vjps=vjps)
    return int(max(MIN_BATCH, min(target, budget_bytes // per)))


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    msg = str(err).lower()
    return isinstance(err, RuntimeError) and ("out of memory" in msg or "alloc_failed" in msg)


def _free_cache(device):
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def guarded_time(make_fn, batch: int, device, *, min_batch: int = MIN_BATCH, max_call_s: float = MAX_CALL_S,
                 log=print, label: str = "") -> dict:
    """Time ``make_fn(b)()`` (a zero-argument callable for a batch of b samples) at the planned ``batch``.

    A trial call first: on ``torch.cuda.OutOfMemoryError`` (or a CUDA/cuBLAS allocation failure) the cache is
    emptied and the batch halved, down to ``min_batch``; a trial slower than ``max_call_s`` shrinks the batch
    in proportion (do_bench calls the function about 7 times). The same guard wraps the timing itself.
    Returns ``{"ms": median ms at the batch used, "batch": the batch used, "ooms": halvings}``, or
    ``{"ms": None, "batch": b, "skipped": reason}`` when even ``min_batch`` does not fit."""
    b, ooms, shrunk = int(batch), 0, False
    while True:
        oom = False
        try:
            fn = make_fn(b)
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            trial = time.perf_counter() - t0
            if trial > max_call_s and b > min_batch and not shrunk:
                shrunk = True
                nb = max(min_batch, int(b * max_call_s / trial))
                log(f"[timing] {label}: one call {trial:.2f} s at batch {b}: batch {nb}")
                b = nb
                del fn
                continue
            ms = time_ms(fn, device, warmup=5, rep=20, cpu_reps=1)
            del fn
            return {"ms": ms, "batch": b, "ooms": ooms}
        except Exception as err:  # noqa: BLE001 - only out-of-memory errors are handled, the rest re-raised
            if not _is_oom(err):
                raise
            oom = True
        if oom:
            fn = None
            _free_cache(device)
            ooms += 1
            if b <= min_batch:
                log(f"[timing] {label}: out of memory at the minimum batch {b}: skipped")
                return {"ms": None, "batch": b, "ooms": ooms, "skipped": f"out of memory at batch {b}"}
            b = max(min_batch, b // 2)
            log(f"[timing] {label}: out of memory, batch halved to {b}")


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


def likelihood_timing(sizes, *, batch, hidden, device, vjp_sample, log=print, left=lambda: math.inf,
                      budget_bytes=None, skipped=None, max_call_s=MAX_CALL_S, min_left_s=20.0, rows=None) -> list[dict]:
    """Per n: ms per RK4 step with likelihood for ``batch`` samples (timed at the batch the memory model and
    the OOM guard allow, then scaled linearly to ``batch``; the batches used are recorded). Sizes that do
    not fit or come after the deadline are appended to ``skipped`` with the reason."""
    device = torch.device(device)
    skipped = [] if skipped is None else skipped
    if budget_bytes is None:
        budget_bytes = MEM_FRACTION * torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else CPU_MEM_BUDGET
    rows = [] if rows is None else rows
    # one untimed small step of each model first: CUDA context, cuBLAS handles and vmap set-up are not
    # charged to the first size's trial call (which decides its batch)
    xw = torch.randn(2, 6, 3, device=device)
    _rk4_step_fn(EGNN(hidden=hidden, steps=3).to(device), xw, "brute", vjp_sample=6)()
    _rk4_step_fn(NoBGNN(hidden=hidden, steps=2, k=3).to(device), xw, "hollow")()
    _sync(device)
    for n in sizes:
        if left() < min_left_s:
            log(f"[timing] n = {n} skipped: time budget")
            skipped.append({"n": n, "reason": "time budget"})
            continue
        torch.manual_seed(0)
        x = torch.randn(batch, n, 3, device=device)
        base = EGNN(hidden=hidden, steps=3).to(device)
        N = 3 * n
        m = min(N, vjp_sample)
        kw = dict(target=batch, budget_bytes=budget_bytes, hidden=hidden, log=log, device=device, max_call_s=max_call_s)
        fb = _timed_per_batch(lambda b: _fwd_fn(base, x[:b]), "baseline", n, None, steps=3, vjps=0,
                              label=f"n = {n} baseline forward", **kw)
        if m == N:
            sb = _timed_per_batch(lambda b: _rk4_step_fn(base, x[:b], "brute"), "baseline", n, None, steps=3,
                                  vjps=min(N, 96), label=f"n = {n} baseline step", **kw)
        else:
            sb = _timed_per_batch(lambda b: _rk4_step_fn(base, x[:b], "brute", vjp_sample=m), "baseline", n, None,
                                  steps=3, vjps=m, label=f"n = {n} baseline step ({m} of {N} VJPs)", **kw)
            if sb["ms"] is not None and fb["ms"] is not None:
                # forward part + the VJP part scaled from m to N VJPs (both per `batch` samples)
                sb["per_batch_ms"] = fb["per_batch_ms"] + (sb["per_batch_ms"] - fb["per_batch_ms"]) * N / m
        base = None  # free it before the hollow models
        _free_cache(device)
        if sb["ms"] is None or fb["ms"] is None:
            skipped.append({"n": n, "reason": f"baseline: {sb.get('skipped') or fb.get('skipped')}"})
            log(f"[timing] n = {n}: baseline skipped")
            continue
        for k_label, k in (("k = 7", 7), ("k = ⌈√n⌉", math.ceil(math.sqrt(n)))):
            k = min(k, n - 1)
            if left() < min_left_s / 2:
                skipped.append({"n": n, "k": k, "reason": "time budget"})
                continue
            mh = NoBGNN(hidden=hidden, steps=2, k=k).to(device)
            sh = _timed_per_batch(lambda b: _rk4_step_fn(mh, x[:b], "hollow"), "hollow", n, k, steps=2, vjps=0,
                                  label=f"n = {n} hollow {k_label} step", **kw)
            fh = _timed_per_batch(lambda b: _fwd_fn(mh, x[:b]), "hollow", n, k, steps=2, vjps=0,
                                  label=f"n = {n} hollow {k_label} forward", **kw)
            mh = None
            _free_cache(device)
            if sh["ms"] is None or fh["ms"] is None:
                skipped.append({"n": n, "k": k, "reason": f"hollow: {sh.get('skipped') or fh.get('skipped')}"})
                continue
            row = {"n": n, "k": k, "k_label": k_label, "batch": batch,
                   "baseline_batch": sb["batch"], "baseline_forward_batch": fb["batch"],
                   "hollow_batch": sh["batch"], "hollow_forward_batch": fh["batch"],
                   "baseline_vjps_timed": m, "baseline_ms": round(sb["per_batch_ms"], 3),
                   "baseline_forward_ms": round(fb["per_batch_ms"], 3),
                   "hollow_ms": round(sh["per_batch_ms"], 3), "hollow_forward_ms": round(fh["per_batch_ms"], 3),
                   "speedup": round(sb["per_batch_ms"] / sh["per_batch_ms"], 2),
                   "ooms": sb["ooms"] + fb["ooms"] + sh["ooms"] + fh["ooms"]}
            rows.append(row)
            log(f"[timing] {row}")
    return rows


def _timed_per_batch(make_fn, method, n, k, *, target, budget_bytes, hidden, steps, vjps, label, log, device,
                     max_call_s):
    b0 = planned_batch(method, n, k, target=target, budget_bytes=budget_bytes, hidden=hidden, steps=steps, vjps=vjps)
    r = guarded_time(make_fn, b0, device, log=log, label=label, max_call_s=max_call_s)
    r["planned_batch"] = b0
    if r["ms"] is not None:
        r["per_batch_ms"] = r["ms"] * target / r["batch"]  # linear in the batch: the device is busy at these sizes
    return r


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


def _sample_chunked(model, x0, method, device, log):
    """RK4 (20 steps) likelihood sampling of ``x0`` in chunks; a chunk that runs out of memory is halved."""
    chunk, done, xs, lqs = x0.shape[0], 0, [], []
    while done < x0.shape[0]:
        oom = False
        try:
            x1, lq = rk4_likelihood(model, x0[done:done + chunk], steps=20, method=method)
            xs.append(x1)
            lqs.append(lq)
            done += x1.shape[0]
        except Exception as err:  # noqa: BLE001 - only out-of-memory errors are handled
            if not _is_oom(err):
                raise
            oom = True
        if oom:
            _free_cache(device)
            if chunk <= 1:
                raise torch.cuda.OutOfMemoryError("toy sampling: out of memory at one sample per chunk")
            chunk //= 2
            log(f"[toy] out of memory: sampling in chunks of {chunk}")
    return torch.cat(xs), torch.cat(lqs), chunk


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
        _sync(device)
        t0 = time.perf_counter()
        x1, lq, chunk = _sample_chunked(model, x0, method, device, log)
        _sync(device)
        secs = time.perf_counter() - t0
        lw = log_weights("LJ13", x1.double().cpu(), lq.double().cpu())
        out[name] = {"iterations": its, "final_loss": round(float(np.mean(losses[-50:])), 4), "sample_seconds": round(secs, 3),
                     "sample_chunk": chunk, "seconds_per_sample": secs / samples, "ess": kish_ess(lw), "ess_rem": ess_rem(lw),
                     "ess_ci": bootstrap_interval(lw, kish_ess), "ess_rem_ci": bootstrap_interval(lw, ess_rem)}
        log(f"[toy] {name}: {out[name]}")
        del model
        _free_cache(device)
    h, b = out["hollow"], out["baseline"]
    out["effsu"] = (h["ess"] / h["seconds_per_sample"]) / max(1e-300, b["ess"] / b["seconds_per_sample"])
    out["effsu_rem"] = (h["ess_rem"] / h["seconds_per_sample"]) / max(1e-300, b["ess_rem"] / b["seconds_per_sample"])
    return out


SMOKE_PROFILE = {"sizes": (6, 9), "batch": 4, "hidden": 8, "vjp_sample": 6, "train_seconds_each": 1}


def run_scale_up(*, smoke=False, device=None, deadline_s=None, log=print, save=None, budget_bytes=None) -> dict:
    """The GPU study; ``deadline_s`` skips later sizes and the toy (recorded in ``skipped``) so that the JSON is
    written in time. A stage that fails is recorded under ``errors`` (the JSON is still written)."""
    t_start = time.perf_counter()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    P = dict(GPU_PROFILE)
    if smoke:
        P.update(SMOKE_PROFILE)
    left = (lambda: deadline_s - (time.perf_counter() - t_start)) if deadline_s else (lambda: math.inf)
    save = save or (lambda p: None)
    skipped, errors = [], []
    payload = {"smoke": smoke, "profile": {k: list(v) if isinstance(v, tuple) else v for k, v in P.items()},
               "batch": P["batch"], "skipped": skipped, "errors": errors,
               "batch_note": f"ms per {P['batch']} samples; each size timed at the largest batch the memory model, the "
                             "OOM guard and a per-call time cap allow (recorded per row), scaled linearly"}
    if device.type == "cuda":
        payload["device_memory_gb"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    rows = []
    try:
        likelihood_timing(P["sizes"], batch=P["batch"], hidden=P["hidden"], device=device, vjp_sample=P["vjp_sample"],
                          log=log, left=left, budget_bytes=budget_bytes, skipped=skipped, rows=rows)
    except Exception as err:  # noqa: BLE001 - recorded; the rows measured so far are kept
        errors.append(f"likelihood timing: {type(err).__name__}: {err}")
        log(f"[timing] error: {errors[-1]}")
        _free_cache(device)
    payload["likelihood_step"] = rows
    payload["exponents"] = exponents(rows)
    save(payload)
    toy_need = 2 * P["train_seconds_each"] + 25
    if left() > toy_need:
        try:
            payload["toy"] = toy_study(device=device, hidden=P["hidden"], train_seconds=P["train_seconds_each"],
                                       samples=8 if smoke else 1000, iterations_cap=50 if smoke else 10**9, log=log)
        except Exception as err:  # noqa: BLE001
            errors.append(f"toy: {type(err).__name__}: {err}")
            payload["toy"] = f"skipped: {type(err).__name__}"
            _free_cache(device)
    else:
        payload["toy"] = "skipped: time budget"
        skipped.append({"stage": "toy", "reason": f"time budget ({left():.0f} s left, {toy_need} s needed)"})
    payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
    save(payload)
    return payload
