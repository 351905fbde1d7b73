"""Poincaré-ball operations of companion.hyperet: geoopt agreement, Theorems 1 and 2, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.core import ParameterError
from companion.hyperet import poincare as P

geoopt = pytest.importorskip("geoopt")

CURVATURES = [0.01, 0.3, 1.0, 4.0]


def _points(n, d, c, max_frac=0.9, seed=0):
    """Random points inside D_c with √c‖x‖ uniform in (0.05, max_frac)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    frac = 0.05 + (max_frac - 0.05) * torch.rand(n, 1, generator=g, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True) * frac / math.sqrt(c)


@pytest.mark.parametrize("c", CURVATURES)
@pytest.mark.parametrize("guards", [True, False])
def test_agrees_with_geoopt(c, guards):
    ball = geoopt.PoincareBall(c=c)
    x, y = _points(50, 7, c, seed=1), _points(50, 7, c, seed=2)
    u = torch.randn(50, 7, dtype=torch.float64) * 2
    m = torch.randn(5, 7, dtype=torch.float64) * 0.15  # keeps M ⊗ x away from the boundary (where the guards differ)
    # geoopt keeps c in float32 and blends Taylor expansions near k = 0, so it agrees to ~1e-6 relative;
    # the official guards (1e-5 in the Möbius-addition denominator) move results by ~1e-5.
    tol = dict(rtol=2e-5, atol=1e-6) if not guards else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(P.expmap0(u, c, guards=guards), ball.expmap0(u), **tol)
    torch.testing.assert_close(P.logmap0(x, c, guards=guards), ball.logmap0(x), **tol)
    torch.testing.assert_close(P.mobius_add(x, y, c, guards=guards), ball.mobius_add(x, y), **tol)
    torch.testing.assert_close(P.mobius_scalar_mul(0.7, x, c, guards=guards), ball.mobius_scalar_mul(torch.tensor(0.7, dtype=torch.float64), x), **tol)
    torch.testing.assert_close(P.mobius_matvec(m, x, c, guards=guards), ball.mobius_matvec(m, x), **tol)
    torch.testing.assert_close(P.radius(x, c), ball.dist0(x), rtol=2e-5, atol=1e-6)
    torch.testing.assert_close(P.dist(x, y, c), ball.dist(x, y), rtol=2e-5, atol=1e-6)


def test_maps_are_inverse_and_radius_is_twice_the_norm():
    c = 0.01
    u = torch.randn(40, 16, dtype=torch.float64)
    y = P.expmap0(u, c, guards=False)
    torch.testing.assert_close(P.logmap0(y, c, guards=False), u, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(P.radius(y, c), 2 * u.norm(dim=-1), rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    c=st.floats(1e-3, 10.0),
    s=st.floats(0.05, 3.0),
    frac=st.floats(0.01, 0.95),
    seed=st.integers(0, 2**16),
)
def test_theorem_1_radius_scales_by_s(c, s, frac, seed):
    x = _points(1, 5, c, seed=seed)
    x = x / (math.sqrt(c) * x.norm()) * frac
    y = P.mobius_scalar_mul(s, x, c, guards=False)
    torch.testing.assert_close(P.radius(y, c), s * P.radius(x, c), rtol=1e-9, atol=1e-12)
    # direction preserved
    torch.testing.assert_close(y / y.norm(), x / x.norm(), rtol=1e-10, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(c=st.floats(1e-3, 10.0), frac=st.floats(0.01, 0.9), seed=st.integers(0, 2**16))
def test_theorem_2_radius_scales_by_norm_ratio(c, frac, seed):
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(6, 6, generator=g, dtype=torch.float64) * 0.4
    x = torch.randn(1, 6, generator=g, dtype=torch.float64)
    x = x / (math.sqrt(c) * x.norm()) * frac
    ratio = (x @ m.T).norm() / x.norm()
    y = P.mobius_matvec(m, x, c, guards=False)
    torch.testing.assert_close(P.radius(y, c), ratio * P.radius(x, c), rtol=1e-8, atol=1e-12)


def test_theorems_hold_with_guards_away_from_the_boundary():
    c = 0.01
    x = _points(100, 32, c, max_frac=0.6, seed=3)
    torch.testing.assert_close(P.radius(P.mobius_scalar_mul(1.3, x, c), c), 1.3 * P.radius(x, c), rtol=1e-9, atol=1e-12)
    m = torch.eye(32, dtype=torch.float64) * 0.8
    torch.testing.assert_close(P.radius(P.mobius_matvec(m, x, c), c), 0.8 * P.radius(x, c), rtol=1e-9, atol=1e-12)


def test_guards_keep_results_inside_the_ball():
    c = 1.0
    x = _points(20, 4, c, max_frac=0.99)
    y = P.mobius_matvec(torch.eye(4, dtype=torch.float64) * 50, x, c)
    assert (y.norm(dim=-1) <= (1 - P.BALL_EPS) / math.sqrt(c) + 1e-12).all()
    assert torch.isfinite(P.logmap0(y, c)).all()


def test_zero_row_gives_zero_with_finite_gradient():
    m = torch.zeros(3, 3, dtype=torch.float64, requires_grad=True)
    x = torch.tensor([[0.1, 0.2, 0.0]], dtype=torch.float64)
    y = P.mobius_matvec(m, x, 1.0)
    assert torch.equal(y, torch.zeros_like(y))
    y.sum().backward()
    assert torch.isfinite(m.grad).all()


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "0.01", True])
def test_bad_curvature(bad):
    with pytest.raises(ParameterError, match="c="):
        P.expmap0(torch.zeros(2, 3), bad)


def test_points_outside_the_ball_are_rejected():
    c = 1.0
    outside = torch.tensor([[0.6, 0.9]])  # ‖x‖ ≈ 1.08 > 1
    for fn in (lambda: P.logmap0(outside, c), lambda: P.radius(outside, c), lambda: P.mobius_scalar_mul(2.0, outside, c), lambda: P.mobius_matvec(torch.eye(2), outside, c)):
        with pytest.raises(ParameterError, match="inside the Poincaré ball"):
            fn()
    with pytest.raises(ParameterError, match="inside"):
        P.radius(torch.tensor([[1.0, 0.0]]), c)  # on the boundary
    with pytest.raises(ParameterError, match="floating-point"):
        P.radius(torch.tensor([[0, 0]]), c)


def test_matvec_shape_error():
    with pytest.raises(ParameterError, match="matrix"):
        P.mobius_matvec(torch.eye(3), torch.zeros(2, 4), 1.0)
