"""Scale-up studies for paper 18 (RTCFR+): batched (μ, T_u) grids and throughput, CPU or GPU, and the stage
bodies of the two studies (:mod:`companion.rtcfr.scale` on a GPU, :mod:`companion.rtcfr.scale_cpu` against
OpenSpiel's C++ CFR+).

Paper: Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games* (NeurIPS 2025),
Fig. 1 (RTCFR+ against CFR+/PCFR+/DCFR) and Figs. 8-15 (sensitivity to μ and T_u).
:func:`grid_study` runs RTCFR+ over a whole (μ, T_u) grid in one :class:`~companion.rtcfr.batched.BatchedSolver`
and the average-iterate baselines beside it; :func:`throughput` times one batched iteration (``companion.core.time_ms``);
:func:`timed_blocks` times a solver step on the CPU (wall and process time).

The stages (each ``fn(ctx) -> JSON-able``, knobs from ``ctx.profile``): :func:`correctness_stage`,
:func:`throughput_stage` and :func:`grids_stage` (GPU study); :func:`openspiel_stage` and :func:`target_stage`
(CPU study). No plotly here (the GPU machine has none).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion.core import limit_threads, time_ms
from companion.rtcfr.batched import BatchedSolver, sweep
from companion.rtcfr.games import GAMES, CompiledGame, compile_game, data_path, openspiel_game
from companion.rtcfr.solvers import TUNED, Solver, as_game

#: the project's CPU target: ours at least this many times OpenSpiel's C++ CFR+ iterations per second on Leduc
CPU_SPEEDUP_TARGET = 20.0

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


def timed_blocks(step, blocks: int, per_block: int) -> tuple[float, float]:
    """Median (wall, process CPU) seconds per call of ``step`` over ``blocks`` blocks of ``per_block`` calls (the
    process time is steadier on a shared machine)."""
    wall, cpu = [], []
    for _ in range(blocks):
        w, c = time.perf_counter(), time.process_time()
        for _ in range(per_block):
            step()
        wall.append((time.perf_counter() - w) / per_block)
        cpu.append((time.process_time() - c) / per_block)
    return float(np.median(wall)), float(np.median(cpu))


def numpy_ms_per_iter(game, algorithm: str = "rtcfr+", iterations: int = 200, **hyper) -> float:
    """Wall ms per iteration of the single-configuration numpy solver (the CPU peer), after 5 untimed ones."""
    solver = Solver(as_game(game), algorithm, track_average=algorithm not in ("rtcfr+", "rtpcfr+"), **hyper)
    for _ in range(5):
        solver.step()
    return 1e3 * timed_blocks(solver.step, 1, iterations)[0]


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


# ---------------------------------------------------------------- the GPU study (companion.rtcfr.scale)
def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-5 * max(1.0, b)


def correctness_stage(ctx) -> dict:
    """NashConv of RTCFR+ (μ = 1e-3, T_u = 10) after ``correctness.iterations`` on ``correctness.game``: the numpy
    solver, the batched torch solver eager and, on CUDA, replayed from a CUDA graph of ``graph_steps`` iterations.
    ``graph_steps`` in the result is what the later stages replay: 0 (eager) where the graphs failed or disagree."""
    p, steps = ctx.profile["correctness"], ctx.profile["graph_steps"] if ctx.device == "cuda" else 0
    game, n = CompiledGame.load(data_path(p["game"])), p["iterations"]
    ref = Solver(game, "rtcfr+", mu=1e-3, T_u=10)
    for _ in range(n):
        ref.step()
    out = {"game": p["game"], "iterations": n, "numpy": ref.nash_conv()}
    eager = BatchedSolver(game, "rtcfr+", mu=[1e-3, 1e-3], T_u=[10, 10], device=ctx.device)
    for _ in range(n):
        eager.step()
    out["eager"] = float(eager.nash_conv()[0])
    out["graph_ok"] = False
    if steps:
        try:
            solver = BatchedSolver(game, "rtcfr+", mu=[1e-3, 1e-3], T_u=[10, 10], device=ctx.device)
            replay = solver.graphed(steps)
            for _ in range(n // steps):
                replay()
            out["graph"] = float(solver.nash_conv()[0])
            out["graph_ok"] = _close(out["graph"], out["numpy"])
        except Exception as exc:  # noqa: BLE001 - a failed capture means eager only, recorded here
            out["graph_error"] = f"{type(exc).__name__}: {exc}"[:300]
    out["eager_ok"] = _close(out["eager"], out["numpy"])
    out["graph_steps"] = steps if out["graph_ok"] else 0
    ctx.log(f"  correctness: {out}" + ("" if out["eager_ok"] else "  WARNING: the batched solver disagrees with numpy"))
    return out


def _graph_steps(ctx) -> int:
    """The CUDA-graph replay length the ``correctness`` stage validated (checked here if that stage is not done)."""
    if ctx.results.get("stages", {}).get("correctness", {}).get("state") == "done":
        return ctx.results["correctness"]["graph_steps"]
    if "graph_steps" not in ctx.shared:
        ctx.shared["graph_steps"] = correctness_stage(ctx)["graph_steps"]
    return ctx.shared["graph_steps"]


def throughput_stage(ctx) -> list[dict]:
    """Per game of ``throughput.games``: the peer first (the single-configuration numpy solver on this machine's
    CPU, ms per iteration), then :func:`throughput` at every batch of hyperparameter points; a game is started
    only while the stage has time left."""
    p, steps = ctx.profile["throughput"], _graph_steps(ctx)
    rows = []
    for name in p["games"]:
        if rows and ctx.left() <= 0:
            ctx.log(f"  throughput: no time left, {name} and later not timed")
            break
        game = CompiledGame.load(data_path(name))
        peer = numpy_ms_per_iter(game, "rtcfr+", iterations=p["peer_iterations"])
        for batch in p["batches"]:
            row = throughput(game, batch, device=ctx.device, graph_steps=steps)
            row["numpy_cpu_ms_per_iter"] = peer
            row["speedup_vs_numpy_cpu"] = row["config_iterations_per_s"] * peer / 1e3
            rows.append(row)
            ctx.log(f"  {row}")
        if ctx.device == "cuda":
            torch.cuda.empty_cache()
    return rows


def grids_stage(ctx) -> dict:
    """``{game: grid_study(...)}`` over ``grids.mus`` x ``grids.T_us`` for ``grids.iterations`` iterations, with the
    paper's tuned point and the wall time; a game is started only while the stage has time left."""
    p, steps = ctx.profile["grids"], _graph_steps(ctx)
    grids = {}
    for name in p["games"]:
        if grids and ctx.left() <= 0:
            ctx.log(f"  grids: no time left, {name} and later not run")
            break
        t0 = time.perf_counter()
        res = grid_study(CompiledGame.load(data_path(name)), p["mus"], p["T_us"], p["iterations"], eval_every=p["eval_every"],
                         device=ctx.device, graph_steps=steps)
        res["paper_tuned"] = list(TUNED.get(name, (None, None)))
        res["wall_s"] = time.perf_counter() - t0
        grids[name] = res
        base = {a: (b["last"][-1], b["average"][-1]) for a, b in res["baselines"].items()}
        ctx.log(f"  {name} {res['wall_s']:.1f}s best {res['best']} baselines (last, avg) {base}")
        if ctx.device == "cuda":
            torch.cuda.empty_cache()
    return grids


# ---------------------------------------------------------------- the CPU study (companion.rtcfr.scale_cpu)
def _openspiel_row(name: str, os_iters: int, blocks: int) -> dict:
    """OpenSpiel's C++ CFR+ (alternating updates, linear averaging) first, then our numpy CFR+ (linear average, as
    OpenSpiel) and RTCFR+ (last iterate, the paper's tuned μ and T_u): ms per iteration (wall and process time,
    median over ``blocks``) and NashConv after the same number of iterations."""
    import pyspiel

    game = compile_game(name)
    os_game = openspiel_game(name)
    row = {"game": name, "openspiel_string": GAMES[name], "n_infosets": game.n_infosets}
    cpp = pyspiel.CFRPlusSolver(os_game)
    cpp.evaluate_and_update_policy()
    per = max(1, os_iters // blocks)
    wall, cpu = timed_blocks(cpp.evaluate_and_update_policy, blocks, per)
    done = 1 + blocks * per
    row["openspiel_cpp_cfr_plus"] = {"ms_per_iter_wall": 1e3 * wall, "ms_per_iter_cpu": 1e3 * cpu,
                                     "iterations": done, "nash_conv_average": pyspiel.nash_conv(os_game, cpp.average_policy())}
    mu, T_u = TUNED.get(name, (1e-3, 100))
    for label, alg, kw in (("ours_cfr_plus", "cfr+", {}),
                           ("ours_rtcfr_plus", "rtcfr+", {"mu": mu, "T_u": T_u, "track_average": False})):
        solver = Solver(game, alg, **kw)
        for _ in range(done):  # as many iterations as OpenSpiel, for the NashConv comparison
            solver.step()
        nc = {"nash_conv_last": solver.nash_conv("last")}
        if alg == "cfr+":
            nc["nash_conv_average"] = solver.nash_conv("average")
        wall, cpu = timed_blocks(solver.step, blocks, max(50, 20 * per))
        row[label] = {"ms_per_iter_wall": 1e3 * wall, "ms_per_iter_cpu": 1e3 * cpu, "iterations": done, **nc,
                      **({"mu": mu, "T_u": T_u} if alg == "rtcfr+" else {})}
    os_row = row["openspiel_cpp_cfr_plus"]
    for label in ("ours_cfr_plus", "ours_rtcfr_plus"):
        row[label]["speedup_wall"] = os_row["ms_per_iter_wall"] / row[label]["ms_per_iter_wall"]
        row[label]["speedup_cpu"] = os_row["ms_per_iter_cpu"] / row[label]["ms_per_iter_cpu"]
    return row


def openspiel_stage(ctx) -> list[dict]:
    """One row per game of ``games`` (``{name: {"iterations": OpenSpiel's, "blocks": timing blocks}}``); a game is
    started only while the stage has time left."""
    rows = []
    for name, plan in ctx.profile["games"].items():
        if rows and ctx.left() <= 0:
            ctx.log(f"  games: no time left, {name} and later not timed")
            break
        row = _openspiel_row(name, plan["iterations"], plan["blocks"])
        rows.append(row)
        o, c, r = row["openspiel_cpp_cfr_plus"], row["ours_cfr_plus"], row["ours_rtcfr_plus"]
        ctx.log(f"  {name}: OpenSpiel C++ CFR+ {o['ms_per_iter_wall']:.2f} ms/it (NashConv avg {o['nash_conv_average']:.2e}); "
                f"ours CFR+ {c['ms_per_iter_wall']:.3f} ms/it ({c['speedup_wall']:.0f}x wall, {c['speedup_cpu']:.0f}x cpu; "
                f"NashConv avg {c['nash_conv_average']:.2e}); RTCFR+ {r['ms_per_iter_wall']:.3f} ms/it "
                f"({r['speedup_wall']:.0f}x wall, {r['speedup_cpu']:.0f}x cpu)")
    return rows


def target_stage(ctx) -> dict:
    """The project's target on Leduc (:data:`CPU_SPEEDUP_TARGET`), from the ``games`` stage: our CFR+ and RTCFR+
    speed-ups over OpenSpiel's C++ CFR+ (wall and process time), ``met`` when both wall speed-ups reach it."""
    leduc = [r for r in ctx.results.get("games") or [] if r["game"] == "leduc_poker"]
    if ctx.results.get("stages", {}).get("games", {}).get("state") != "done" or not leduc:
        raise RuntimeError("the target needs the games stage's Leduc row: run it first (--stages games,target)")
    ours = {k: leduc[0][f"ours_{k}"] for k in ("rtcfr_plus", "cfr_plus")}
    out = {"text": f"ours >= {CPU_SPEEDUP_TARGET:g}x OpenSpiel C++ CFR+ iterations/s on Leduc"}
    out.update({f"leduc_speedup_{k}_{clock}": ours[k][f"speedup_{clock}"] for clock in ("wall", "cpu") for k in ours})
    out["met"] = min(out["leduc_speedup_cfr_plus_wall"], out["leduc_speedup_rtcfr_plus_wall"]) >= CPU_SPEEDUP_TARGET
    ctx.log(f"  target: {out}")
    return out
