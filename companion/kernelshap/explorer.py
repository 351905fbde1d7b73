"""The estimator explorer of paper 16 (unified Shapley estimators); needs plotly and ipywidgets.

:func:`explorer_view` is the explorer's pure update function (dataset, estimator, distribution,
replacement, m): the estimate for one query row beside the exact values (TreeExplainer), and the
normalised error's spread over seeds; :func:`explorer_controls` builds the widgets the notebook
hands to ``companion.viz.Explorer``. The data (model, game, exact values) are built once per data
set by :func:`cached_setup`, so the view takes no precomputed object.
"""

from __future__ import annotations

import functools

import numpy as np
import plotly.graph_objects as go

from companion.core.validation import check_bool, check_choice, check_int
from companion.kernelshap.estimators import estimate, kernel_explainer, normalised_error
from companion.kernelshap.experiment import DATASETS, SHAP, make_setup
from companion.kernelshap.sampling import DISTRIBUTIONS
import companion.viz  # noqa: F401  (the theme and the mode bar)

__all__ = ["BUDGETS", "EXPLORER_ESTIMATORS", "cached_setup", "explorer_controls", "explorer_view"]

# The explorer's estimator control: the framework's two kinds (and λ), or the shap library.
EXPLORER_ESTIMATORS = {
    "regression (LS, λ=α)": ("LS", "alpha"),
    "matrix-vector (MV, λ=α)": ("MV", "alpha"),
    "matrix-vector (MV, λ=0)": ("MV", "zero"),
    SHAP: None,
}
BUDGETS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

@functools.lru_cache(maxsize=8)
def cached_setup(name: str):
    """:func:`~companion.kernelshap.experiment.make_setup`, once per data set (model, game, exact values)."""
    return make_setup(name)


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


def explorer_controls(dataset: str = "diabetes", m: int = 256) -> dict:
    """The explorer's widgets: data set, estimator, sampling distribution, replacement and budget m."""
    import ipywidgets as widgets

    check_choice("dataset", dataset, DATASETS)
    check_choice("m", m, BUDGETS)
    style = {"description_width": "initial"}
    return {
        "dataset": widgets.Dropdown(options=list(DATASETS), value=dataset, description="data set", style=style),
        "estimator": widgets.Dropdown(options=list(EXPLORER_ESTIMATORS), value="regression (LS, λ=α)",
                                      description="estimator", style=style),
        "distribution": widgets.Dropdown(options=list(DISTRIBUTIONS), value="leverage", description="sampling", style=style),
        "replacement": widgets.Checkbox(value=True, description="with replacement", style=style),
        "m": widgets.SelectionSlider(options=list(BUDGETS), value=m, description="budget m", style=style),
    }
