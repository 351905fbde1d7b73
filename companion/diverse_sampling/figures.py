"""Figures of paper 19's notebook (plotly)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.diverse_sampling import toy as T
from companion.viz import COLORS

_PAL = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)


def coverage_curve(model: T.ToyModel, ns, *, trials: int, lam: float, k=None, aggregation="max", seed=0) -> dict:
    """Mean clusters covered, SE RMSE per estimator and mean ESS/N on the exact toy, for each N."""
    out = {"n": [], "iid": [], "steered": [], "ess": [], "rmse": {e: [] for e in T.ESTIMATORS}}
    for n in ns:
        s = T.summary(model, n=int(n), trials=trials, lam=lam, k=k, aggregation=aggregation, seed=seed + 7 * int(n))
        out["n"].append(int(n))
        out["iid"].append(s["covered"]["iid"])
        out["steered"].append(s["covered"]["steered"])
        out["ess"].append(s["ess"])
        for e in T.ESTIMATORS:
            out["rmse"][e].append(s["rmse"][e])
    return out


def idea_figure(curve: dict, n_clusters: int, lam: float) -> go.Figure:
    """Left: clusters covered vs N (IID vs steered). Right: RMSE of the SE estimators vs N."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("clusters covered", "RMSE of the SE estimate (nats)"))
    fig.add_trace(go.Scatter(x=curve["n"], y=curve["iid"], name="IID", mode="lines+markers", line_color=_PAL[0]), 1, 1)
    fig.add_trace(go.Scatter(x=curve["n"], y=curve["steered"], name=f"steered (λ = {lam:g})", mode="lines+markers",
                             line_color=_PAL[1]), 1, 1)
    fig.add_hline(y=n_clusters, line_dash="dot", row=1, col=1)
    for i, e in enumerate(T.ESTIMATORS):
        fig.add_trace(go.Scatter(x=curve["n"], y=curve["rmse"][e], name=T.LABELS[e] + " RMSE", mode="lines+markers",
                                 line=dict(color=_PAL[i % len(_PAL)], dash="solid" if i else "dot")), 1, 2)
    fig.update_xaxes(title_text="N samples", type="log")
    fig.update_layout(height=400, title=f"Exact toy ({n_clusters} Zipf clusters): steering covers more "
                      "meanings; weights undo its bias; the control variate cuts the error")
    return fig


def text_figure(text: dict) -> go.Figure:
    """Templated-QA results: AUROC per estimator (mean ± std over seeds) and meanings covered per question."""
    names = ("iid", "steered_unweighted", "steered_is", "steered_is_cv")
    labels = ("IID", "steered, no IS", "steered + IS", "steered + IS + CV")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("AUROC of SE for predicting a wrong greedy answer",
                                                        "meanings covered per question"))
    fig.add_trace(go.Bar(x=list(labels) + ["exact model SE"],
                         y=[text["auroc"][n][0] for n in names] + [text["auroc_truth"]],
                         error_y=dict(type="data", array=[text["auroc"][n][1] for n in names] + [0.0]),
                         marker_color=[_PAL[i % len(_PAL)] for i in range(4)] + ["#555555"], showlegend=False), 1, 1)
    fig.add_hline(y=0.5, line_dash="dot", row=1, col=1)
    q = np.arange(text["n_questions"])
    fig.add_trace(go.Bar(x=q, y=text["covered_iid"].mean(0), name="IID", marker_color=_PAL[0]), 1, 2)
    fig.add_trace(go.Bar(x=q, y=text["covered_steered"].mean(0), name="steered", marker_color=_PAL[1]), 1, 2)
    fig.update_xaxes(title_text="question", row=1, col=2)
    fig.update_layout(height=400, barmode="group",
                      title=f"Templated QA, N = {text['n']}, λ = {text['lam']:g}, k = {text['k']}, "
                            f"{len(text['seeds'])} seed(s)")
    return fig


def gpu_figure(gpu: dict) -> go.Figure:
    """Recorded GPU sweep: AUROC and clusters covered vs N for each schedule."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("AUROC of SE", "clusters covered"))
    sweep = gpu["sweep"]
    for i, sched in enumerate(sorted({r["schedule"] for r in sweep})):
        rs = sorted((r for r in sweep if r["schedule"] == sched), key=lambda r: r["n"])
        ns = [r["n"] for r in rs]
        c = _PAL[(i + 1) % len(_PAL)]
        fig.add_trace(go.Scatter(x=ns, y=[r["auroc_is"] for r in rs], name=f"steered + IS ({sched})", line_color=c), 1, 1)
        fig.add_trace(go.Scatter(x=ns, y=[r["covered_steered"] for r in rs], name=f"steered ({sched})", line_color=c,
                                 showlegend=False), 1, 2)
    base = sorted((r for r in sweep if r["schedule"] == sweep[0]["schedule"]), key=lambda r: r["n"])
    fig.add_trace(go.Scatter(x=[r["n"] for r in base], y=[r["auroc_iid"] for r in base], name="IID", line_color=_PAL[0]), 1, 1)
    fig.add_trace(go.Scatter(x=[r["n"] for r in base], y=[r["covered_iid"] for r in base], name="IID",
                             line_color=_PAL[0], showlegend=False), 1, 2)
    fig.update_xaxes(title_text="N", type="log")
    fig.update_layout(height=380, title=f"Recorded on {gpu.get('device', 'GPU')}, {gpu.get('date', '')}")
    return fig
