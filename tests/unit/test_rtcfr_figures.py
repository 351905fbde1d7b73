"""Paper 18 (RTCFR+): the explorer's update function and the figure builders, without a browser."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pyspiel")
go = pytest.importorskip("plotly.graph_objects")

from companion.core import ParameterError  # noqa: E402
from companion.rtcfr import compile_game  # noqa: E402
from companion.rtcfr.explorer import explorer_controls, explorer_view  # noqa: E402
from companion.rtcfr.figures import gpu_grid_figure, heatmap_figure, kuhn_strategy_table  # noqa: E402
from companion.rtcfr.solvers import snapshots, trace_strategy  # noqa: E402


def test_explorer_view_draws_the_checked_algorithms():
    fig, readout = explorer_view("kuhn_poker", 200, 0.1, 10, 1e-10, rtcfr_plus=True, cfr_plus=True,
                                 pcfr_plus=False, dcfr=False, cfr=False, reset_theta=True, average=True)
    names = [t.name for t in fig.data]
    assert names == ["CFR+ last", "CFR+ average", "RTCFR+ reset θ last", "RTCFR+ last"]
    assert fig.layout.yaxis.type == "log" and "NashConv" in fig.layout.yaxis.title.text
    assert fig.layout.title.text and fig.layout.xaxis.title.text == "iteration"
    assert "RTCFR+ last iterate" in readout and "CFR+" in readout
    # every plotted value is positive (floored) so the log axis is defined
    assert all((np.asarray(t.y) > 0).all() for t in fig.data)


def test_explorer_view_responds_to_mu():
    a = explorer_view("kuhn_poker", 100, 0.1, 10, 1e-10, cfr_plus=False, pcfr_plus=False, dcfr=False)[0]
    b = explorer_view("kuhn_poker", 100, 0.001, 10, 1e-10, cfr_plus=False, pcfr_plus=False, dcfr=False)[0]
    assert not np.allclose(a.data[-1].y, b.data[-1].y)


@pytest.mark.parametrize("kwargs,param", [(dict(game="chess"), "game"), (dict(mu=0.0), "mu"), (dict(T_u=0), "T_u")])
def test_explorer_view_rejects_bad_controls(kwargs, param):
    with pytest.raises(ParameterError, match=param):
        explorer_view(**kwargs)


def test_explorer_controls_drive_the_view():
    controls = explorer_controls(iterations=200)
    values = {k: w.value for k, w in controls.items()}
    assert values["game"] == "kuhn_poker" and values["iterations"] == 200
    fig, readout = explorer_view(**values)
    assert "200 iterations" in readout and len(fig.data) >= 4
    with pytest.raises(ParameterError, match="iterations"):
        explorer_controls(iterations=300)


def test_kuhn_table_and_idea_trace():
    game = compile_game("kuhn_poker")
    table = kuhn_strategy_table(game, snapshots(game, "rtcfr+", [10, 300], mu=0.1, T_u=10))
    assert len(table) == 12 and list(table.columns)[-1] == "Nash"
    np.testing.assert_allclose(table["t=300"], table["Nash"], atol=2e-3)
    trace = trace_strategy(game, "rtcfr+", 1, "1b", 1, 50, mu=0.1, T_u=10)
    assert trace["prob"].shape == (50,) and np.isnan(trace["ref"]).sum() == 0
    assert list(trace["reference_updates"]) == [10, 20, 30, 40, 50]


def test_heatmap_and_gpu_figures():
    fig = heatmap_figure([0.1, 0.01], [10, 100], [[1e-3, 0.0], [1e-2, 1e-5]], "grid")
    assert fig.data[0].z.shape == (2, 2) and np.isfinite(fig.data[0].z).all()
    grid = {"iterations": [1, 100], "rtcfr": {"last": [[1.0, 1.0], [0.1, 0.01]], "mu": [1e-3, 0.1], "T_u": [100, 10]},
            "baselines": {"cfr+": {"last": [1.0, 0.5], "average": [1.0, 0.05]}}}
    fig = gpu_grid_figure(grid, "Leduc")
    assert [t.name for t in fig.data][:2] == ["RTCFR+ best of grid (μ=0.1, T_u=10)", "RTCFR+ untuned (μ=1e-3, T_u=100)"]
