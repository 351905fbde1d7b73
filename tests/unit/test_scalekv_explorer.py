"""Paper 03, ScaleKV: the KV-cache-groups explorer's update function and the notebook's figures, without a browser."""

import json

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from companion.core import ParameterError
from companion.scalekv import TinyVAR, VARConfig, calibrate, sweep
from companion.scalekv import figures as SF
from companion.scalekv.bench import attention_latency, selection_timing
from companion.scalekv.explorer import budget_grid, format_bytes, kv_groups_data, kv_groups_view

SIDES = (1, 2, 3, 4, 6)
FRACTIONS = [0.1, 0.3, 0.5]
DELTAS = [0.0, 0.1, 0.2]


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = TinyVAR(VARConfig(sides=SIDES, layers=3, dim=32, heads=2, mlp_ratio=2)).eval()
    with torch.no_grad():
        for blk in model.blocks:
            blk.attn.qkv.weight.normal_(0, 0.3)
    z = calibrate(model, torch.arange(3), seed=1).z
    labels = torch.arange(6) % 10
    res = sweep(model, labels, z, FRACTIONS, window_size=1, delta=0.1, keep_images=2)
    data = kv_groups_data(model, labels, z, res, DELTAS, n_images=2)
    return model, z, res, data


def _state(fig: go.Figure):
    """What the browser test compares: every trace's data."""
    return json.dumps([[np.asarray(t.z).tolist() if getattr(t, "z", None) is not None else None,
                        np.asarray(t.text).tolist() if getattr(t, "text", None) is not None else None] for t in fig.data])


def test_view_is_pure_and_light(setup):
    *_, data = setup
    f1, r1 = kv_groups_view(data, budget=0.3, delta=0.1)
    f2, r2 = kv_groups_view(data, budget=0.3, delta=0.1)
    assert r1 == r2 and _state(f1) == _state(f2)
    cells = sum(np.asarray(t.z).size for t in f1.data if isinstance(t, go.Heatmap))
    assert cells < 2000
    assert len(f1.data) == 1 + 3 + 3 * 2  # grid, 3 legend entries, 3 images per row


def test_first_control_budget_changes_the_plotted_data_and_the_readout(setup):
    *_, data = setup
    (fa, ra), (fb, rb) = kv_groups_view(data, budget=0.1, delta=0.1), kv_groups_view(data, budget=0.3, delta=0.1)
    assert ra != rb and _state(fa) != _state(fb)
    (fc, rc) = kv_groups_view(data, budget=0.3, delta=0.2)
    assert rc != rb and _state(fc) != _state(fb)


def test_readout_reports_retained_bytes_against_the_full_cache(setup):
    model, _, res, data = setup
    _, r = kv_groups_view(data, budget=0.3, delta=0.1)
    row = res.table[(res.table.method == "scalekv") & (res.table.fraction == 0.3)].iloc[0]
    assert format_bytes(row.retained_bytes) in r and format_bytes(row.full_bytes) in r
    assert "30.0%" in r and "PSNR" in r and "best baseline" in r


def test_grid_colours_and_tokens(setup):
    _, _, res, data = setup
    b = data.scalekv[(0.3, 0.1)]["budgets"]
    group, kept = budget_grid(b)
    assert (group[:, : b.first] == 0).all() and set(np.unique(group[:, b.first:])) <= {1, 2}
    assert (group == 2).sum() == b.drafters.sum()
    assert (kept[:, b.first:].sum(0) == 3 * b.base).all()  # every compressed scale holds exactly L * B tokens
    fig, _ = kv_groups_view(data, budget=0.3, delta=0.1)
    assert np.asarray(fig.data[0].z).tolist() == group.tolist()
    assert np.asarray(fig.data[0].text).tolist() == kept.tolist()


def test_controls_snap_to_the_precomputed_grid_and_reject_bad_values(setup):
    *_, data = setup
    assert data.nearest(0.12, 0.04) == (0.1, 0.0)
    with pytest.raises(ParameterError):
        kv_groups_view(data, budget=0.0, delta=0.1)
    with pytest.raises(ParameterError):
        kv_groups_view(data, budget=0.3, delta=-1)


def test_the_sweep_values_are_reused_at_its_delta(setup):
    model, z, res, data = setup
    row = res.table[(res.table.method == "scalekv") & (res.table.fraction == 0.5)].iloc[0]
    assert data.scalekv[(0.5, 0.1)]["psnr"] == float(row.psnr)
    best = data.baselines[0.5]
    others = res.table[(res.table.fraction == 0.5) & (res.table.method != "scalekv")]
    assert best["psnr"] == others.psnr.max()


def test_kv_groups_data_needs_kept_images(setup):
    model, z, res, _ = setup
    with pytest.raises(ParameterError):
        kv_groups_data(model, torch.arange(6) % 10, z, res, DELTAS, n_images=7)


def test_format_bytes():
    assert format_bytes(512) == "512 B" and format_bytes(1536) == "1.5 KiB" and format_bytes(3 * 2**30) == "3.0 GiB"


def test_notebook_figures_build(setup):
    model, z, res, _ = setup
    cal = calibrate(model, torch.arange(2), seed=0)
    figs = [
        SF.loss_figure([3.0, 2.0, 1.5] * 5),
        SF.cache_growth_figure({"a": SIDES, "b": (1, 2, 4)}),
        SF.asi_figure(cal.current, cal.history, cal.z, res.budgets[("scalekv", 0.3)].drafters, SIDES),
        SF.fidelity_figure(res.table),
        SF.planted_figure(cal.z, [1], {"scalekv": {0.1: 0.2}, "uniform": {0.1: 0.3}}, SIDES),
        SF.latency_figure(attention_latency("cpu", sides=(1, 2, 4), geometry=dict(layers=1, heads=2, head_dim=8), batch=1,
                                            budget=6, dtype=torch.float32, log=lambda *a: None)),
        SF.kernel_figure(selection_timing("cpu", geometry=dict(layers=1, heads=2, head_dim=8), batch=1, cases=((60, 6),),
                                          capacity=20, dtype=torch.float32, log=lambda *a: None)),
    ]
    assert all(isinstance(f, go.Figure) and len(f.data) > 0 for f in figs)


def test_explorer_view_and_controls(setup):
    from companion.scalekv.explorer import explorer_controls, explorer_view

    *_, data = setup
    controls = explorer_controls(data, budget=0.28, delta=0.12)
    assert controls["budget"].value == 0.3 and controls["delta"].value == 0.1  # nearest grid points
    assert [v for _, v in controls["budget"].options] == FRACTIONS and [v for _, v in controls["delta"].options] == DELTAS
    fig, readout = explorer_view(data, budget=0.3, delta=0.1)
    assert readout == kv_groups_view(data, budget=0.3, delta=0.1)[1]
