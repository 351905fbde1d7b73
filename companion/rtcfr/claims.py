"""The claims table of paper 18 (RTCFR+), built from the run's result objects and judged by the one rule
(:func:`companion.core.judge`).

The solvers are deterministic (no seed enters a run), so the independent repeats of a claim are the
**games**: a "beats" claim is an effect judged on one value per game, ``log10`` of the RTCFR+ NashConv over
the compared one (:func:`win_log_ratio`), against ``log10(WIN_FACTOR)`` (a win needs at most ``WIN_FACTOR``
times the other value). A claim measured on one game is one value, hence inconclusive until it is run on
three. Convergence on Kuhn and of the kept-θ run is an exact claim: NashConv (the distance to an
equilibrium) within a tolerance, one run.

Every threshold is a named constant below, tested just inside and just outside in
``tests/unit/test_rtcfr_claims.py``. Every window follows the run's ``iterations`` (:func:`late_window`),
so the rows hold at the smallest allowed ``ITERATIONS``. No plotly here.
"""

from __future__ import annotations

import math

import numpy as np

from companion.core import Claim, judge, not_run
from companion.core.claims import at_cell
from companion.core.stages import not_finished

__all__ = ["KEEP_CEILING", "KUHN_NASHCONV", "LATE_FRACTION", "MACHINE", "RESET_FLOOR", "SPREAD_MARGIN", "WIN_FACTOR",
           "beats", "claim_rows", "late_window", "mu_tu_spread", "recorded_rows", "win_log_ratio"]

#: NashConv values below this are machine precision: both below it is a tie (ratio 1), not a win.
MACHINE = 1e-12
#: a last iterate "beats" another value when it is at most this fraction of it.
WIN_FACTOR = 0.5
#: Kuhn: "converges to a Nash equilibrium" means NashConv at most this at the run's final iteration.
KUHN_NASHCONV = 1e-6
#: the late window of the θ-reset claim: the last LATE_FRACTION of the run (and at least one T_u cycle).
LATE_FRACTION = 0.1
#: resetting θ "stops convergence": its best NashConv in the late window stays at or above this ...
RESET_FLOOR = 0.03
#: ... while keeping θ ends at or below this.
KEEP_CEILING = 1e-2
#: "μ matters more than T_u": the mean spread of log10 NashConv along μ must exceed that along T_u by
#: at least this many decades.
SPREAD_MARGIN = 0.5

DETERMINISTIC = "deterministic solvers, one run per game (no seed enters)"
# the cells of notebooks/18_rtcfr.ipynb (nbformat ids) that measure the rows: the comparison over games, the Leduc
# keep-vs-reset-θ study, the μ × T_u heat map, and the Scale-up cell that shows the recorded GPU run
COMPARISON_CELL, LEDUC_CELL, HEATMAP_CELL, GPU_CELL = "f66f769b", "915c5eff", "13c8a843", "b6a297a7"


def win_log_ratio(a: float, b: float) -> float:
    """``log10(a / b)`` with both clamped at ``MACHINE`` from below: negative when ``a`` is smaller, 0 for a tie
    at machine precision."""
    return float(math.log10(max(float(a), MACHINE) / max(float(b), MACHINE)))


def beats(a: float, b: float) -> bool:
    """``a`` is at most ``WIN_FACTOR`` times ``b`` (values below ``MACHINE`` count as ``MACHINE``, so two
    values at machine precision tie)."""
    return win_log_ratio(a, b) <= math.log10(WIN_FACTOR)


def late_window(iterations: int, T_u: int) -> tuple[int, int]:
    """``(start, end)`` of the late window: the last ``LATE_FRACTION`` of ``iterations`` iterations, widened
    to at least one full reference cycle of ``T_u`` iterations, never before iteration 1."""
    width = max(math.ceil(LATE_FRACTION * iterations), int(T_u))
    return max(1, iterations - width), iterations


def mu_tu_spread(grid) -> tuple[float, float]:
    """Mean spread (max − min) of log10 NashConv along μ (per T_u column) and along T_u (per μ row) of a
    ``[len(mus), len(T_us)]`` grid of final NashConv values (floored at 1e-17)."""
    log_grid = np.log10(np.maximum(np.asarray(grid, dtype=float), 1e-17))
    return (float(np.mean(log_grid.max(axis=0) - log_grid.min(axis=0))),
            float(np.mean(log_grid.max(axis=1) - log_grid.min(axis=1))))


def _final(tr, which="last"):
    return float((tr.last if which == "last" else tr.average)[-1])


def _win(values) -> object:
    """The judgement of a "beats" claim from one log10 ratio per game."""
    return judge(values, math.log10(WIN_FACTOR), direction="lower", fmt=lambda x: f"{x:.2f}")


def _per_game(against: str, ratio: str, names, values) -> dict:
    """The ``measured`` (the wins) and ``details`` (each game's log10 ratio) of a "beats" row."""
    wins = sum(v <= math.log10(WIN_FACTOR) for v in values)
    return {"measured": f"RTCFR+ wins {wins} of {len(values)} games against {against}",
            "details": (f"{ratio}: " + ", ".join(f"{g} {v:+.2f}" for g, v in zip(names, values))
                        + f" (≤ {math.log10(WIN_FACTOR):+.2f} is a win)")}


def claim_rows(results: dict, keep, reset, *, iterations: int, heatmap_grid, heatmap_mus, heatmap_T_us,
               heatmap_game: str, heatmap_iterations: int, recorded: dict | None = None) -> list[Claim]:
    """The rows of the Reproduce table.

    ``results``: ``{game: [tuned, untuned, cfr+, pcfr+, dcfr]}`` Trajectories of ``iterations`` iterations
    (tuned and untuned RTCFR+ last iterates; baselines with last and average); ``keep`` / ``reset``: the
    Leduc RTCFR+ runs keeping / resetting θ (``params`` with ``mu`` and ``T_u``); ``heatmap_grid``: the
    final last-iterate NashConv over ``heatmap_mus x heatmap_T_us``; ``recorded``: the committed GPU results.
    """
    names = list(results)
    n = len(names)
    scale = f"{n} game{'s' if n > 1 else ''} ({', '.join(names)}), {iterations} iterations, CPU; {DETERMINISTIC}"
    ratio = f"per game log10(RTCFR+ NashConv / the other's; values under {MACHINE:g} count as {MACHINE:g})"
    rows = []

    if "kuhn_poker" in results:
        tr = results["kuhn_poker"][0]
        early = int(tr.iterations[tr.iterations <= min(100, iterations)][-1])  # an evaluated iteration (EVAL_EVERY)
        final = _final(tr)
        rows.append(Claim(
            claim="RTCFR+'s last iterate converges to a Nash equilibrium",
            paper="Kuhn: tuned RTCFR+ falls to machine precision (Fig. 1)",
            measured=f"Kuhn NashConv {tr.at(early):.1e} at {early}, {final:.1e} at {iterations} iterations",
            scale=f"Kuhn poker, μ = {tr.params.get('mu')}, T_u = {tr.params.get('T_u')}, {iterations} iterations, one run",
            # |NashConv|: at machine precision rounding can leave the (non-negative) sum a hair below 0
            judgement=judge([abs(final)], KUHN_NASHCONV, kind="exact", fmt=lambda x: f"{x:.1e}"), cell=COMPARISON_CELL))

    avg, last, untuned = [], [], []
    for trs in results.values():
        tuned, unt, *base = trs
        rt, u = _final(tuned), _final(unt)
        avg.append(win_log_ratio(rt, min(_final(t, "average") for t in base)))
        last.append(win_log_ratio(rt, min(_final(t) for t in base)))
        untuned.append(win_log_ratio(u, min(_final(t, w) for t in base if t.algorithm != "pcfr+"
                                            for w in ("last", "average"))))
    rows.append(Claim(
        claim="Tuned RTCFR+'s last iterate beats the average iterate of CFR+, PCFR+ and DCFR",
        paper="on all games but Liar's Dice(6) (8 of 9)",
        **_per_game("the best average iterate", ratio, names, avg),
        scale=scale, judgement=_win(avg), cell=COMPARISON_CELL))
    rows.append(Claim(
        claim="Tuned RTCFR+ beats the other algorithms' last iterates",
        paper="beats every tested algorithm (also R-NaD, Reg-CFR, OMWU, OGDA: not run here)",
        **_per_game("the best CFR+/PCFR+/DCFR last iterate", ratio, names, last),
        scale=scale, judgement=_win(last), cell=COMPARISON_CELL))
    rows.append(Claim(
        claim="Untuned RTCFR+ (μ = 1e-3, T_u = 100) beats every algorithm except PCFR+",
        paper="on most games (Fig. 1, untuned panels)",
        **_per_game("the best CFR+/DCFR iterate (average or last)", ratio, names, untuned),
        scale=scale, judgement=_win(untuned), cell=COMPARISON_CELL))

    mu, T_u = keep.params.get("mu"), keep.params.get("T_u")
    lo, hi = late_window(iterations, T_u)
    reset_best = reset.min_after(lo)
    keep_end = _final(keep)
    leduc = f"Leduc, μ = {mu}, T_u = {T_u}, {iterations} iterations; one game, {DETERMINISTIC}"
    rows.append(Claim(
        claim="Keeping θ across reference updates, RTCFR+ converges",
        paper="RTCFR+ as specified keeps θ (Alg. 1; the control of Fig. 3)",
        measured=f"Leduc, θ kept: NashConv {keep_end:.1e} at iteration {hi}",
        scale=leduc, judgement=judge([abs(keep_end)], KEEP_CEILING, kind="exact", fmt=lambda x: f"{x:.1e}"), cell=LEDUC_CELL))
    rows.append(Claim(
        claim="Resetting θ at reference updates stops convergence",
        paper="RTCFR+ with θ reset never converges (Fig. 3)",
        measured=f"Leduc: reset-θ best NashConv in iterations {lo}-{hi} {reset_best:.3f} (θ kept: {keep_end:.1e} at {hi})",
        scale=leduc, judgement=judge([reset_best], RESET_FLOOR, direction="higher", fmt=lambda x: f"{x:.3g}"),
        cell=LEDUC_CELL))

    spread_mu, spread_tu = mu_tu_spread(heatmap_grid)
    rows.append(Claim(
        claim="μ matters more than T_u (choose μ first)",
        paper="sensitivity figures 8-15",
        measured=(f"mean spread of log10 NashConv: {spread_mu:.1f} decades along μ, {spread_tu:.1f} along T_u "
                  f"(judged on the difference)"),
        scale=f"{heatmap_game}, {len(heatmap_mus)}x{len(heatmap_T_us)} grid, {heatmap_iterations} iterations; one game, "
              f"{DETERMINISTIC}",
        judgement=judge([spread_mu - spread_tu], SPREAD_MARGIN, direction="higher", fmt=lambda x: f"{x:.2f}"),
        cell=HEATMAP_CELL))
    rows.extend(at_cell(GPU_CELL, recorded_rows(recorded)))
    return rows


def recorded_rows(rec: dict | None) -> list[Claim]:
    """The rows from the GPU study's ``grids`` stage (:mod:`companion.rtcfr.scale`), or a "not run here" row that
    says why (no results, the stage's state where it did not finish, or a batched solver that disagreed with the
    numpy solver in the ``correctness`` stage)."""
    larger = "The same on the larger games (Liar's Dice(5/6), Goofspiel(5/6), Battleship(3))"
    check = (rec or {}).get("correctness") or {}
    if check.get("eager_ok") is False:
        why = (f"the batched solver that ran the grids disagreed with the numpy solver in the correctness stage "
               f"({check.get('game')}, {check.get('iterations')} iterations: NashConv {check.get('eager')} vs "
               f"{check.get('numpy')}), so its grids are not evidence")
        return [Claim(claim=larger, paper="all games but Liar's Dice(6)", measured=why,
                      scale="GPU (python -m companion.bench rtcfr)", judgement=not_run(why))]
    if not ((rec or {}).get("stages", {}).get("grids", {}).get("state") == "done" and rec["grids"]):
        left = [s for s in not_finished(rec) if s.split(" ")[0] == "grids"]
        why = (f"the GPU study's stage {left[0]}" if left else "no GPU run recorded yet") + ": python -m companion.bench rtcfr"
        return [Claim(claim=larger, paper="all games but Liar's Dice(6)", measured=why,
                      scale="GPU (python -m companion.bench rtcfr)", judgement=not_run(why))]
    grid = rec["profile"]["grids"]
    names = list(rec["grids"])
    points = len(grid["mus"]) * len(grid["T_us"])
    scale = (f"{rec['device']}, {rec['date']}; {len(names)} games, {grid['iterations']} iterations, "
             f"{len(grid['mus'])}x{len(grid['T_us'])} (μ, T_u) grid; {DETERMINISTIC}")
    vs_avg = [win_log_ratio(r["best"]["final_last"], min(b["average"][-1] for b in r["baselines"].values()))
              for r in rec["grids"].values()]
    rows = [Claim(
        claim="Tuned RTCFR+'s last iterate beats the baselines' average iterates on the larger games",
        paper="all games but Liar's Dice(6)",
        **_per_game(f"the best CFR+/PCFR+/DCFR average, at the best of the {points} grid points (picked on the same "
                    "final value)", "per game log10(its NashConv / the best average's)", names, vs_avg),
        scale=scale, judgement=_win(vs_avg))]
    spreads = {}
    for g, r in rec["grids"].items():
        rt = r.get("rtcfr", {})
        if "last" in rt and "mus" in rt and "T_us" in rt:
            spreads[g] = mu_tu_spread(np.asarray(rt["last"][-1], dtype=float).reshape(len(rt["mus"]), len(rt["T_us"])))
    if spreads:
        diff = [m - t for m, t in spreads.values()]
        rows.append(Claim(
            claim="μ matters more than T_u on the larger games",
            paper="sensitivity figures 8-15",
            measured=(f"spread of log10 NashConv along μ minus along T_u: {min(diff):+.1f} to {max(diff):+.1f} decades "
                      f"over {len(diff)} games"),
            details="per game, mean spread of log10 final NashConv along μ minus along T_u (decades): "
                    + ", ".join(f"{g} {m:.1f} − {t:.1f}" for g, (m, t) in spreads.items()),
            scale=scale,
            judgement=judge(diff, SPREAD_MARGIN, direction="higher", fmt=lambda x: f"{x:.2f}")))
    return rows
