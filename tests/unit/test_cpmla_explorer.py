"""companion.cpmla.explorer: the pure view and the controls."""

import plotly.graph_objects as go
import pytest
import torch

from companion.cpmla.explorer import EXPLORER_SAMPLERS, ExplorerData, explorer_controls, explorer_view
from companion.cpmla.mirror_map import ConvexPotential
from companion.cpmla.targets import eight_gaussians, ill_conditioned_gaussian


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    targets = {"gaussian": ill_conditioned_gaussian(), "8gaussians": eight_gaussians()}
    return ExplorerData(targets=targets, learned={k: ConvexPotential(2, hidden=8, seed=0) for k in targets},
                        reference={k: t.sample(200, g) for k, t in targets.items()})


@pytest.mark.parametrize("sampler", EXPLORER_SAMPLERS)
def test_every_sampler_renders_three_panels(data, sampler):
    fig, readout = explorer_view(data, target="8gaussians", sampler=sampler, eta=0.005, T=5, chains=20)
    assert isinstance(fig, go.Figure) and "energy distance" in readout
    assert {"x", "x2", "x3"} <= {tr.xaxis for tr in fig.data}


def test_divergence_is_reported_not_raised(data):
    fig, readout = explorer_view(data, target="gaussian", sampler="ULA", eta=0.5, T=100, chains=20)
    assert readout.startswith("diverged")


def test_view_is_pure_and_alpha_does_not_leak(data):
    a = explorer_view(data, sampler="mirror: learned ICNN", T=3, chains=20, alpha=0.5)[1]
    assert data.learned["gaussian"].alpha == 1e-4
    assert a == explorer_view(data, sampler="mirror: learned ICNN", T=3, chains=20, alpha=0.5)[1]


def test_controls_match_the_view_arguments(data):
    controls = explorer_controls(data)
    assert set(controls) == {"target", "sampler", "hessian", "eta", "T", "chains", "alpha"}
    explorer_view(data, **{k: c.value for k, c in controls.items()} | {"T": 2, "chains": 20})
