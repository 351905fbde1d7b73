"""The HyperET notebook's figures and explorer update functions (pure; no browser)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from companion.core import ParameterError
from companion.hyperet.data import LEVELS, prompts
from companion.hyperet.explorer import (
    disk_projection,
    disk_view,
    explorer_controls,
    explorer_data,
    explorer_view,
    identity_controls,
    identity_view,
)
from companion.hyperet.figures import accuracy_figure, curves_figure, hierarchy_figure, radius_figure


@pytest.fixture(scope="module")
def proj():
    g = torch.Generator().manual_seed(0)
    text = {lv: torch.nn.functional.normalize(torch.randn(len(p), 24, generator=g), dim=-1) for lv, p in prompts("digits").items()}
    imgs = torch.nn.functional.normalize(torch.randn(60, 24, generator=g), dim=-1)
    return disk_projection(imgs, text), np.arange(60) % 10


def _rad_from_trace(trace, c):
    xy = np.stack([trace.x, trace.y], axis=1)  # shown as √c·x
    return 2 / math.sqrt(c) * np.arctanh(np.linalg.norm(xy, axis=1))


def test_projection_shapes(proj):
    p, _ = proj
    assert p["images"].shape == (60, 2)
    for lv in LEVELS:
        assert p[lv].shape == (len(prompts("digits")[lv]), 2)
    text_norms = np.linalg.norm(np.concatenate([p[lv] for lv in LEVELS]), axis=1)
    assert np.isclose(text_norms, 1.0).any()  # scaled so the (lower) median text vector has norm 1


@pytest.mark.parametrize("c", [0.01, 1.0, 5.0])
def test_disk_view_moves_images_radially_by_s(proj, c):
    p, labels = proj
    fig1, _ = disk_view(p, labels, prompts("digits"), c=c, s=1.0)
    fig2, readout = disk_view(p, labels, prompts("digits"), c=c, s=1.7)
    assert isinstance(fig2, go.Figure) and "Theorem 1" in readout and "ratio 1.700" in readout
    img1 = [t for t in fig1.data if t.name and t.name.startswith("image: 3")][0]
    img2 = [t for t in fig2.data if t.name and t.name.startswith("image: 3")][0]
    np.testing.assert_allclose(_rad_from_trace(img2, c), 1.7 * _rad_from_trace(img1, c), rtol=1e-6)
    # every point stays inside the unit disk as drawn
    for t in fig2.data:
        if t.mode == "markers":
            assert (np.hypot(np.asarray(t.x), np.asarray(t.y)) < 1).all()
    # text untouched when only images move
    t1 = [t for t in fig1.data if t.name == "text (fine)"][0]
    t2 = [t for t in fig2.data if t.name == "text (fine)"][0]
    np.testing.assert_allclose(t1.x, t2.x)


def test_disk_view_bad_input(proj):
    p, labels = proj
    with pytest.raises(ParameterError, match="c="):
        disk_view(p, labels, prompts("digits"), c=0.0)
    with pytest.raises(ParameterError, match="s="):
        disk_view(p, labels, prompts("digits"), s=-1.0)
    with pytest.raises(ParameterError, match="move"):
        disk_view(p, labels, prompts("digits"), move="labels")


def test_identity_view_readout_and_regions():
    fig, readout = identity_view("diagonal", "fp64")
    assert isinstance(fig, go.Figure) and "agrees within 1e-5" in readout
    z = np.asarray(fig.data[0].z)
    assert z.min() < -12 and z.max() > -1  # exact somewhere, broken by the guards elsewhere
    with pytest.raises(ParameterError, match="precision"):
        identity_view("diagonal", "fp16")


def test_static_figures():
    assert len(hierarchy_figure(1.0).data) > 20
    rows = [
        {"variant": v, "acc_fine": 0.5, "acc_mid": 0.7, "acc_coarse": 0.9, "cls_Rad_before": 50.0, "cls_Rad_after": 45.0, "patch_Rad_after": 44.0}
        for v in ("a", "b")
    ]
    assert len(accuracy_figure(rows).data) == 3
    assert len(radius_figure(rows).data) == 3
    fig = curves_figure({"Euclidean diag (q,v)": {"losses": [3.0, 2.0]}, "HRA diag (q,v)": {"losses": [3.0, 2.0]}})
    assert len(fig.data) == 2 and fig.layout.title.text


def test_explorer_view_and_controls():
    g = torch.Generator().manual_seed(1)
    text = {lv: torch.nn.functional.normalize(torch.randn(len(p), 24, generator=g), dim=-1) for lv, p in prompts("digits").items()}
    imgs = torch.nn.functional.normalize(torch.randn(30, 24, generator=g), dim=-1)
    data = explorer_data(imgs, text, np.arange(30) % 10, prompts("digits"))
    controls = explorer_controls(data)
    assert set(controls) == {"c", "s", "move"}
    fig, readout = explorer_view(data, **{k: w.value for k, w in controls.items()})
    assert isinstance(fig, go.Figure) and "ratio 1.000" in readout
    fig2, readout2 = explorer_view(data, c=1.0, s=2.0, move="all")
    assert "ratio 2.000" in readout2 and "applied to all" in fig2.layout.title.text
    assert set(identity_controls()) == {"structure", "precision", "spread"}
    with pytest.raises(ParameterError, match="move"):
        explorer_controls(data, move="labels")
