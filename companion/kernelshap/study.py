"""The stage bodies of paper 16's two studies: :mod:`companion.kernelshap.scale` (the estimators at d = 784 and
3072 on a GPU) and :mod:`companion.kernelshap.scale_cpu` (our LeverageSHAP against shap's KernelExplainer).

Each stage is ``fn(ctx) -> JSON-able`` and reads its knobs from ``ctx.profile``:

* :func:`studies_stage`: :func:`~companion.kernelshap.experiment.scale_study` on the polynomial game (closed-form
  values) for every ``(d, seeds)`` of the plan, every named estimator and budget m, sampled, evaluated and
  solved on the device; a dimension is started only while the stage has time left;
* :func:`cpu_peer_stage`: the same LeverageSHAP estimate with NumPy on this machine's CPU at one (d, m), and the
  device's speed-up over it where the ``studies`` stage measured that point;
* :func:`shap_rows_stage`: on each bundled data set of the plan (the notebook's protocol: a
  ``DecisionTreeRegressor(max_depth=10)``, exact values from the interventional TreeExplainer), at every budget
  m, shap's ``KernelExplainer`` first, then ours with and without replacement, on exactly the same game: the
  normalised MSE and wall time of one whole estimate over seeds;
* :func:`comparison_stage`: the project's speed target (not a paper claim) on those rows: ours at least
  ``SPEEDUP_TARGET`` times faster than shap at equal m with a median error at most ``ERROR_RATIO_MAX`` times
  shap's.

No plotly here; shap is imported only by the stage that runs it.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion.core import Timer, check_int, limit_threads
from companion.kernelshap.estimators import ESTIMATORS, estimate, normalised_error
from companion.kernelshap.experiment import (ERROR_RATIO_MAX, SHAP, SPEEDUP_TARGET, make_setup, run_estimator,
                                             scale_study, summary)
from companion.kernelshap.polynomial import PolynomialGame

__all__ = ["LEVERAGE", "comparison_stage", "cpu_peer_stage", "shap_rows_stage", "studies_stage"]

LEVERAGE = "LeverageSHAP (LS, leverage)"


def _game(ctx, d: int, device) -> PolynomialGame:
    g = ctx.profile["game"]
    return PolynomialGame(d, order=g["order"], terms_per_feature=g["terms_per_feature"], seed=ctx.seed, device=device)


def studies_stage(ctx) -> list[dict]:
    """One :func:`~companion.kernelshap.experiment.scale_study` per ``(d, seeds)`` of ``plan`` (medians over
    seeds ``seed … seed + seeds − 1``); a dimension is started only while the stage has time left."""
    p = ctx.profile
    studies = []
    for d, seeds in p["plan"]:
        check_int("plan: seeds", seeds, lo=1)
        if studies and ctx.left() <= 0:
            ctx.log(f"  studies: no time left, d = {d} and later not run")
            break
        g = p["game"]
        study = scale_study(d, p["budgets"], seeds, list(ESTIMATORS), device=ctx.device, order=g["order"],
                            terms_per_feature=g["terms_per_feature"], game_seed=ctx.seed, seed0=ctx.seed)
        studies.append(study)
        for method, rec in study["methods"].items():
            for i, m in enumerate(study["budgets"]):
                ctx.log(f"  d={d:5d} m={m:7d} {method:40s} NMSE {np.median(rec['nmse'][i]):.2e} "
                        f"{np.median(rec['seconds'][i]) * 1e3:8.1f} ms (solve {np.median(rec['solve_seconds'][i]) * 1e3:.1f} ms)")
        if ctx.device == "cuda":
            torch.cuda.empty_cache()
    return studies


def cpu_peer_stage(ctx) -> dict:
    """LeverageSHAP with NumPy on this machine's CPU (all its threads) at ``cpu_peer`` = (d, m), one seed after a
    warm-up; ``speedup_gpu_vs_cpu`` against the ``studies`` stage's median time at that (d, m), where it ran."""
    d, m = ctx.profile["cpu_peer"]["d"], ctx.profile["cpu_peer"]["m"]
    game = _game(ctx, d, "cpu")
    truth = game.shapley()
    estimate(game, m, LEVERAGE, seed=ctx.seed)  # warm-up
    with Timer() as t:
        phi = estimate(game, m, LEVERAGE, seed=ctx.seed)
    out = {"d": d, "m": m, "method": LEVERAGE, "device": "cpu (numpy)", "threads": torch.get_num_threads(),
           "seconds": t.seconds, "nmse": normalised_error(phi, truth)}
    for study in ctx.results.get("studies") or []:
        if study["d"] == d and m in study["budgets"]:
            gpu_s = float(np.median(study["methods"][LEVERAGE]["seconds"][study["budgets"].index(m)]))
            out["speedup_gpu_vs_cpu"] = out["seconds"] / gpu_s
    ctx.log(f"  cpu peer: {out}")
    return out


def _measure(setup, method: str, m: int, seeds: list[int], replacement: bool = True) -> dict:
    """One whole estimate per seed (after an untimed warm-up): errors, wall seconds and game evaluations."""
    errors, seconds, evaluations = [], [], []
    run_estimator(setup, method, m, seeds[0], replacement)  # warm-up (imports, caches), not recorded
    for seed in seeds:
        before = setup.game.evaluations
        start = time.perf_counter()
        phi = run_estimator(setup, method, m, seed, replacement)
        seconds.append(time.perf_counter() - start)
        evaluations.append(setup.game.evaluations - before)
        errors.append(normalised_error(phi, setup.truth))
    return {"method": method if method == SHAP else f"{method}, {'with' if replacement else 'without'} replacement",
            "m": m, **summary(errors, seconds), "median_evaluations": float(np.median(evaluations)), "nmse": errors,
            "seconds": seconds}


def shap_rows_stage(ctx) -> list[dict]:
    """shap first, then ours with and without replacement, at every (data set, m) of ``plan``, on ``threads``
    BLAS and torch threads; a data set is started only while the stage has time left."""
    from threadpoolctl import threadpool_limits

    p = ctx.profile
    seeds = list(range(ctx.seed, ctx.seed + check_int("seeds", p["seeds"], lo=1)))
    rows = []
    with threadpool_limits(limits=p["threads"]), limit_threads(p["threads"]):
        for name, budgets in p["plan"].items():
            if rows and ctx.left() <= 0:
                ctx.log(f"  rows: no time left, {name} and later not run")
                break
            setup = make_setup(name)
            for m in budgets:
                for method, replacement in ((SHAP, True), (p["ours"], True), (p["ours"], False)):
                    row = {"dataset": name, "d": setup.game.d, **_measure(setup, method, m, seeds, replacement)}
                    rows.append(row)
                    ctx.log(f"  {name:14s} m={m:6d} {row['method']:55s} NMSE {row['median_nmse']:.2e} "
                            f"[{row['nmse_q25']:.1e}, {row['nmse_q75']:.1e}]  {row['median_seconds'] * 1e3:8.1f} ms")
    return rows


def comparison_stage(ctx) -> list[dict]:
    """Per (data set, m) and our variant: shap's median time over ours and our median error over shap's, from
    the ``rows`` stage."""
    if ctx.results.get("stages", {}).get("rows", {}).get("state") != "done":
        raise RuntimeError("the comparison needs the rows stage's results: run it first (--stages rows,comparison)")
    shap = {(r["dataset"], r["m"]): r for r in ctx.results["rows"] if r["method"] == SHAP}
    out = []
    for r in ctx.results["rows"]:
        ref = shap.get((r["dataset"], r["m"]))
        if r["method"] == SHAP or ref is None:
            continue
        speedup, ratio = ref["median_seconds"] / r["median_seconds"], r["median_nmse"] / ref["median_nmse"]
        out.append({"dataset": r["dataset"], "m": r["m"], "method": r["method"], "speedup_vs_shap": speedup,
                    "nmse_ratio_vs_shap": ratio, "meets_target": bool(speedup >= SPEEDUP_TARGET and ratio <= ERROR_RATIO_MAX)})
        ctx.log(f"  {r['dataset']} m={r['m']} {r['method']}: {speedup:.1f}x faster than shap, error ratio {ratio:.2f}")
    return out
