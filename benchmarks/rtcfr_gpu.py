"""Paper 18 (RTCFR+) on one GPU: batched throughput and (μ, T_u) grids on the paper's larger games.

Run from the repository root on the H200 machine (no OpenSpiel there: the games are loaded from
``data/rtcfr/*.npz``, written by ``data/rtcfr/make_games.py``):

    python benchmarks/rtcfr_gpu.py            # about 2 minutes on one H200
    python benchmarks/rtcfr_gpu.py --smoke    # tiny, on the CPU, end to end (writes rtcfr_gpu_smoke)

1. correctness: the batched torch solver (eager, and replayed from a CUDA graph) against the numpy
   solver on Leduc, NashConv after 60 iterations;
2. throughput: ms per batched iteration for B = 1, 16, 128 hyperparameter points (``do_bench``
   median), eager and CUDA-graph, beside the peer: the single-configuration numpy solver on this
   machine's CPU (itself ≥ 20x OpenSpiel's C++ CFR+, see benchmarks/rtcfr_cpu.py);
3. RTCFR+ over a 7 x 4 grid of (μ, T_u) in one batch, and CFR+/PCFR+/DCFR (last and average
   iterate), NashConv every 100 iterations, on Liar's Dice(5/6), Goofspiel(5/6), Battleship(3).

A wall-clock guard skips what would not fit in the budget and says so in the results.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from companion.core import save_results  # noqa: E402
from companion.rtcfr.batched import BatchedSolver  # noqa: E402
from companion.rtcfr.games import CompiledGame, data_path  # noqa: E402
from companion.rtcfr.solvers import TUNED, Solver  # noqa: E402
from companion.rtcfr.study import grid_study, numpy_ms_per_iter, throughput  # noqa: E402

MUS = (1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 1e-1)
T_US = (10, 50, 100, 500)


def correctness(device, graph_steps):
    """NashConv after 60 iterations: numpy vs batched eager vs batched CUDA graph (RTCFR+, T_u = 10)."""
    game = CompiledGame.load(data_path("leduc_poker"))
    ref = Solver(game, "rtcfr+", mu=1e-3, T_u=10)
    for _ in range(60):
        ref.step()
    out = {"game": "leduc_poker", "iterations": 60, "numpy": ref.nash_conv()}
    eager = BatchedSolver(game, "rtcfr+", mu=[1e-3, 1e-3], T_u=[10, 10], device=device)
    for _ in range(60):
        eager.step()
    out["eager"] = float(eager.nash_conv()[0])
    out["graph_ok"] = False
    if graph_steps:
        try:
            solver = BatchedSolver(game, "rtcfr+", mu=[1e-3, 1e-3], T_u=[10, 10], device=device)
            replay = solver.graphed(graph_steps)
            for _ in range(60 // graph_steps):
                replay()
            out["graph"] = float(solver.nash_conv()[0])
            out["graph_ok"] = abs(out["graph"] - out["numpy"]) <= 1e-5 * max(1.0, out["numpy"])
        except Exception as exc:
            out["graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
    out["eager_ok"] = abs(out["eager"] - out["numpy"]) <= 1e-5 * max(1.0, out["numpy"])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run on the CPU")
    parser.add_argument("--budget", type=float, default=165.0, help="wall-clock seconds before skipping the rest")
    args = parser.parse_args()
    start = time.perf_counter()
    smoke = args.smoke
    device = "cpu" if smoke or not torch.cuda.is_available() else "cuda"
    graph_steps = 10 if device == "cuda" else 0
    if smoke:
        games, mus, tus, iters, batches, tgames = ["leduc_poker"], MUS[2:5], T_US[:2], 60, (1, 4), ["leduc_poker"]
    else:
        games = ["liars_dice_5", "goofspiel_5", "liars_dice_6", "goofspiel_6", "battleship_3"]
        mus, tus, iters, batches = MUS, T_US, 2000, (1, 16, 128)
        tgames = ["leduc_poker", "liars_dice_6", "goofspiel_6", "battleship_3"]
    payload = {"smoke": smoke, "device_kind": device, "budget_s": args.budget, "skipped": []}

    def left():
        return args.budget - (time.perf_counter() - start)

    check = correctness(device, graph_steps)
    payload["correctness"] = check
    print("correctness", check, flush=True)
    if graph_steps and not check["graph_ok"]:
        graph_steps = 0  # CUDA graphs disagree or failed: eager only, recorded above
    if not check["eager_ok"]:  # recorded in the results; the run goes on so the GPU time is not lost
        print(f"WARNING: batched solver disagrees with the numpy solver: {check}", flush=True)
    payload["graph_steps"] = graph_steps

    rows = []
    for name in tgames:
        game = CompiledGame.load(data_path(name))
        peer = numpy_ms_per_iter(game, "rtcfr+", iterations=20 if smoke else 50)
        for batch in batches:
            if left() < 120 and not smoke:
                payload["skipped"].append(f"throughput {name} B={batch}")
                continue
            row = throughput(game, batch, device=device, graph_steps=graph_steps)
            row["numpy_cpu_ms_per_iter"] = peer
            row["speedup_vs_numpy_cpu"] = row["config_iterations_per_s"] * peer / 1e3
            rows.append(row)
            print(row, flush=True)
        del game
        if device == "cuda":
            torch.cuda.empty_cache()
    payload["throughput"] = rows

    grids = {}
    for name in games:
        if left() < (10 if smoke else 25):
            payload["skipped"].append(f"grid {name}")
            continue
        game = CompiledGame.load(data_path(name))
        t0 = time.perf_counter()
        res = grid_study(game, mus, tus, iters, eval_every=20 if smoke else 100, device=device, graph_steps=graph_steps)
        res["paper_tuned"] = list(TUNED.get(name, (None, None)))
        res["wall_s"] = time.perf_counter() - t0
        grids[name] = res
        base = {a: (b["last"][-1], b["average"][-1]) for a, b in res["baselines"].items()}
        print(name, f"{res['wall_s']:.1f}s", "best", res["best"], "baselines (last, avg)", base, flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
    payload["grids"] = grids
    payload["grid"] = {"mus": list(mus), "T_us": list(tus), "iterations": iters}
    payload["wall_s"] = time.perf_counter() - start
    if smoke:  # never touch the committed results from a smoke run
        import tempfile

        path = save_results("rtcfr_gpu_smoke", payload, out_dir=tempfile.mkdtemp(prefix="rtcfr_smoke_"))
    else:
        path = save_results("rtcfr_gpu", payload)
    print(f"wrote {path} in {payload['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
