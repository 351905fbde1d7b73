"""Scale-up studies for paper 18 (RTCFR+): batched (μ, T_u) grids and throughput, CPU or GPU.

Paper: Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games*
(NeurIPS 2025), Fig. 1 (RTCFR+ against CFR+/PCFR+/DCFR) and Figs. 8-15 (sensitivity to μ and T_u).
:func:`grid_study` runs RTCFR+ over a whole (μ, T_u) grid in one :class:`~companion.rtcfr.batched.BatchedSolver`
and the average-iterate baselines beside it; :func:`throughput` times one batched iteration (``companion.core.time_ms``).
The GPU benchmark (``benchmarks/rtcfr_gpu.py``) and the notebook's GPU profile call these.
No plotly here (the GPU machine has none).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion.core import limit_threads, time_ms
from companion.rtcfr.batched import BatchedSolver, sweep
from companion.rtcfr.solvers import Solver, as_game

BASELINES = ("cfr+", "pcfr+", "dcfr")


def throughput(game, batch: int, device="cpu", graph_steps: int = 0, algorithm: str = "rtcfr+") -> dict:
    """ms per batched iteration (B = ``batch`` hyperparameter points) and config-iterations per second."""
    game = as_game(game)
    mus = np.geomspace(1e-4, 1e-1, batch)
    solver = BatchedSolver(game, algorithm, mu=mus, T_u=np.full(batch, 100), track_average=False, device=device)
    with limit_threads(1 if solver.device.type == "cpu" else None):
        eager = time_ms(solver.step, device, cpu_reps=20)
        out = {"game": game.name, "batch": batch, "algorithm": algorithm, "eager_ms_per_step": eager}
        best = eager
        if graph_steps and solver.device.type == "cuda":
            try:
                replay = solver.graphed(graph_steps)
                graph = time_ms(replay, device, cpu_reps=20) / graph_steps
                out["graph_ms_per_step"] = graph
                best = min(best, graph)
            except Exception as exc:  # record, never hide
                out["graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
    out["config_iterations_per_s"] = batch * 1e3 / best
    return out


def numpy_ms_per_iter(game, algorithm: str = "rtcfr+", iterations: int = 200, **hyper) -> float:
    """Wall ms per iteration of the single-configuration numpy solver (the CPU peer)."""
    solver = Solver(as_game(game), algorithm, track_average=algorithm not in ("rtcfr+", "rtpcfr+"), **hyper)
    for _ in range(5):
        solver.step()
    start = time.perf_counter()
    for _ in range(iterations):
        solver.step()
    return 1e3 * (time.perf_counter() - start) / iterations


def grid_study(game, mus, T_us, iterations: int, *, eval_every: int = 100, baselines=BASELINES, device="cpu",
               graph_steps: int = 0, gamma: float = 1e-10) -> dict:
    """RTCFR+ over the grid mus x T_us (one batch) and each baseline (last and average iterate).

    Returns plain lists (JSON-ready): ``iterations``; ``rtcfr`` with ``mu``, ``T_u``, ``last``
    [n_eval][B] and ``seconds``; ``baselines[alg]`` with ``last``/``average`` [n_eval] and
    ``seconds``; ``best`` the grid point with the lowest final last-iterate NashConv.
    """
    game = as_game(game)
    res = sweep(game, mus, T_us, iterations, eval_every=eval_every, gamma=gamma, device=device, graph_steps=graph_steps)
    last = res["last"]
    k = int(np.argmin(last[-1]))
    out = {
        "game": game.name, "n_infosets": game.n_infosets, "n_sequences": list(game.n_sequences),
        "iterations": [int(t) for t in res["iterations"]],
        "rtcfr": {"mu": res["mu"], "T_u": res["T_u"], "mus": res["mus"], "T_us": res["T_us"],
                  "last": last.tolist(), "seconds": res["seconds"],
                  "config_iterations_per_s": res["config_iterations_per_s"]},
        "best": {"mu": res["mu"][k], "T_u": res["T_u"][k], "final_last": float(last[-1, k])},
        "baselines": {},
    }
    for alg in baselines:
        solver = BatchedSolver(game, alg, mu=1.0, T_u=1, track_average=True, device=device)
        if solver.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        _, bl, ba = solver.run(iterations, eval_every=eval_every, average=True, graph_steps=graph_steps)
        out["baselines"][alg] = {"last": bl[:, 0].tolist(), "average": ba[:, 0].tolist(),
                                 "seconds": time.perf_counter() - start}
    return out
