"""The CFR-convergence explorer of paper 18 (RTCFR+); needs plotly and ipywidgets.

:func:`explorer_view` is the explorer's pure update function: it recomputes RTCFR+ for the
controls' (μ, T_u, γ) and reuses cached baseline runs (:func:`cached_run`), so a change of a slider
costs one RTCFR+ run (a fraction of a second on Kuhn and Leduc). :func:`explorer_controls` builds
the widgets the notebook hands to ``companion.viz.Explorer``; the view needs no precomputed data.
"""

from __future__ import annotations

import functools
import time

from companion.core.validation import check_bool, check_choice, check_int
from companion.rtcfr.figures import convergence_figure
from companion.rtcfr.games import PAPER_NAMES
from companion.rtcfr.solvers import LABELS, Trajectory, check_hyper, solve

__all__ = ["EXPLORER_GAMES", "EXPLORER_ITERATIONS", "T_U_OPTIONS", "cached_run", "explorer_controls", "explorer_view"]

EXPLORER_GAMES = ("kuhn_poker", "leduc_poker")
EXPLORER_ITERATIONS = (200, 500, 1000, 2000)
T_U_OPTIONS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


@functools.lru_cache(maxsize=256)
def cached_run(game: str, algorithm: str, iterations: int, mu: float = 1e-3, T_u: int = 100, gamma: float = 1e-10,
               reset_theta: bool = False) -> Trajectory:
    """A cached :func:`~companion.rtcfr.solvers.solve` (NashConv at about 200 points) for the explorer."""
    every = max(1, iterations // 200)
    hyper = dict(mu=mu, T_u=T_u, gamma=gamma, reset_theta=reset_theta) if algorithm.startswith("rt") else {}
    tr = solve(game, algorithm, iterations, eval_every=every, average=not algorithm.startswith("rt"), **hyper)
    if reset_theta:
        tr.params.update(reset_theta=True, label="RTCFR+ reset θ")
    return tr


def explorer_view(game: str = "kuhn_poker", iterations: int = 1000, mu: float = 0.1, T_u: int = 10,
                  gamma: float = 1e-10, rtcfr_plus: bool = True, cfr_plus: bool = True, pcfr_plus: bool = True,
                  dcfr: bool = True, cfr: bool = False, reset_theta: bool = False, average: bool = True):
    """The explorer's update: (figure, readout) for the controls' values. Pure up to caching."""
    game = check_choice("game", game, EXPLORER_GAMES)
    iterations = check_int("iterations", iterations, lo=10, hi=20000)
    mu, T_u, gamma = check_hyper(mu, T_u, gamma)
    flags = {"rtcfr+": rtcfr_plus, "cfr+": cfr_plus, "pcfr+": pcfr_plus, "dcfr": dcfr, "cfr": cfr}
    for name, value in flags.items():
        check_bool(name, value)
    check_bool("reset_theta", reset_theta)
    check_bool("average", average)
    start = time.perf_counter()
    trajs = [cached_run(game, alg, iterations) for alg in ("cfr+", "pcfr+", "dcfr", "cfr") if flags[alg]]
    if reset_theta:
        trajs.append(cached_run(game, "rtcfr+", iterations, mu, T_u, gamma, True))
    rt = cached_run(game, "rtcfr+", iterations, mu, T_u, gamma) if rtcfr_plus else None
    if rt is not None:
        trajs.append(rt)
    seconds = time.perf_counter() - start
    title = f"{PAPER_NAMES[game]}: NashConv of the iterates (μ = {mu:.3g}, T_u = {T_u}, γ = {gamma:.0e})"
    fig = convergence_figure(trajs, title, average=average)
    parts = [f"{PAPER_NAMES[game]}, {iterations} iterations"]
    if rt is not None:
        parts.append(f"RTCFR+ last iterate: {rt.last[-1]:.2e}")
    avgs = {LABELS[t.algorithm]: t.average[-1] for t in trajs if not t.algorithm.startswith("rt")}
    if avgs:
        best = min(avgs, key=avgs.get)
        parts.append(f"best average iterate: {best} {avgs[best]:.2e}")
    parts.append(f"computed in {seconds:.2f} s")
    return fig, " · ".join(parts)


def explorer_controls(game: str = "kuhn_poker", iterations: int = 1000) -> dict:
    """The explorer's widgets: game, iterations, RTCFR+'s μ, T_u, γ and which algorithms to draw."""
    import ipywidgets as widgets

    check_choice("game", game, EXPLORER_GAMES)
    check_choice("iterations", iterations, EXPLORER_ITERATIONS)
    return {
        "game": widgets.Dropdown(options=[(PAPER_NAMES[g], g) for g in EXPLORER_GAMES], value=game, description="game"),
        "iterations": widgets.Dropdown(options=list(EXPLORER_ITERATIONS), value=iterations, description="iterations"),
        "mu": widgets.FloatLogSlider(value=0.1, base=10, min=-5, max=0, step=0.25, description="μ"),
        "T_u": widgets.SelectionSlider(options=list(T_U_OPTIONS), value=10, description="T_u"),
        "gamma": widgets.FloatLogSlider(value=1e-10, base=10, min=-12, max=-2, step=1, description="γ"),
        "rtcfr_plus": widgets.Checkbox(value=True, description="RTCFR+"),
        "cfr_plus": widgets.Checkbox(value=True, description="CFR+"),
        "pcfr_plus": widgets.Checkbox(value=True, description="PCFR+"),
        "dcfr": widgets.Checkbox(value=True, description="DCFR"),
        "cfr": widgets.Checkbox(value=False, description="CFR"),
        "reset_theta": widgets.Checkbox(value=False, description="RTCFR+ with θ reset"),
        "average": widgets.Checkbox(value=True, description="show average iterates"),
    }
