"""Paper 16: the explorer's pure update function and the figure builders, without a browser."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from companion.core import ParameterError
from companion.kernelshap.experiment import SHAP, error_curves, scale_study, without_replacement
from companion.kernelshap.explorer import EXPLORER_ESTIMATORS, cached_setup, explorer_controls, explorer_view
from companion.kernelshap.figures import error_curves_figure, error_curves_grid, scale_figure, size_distribution_figure


def test_explorer_default_view():
    fig, readout = explorer_view(seeds=3)
    assert isinstance(fig, go.Figure) and len(fig.data) == 2
    exact, est = fig.data
    assert len(exact.x) == 10 == len(est.x)  # diabetes: all 10 features (top 15)
    setup = cached_setup("diabetes")
    order = np.argsort(-np.abs(setup.truth))[:10]
    np.testing.assert_allclose(exact.y, setup.truth[order])
    assert "median" in readout and "IQR" in readout and "over 3 seeds" in readout
    assert "m = 256" in fig.layout.title.text


@pytest.mark.parametrize("estimator", list(EXPLORER_ESTIMATORS))
def test_explorer_every_estimator(estimator):
    fig, readout = explorer_view("diabetes", estimator, "kernel", True, 64, seeds=2)
    assert len(fig.data) == 2 and np.isfinite(np.asarray(fig.data[1].y, float)).all()
    gap = float(readout.split("= ")[-1].split()[0].rstrip("(m"))
    assert abs(gap) < 1e-9  # efficiency, shown in the readout


def test_explorer_caps_m_without_replacement_and_is_exact_there():
    fig, readout = explorer_view("diabetes", "regression (LS, λ=α)", "leverage", False, 8192, seeds=2)
    assert "capped at 2^d − 2 = 1022" in readout
    assert "median 0.00e+00" in readout or float(readout.split("median ")[1].split()[0]) < 1e-9


def test_explorer_top_features_on_digits():
    fig, _ = explorer_view("digits", "regression (LS, λ=α)", "leverage", True, 256, seeds=1, top=12)
    assert len(fig.data[0].x) == 12


@pytest.mark.parametrize("bad", [dict(dataset="mnist"), dict(estimator="exact"), dict(distribution="uniform"),
                                 dict(m=1), dict(replacement="yes"), dict(seeds=0)])
def test_explorer_rejects_bad_controls(bad):
    with pytest.raises(ParameterError):
        explorer_view(**bad)


def test_explorer_controls_match_the_view():
    controls = explorer_controls()
    assert set(controls) == {"dataset", "estimator", "distribution", "replacement", "m"}
    fig, readout = explorer_view(**{k: w.value for k, w in controls.items()}, seeds=2)
    assert "m = 256" in fig.layout.title.text
    with pytest.raises(ParameterError):
        explorer_controls(m=100)


def test_size_distribution_figure():
    fig = size_distribution_figure(12)
    assert len(fig.data) == 5
    for trace in fig.data:
        assert abs(sum(trace.y) - 1) < 1e-12 and list(trace.x) == list(range(1, 12))
    assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text and fig.layout.title.text


def test_error_curve_figures():
    setup = cached_setup("diabetes")
    methods = ["LeverageSHAP (LS, leverage)", without_replacement("LeverageSHAP (LS, leverage)"), SHAP]
    curves = error_curves(setup, methods, [32, 64], seeds=3)
    fig = error_curves_figure(curves, [32, 64], "t")
    assert len(fig.data) == 2 * len(methods) and fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    medians = [t for t in fig.data if t.showlegend is not False]
    np.testing.assert_allclose(medians[0].y, np.median(curves[methods[0]], axis=1))
    grid = error_curves_grid({"diabetes": (10, [32, 64], curves), "again": (10, [32, 64], curves)}, "grid")
    assert len(grid.data) == 4 * len(methods)
    assert sum(t.showlegend is not False for t in grid.data) == len(methods)  # one legend entry per method


def test_scale_figure_from_a_study():
    study = scale_study(12, [32, 128], seeds=2, methods=["LeverageSHAP (LS, leverage)", "MV, leverage"], device="cpu")
    fig = scale_figure(study)
    assert len(fig.data) == 4 and "d = 12" in fig.layout.title.text
