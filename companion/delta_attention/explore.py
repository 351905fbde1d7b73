"""Figures and the explorer of notebook 09 (Δ Attention). Imports plotly; the rest of the package does not.

`make_explorer_update(model, input_ids)` returns the explorer's pure update function
`update(window, sink, gamma) -> (figure, readout)`: per-layer, per-position error (1 − cosine of the
attention output against the dense run) of the sparse prefill and of sparse + Δ side by side, and the
compute fractions. Results are memoised per control setting, so moving a slider back is instant.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.delta_attention.attention import Method, compute_fraction, delta_plan, sink_window_mask
from companion.delta_attention.minilm import position_error, run_minilm
from companion.viz import COLORS



def make_explorer_update(model, input_ids, *, tail: int = 32, causal: bool = False, dense=None,
                         max_columns: int = 128):
    """The explorer's update function over MiniLM (see the module docstring). The heatmaps average
    the positions into at most `max_columns` bins (a small figure keeps the widget round trip fast)."""
    dense = dense or run_minilm(model, input_ids, Method("dense", causal=causal))
    n = input_ids.shape[1]

    @lru_cache(maxsize=64)
    def _errors(window: int, sink: int, gamma: int):
        sp = Method("sparse", sink=sink, window=window, causal=causal)
        de = Method("delta", sink=sink, window=window, gamma=gamma, tail=tail, causal=causal)
        e_sp = position_error(run_minilm(model, input_ids, sp), dense)
        e_de = position_error(run_minilm(model, input_ids, de), dense)
        return e_sp, e_de, compute_fraction(n, sp), compute_fraction(n, de)

    def update(window: int, sink: int, gamma: int):
        e_sp, e_de, f_sp, f_de = _errors(int(window), int(sink), int(gamma))
        fig = error_heatmaps(e_sp, e_de, titles=(f"sparse (sink {sink}, window {window})",
                                                  f"sparse + Δ (γ = {gamma}, dense tail {tail})"),
                             max_columns=max_columns)
        readout = (f"compute: sparse {f_sp:.1%} of dense, sparse + Δ {f_de:.1%}  |  "
                   f"mean 1 − cos over layers and positions: sparse {e_sp.mean():.4f}, "
                   f"sparse + Δ {e_de.mean():.4f}  |  last layer: {e_sp[-1].mean():.4f} vs {e_de[-1].mean():.4f}")
        return fig, readout

    return update


def bin_positions(e: np.ndarray, max_columns: int) -> tuple[np.ndarray, np.ndarray]:
    """Average [L, N] into [L, ⌈N/b⌉] bins of b = ⌈N/max_columns⌉ positions; returns (x = first
    position of each bin, binned values as float32)."""
    n = e.shape[1]
    b = max(1, -(-n // max_columns))
    starts = np.arange(0, n, b)
    binned = np.stack([e[:, s:s + b].mean(axis=1) for s in starts], axis=1)
    return starts, binned.astype(np.float32)


def error_heatmaps(e_sparse: np.ndarray, e_delta: np.ndarray, titles=("sparse", "sparse + Δ"),
                   max_columns: int = 128) -> go.Figure:
    """Two heatmaps [layer × position] of 1 − cos(method, dense), one shared colour scale."""
    x, e_sparse = bin_positions(e_sparse, max_columns)
    _, e_delta = bin_positions(e_delta, max_columns)
    zmax = float(max(np.quantile(e_sparse, 0.99), np.quantile(e_delta, 0.99), 1e-6))
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.04)
    layers = np.arange(1, e_sparse.shape[0] + 1)
    for col, e in ((1, e_sparse), (2, e_delta)):
        fig.add_trace(go.Heatmap(z=e, y=layers, x=x, zmin=0, zmax=zmax, colorscale="Viridis",
                                 showscale=col == 2, colorbar=dict(title="1 − cos"),
                                 hovertemplate="layer %{y}, position %{x}: %{z:.4f}<extra></extra>"), row=1, col=col)
        fig.update_xaxes(title_text="token position" + (f" (bins of {x[1] - x[0]})" if len(x) > 1 and x[1] - x[0] > 1 else ""),
                         row=1, col=col)
    fig.update_yaxes(title_text="layer", autorange="reversed", row=1, col=1)
    fig.update_layout(title="Per-position error of the attention output against the dense run", height=360)
    return fig


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
