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
2. **Segment-sum kernel** (:func:`segment_sum_timing`): on the real pruned line-edge lists of a NoBGNN graph
   (k = 7, 1,000 Gaussian configurations, features hidden + d = the [m, Δp] a step aggregates) it times
   ``index_add_`` first (the peer), then ``companion_kernels.segment_sum`` (the Triton CSR kernel, its plan
   built once per graph and timed on its own), forward and forward + backward, and one RK4 likelihood step
   of NoBGNN with each aggregation (plans rebuilt at every evaluation, since the kNN graph follows x);
   ms, the kernel's speed-up over ``index_add_`` (``speedup_*``: index_add_ time / kernel time, below 1 when
   the kernel is slower; :mod:`~companion.hollowflow.claims` judges them) and the max |difference|.
3. **Briefly trained models** (MALA data on the device), :data:`TOY_SYSTEMS`: LJ13 (hollow k = 6) and LJ55
   (hollow k = 7, as the paper) against the fully connected baseline, flow matching with OT pairing for
   ``train_seconds`` each; samples with RK4 (20 steps) likelihoods; ESS, ESS_rem with 68 % bootstrap
   intervals, seconds per sample, EffSU. The LJ55 baseline samples only ``baseline_samples`` (its n·d = 165
   VJPs per evaluation cost ≈ 4 s per sample on the H200): its ESS fraction is then at least 1/N by
   construction, which favours the baseline in EffSU (recorded with the counts).

**Time**: the timing and kernel stages run only while the deadline leaves the estimated time of the stages
after them (:func:`stage_reserve`), so their sizes give way to the toy rather than the reverse; each toy
system runs when its own estimate ``need_s`` fits.

Deviations: EGNN-style blocks instead of PaiNN (hidden 64; 2 line-graph steps, baseline 3 steps -- the
paper's LJ13 setup, also used for LJ55 where the paper's baseline has 7); training is seconds, not hours.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from companion.core import recorded_results, time_ms
from companion_kernels.dispatch import interpreting
from companion_kernels.segment_sum import plan, segment_sum
from companion.hollowflow.divergence import divergence_bruteforce, divergence_hollow, rk4_likelihood
from companion.hollowflow.experiments import fitted_slope
from companion.hollowflow.lj import (SYSTEMS, bootstrap_interval, effsu, ess_rem, kish_ess, lj_samples, log_weights,
                                    train_cfm)
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
    "segment_sum": {"sizes": (13, 55, 100, 200), "k": 7, "batch": 1000, "hidden": 64, "need_s": 40},
    "toy": "LJ13 (hollow k = 6) and LJ55 (hollow k = 7) vs fully connected, RK4 20 steps (TOY_SYSTEMS)",
    "deadline_s": 330,
}

#: the trained-model stage per system: hollow k, training seconds per model, flow samples of the hollow model
#: and of the baseline, MALA data size, and ``need_s``, the stage's estimated seconds on an H200 (from the
#: committed per-step times: LJ13 baseline 1.6 s per RK4 step per 1,000 samples -> 33 s for 1,000 samples of
#: 20 steps; LJ55 baseline 207 s per step per 1,000 -> 4.1 s per sample -> 33 s for 8 samples)
TOY_SYSTEMS = {
    "LJ13": {"k": 6, "train_seconds": 12, "samples": 1000, "baseline_samples": 1000, "data": 4096, "chains": 256,
             "batch": 256, "ode_steps": 20, "need_s": 75},
    "LJ55": {"k": 7, "train_seconds": 10, "samples": 1000, "baseline_samples": 8, "data": 2048, "chains": 256,
             "batch": 256, "ode_steps": 20, "need_s": 70},
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


def _sample_chunked(model, x0, method, device, log, steps=20):
    """RK4 (``steps`` steps) likelihood sampling of ``x0`` in chunks; a chunk that runs out of memory is halved."""
    chunk, done, xs, lqs = x0.shape[0], 0, [], []
    while done < x0.shape[0]:
        oom = False
        try:
            x1, lq = rk4_likelihood(model, x0[done:done + chunk], steps=steps, method=method)
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


def _train_timed(model, data, seconds, iterations_cap, batch, chunk=10):
    """Flow matching in chunks of ``chunk`` iterations until ``seconds`` have passed (or the cap)."""
    t0, its, losses = time.perf_counter(), 0, []
    while time.perf_counter() - t0 < seconds and its < iterations_cap:
        losses += train_cfm(model, data, iterations=chunk, batch=batch, lr=5e-4, seed=its)
        its += chunk
    return its, losses, time.perf_counter() - t0


def toy_study(system, cfg, *, device, hidden, iterations_cap=10**9, log=print) -> dict:
    """One system of :data:`TOY_SYSTEMS`: hollow NoBGNN (k = ``cfg["k"]``) and the fully connected baseline,
    each trained for ``cfg["train_seconds"]`` (batch ``cfg["batch"]``), then sampled with RK4 (``cfg["ode_steps"]``,
    20 on the GPU as the paper) likelihoods (hollow: d VJPs;
    baseline: n·d VJPs) on ``cfg["samples"]`` / ``cfg["baseline_samples"]`` prior draws; ESS, ESS_rem, 68 %
    bootstrap intervals, seconds per sample and EffSU (ESS per second relative to the baseline)."""
    n = SYSTEMS[system][0]
    data = lj_samples(system, cfg["data"], seed=0, chains=cfg["chains"], device=device).float()
    gen = torch.Generator(device=device).manual_seed(11)
    x0 = torch.randn(max(cfg["samples"], cfg["baseline_samples"]), n, 3, device=device, generator=gen)
    out = {"system": system, "n": n, "k": cfg["k"]}
    models = (("hollow", NoBGNN(hidden=hidden, steps=2, k=cfg["k"]), cfg["samples"]),
              ("baseline", EGNN(hidden=hidden, steps=3), cfg["baseline_samples"]))
    for name, model, count in models:
        model.to(device)
        its, losses, train_s = _train_timed(model, data, cfg["train_seconds"], iterations_cap, cfg["batch"])
        method = "hollow" if name == "hollow" else "bruteforce"
        _sync(device)
        t0 = time.perf_counter()
        x1, lq, chunk = _sample_chunked(model, x0[:count], method, device, log, steps=cfg["ode_steps"])
        _sync(device)
        secs = time.perf_counter() - t0
        lw = log_weights(system, x1.double().cpu(), lq.double().cpu())
        out[name] = {"iterations": its, "train_seconds": round(train_s, 1),
                     "final_loss": round(float(np.mean(losses[-50:])), 4), "samples": count,
                     "sample_seconds": round(secs, 3), "sample_chunk": chunk, "seconds_per_sample": secs / count,
                     "ess": kish_ess(lw), "ess_rem": ess_rem(lw), "ess_ci": bootstrap_interval(lw, kish_ess),
                     "ess_rem_ci": bootstrap_interval(lw, ess_rem)}
        log(f"[toy] {system} {name}: {out[name]}")
        del model
        _free_cache(device)
    h, b = out["hollow"], out["baseline"]
    out["effsu"] = effsu(h["ess"], h["seconds_per_sample"], b["ess"], b["seconds_per_sample"])
    out["effsu_rem"] = effsu(h["ess_rem"], h["seconds_per_sample"], b["ess_rem"], b["seconds_per_sample"])
    return out


# ------------------------------------------------------------------ the segment-sum kernel against index_add_

def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def segment_sum_timing(sizes, *, batch, k, hidden, device, log=print, left=lambda: math.inf, skipped=None,
                       budget_bytes=None, max_call_s=MAX_CALL_S, min_left_s=8.0, rows=None) -> list[dict]:
    """Per n: the aggregation of one NoBGNN forward (its ``steps`` pruned line-edge lists, features hidden + d)
    by ``index_add_`` (timed first) and by the segment-sum kernel, forward and forward + backward, the plan's
    own cost, and one RK4 likelihood step (hollow divergence) of the model with each aggregation (timed at the
    batch that fits, scaled to ``batch`` as in :func:`likelihood_timing`). The kernel runs on CUDA, or under
    ``TRITON_INTERPRET=1`` on the CPU; otherwise (a CPU run without the interpreter) the reference path, recorded
    as ``impl``."""
    device = torch.device(device)
    impl = "triton" if device.type == "cuda" or interpreting() else "reference"
    skipped = [] if skipped is None else skipped
    rows = [] if rows is None else rows
    if budget_bytes is None:
        budget_bytes = MEM_FRACTION * torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else CPU_MEM_BUDGET
    F = hidden + 3
    for n in sizes:
        if left() < min_left_s:
            log(f"[segment_sum] n = {n} skipped: time budget")
            skipped.append({"stage": "segment_sum", "n": n, "reason": "time budget"})
            continue
        kk = min(k, n - 1)
        try:
            torch.manual_seed(0)
            x = torch.randn(batch, n, 3, device=device)
            m_ia = NoBGNN(hidden=hidden, steps=2, k=kk).to(device)
            m_ss = NoBGNN(hidden=hidden, steps=2, k=kk, aggregate="segment_sum", segment_impl=impl).to(device)
            m_ss.load_state_dict(m_ia.state_dict())
            g = m_ia.graph(x)
            E = g.src.numel()
            lists = [le[:, 1] for le in g.kept]
            gen = torch.Generator(device=device).manual_seed(1)
            vals = [torch.randn(r.numel(), F, device=device, generator=gen) for r in lists]
            gout = torch.randn(E, F, device=device, generator=gen)
            plans = [plan(r, E) for r in lists]

            def index_add():
                return [torch.zeros(E, F, device=device).index_add_(0, r, v) for r, v in zip(lists, vals)]

            def kernel():
                return [segment_sum(v, r, E, plan=p, impl=impl) for r, v, p in zip(lists, vals, plans)]

            def backward(fn):
                leaves = [v.detach().requires_grad_(True) for v in vals]

                def run():
                    outs = fn(leaves)
                    return torch.autograd.grad(outs, leaves, [gout] * len(outs))
                return run

            ia_fb = backward(lambda vs: [torch.zeros(E, F, device=device).index_add(0, r, v) for r, v in zip(lists, vs)])
            ss_fb = backward(lambda vs: [segment_sum(v, r, E, plan=p, impl=impl) for r, v, p in zip(lists, vs, plans)])
            row = {"n": n, "k": kk, "batch": batch, "impl": impl, "features": F, "line_nodes": E,
                   "line_edges": [int(r.numel()) for r in lists]}
            row["index_add_ms"] = round(time_ms(index_add, device, warmup=5, rep=20, cpu_reps=3), 4)
            row["segment_sum_ms"] = round(time_ms(kernel, device, warmup=5, rep=20, cpu_reps=3), 4)
            row["plan_ms"] = round(time_ms(lambda: [plan(r, E) for r in lists], device, warmup=5, rep=20, cpu_reps=3), 4)
            row["index_add_fwd_bwd_ms"] = round(time_ms(ia_fb, device, warmup=5, rep=20, cpu_reps=3), 4)
            row["segment_sum_fwd_bwd_ms"] = round(time_ms(ss_fb, device, warmup=5, rep=20, cpu_reps=3), 4)
            row["max_abs_diff"] = max(_diff(a, b) for a, b in zip(kernel(), index_add()))
            row["grad_max_abs_diff"] = max(_diff(a, b) for a, b in zip(ss_fb(), ia_fb()))
            del vals, gout, plans, g
            _free_cache(device)
            kw = dict(target=batch, budget_bytes=budget_bytes, hidden=hidden, log=log, device=device,
                      max_call_s=max_call_s, steps=2, vjps=0)
            divergence_hollow(m_ss, x[:2], 0.5)  # compile the kernel for the readout's width outside the timed trial
            st_ia = _timed_per_batch(lambda b: _rk4_step_fn(m_ia, x[:b], "hollow"), "hollow", n, kk,
                                     label=f"n = {n} RK4 step, index_add_", **kw)
            st_ss = _timed_per_batch(lambda b: _rk4_step_fn(m_ss, x[:b], "hollow"), "hollow", n, kk,
                                     label=f"n = {n} RK4 step, segment_sum", **kw)
            xs = x[:min(batch, 64)]
            (b_ia, d_ia), (b_ss, d_ss) = divergence_hollow(m_ia, xs, 0.5), divergence_hollow(m_ss, xs, 0.5)
            row.update({"rk4_batch": [st_ia["batch"], st_ss["batch"]],
                        "rk4_index_add_ms": _round(st_ia.get("per_batch_ms")),
                        "rk4_segment_sum_ms": _round(st_ss.get("per_batch_ms")),
                        "velocity_max_abs_diff": _diff(b_ia, b_ss), "divergence_max_abs_diff": _diff(d_ia, d_ss)})
        except Exception as err:  # noqa: BLE001 - only out-of-memory errors are recorded, the rest re-raised
            if not _is_oom(err):
                raise
            _free_cache(device)
            skipped.append({"stage": "segment_sum", "n": n, "reason": "out of memory"})
            log(f"[segment_sum] n = {n}: out of memory, skipped")
            continue
        pairs = {"fwd": ("index_add_ms", "segment_sum_ms"), "fwd_bwd": ("index_add_fwd_bwd_ms", "segment_sum_fwd_bwd_ms"),
                 "rk4": ("rk4_index_add_ms", "rk4_segment_sum_ms")}
        ratios = {key: row[a] / row[b] for key, (a, b) in pairs.items() if row[a] and row[b]}
        row.update({f"speedup_{key}": float(f"{r:.4g}") for key, r in ratios.items()})
        rows.append(row)
        log(f"[segment_sum] {row}")
    return rows


def _round(v, nd=3):
    return None if v is None else round(v, nd)


SMOKE_PROFILE = {"sizes": (6, 9), "batch": 4, "hidden": 8, "vjp_sample": 6,
                 "segment_sum": {"sizes": (9,), "k": 7, "batch": 4, "hidden": 8, "need_s": 5}}
SMOKE_TOY = {"LJ13": {"k": 6, "train_seconds": 1, "samples": 8, "baseline_samples": 4, "data": 64, "chains": 16,
                      "batch": 16, "ode_steps": 2, "need_s": 5},
             "LJ55": {"k": 7, "train_seconds": 1, "samples": 4, "baseline_samples": 1, "data": 32, "chains": 16,
                      "batch": 8, "ode_steps": 1, "need_s": 5}}


def stage_reserve(P: dict, toys: dict, after: str) -> float:
    """Seconds the stages after ``after`` ("timing" or "segment_sum") are estimated to need: the kernel stage's
    ``need_s`` (after the timing only) plus every toy system's ``need_s``."""
    if after not in ("timing", "segment_sum"):
        raise ValueError(f"after={after!r}: expected 'timing' or 'segment_sum'")
    toy = sum(float(c["need_s"]) for c in toys.values())
    return toy + (float(P["segment_sum"]["need_s"]) if after == "timing" else 0.0)


def run_scale_up(*, smoke=False, device=None, deadline_s=None, log=print, save=None, budget_bytes=None) -> dict:
    """The GPU study; ``deadline_s`` skips later sizes and stages (recorded in ``skipped``) so that the JSON is
    written in time, each stage keeping the estimated time of the stages after it (:func:`stage_reserve`).
    A stage that fails is recorded under ``errors`` (the JSON is still written)."""
    t_start = time.perf_counter()
    device = torch.device(device or ("cuda" if torch.cuda.is_available() and not smoke else "cpu"))
    P = dict(GPU_PROFILE)
    toys = SMOKE_TOY if smoke else TOY_SYSTEMS
    if smoke:
        P.update(SMOKE_PROFILE)
    left = (lambda: deadline_s - (time.perf_counter() - t_start)) if deadline_s else (lambda: math.inf)
    save = save or (lambda p: None)
    skipped, errors = [], []
    payload = {"smoke": smoke, "profile": _jsonable(P), "toy_systems": _jsonable(toys),
               "batch": P["batch"], "skipped": skipped, "errors": errors,
               "batch_note": f"ms per {P['batch']} samples; each size timed at the largest batch the memory model, the "
                             "OOM guard and a per-call time cap allow (recorded per row), scaled linearly"}
    if device.type == "cuda":
        payload["device_memory_gb"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    rows = []
    reserve = stage_reserve(P, toys, "timing")
    try:
        likelihood_timing(P["sizes"], batch=P["batch"], hidden=P["hidden"], device=device, vjp_sample=P["vjp_sample"],
                          log=log, left=lambda: left() - reserve, budget_bytes=budget_bytes, skipped=skipped, rows=rows)
    except Exception as err:  # noqa: BLE001 - recorded; the rows measured so far are kept
        errors.append(f"likelihood timing: {type(err).__name__}: {err}")
        log(f"[timing] error: {errors[-1]}")
        _free_cache(device)
    payload["likelihood_step"] = rows
    payload["exponents"] = exponents(rows)
    save(payload)

    S = P["segment_sum"]
    reserve = stage_reserve(P, toys, "segment_sum")
    seg_rows = []
    try:
        segment_sum_timing(S["sizes"], batch=S["batch"], k=S["k"], hidden=S["hidden"], device=device, log=log,
                           left=lambda: left() - reserve, skipped=skipped, budget_bytes=budget_bytes, rows=seg_rows)
    except Exception as err:  # noqa: BLE001
        errors.append(f"segment_sum: {type(err).__name__}: {err}")
        log(f"[segment_sum] error: {errors[-1]}")
        _free_cache(device)
    payload["segment_sum"] = seg_rows
    save(payload)

    payload["toy"] = {}
    for system, cfg in toys.items():
        need = cfg["need_s"]  # the toys do not reserve for each other: each runs when its own estimate fits
        if left() <= need:
            payload["toy"][system] = "skipped: time budget"
            skipped.append({"stage": f"toy {system}", "reason": f"time budget ({left():.0f} s left, {need:.0f} s needed)"})
            continue
        try:
            payload["toy"][system] = toy_study(system, cfg, device=device, hidden=P["hidden"],
                                               iterations_cap=20 if smoke else 10**9, log=log)
        except Exception as err:  # noqa: BLE001
            errors.append(f"toy {system}: {type(err).__name__}: {err}")
            payload["toy"][system] = f"skipped: {type(err).__name__}"
            _free_cache(device)
        save(payload)
    payload["total_seconds"] = round(time.perf_counter() - t_start, 1)
    save(payload)
    return payload


def _jsonable(d: dict) -> dict:
    return {k: (_jsonable(v) if isinstance(v, dict) else list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
