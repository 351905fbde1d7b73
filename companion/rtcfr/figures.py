"""Figures and the CFR-convergence explorer for paper 18 (RTCFR+); needs plotly.

Paper: Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games*
(NeurIPS 2025). Fig. 1 plots exploitability against iterations on a log scale; here the metric is
named: NashConv (the sum of both players' best-response gains, what the official code reports).
The explorer is in :mod:`companion.rtcfr.explorer`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from companion.rtcfr.games import PAPER_NAMES
from companion.rtcfr.solvers import LABELS, Trajectory
import companion.viz  # noqa: F401  (the theme and the mode bar)

ALGO_COLORS = {"rtcfr+": "#D55E00", "rtpcfr+": "#CC79A7", "cfr+": "#0072B2", "pcfr+": "#009E73", "dcfr": "#E69F00",
               "cfr": "#56B4E9", "reset": "#000000"}
FLOOR = 1e-17  # NashConv is plotted as max(value, FLOOR) on the log axis (it can reach 0 up to rounding)


def _floor(v):
    return np.maximum(np.asarray(v, dtype=float), FLOOR)


def convergence_figure(trajectories, title: str, average: bool = True, height: int = 420) -> go.Figure:
    """NashConv of the last (solid) and average (dotted) iterates against iterations, log scale."""
    fig = go.Figure()
    for tr in trajectories:
        key = "reset" if tr.params.get("reset_theta") else tr.algorithm
        color = ALGO_COLORS.get(key, "#888888")
        name = tr.params.get("label") or LABELS.get(tr.algorithm, tr.algorithm)
        fig.add_trace(go.Scatter(x=tr.iterations, y=_floor(tr.last), mode="lines", name=f"{name} last",
                                 line=dict(color=color, width=2.5 if tr.algorithm.startswith("rt") else 1.8)))
        if average and np.isfinite(tr.average).any() and not tr.algorithm.startswith("rt"):
            fig.add_trace(go.Scatter(x=tr.iterations, y=_floor(tr.average), mode="lines", name=f"{name} average",
                                     line=dict(color=color, dash="dot", width=1.8)))
    fig.update_layout(title=title, height=height, xaxis_title="iteration", yaxis_title="NashConv (log scale)",
                      legend=dict(orientation="v", x=1.01, y=1))
    fig.update_yaxes(type="log", exponentformat="power")
    return fig


def idea_figure(trace_cfr: dict, trace_rt: dict, target: float, label: str) -> go.Figure:
    """One probability over iterations: CFR+'s last iterate, RTCFR+'s, and RTCFR+'s moving reference."""
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=trace_cfr["t"], y=trace_cfr["prob"], name="CFR+ last iterate",
                             line=dict(color=ALGO_COLORS["cfr+"], width=1.5)))
    fig.add_trace(go.Scatter(x=trace_rt["t"], y=trace_rt["prob"], name="RTCFR+ last iterate",
                             line=dict(color=ALGO_COLORS["rtcfr+"], width=2.5)))
    fig.add_trace(go.Scatter(x=trace_rt["t"], y=trace_rt["ref"], name="RTCFR+ reference r",
                             line=dict(color="#000000", width=1.5, shape="hv", dash="dash")))
    fig.add_hline(y=target, line=dict(color="#999999", dash="dot"), annotation_text=f"Nash: {target:.3g}")
    fig.update_layout(title=f"The idea: regularise toward r, let CFR+ solve it, move r · {label}", height=380,
                      xaxis_title="iteration", yaxis_title="probability")
    return fig


def heatmap_figure(mus, T_us, values, title: str) -> go.Figure:
    """log10 NashConv over the (μ, T_u) grid; ``values`` is [len(mus), len(T_us)]."""
    z = np.log10(np.maximum(np.asarray(values, dtype=float), FLOOR))
    text = [[f"{v:.1e}" for v in row] for row in np.asarray(values, dtype=float)]
    fig = go.Figure(go.Heatmap(z=z, x=[str(t) for t in T_us], y=[f"{m:g}" for m in mus], text=text,
                               texttemplate="%{text}", colorscale="Viridis_r",
                               colorbar=dict(title="log10 NashConv")))
    fig.update_layout(title=title, xaxis_title="T_u (iterations between reference updates)",
                      yaxis_title="μ (regularisation)", height=380)
    fig.update_yaxes(type="category")
    fig.update_xaxes(type="category")
    return fig


def kuhn_strategy_table(game, snaps: dict, decimals: int = 3) -> pd.DataFrame:
    """Kuhn: P(bet/call) of the last iterate at each infoset and checkpoint, with the Nash values.

    Player 2's equilibrium strategy is unique; player 1's is a one-parameter family (α ∈ [0, 1/3]:
    bet J with α, call with Q after check-bet with α + 1/3, bet K with 3α), so its Nash column uses
    α read off the last checkpoint's P(bet | J).
    """
    card = {"0": "J", "1": "Q", "2": "K"}
    rows = []
    last = snaps[max(snaps)]
    p0 = game.players[0]
    alpha = float(last[0][p0.infoset_start[p0.key_index["0"]] + 1])
    nash = {("0", ""): alpha, ("1", ""): 0.0, ("2", ""): 3 * alpha, ("0", "pb"): 0.0, ("1", "pb"): alpha + 1 / 3,
            ("2", "pb"): 1.0, ("0", "p"): 1 / 3, ("1", "p"): 0.0, ("2", "p"): 1.0, ("0", "b"): 0.0,
            ("1", "b"): 1 / 3, ("2", "b"): 1.0}
    meaning = {"": "bet (first)", "pb": "call after check-bet", "p": "bet after check", "b": "call a bet"}
    for player, tp in enumerate(game.players):
        for key in sorted(tp.infoset_keys, key=lambda k: (len(k), k)):
            i = tp.key_index[key]
            seq_bet = tp.infoset_start[i] + list(tp.seq_action[tp.infoset_start[i]:tp.infoset_start[i] + 2]).index(1)
            row = {"player": player + 1, "card": card[key[0]], "decision": meaning[key[1:]]}
            for t in sorted(snaps):
                row[f"t={t}"] = round(float(snaps[t][player][seq_bet]), decimals)
            row["Nash"] = round(nash[(key[0], key[1:])], decimals)
            rows.append(row)
    return pd.DataFrame(rows)


def gpu_grid_figure(grid: dict, label: str) -> go.Figure:
    """Recorded GPU grid: best and untuned RTCFR+ (last iterate) against the baselines."""
    it = np.asarray(grid["iterations"])
    last = np.asarray(grid["rtcfr"]["last"])
    mu, tu = np.asarray(grid["rtcfr"]["mu"]), np.asarray(grid["rtcfr"]["T_u"])
    fig = go.Figure()
    k_best = int(np.argmin(last[-1]))
    picks = [(k_best, f"RTCFR+ best of grid (μ={mu[k_best]:g}, T_u={tu[k_best]})", 2.8, "solid")]
    untuned = np.flatnonzero((np.isclose(mu, 1e-3)) & (tu == 100))
    if len(untuned):
        picks.append((int(untuned[0]), "RTCFR+ untuned (μ=1e-3, T_u=100)", 1.8, "dash"))
    for k, name, width, dash in picks:
        fig.add_trace(go.Scatter(x=it, y=_floor(last[:, k]), name=name,
                                 line=dict(color=ALGO_COLORS["rtcfr+"], width=width, dash=dash)))
    for alg, res in grid["baselines"].items():
        fig.add_trace(go.Scatter(x=it, y=_floor(res["average"]), name=f"{LABELS[alg]} average",
                                 line=dict(color=ALGO_COLORS[alg], dash="dot")))
        fig.add_trace(go.Scatter(x=it, y=_floor(res["last"]), name=f"{LABELS[alg]} last",
                                 line=dict(color=ALGO_COLORS[alg], width=1), opacity=0.5))
    fig.update_layout(title=f"{label}: NashConv, recorded on the GPU", xaxis_title="iteration",
                      yaxis_title="NashConv (log scale)", height=380)
    fig.update_yaxes(type="log", exponentformat="power")
    return fig


def comparison_figure(results: dict, title: str, cols: int = 2) -> go.Figure:
    """The paper's Fig. 1 layout: one panel per game, NashConv against iterations on a log scale.

    ``results`` maps a game name to its trajectories; RTCFR+ curves are last iterates, baselines
    show their average (dotted) and last (thin) iterates.
    """
    from plotly.subplots import make_subplots

    games = list(results)
    rows = (len(games) + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[PAPER_NAMES.get(g, g) for g in games],
                        horizontal_spacing=0.08, vertical_spacing=0.12)
    seen = set()
    for k, game in enumerate(games):
        r, c = k // cols + 1, k % cols + 1
        for tr in results[game]:
            label = tr.params.get("label") or LABELS.get(tr.algorithm, tr.algorithm)
            key = "rtcfr+" if tr.algorithm.startswith("rt") else tr.algorithm
            color = ALGO_COLORS.get(key, "#888888")
            dash = "dash" if tr.params.get("untuned") else "solid"
            if tr.algorithm.startswith("rt"):
                curves = [(f"{label} last", tr.last, dict(color=color, width=2.5, dash=dash))]
            else:
                curves = [(f"{label} average", tr.average, dict(color=color, dash="dot", width=1.8)),
                          (f"{label} last", tr.last, dict(color=color, width=1))]
            for name, y, line in curves:
                fig.add_trace(go.Scatter(x=tr.iterations, y=_floor(y), name=name, line=line, legendgroup=name,
                                         showlegend=name not in seen, opacity=0.55 if line.get("width") == 1 else 1),
                              row=r, col=c)
                seen.add(name)
        fig.update_yaxes(type="log", exponentformat="power", row=r, col=c, title_text="NashConv" if c == 1 else None)
        fig.update_xaxes(title_text="iteration" if r == rows else None, row=r, col=c)
    fig.update_layout(title=title, height=330 * rows + 80)
    return fig


def final_value(tr: Trajectory, which: str) -> float:
    return float((tr.last if which == "last" else tr.average)[-1])
