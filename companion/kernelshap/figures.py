"""Figures and the estimator explorer for paper 16 (unified Shapley estimators); needs plotly.

Paper: Chen, Seshadri, Villani et al., *A Unified Framework for Provably Efficient Algorithms to
Estimate Shapley Values* (NeurIPS 2025). Fig. 1 of the paper pictures the sampling distributions;
its benchmark figures plot the median normalised MSE against m with IQR bands. :func:`explorer_view`
is the explorer's pure update function (dataset, estimator, distribution, replacement, m): the
estimate for one query beside the exact values, and the normalised error's spread over seeds.
Not imported by the GPU path (plotly is absent on the GPU machine).
"""

from __future__ import annotations

import functools

import numpy as np
import plotly.graph_objects as go

from companion.core.validation import check_bool, check_choice, check_int
from companion.kernelshap.estimators import ESTIMATORS, estimate, kernel_explainer, normalised_error
from companion.kernelshap.experiment import DATASETS, SHAP, make_setup
from companion.kernelshap.sampling import DISTRIBUTIONS, size_distribution

# The explorer's estimator control: the framework's two kinds (and λ), or the shap library.
EXPLORER_ESTIMATORS = {
    "regression (LS, λ=α)": ("LS", "alpha"),
    "matrix-vector (MV, λ=α)": ("MV", "alpha"),
    "matrix-vector (MV, λ=0)": ("MV", "zero"),
    SHAP: None,
}
BUDGETS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
DIST_COLORS = {"kernel": "#0072B2", "modified": "#009E73", "leverage": "#D55E00"}
METHOD_COLORS = {
    "KernelSHAP (LS, kernel)": "#0072B2",
    "LeverageSHAP (LS, leverage)": "#D55E00",
    "LS, modified ℓ2": "#009E73",
    "unbiased KernelSHAP (MV, kernel, λ=0)": "#56B4E9",
    "MV, leverage": "#E69F00",
    SHAP: "#000000",
}


@functools.lru_cache(maxsize=8)
def cached_setup(name: str):
    """:func:`~companion.kernelshap.experiment.make_setup`, once per data set (model, game, exact values)."""
    return make_setup(name)


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


def _estimates(setup, estimator: str, distribution: str, replacement: bool, m: int, seeds: int) -> list[np.ndarray]:
    if estimator == SHAP:
        return [kernel_explainer(setup.game, m, seed=s) for s in range(seeds)]
    kind, lam = EXPLORER_ESTIMATORS[estimator]
    return [estimate(setup.game, m, kind=kind, distribution=distribution, lam=lam, replacement=replacement, seed=s)
            for s in range(seeds)]


def explorer_view(dataset: str = "diabetes", estimator: str = "regression (LS, λ=α)", distribution: str = "leverage",
                  replacement: bool = True, m: int = 256, seeds: int = 8, top: int = 15):
    """Bars of the estimate (seed 0) beside the exact values for the ``top`` features by |φ*|, with the
    seeds' spread as error bars; the readout gives the normalised error's median and IQR over seeds."""
    check_choice("dataset", dataset, DATASETS)
    check_choice("estimator", estimator, tuple(EXPLORER_ESTIMATORS))
    check_choice("distribution", distribution, tuple(DISTRIBUTIONS))
    check_bool("replacement", replacement)
    check_int("m", m, lo=2)
    check_int("seeds", seeds, lo=1, hi=100)
    setup = cached_setup(dataset)
    d = setup.game.d
    note = ""
    if not replacement and m > 2**d - 2 and estimator != SHAP:
        m, note = 2**d - 2, f" (m capped at 2^d − 2 = {2**d - 2}: all coalitions)"
    runs = np.array(_estimates(setup, estimator, distribution, replacement, m, seeds))
    errors = np.array([normalised_error(phi, setup.truth) for phi in runs])
    order = np.argsort(-np.abs(setup.truth))[:top]
    names = [setup.feature_names[j] for j in order]
    fig = go.Figure()
    fig.add_bar(x=names, y=setup.truth[order], name="exact φ* (TreeExplainer)", marker_color="#999999")
    spread = runs[:, order].std(0) if seeds > 1 else None
    fig.add_bar(x=names, y=runs[0, order], name=f"estimate, seed 0 (± sd over {seeds} seeds)", marker_color="#D55E00",
                error_y=dict(type="data", array=spread, visible=spread is not None))
    label = estimator if estimator == SHAP else f"{estimator}, {distribution}, {'with' if replacement else 'without'} replacement"
    fig.update_layout(title=f"{dataset} (d = {d}): {label}, m = {m}", barmode="group", height=430,
                      xaxis_title=f"feature (the {min(top, d)} largest |φ*|)", yaxis_title="Shapley value φ_j")
    q25, med, q75 = np.quantile(errors, [0.25, 0.5, 0.75])
    readout = (f"normalised MSE ‖φ̂ − φ*‖²/‖φ*‖² over {seeds} seeds: median {med:.2e} (IQR {q25:.1e} … {q75:.1e}); "
               f"Σφ̂ − (v([d]) − v(∅)) = {runs[0].sum() - (setup.game.full - setup.game.empty):+.1e}{note}")
    return fig, readout


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
