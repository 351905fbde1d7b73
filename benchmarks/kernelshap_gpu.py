"""Paper 16 (unified Shapley estimators) on one GPU: d = 784 and 3072, m up to 1e5.

Run from the repository root on the H200 machine (no shap there, none needed):

    python benchmarks/kernelshap_gpu.py            # under 3 minutes on one H200
    python benchmarks/kernelshap_gpu.py --smoke    # tiny, on the CPU, end to end (writes to a temp folder)

The game is a sparse cubic polynomial (``companion.kernelshap.polynomial.PolynomialGame``: 2d random
monomials of order 3 plus a linear part) whose interventional Shapley values are exact in closed form
at any d, so no tree ensemble or TreeExplainer is needed for ground truth. For every named estimator
of the paper's framework (LS: KernelSHAP, LeverageSHAP, modified ℓ2; MV: unbiased KernelSHAP, MV
leverage), paired sampling with replacement, m ∈ {500, 5000, 50000, 100000}: the coalitions are drawn
on the device, evaluated in batches on the device, the weighted Gram ``Zᵀ diag(wk) Z`` accumulated in
float64 on the device and the (d−1)×(d−1) system solved there. Recorded per (d, method, m) over
seeds: normalised MSE, Spearman rank correlation, wall time split into sampling / evaluation / solve.

Timing is wall-clock with CUDA synchronisation (median over seeds), not ``do_bench``: one estimate
includes host-side sampling of subset sizes and a fresh random draw, which is the thing measured.
shap's KernelExplainer is CPU-only and absent here; the peers in this run are the matrix-vector
estimator (unbiased KernelSHAP, Covert & Lee) and the same LS estimator on this machine's CPU
(NumPy, all cores) at d = 784, m = 50000. The CPU benchmark (benchmarks/kernelshap_cpu.py) compares
with shap itself.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from companion.core import Timer, save_results  # noqa: E402
from companion.kernelshap.estimators import ESTIMATORS, estimate, normalised_error  # noqa: E402
from companion.kernelshap.experiment import scale_rows, scale_study  # noqa: E402
from companion.kernelshap.polynomial import PolynomialGame  # noqa: E402

LEVERAGE = "LeverageSHAP (LS, leverage)"


def cpu_peer(d: int, m: int) -> dict:
    """The same LeverageSHAP estimate on this machine's CPU (NumPy path), one seed after a warm-up."""
    game = PolynomialGame(d, seed=0, device="cpu")
    truth = game.shapley()
    estimate(game, 1000, LEVERAGE, seed=0)
    with Timer() as t:
        phi = estimate(game, m, LEVERAGE, seed=0)
    return {"d": d, "m": m, "method": LEVERAGE, "device": "cpu (numpy)", "threads": torch.get_num_threads(),
            "seconds": t.seconds, "nmse": normalised_error(phi, truth)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run on the CPU, results to a temp folder")
    parser.add_argument("--budget", type=float, default=170.0, help="wall-clock seconds before skipping the rest")
    args = parser.parse_args()
    start = time.perf_counter()
    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    if args.smoke:
        plan, budgets, peer = [(24, 3), (40, 2)], (100, 400), (24, 2000)
    else:
        plan, budgets, peer = [(784, 10), (3072, 5)], (500, 5000, 50_000, 100_000), (784, 50_000)
    payload = {"smoke": args.smoke, "device_kind": device, "budget_s": args.budget, "skipped": [],
               "protocol": "PolynomialGame(order=3, terms_per_feature=2, seed=0); paired sampling with replacement; "
                           "estimators as in companion.kernelshap.ESTIMATORS; medians over seeds 0..n-1",
               "studies": [], "rows": []}
    for d, seeds in plan:
        elapsed = time.perf_counter() - start
        if elapsed > args.budget:
            payload["skipped"].append(f"d={d}")
            continue
        study = scale_study(d, budgets, seeds, list(ESTIMATORS), device=device)
        rows = scale_rows(study)
        payload["studies"].append(study)
        payload["rows"].extend(rows)
        for row in rows:
            print(f"d={row['d']:5d} m={row['m']:7d} {row['method']:40s} NMSE {row['median_nmse']:.2e} "
                  f"rho {row['median_spearman']:.3f}  {row['median_seconds'] * 1e3:8.1f} ms "
                  f"(solve {row['median_solve_seconds'] * 1e3:.1f} ms)", flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
    if time.perf_counter() - start < args.budget:
        payload["cpu_peer"] = cpu_peer(*peer)
        print("cpu peer", payload["cpu_peer"], flush=True)
        gpu = [r for r in payload["rows"] if r["d"] == peer[0] and r["m"] == peer[1] and r["method"] == LEVERAGE]
        if gpu:
            payload["cpu_peer"]["speedup_gpu_vs_cpu"] = payload["cpu_peer"]["seconds"] / gpu[0]["median_seconds"]
    else:
        payload["skipped"].append("cpu peer")
    payload["wall_seconds"] = time.perf_counter() - start
    out_dir = tempfile.mkdtemp(prefix="kernelshap_gpu_smoke_") if args.smoke else None
    path = save_results("kernelshap_gpu", payload, out_dir=out_dir)
    print(f"wrote {path} in {payload['wall_seconds']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
