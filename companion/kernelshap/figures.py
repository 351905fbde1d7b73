"""Figures and the estimator explorer for paper 16 (unified Shapley estimators); needs plotly.

Paper: Chen, Seshadri, Villani et al., *A Unified Framework for Provably Efficient Algorithms to
Estimate Shapley Values* (NeurIPS 2025). Fig. 1 of the paper pictures the sampling distributions;
its benchmark figures plot the median normalised MSE against m with IQR bands. The explorer is in
:mod:`companion.kernelshap.explorer`. Not imported by the GPU path (plotly is absent on the GPU machine).
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from companion.kernelshap.estimators import ESTIMATORS
from companion.kernelshap.experiment import SHAP
from companion.kernelshap.sampling import DISTRIBUTIONS, size_distribution
import companion.viz  # noqa: F401  (the theme and the mode bar)

DIST_COLORS = {"kernel": "#0072B2", "modified": "#009E73", "leverage": "#D55E00"}
METHOD_COLORS = {
    "KernelSHAP (LS, kernel)": "#0072B2",
    "LeverageSHAP (LS, leverage)": "#D55E00",
    "LS, modified ℓ2": "#009E73",
    "unbiased KernelSHAP (MV, kernel, λ=0)": "#56B4E9",
    "MV, leverage": "#E69F00",
    SHAP: "#000000",
}


def size_distribution_figure(d: int, extra_taus=(0.25, 0.75)) -> go.Figure:
    """P(|S| = s) for the kernel (τ=1), modified ℓ2 (τ=½) and leverage (τ=0) distributions, plus τ family members."""
    sizes = np.arange(1, d)
    fig = go.Figure()
    for name, tau in DISTRIBUTIONS.items():
        fig.add_scatter(x=sizes, y=size_distribution(d, name), mode="lines+markers", name=f"{name} (τ = {tau:g})",
                        line=dict(color=DIST_COLORS[name], width=2.5), marker=dict(size=5))
    for tau in extra_taus:
        fig.add_scatter(x=sizes, y=size_distribution(d, tau), mode="lines", name=f"τ = {tau:g}",
                        line=dict(color="#888888", dash="dot", width=1.2))
    fig.update_layout(title=f"Sampling distributions over subset sizes, d = {d}: P(|S| = s) ∝ (s(d−s))^(−τ)",
                      xaxis_title="subset size s", yaxis_title="probability of drawing a subset of size s", height=400)
    return fig


def error_curves_figure(curves: dict, budgets, title: str, height: int = 420) -> go.Figure:
    """Median normalised MSE against m, log–log, with the interquartile range over seeds as a band."""
    fig = go.Figure()
    budgets = list(budgets)
    for i, (method, errors) in enumerate(curves.items()):
        errors = np.asarray(errors)
        q25, med, q75 = np.quantile(errors, [0.25, 0.5, 0.75], axis=1)
        color = METHOD_COLORS.get(method.split(" [")[0], None) or f"hsl({60 * i}, 60%, 45%)"
        dash = "dash" if "without" in method else ("dot" if method == SHAP else "solid")
        fig.add_scatter(x=budgets + budgets[::-1], y=list(q75) + list(q25[::-1]), fill="toself", mode="lines",
                        line=dict(width=0), fillcolor=color, opacity=0.15, showlegend=False, hoverinfo="skip")
        fig.add_scatter(x=budgets, y=med, mode="lines+markers", name=method, line=dict(color=color, dash=dash, width=2))
    fig.update_layout(title=title, height=height, xaxis_title="sample budget m (model evaluations)",
                      yaxis_title="normalised MSE (median, IQR band)")
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log", exponentformat="power")
    return fig


def error_curves_grid(results: dict, title: str, height: int = 440) -> go.Figure:
    """One panel per data set: ``results = {dataset: (d, budgets, curves)}`` as from :func:`error_curves`."""
    from plotly.subplots import make_subplots

    names = list(results)
    fig = make_subplots(rows=1, cols=len(names), subplot_titles=[f"{n} (d = {results[n][0]})" for n in names],
                        horizontal_spacing=0.06)
    for col, name in enumerate(names, start=1):
        _, budgets, curves = results[name]
        panel = error_curves_figure(curves, budgets, "")
        for trace in panel.data:
            trace.showlegend = col == 1 and trace.showlegend is not False
            trace.legendgroup = trace.name
            fig.add_trace(trace, row=1, col=col)
        fig.update_xaxes(type="log", title_text="sample budget m", row=1, col=col)
        fig.update_yaxes(type="log", exponentformat="power", row=1, col=col)
    fig.update_yaxes(title_text="normalised MSE (median, IQR band)", row=1, col=1)
    fig.update_layout(title=title, height=height, legend=dict(orientation="h", y=-0.22, x=0))
    return fig


def scale_figure(study: dict, title: str | None = None, height: int = 420) -> go.Figure:
    """NMSE against m for a :func:`~companion.kernelshap.experiment.scale_study` (recorded or run here)."""
    curves = {method: rec["nmse"] for method, rec in study["methods"].items() if method in ESTIMATORS}
    return error_curves_figure(curves, study["budgets"],
                               title or f"Polynomial game, d = {study['d']}, on {study['device']}", height=height)
