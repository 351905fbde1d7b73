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


def gpu_figure(gpu: dict | None) -> go.Figure:
    """The recorded one-GPU study: steered/IID meanings covered per seed, and the RMSE and bias against the model's
    exact SE of IID and of steered + IS + CV, vs N for each schedule (markers: seeds; lines: their mean). A
    payload that kept only means shows those; none recorded gives an empty figure that says so."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("meanings covered, steered / IID", "RMSE vs exact SE (nats)",
                                                        "bias vs exact SE (nats)"))
    sweep = (gpu or {}).get("sweep") or []
    if not sweep:
        fig.add_annotation(text="not recorded yet: python -m companion.bench diverse_sampling", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
        return fig.update_layout(height=360)

    def line(col, rs, values, name, color, dash="solid", legend=True):
        xs = [r["n"] for r in rs for _ in values(r)]
        fig.add_trace(go.Scatter(x=xs, y=[v for r in rs for v in values(r)], mode="markers", marker=dict(color=color, size=5),
                                 opacity=0.5, showlegend=False, hoverinfo="skip"), 1, col)
        fig.add_trace(go.Scatter(x=[r["n"] for r in rs], y=[float(np.mean(values(r))) for r in rs], name=name,
                                 mode="lines+markers", line=dict(color=color, dash=dash), showlegend=legend), 1, col)

    def err(kind, est, mean_key):
        return lambda r: r[f"{kind}_seeds"][est] if f"{kind}_seeds" in r else [r[mean_key]] if mean_key else []

    for i, sched in enumerate(dict.fromkeys(r["schedule"] for r in sweep)):
        rs = sorted((r for r in sweep if r["schedule"] == sched), key=lambda r: r["n"])
        c = _PAL[(i + 1) % len(_PAL)]
        line(1, rs, lambda r: r.get("covered_ratio_seeds") or [r["covered_steered"] / r["covered_iid"]], sched, c)
        line(2, rs, err("rmse", "steered_is_cv", "rmse_is_cv"), f"steered + IS + CV ({sched})", c, legend=False)
        if any("bias_seeds" in r for r in rs):
            line(3, rs, err("bias", "steered_is_cv", None), f"steered + IS + CV ({sched})", c, legend=False)
    rs = sorted((r for r in sweep if r["schedule"] == sweep[0]["schedule"]), key=lambda r: r["n"])
    line(2, rs, err("rmse", "iid", "rmse_iid"), "IID", _PAL[0], dash="dot")
    if any("bias_seeds" in r for r in rs):
        line(3, rs, err("bias", "iid", None), "IID", _PAL[0], dash="dot", legend=False)
    else:
        fig.add_annotation(text="bias not kept in this payload", showarrow=False, row=1, col=3, x=0.5, y=0.5,
                           xref="x3 domain", yref="y3 domain")
    fig.add_hline(y=1.0, line_dash="dot", row=1, col=1)
    fig.add_hline(y=0.0, line_dash="dot", row=1, col=3)
    ns = sorted({r["n"] for r in sweep})
    fig.update_xaxes(title_text="N", type="log", tickvals=ns, ticktext=[str(n) for n in ns])
    scorer = (gpu.get("text_model") or {}).get("scorer", "scorer not recorded")
    return fig.update_layout(height=380, title=f"Recorded on {gpu.get('device', 'GPU')}, {gpu.get('date', '')}; {scorer}")
