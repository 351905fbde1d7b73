"""Figures of the ScaleKV notebook (paper 03). Imports plotly; every builder returns a ``go.Figure``."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.scalekv.budgets import LABELS, METHODS
from companion.scalekv.schedule import cumulative_tokens, map_sizes
from companion.viz import COLORS

__all__ = ["cache_growth_figure", "asi_figure", "fidelity_figure", "planted_figure", "latency_figure", "kernel_figure", "loss_figure"]

METHOD_COLORS = {m: COLORS[i] for i, m in enumerate(METHODS)}


def loss_figure(losses, title: str = "training loss of the tiny VAR") -> go.Figure:
    """Cross-entropy per step, smoothed over 10 steps."""
    x = np.asarray(losses, dtype=float)
    k = min(10, len(x))
    smooth = np.convolve(x, np.ones(k) / k, mode="valid")
    fig = go.Figure(go.Scatter(x=list(range(k - 1, len(x))), y=np.round(smooth, 4), mode="lines", name="loss"))
    fig.update_layout(title=title, xaxis_title="step", yaxis_title="nats per token", height=280, width=520)
    return fig


def cache_growth_figure(schedules: dict) -> go.Figure:
    """Per schedule: tokens of each map (bars) and the full cache after each step (line)."""
    fig = make_subplots(rows=1, cols=len(schedules), subplot_titles=list(schedules), horizontal_spacing=0.1)
    for i, (name, sides) in enumerate(schedules.items(), start=1):
        x = [f"{s}x{s}" for s in sides]
        fig.add_trace(go.Bar(x=x, y=map_sizes(sides), name="tokens of the map", marker_color=COLORS[5], showlegend=i == 1), row=1, col=i)
        fig.add_trace(go.Scatter(x=x, y=cumulative_tokens(sides), name="KV cache after the step (full)", mode="lines+markers",
                                 line=dict(color=COLORS[3]), showlegend=i == 1), row=1, col=i)
        fig.update_xaxes(title_text="scale", row=1, col=i)
    fig.update_yaxes(title_text="tokens per layer", row=1, col=1)
    fig.update_layout(height=330, title="The KV cache grows with every scale", legend=dict(orientation="h", y=-0.3))
    return fig


def _cells(mat: np.ndarray) -> tuple[list, list]:
    """Heatmap values (None where NaN) and their labels ('' where NaN), rounded to 2 decimals."""
    vals = [[None if np.isnan(v) else round(float(v), 2) for v in row] for row in mat]
    return vals, [["" if v is None else f"{v:.2f}" for v in row] for row in vals]


def asi_figure(current, history, z, drafters, sides, *, title: str = "Attention Selectivity Index on the calibration images") -> go.Figure:
    """Heatmaps [layers x scales] of the two ASI factors and the z-scores; drafters marked with a cross."""
    cur, hist, zz = (np.asarray(t, dtype=float) for t in (current, history, z))
    nl, nk = zz.shape
    x = [f"{s}x{s}" for s in sides]
    y = [f"layer {i}" for i in range(nl)]
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08,
                        subplot_titles=["current-map share E[sum_C alpha]", "history top-K' concentration", "z-score of the ASI (low: drafter)"])
    for c, (mat, cs, lo, hi) in enumerate(((cur, "Blues", 0, 1), (hist, "Greens", 0, 1), (zz, "RdBu", -2, 2)), start=1):
        m, t = _cells(mat)
        fig.add_trace(go.Heatmap(z=m, x=x, y=y, colorscale=cs, zmin=lo, zmax=hi, text=t, texttemplate="%{text}",
                                 showscale=False, xgap=1, ygap=1), row=1, col=c)
        fig.update_yaxes(autorange="reversed", row=1, col=c)
    d = np.asarray(drafters, dtype=bool)
    ys, xs = np.nonzero(d)
    fig.add_trace(go.Scatter(x=[x[k] for k in xs], y=[y[i] for i in ys], mode="markers", name="ScaleKV's drafter",
                             marker=dict(symbol="square-open", size=30, color="black", line=dict(width=3, color="black"))), row=1, col=3)
    fig.update_xaxes(title_text="scale (token map)")
    fig.update_layout(height=120 + 40 * nl, title=title, legend=dict(orientation="h", y=-0.25))
    return fig


def fidelity_figure(table, *, title: str = "Fidelity to the full cache at equal KV memory") -> go.Figure:
    """PSNR, token agreement (free-running) and hidden-state error (teacher-forced) vs retained memory."""
    cols = [("psnr", "PSNR vs full cache (dB)"), ("agreement", "token agreement"), ("hidden_error", "hidden-state error (teacher-forced)")]
    cols = [c for c in cols if c[0] in table.columns]
    fig = make_subplots(rows=1, cols=len(cols), subplot_titles=[c[1] for c in cols], horizontal_spacing=0.07)
    for m in METHODS:
        rows = table[table.method == m].sort_values("memory_fraction")
        if rows.empty:
            continue
        for c, (key, _) in enumerate(cols, start=1):
            y = [None if not math.isfinite(v) else round(float(v), 4) for v in rows[key]]
            fig.add_trace(go.Scatter(x=np.round(rows.memory_fraction.to_numpy() * 100, 2), y=y, mode="lines+markers", name=LABELS[m],
                                     line=dict(color=METHOD_COLORS[m], width=3 if m == "scalekv" else 1.5), showlegend=c == 1),
                          row=1, col=c)
            fig.update_xaxes(title_text="retained K/V (% of full cache)", row=1, col=c)
    fig.update_layout(height=360, title=title, legend=dict(orientation="h", y=-0.3))
    return fig


def planted_figure(z, planted, errors: dict, sides, *, title: str = "Planted drafters: z-scores and error at equal memory") -> go.Figure:
    """Left: z-scores with the planted drafter layers marked; right: hidden-state error per method and budget."""
    zz = np.asarray(z, dtype=float)
    nl, nk = zz.shape
    x = [f"{s}x{s}" for s in sides]
    y = [f"layer {i}" + (" (planted drafter)" if i in planted else "") for i in range(nl)]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.5, 0.5], horizontal_spacing=0.15,
                        subplot_titles=["z-score of the ASI (low: drafter)", "hidden-state error vs full cache"])
    m, t = _cells(zz)
    fig.add_trace(go.Heatmap(z=m, x=x, y=y, colorscale="RdBu", zmin=-2, zmax=2, text=t, texttemplate="%{text}",
                             showscale=False, xgap=1, ygap=1), row=1, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    for meth, per_budget in errors.items():
        fr = sorted(per_budget)
        fig.add_trace(go.Bar(x=[f"{f:.0%}" for f in fr], y=[round(per_budget[f], 4) for f in fr], name=LABELS[meth],
                             marker_color=METHOD_COLORS[meth]), row=1, col=2)
    fig.update_xaxes(title_text="scale (token map)", row=1, col=1)
    fig.update_xaxes(title_text="budget (fraction of the full cache)", row=1, col=2)
    fig.update_layout(height=340, title=title, barmode="group", legend=dict(orientation="h", y=-0.3))
    return fig


def latency_figure(rows, *, title: str = "Attention latency per scale (one layer, Infinity-8B geometry)") -> go.Figure:
    """``rows``: dicts with ``scale``, ``side``, ``full_ms``, ``compressed_ms``."""
    x = [f"{r['side']}x{r['side']}" for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=x, y=[r["full_ms"] for r in rows], name="full cache", marker_color=COLORS[5]))
    fig.add_trace(go.Bar(x=x, y=[r["compressed_ms"] for r in rows], name="compressed cache", marker_color=COLORS[0]))
    fig.update_layout(title=title, barmode="group", xaxis_title="scale", yaxis_title="ms (median)", height=330)
    return fig


def kernel_figure(rows, *, title: str = "Fused token selection vs its PyTorch reference") -> go.Figure:
    """``rows``: dicts with ``label``, ``impl`` and ``ms``."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    fig = go.Figure()
    for i, impl in enumerate(impls):
        ms = {r["label"]: r["ms"] for r in rows if r["impl"] == impl}
        fig.add_trace(go.Bar(x=labels, y=[ms.get(lab) for lab in labels], name=impl, marker_color=COLORS[i % len(COLORS)]))
    fig.update_layout(title=title, barmode="group", yaxis_title="ms (median)", yaxis_type="log", height=340)
    return fig
