"""Static figures of notebook 09 (Δ Attention): the mask picture, depth, trade-off, recall, GPU ladder."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.delta_attention.attention import compute_fraction, delta_plan, sink_window_mask
from companion.viz import COLORS


def mask_picture(n: int = 48, *, sink: int = 4, window: int = 8, gamma: int = 8, tail: int = 8,
                 causal: bool = True) -> go.Figure:
    """Which (query, key) scores each pass computes: sparse (sink + window), Δ rows, dense tail."""
    m = sink_window_mask(n, sink=sink, window=window, causal=causal).numpy().astype(float)
    plan = delta_plan(n, gamma, tail)
    z = m.copy()
    allowed = np.tril(np.ones((n, n))) if causal else np.ones((n, n))
    for r in plan.anchors().tolist():
        z[r] = np.where(m[r] > 0, 1.0, allowed[r] * 2.0)
    for r in range(plan.s_p, n):
        z[r] = np.where(m[r] > 0, 1.0, allowed[r] * 3.0)
    colorscale = [[0.0, "#ffffff"], [0.125, "#ffffff"], [0.125, COLORS[0]], [0.375, COLORS[0]],
                  [0.375, COLORS[1]], [0.625, COLORS[1]], [0.625, COLORS[3]], [1.0, COLORS[3]]]
    fig = go.Figure(go.Heatmap(z=z, zmin=-0.5, zmax=3.5, colorscale=colorscale, showscale=False,
                               hovertemplate="query %{y}, key %{x}<extra></extra>"))
    for name, c in (("sparse: sink + window", COLORS[0]), ("Δ rows (i mod γ = 0), dense", COLORS[1]),
                    ("dense tail (cut_n rule)", COLORS[3])):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", marker=dict(color=c, size=10, symbol="square"),
                                 name=name))
    fig.update_layout(title=f"Scores computed at N = {n}: sink {sink}, window {window}, γ = {gamma}, tail cut_n = {plan.cut_n}",
                      xaxis_title="key position j", yaxis_title="query position i", height=430, width=560,
                      yaxis=dict(autorange="reversed", scaleanchor="x"), legend=dict(orientation="h", y=-0.18))
    return fig


def depth_figure(df, *, sink: int, window: int) -> go.Figure:
    """Cosine (attention output vs dense) and Spearman (last rows) per layer, for one sink/window."""
    sub = df[(df["sink"] == sink) & (df["window"] == window)]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("cosine of attention outputs vs dense",
                                                        "Spearman of the last queries' attention rows vs dense"))
    for i, (label, g) in enumerate(sub.groupby("method", sort=False)):
        c = COLORS[i % len(COLORS)]
        fig.add_trace(go.Scatter(x=g["layer"], y=g["cos_attn"], mode="lines+markers", name=label,
                                 line=dict(color=c), legendgroup=label), row=1, col=1)
        fig.add_trace(go.Scatter(x=g["layer"], y=g["spearman"], mode="lines+markers", name=label, showlegend=False,
                                 line=dict(color=c), legendgroup=label), row=1, col=2)
    fig.update_xaxes(title_text="layer", dtick=1)
    fig.update_yaxes(title_text="cosine", row=1, col=1)
    fig.update_yaxes(title_text="Spearman ρ", row=1, col=2)
    fig.update_layout(title=f"The shift compounds through depth (MiniLM, sink {sink}, window {window})", height=420)
    return fig


def tradeoff_figure(final) -> go.Figure:
    """Final sentence-embedding cosine against compute fraction, one marker per method/config."""
    fig = go.Figure()
    for i, (mode, g) in enumerate(final.groupby("mode", sort=False)):
        fig.add_trace(go.Scatter(x=g["compute_fraction"], y=g["final_cos"], mode="markers", name=mode,
                                 marker=dict(size=10, color=COLORS[i % len(COLORS)]), text=g["method"],
                                 hovertemplate="%{text}<br>compute %{x:.1%}<br>final cos %{y:.4f}<extra></extra>"))
    fig.update_layout(title="Final embedding similarity vs compute spent (MiniLM, 6 layers)",
                      xaxis_title="attention compute, share of dense", yaxis_title="cosine of mean-pooled embedding vs dense",
                      xaxis_tickformat=".0%", height=420)
    return fig


def recall_figure(acc: dict, chance: float) -> go.Figure:
    names = list(acc)
    fig = go.Figure(go.Bar(x=names, y=[acc[k] for k in names], marker_color=COLORS[0],
                           text=[f"{acc[k]:.1%}" for k in names], textposition="outside"))
    fig.add_hline(y=chance, line_dash="dot", annotation_text="chance")
    fig.update_layout(title="Key→value recall after a sparse prefill, dense decode (causal toy)",
                      yaxis_title="recall accuracy", yaxis_tickformat=".0%", yaxis_range=[0, 1.1], height=400)
    return fig


def ladder_figure(rows: list[dict], title: str) -> go.Figure:
    """Latency vs N (log-log) for each contender of the recorded GPU ladder."""
    fig = go.Figure()
    series = {}
    for r in rows:
        if r.get("ms") is None or r["contender"] in ("Δ only", "all", "SDPA"):
            continue
        key = r["contender"] + (f" γ={r['gamma']}" if r.get("gamma") and r["contender"] != "sparse" else "")
        series.setdefault(key, []).append((r["N"], r["ms"]))
    for i, (name, pts) in enumerate(series.items()):
        pts.sort()
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers", name=name,
                                 line=dict(color=COLORS[i % len(COLORS)], dash="dot" if "SDPA" in name else None)))
    fig.update_layout(title=title, xaxis_title="sequence length N (tokens)", yaxis_title="latency of one layer (ms)",
                      xaxis_type="log", yaxis_type="log", height=460)
    return fig
