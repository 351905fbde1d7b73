"""The notebook's runs: the construction check (n = 9, 3-NN), equivariance and hollowness checks, the
divergence cost against n, the LJ toy flow with ESS through both divergence paths, and the peer check
against flow-matching's exact likelihood solver. No plotly here.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion.core import ParameterError, check_int, limit_threads, time_ms
from companion.hollowflow.divergence import divergence_hollow, gaussian_log_prob, jacobian, rk4_likelihood
from companion.hollowflow.lj import SYSTEMS, bootstrap_interval, ess_rem, kish_ess, lj_samples, log_weights, train_cfm
from companion.hollowflow.nobgnn import EGNN, NoBGNN

__all__ = ["paper_config", "construction_check", "self_dependence", "equivariance", "cost_scaling", "fitted_slope",
           "toy_flow", "peer_likelihood", "block_mask"]


def paper_config(n: int = 9, d: int = 3, seed: int = 0) -> torch.Tensor:
    """Gaussian coordinates ``np.random.default_rng(seed).normal(size=(n, d))`` in float64 (the spec's check
    configuration: n = 9, 3-NN, 3 steps gives 100 → 40 → 26 line edges)."""
    return torch.tensor(np.random.default_rng(seed).normal(size=(n, d)), dtype=torch.float64)


def block_mask(n: int, d: int) -> torch.Tensor:
    """The (n·d × n·d) mask of the d×d diagonal blocks."""
    return torch.block_diag(*[torch.ones(d, d)] * n).bool()


def _model(n, d, k, steps, hidden, prune, seed, attention=False):
    torch.manual_seed(seed)
    return NoBGNN(d=d, hidden=hidden, steps=steps, k=k, prune=prune, attention=attention).double()


def self_dependence(model: NoBGNN, x: torch.Tensor, t: float = 0.5, delta: float = 1e-6) -> float:
    """max over line nodes (i, j) of |h^T_ij(x + δe_{j,c}) − h^T_ij(x − δe_{j,c})| / 2δ: a numerical
    Jacobian of the final line states w.r.t. their own target particle (graph held fixed)."""
    x = x.reshape(1, *x.shape[-2:]).to(torch.float64)
    g = model.graph(x)
    n, d = x.shape[1:]
    worst = 0.0
    with torch.no_grad():
        for j in range(n):
            rows = (g.dst % n) == j
            if not bool(rows.any()):
                continue
            for c in range(d):
                e = torch.zeros_like(x)
                e[0, j, c] = delta
                sp, pp, _, _ = model.line_states(x + e, t, g)
                sm, pm, _, _ = model.line_states(x - e, t, g)
                diff = torch.cat([sp - sm, pp - pm], -1)[rows].abs().max() / (2 * delta)
                worst = max(worst, float(diff))
    return worst


def construction_check(*, n: int = 9, k: int = 3, steps: int = 3, hidden: int = 16, seed: int = 0, t: float = 0.5,
                       ablation_seeds: int = 1) -> dict:
    """The paper-style check on one configuration, pruned and unpruned (float64). The coordinates are always
    ``paper_config(n, 3, 0)`` (n = 9, k = 3, 3 steps: 100 → 40 → 26); ``seed`` sets the weights.
    ``ablation_seeds``: the unpruned ablation is repeated with the weights of seeds ``seed``, ``seed + 1``, ...
    (``out["unpruned_seeds"]``, the first being ``out["unpruned"]``), one value per seed for its claim row."""
    check_int("ablation_seeds", ablation_seeds, lo=1)
    x = paper_config(n, 3, 0)
    out = {"n": n, "k": k, "steps": steps}
    mask = block_mask(n, 3)

    def one(prune, s):
        m = _model(n, 3, k, steps, hidden, prune, s)
        g = m.graph(x, keep_B=True)
        J = jacobian(m, x, t, graph=g)
        Jd = jacobian(m, x, t, graph=g, detach_h=True)
        _, dh = divergence_hollow(m, x, t, graph=g)
        return {
            "counts": g.counts(), "removed": [int(r.shape[0]) for r in g.removed], "leaks": g.leaks(),
            "line_nodes": int(g.src.numel()),
            "trace": float(torch.trace(J)), "hollow": float(dh[0]),
            "div_error": abs(float(torch.trace(J)) - float(dh[0])),
            "diag_block_diff": float((J - Jd)[mask].abs().max()),
            "offblock_detached": float(Jd[~mask].abs().max()),
            "self_dependence": self_dependence(m, x, t),
        }

    out["pruned"] = one(True, seed)
    out["unpruned_seeds"] = [one(False, seed + i) for i in range(ablation_seeds)]
    out["unpruned"] = out["unpruned_seeds"][0]
    return out


def equivariance(*, n: int = 9, k: int = 3, steps: int = 2, hidden: int = 16, seed: int = 0, t: float = 0.5) -> dict:
    """Rotation/reflection + translation and permutation residuals of b and of the hollow divergence."""
    x = paper_config(n, 3, seed)
    m = _model(n, 3, k, steps, hidden, True, seed)
    gen = torch.Generator().manual_seed(seed + 7)
    Q, _ = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    c = torch.randn(3, generator=gen, dtype=torch.float64)
    perm = torch.randperm(n, generator=gen)
    b, div = divergence_hollow(m, x, t)
    b_rot, div_rot = divergence_hollow(m, x @ Q.T + c, t)
    b_perm, div_perm = divergence_hollow(m, x[perm], t)
    return {"rotation": float((b_rot[0] - b[0] @ Q.T).abs().max()), "permutation": float((b_perm[0] - b[0][perm]).abs().max()),
            "div_rotation": float((div_rot - div).abs().max()), "div_permutation": float((div_perm - div).abs().max())}


def fitted_slope(n, seconds) -> float:
    """Least-squares slope of log(seconds) against log(n)."""
    return float(np.polyfit(np.log(np.asarray(n, float)), np.log(np.asarray(seconds, float)), 1)[0])


def _time(fn, reps):
    """Median CPU seconds of ``fn`` over ``reps`` calls after a warm-up, in process time (wall-clock timings of
    these millisecond calls on a loaded 2-core machine moved the speed-up's exponent in n by ±0.5 from run to run)."""
    return time_ms(fn, "cpu", cpu_reps=reps, cpu_clock="process") / 1e3


def cost_scaling(sizes=(4, 8, 16, 32, 64), *, k: int = 4, hidden: int = 16, steps_hollow: int = 2, steps_base: int = 2,
                 reps: int = 3, vjp_sample: int | None = 24, seed: int = 0, threads: int | None = 1) -> dict:
    """CPU seconds (:func:`_time`) per velocity + divergence evaluation (one sample, float32): the fully connected
    EGNN with the exact n·d-VJP trace against the NoBGNN (kNN, ``k``) with d VJPs; the hollow time includes
    building the graph, L(G) and the pruning.

    With ``vjp_sample`` the brute force runs the forward and ``vjp_sample`` of its n·d VJPs and scales the
    VJP part by n·d / vjp_sample (every VJP costs the same; this keeps the CPU profile inside its budget).
    """
    sizes = [int(s) for s in sizes]
    if min(sizes) < 3:
        raise ParameterError("sizes", sizes, "particle counts >= 3")
    out = {"n": sizes, "k": k, "hollow_s": [], "brute_s": [], "brute_vjps": [], "vjp_sample": vjp_sample}
    with limit_threads(threads):
        for n in sizes:
            torch.manual_seed(seed)
            x = torch.randn(1, n, 3, generator=torch.Generator().manual_seed(seed + n))
            mh = NoBGNN(hidden=hidden, steps=steps_hollow, k=min(k, n - 1))
            mb = EGNN(hidden=hidden, steps=steps_base)
            out["hollow_s"].append(_time(lambda: divergence_hollow(mh, x, 0.5), reps))
            N = n * 3
            m = N if vjp_sample is None else min(N, vjp_sample)

            def brute(m=m):
                xx = x.detach().requires_grad_(True)
                b = mb(xx, 0.5).reshape(-1)
                for a in range(m):
                    torch.autograd.grad(b[a], xx, retain_graph=a < m - 1)

            def fwd():
                mb(x.detach().requires_grad_(True), 0.5)

            t_all = _time(brute, reps)
            t_fwd = _time(fwd, reps)
            out["brute_s"].append(t_fwd + (t_all - t_fwd) * N / m)
            out["brute_vjps"].append(m)
    out["slope_hollow"] = fitted_slope(sizes, out["hollow_s"])
    out["slope_brute"] = fitted_slope(sizes, out["brute_s"])
    out["speedup"] = [b / h for b, h in zip(out["brute_s"], out["hollow_s"])]
    return out


def toy_flow(*, system: str = "LJ13", k: int = 6, hidden: int = 16, steps_hollow: int = 2, steps_base: int = 3,
             iterations: int = 40, batch: int = 32, train_size: int = 256, n_samples: int = 64, ode_steps: int = 20,
             check_samples: int = 2, check_steps: int = 2, burn_in: int = 200, resamples: int = 1000, lr: float = 3e-3, seed: int = 0, baseline: bool = True,
             threads: int | None = 1, log=None) -> dict:
    """LJ toy: MALA data, a small hollow CFM (and a fully connected baseline), samples with RK4 likelihoods.

    Returns the log-weights, ESS / ESS_rem with 68 % bootstrap intervals, seconds per sample of each
    model's likelihood run, and the largest |log q_hollow − log q_bruteforce| on ``check_samples`` samples
    integrated with ``check_steps`` RK4 steps (the two divergence paths on the same trajectories; the
    brute-force path costs n·d = 39 VJPs per evaluation, so the check uses fewer steps than the sampling).
    """
    if system not in SYSTEMS:
        raise ParameterError("system", system, "one of " + ", ".join(SYSTEMS))
    n, d = SYSTEMS[system]
    if not 1 <= k < n:
        raise ParameterError("k", k, f"an integer with 1 <= k < n = {n}")
    res = {"system": system, "n": n, "k": k, "iterations": iterations, "n_samples": n_samples, "ode_steps": ode_steps,
           "check_steps": check_steps, "check_samples": check_samples}
    with limit_threads(threads):
        t0 = time.perf_counter()
        data = lj_samples(system, train_size, seed=seed, burn_in=burn_in).float()
        res["mala_s"] = time.perf_counter() - t0
        models = {"hollow": NoBGNN(d=d, hidden=hidden, steps=steps_hollow, k=k)}
        if baseline:
            models["baseline"] = EGNN(d=d, hidden=hidden, steps=steps_base)
        x0 = torch.randn(n_samples, n, d, generator=torch.Generator().manual_seed(seed + 11))
        for name, model in models.items():
            torch.manual_seed(seed)
            t0 = time.perf_counter()
            losses = train_cfm(model, data, iterations=iterations, batch=batch, lr=lr, seed=seed)
            train_s = time.perf_counter() - t0
            method = "hollow" if name == "hollow" else "bruteforce"
            t0 = time.perf_counter()
            x1, log_q = rk4_likelihood(model, x0, steps=ode_steps, method=method)
            sample_s = time.perf_counter() - t0
            lw = log_weights(system, x1.double(), log_q.double())
            r = {"losses": losses, "train_s": train_s, "sample_s": sample_s, "seconds_per_sample": sample_s / n_samples,
                 "ess": kish_ess(lw), "ess_rem": ess_rem(lw), "log_w": lw.tolist(),
                 "ess_ci": bootstrap_interval(lw, kish_ess, resamples, seed=seed),
                 "ess_rem_ci": bootstrap_interval(lw, ess_rem, resamples, seed=seed)}
            if name == "hollow" and check_samples:
                xs = x0[:check_samples].double()
                mm = model.double()
                _, lq_h = rk4_likelihood(mm, xs, steps=check_steps, method="hollow")
                _, lq_b = rk4_likelihood(mm, xs, steps=check_steps, method="bruteforce")
                r["path_diff"] = float((lq_h - lq_b).abs().max())
                model.float()
            res[name] = r
            if log:
                log(f"{name}: ESS {r['ess']:.4f}, ESS_rem {r['ess_rem']:.4f}, {sample_s:.1f} s for {n_samples} samples")
    return res


def peer_likelihood(*, n: int = 6, k: int = 3, steps: int = 2, hidden: int = 16, ode_steps: int = 20, samples: int = 4,
                    seed: int = 0) -> dict | None:
    """log q(x₁) from :func:`rk4_likelihood` (3/8 RK4, hollow divergence) against flow-matching's
    ``ODESolver.compute_likelihood(method="rk4", exact_divergence=True)`` with the same steps, float64.
    Returns None when ``flow_matching`` is not installed."""
    try:
        from flow_matching.solver import ODESolver
        from flow_matching.utils import ModelWrapper
    except ImportError:
        return None
    m = _model(n, 3, k, steps, hidden, True, seed)
    x1 = torch.randn(samples, n, 3, generator=torch.Generator().manual_seed(seed + 3), dtype=torch.float64)

    class Flat(ModelWrapper):
        def forward(self, x, t, **extras):
            return self.model(x.reshape(-1, n, 3), t).reshape(x.shape[0], -1)

    solver = ODESolver(velocity_model=Flat(m))
    x0_peer, lq_peer = solver.compute_likelihood(
        x_1=x1.reshape(samples, -1), log_p0=lambda z: gaussian_log_prob(z.reshape(-1, n, 3)), step_size=1.0 / ode_steps,
        method="rk4", exact_divergence=True)
    x0, lq = rk4_likelihood(m, x1, direction="density", steps=ode_steps, scheme="3/8", method="hollow")
    return {"max_abs_diff": float((lq - lq_peer).abs().max()), "x0_diff": float((x0.reshape(samples, -1) - x0_peer).abs().max()),
            "log_q": lq.tolist(), "log_q_peer": lq_peer.tolist(), "ode_steps": ode_steps}

