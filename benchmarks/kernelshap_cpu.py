"""Paper 16 on the CPU: our LeverageSHAP against shap's KernelExplainer, same game, same run.

Run from the repository root (shap installed; one BLAS thread, as the notebooks run):

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/kernelshap_cpu.py
    python benchmarks/kernelshap_cpu.py --smoke     # tiny, results to a temp folder

Protocol (the paper's, on scikit-learn's bundled data): ``DecisionTreeRegressor(max_depth=10)`` on an
ordered 80/20 split, baseline = first training row, query = first test row, exact values from the
interventional TreeExplainer. Both estimators see exactly the same function: shap gets the game as a
mask function (``KernelExplainer(f, zeros).shap_values(ones, nsamples=m, l1_reg=False)``), ours calls
the same game object; both evaluate m coalitions in one predict call. At each budget m and seed:
normalised MSE ‖φ̂ − φ*‖²/‖φ*‖² and wall time of one whole estimate (sampling, model evaluation,
solve; for shap also building the explainer). Reported: medians over seeds, the speed-up
(shap time / ours) and the error ratio. Target (issue 7): ≥ 5× faster at equal m on breast cancer
and digits with equal or lower median error.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from companion.core import save_results  # noqa: E402
from companion.kernelshap.estimators import normalised_error  # noqa: E402
from companion.kernelshap.experiment import SHAP, make_setup, run_estimator  # noqa: E402

OURS = "LeverageSHAP (LS, leverage)"
PLAN = {"breast_cancer": (256, 1024, 4096), "digits": (1024, 4096, 16384)}


def measure(setup, method: str, m: int, seeds: int, replacement: bool = True) -> dict:
    errors, seconds, evaluations = [], [], []
    run_estimator(setup, method, m, 0, replacement)  # warm-up (imports, caches), not recorded
    for seed in range(seeds):
        before = setup.game.evaluations
        start = time.perf_counter()
        phi = run_estimator(setup, method, m, seed, replacement)
        seconds.append(time.perf_counter() - start)
        evaluations.append(setup.game.evaluations - before)
        errors.append(normalised_error(phi, setup.truth))
    return {"method": method if method == SHAP else f"{method}, {'with' if replacement else 'without'} replacement",
            "m": m, "median_nmse": float(np.median(errors)), "nmse_q25": float(np.quantile(errors, 0.25)),
            "nmse_q75": float(np.quantile(errors, 0.75)), "median_seconds": float(np.median(seconds)),
            "median_evaluations": float(np.median(evaluations)), "nmse": errors, "seconds": seconds}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run, results to a temp folder")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    start = time.perf_counter()
    plan = {"breast_cancer": (256,), "digits": (1024,)} if args.smoke else PLAN
    seeds = 3 if args.smoke else args.seeds
    payload = {"smoke": args.smoke, "seeds": seeds, "ours": OURS,
               "threads": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")},
               "protocol": "DecisionTreeRegressor(max_depth=10), ordered 80/20 split, baseline row 0, query = first "
                           "test row, truth = interventional TreeExplainer; paired sampling; shap with l1_reg=False",
               "rows": [], "comparison": []}
    for name, budgets in plan.items():
        setup = make_setup(name)
        for m in budgets:
            shap_row = measure(setup, SHAP, m, seeds)
            ours = measure(setup, OURS, m, seeds, replacement=True)
            ours_wo = measure(setup, OURS, m, seeds, replacement=False)
            for row in (shap_row, ours, ours_wo):
                payload["rows"].append({"dataset": name, "d": setup.game.d, **row})
                print(f"{name:14s} m={m:6d} {row['method']:55s} NMSE {row['median_nmse']:.2e} "
                      f"[{row['nmse_q25']:.1e}, {row['nmse_q75']:.1e}]  {row['median_seconds'] * 1e3:8.1f} ms", flush=True)
            for row in (ours, ours_wo):
                speedup = shap_row["median_seconds"] / row["median_seconds"]
                ratio = row["median_nmse"] / shap_row["median_nmse"]
                payload["comparison"].append({
                    "dataset": name, "m": m, "method": row["method"], "speedup_vs_shap": speedup,
                    "nmse_ratio_vs_shap": ratio, "meets_target": bool(speedup >= 5 and ratio <= 1)})
                print(f"    {row['method']}: {speedup:.1f}x faster than shap, error ratio {ratio:.2f}", flush=True)
    payload["wall_seconds"] = time.perf_counter() - start
    out_dir = tempfile.mkdtemp(prefix="kernelshap_cpu_smoke_") if args.smoke else None
    path = save_results("kernelshap_cpu", payload, out_dir=out_dir)
    print(f"wrote {path} in {payload['wall_seconds']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
