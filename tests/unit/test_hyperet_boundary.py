"""Poincaré-ball operations at the edges: dist near the boundary and at x = y (against an mpmath
reference), and the ball-projection guard at c ≠ 1 (where √c ≠ c, so a c-for-√c slip shows)."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

from companion.hyperet import poincare as P

mpmath.mp.dps = 60


def _mp_dist(x: torch.Tensor, y: torch.Tensor, c: float) -> float:
    """d_c(x, y) of the float64 inputs as given, in 60-digit arithmetic (the Möbius/artanh form)."""
    c = mpmath.mpf(c)
    xs = [mpmath.mpf(float(v)) for v in x]
    ys = [mpmath.mpf(float(v)) for v in y]
    mx = [-v for v in xs]
    x2, y2 = sum(v * v for v in mx), sum(v * v for v in ys)
    xy = sum(a * b for a, b in zip(mx, ys))
    num = [(1 + 2 * c * xy + c * y2) * a + (1 - c * x2) * b for a, b in zip(mx, ys)]
    den = 1 + 2 * c * xy + c**2 * x2 * y2
    n = mpmath.sqrt(sum((v / den) ** 2 for v in num))
    return float(2 / mpmath.sqrt(c) * mpmath.atanh(mpmath.sqrt(c) * n))


def _near_boundary(n, d, c, gap, seed=0):
    """Points with 1 − √c‖x‖ = gap (to float64 rounding)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True) * (1 - gap) / math.sqrt(c)


@pytest.mark.parametrize("gap", [1e-3, 1e-6, 1e-8])
def test_dist_near_the_boundary_is_finite_and_accurate(gap):
    c = 0.1
    x = _near_boundary(6, 5, c, gap, seed=1)
    y = torch.cat([_near_boundary(3, 5, c, gap, seed=2), 0.3 * _near_boundary(3, 5, c, 0.5, seed=3)])
    d = P.dist(x, y, c)
    assert torch.isfinite(d).all()
    ref = torch.tensor([_mp_dist(a, b, c) for a, b in zip(x, y)], dtype=torch.float64)
    torch.testing.assert_close(d, ref, rtol=1e-9, atol=0)
    # the Möbius/artanh evaluation in float64 is what fails here (inf or NaN, or digits lost)
    sqrt_c = math.sqrt(c)
    moebius = 2 / sqrt_c * torch.atanh(sqrt_c * P._mobius_add(-x, y, c, False).norm(dim=-1))
    if gap <= 1e-8:
        assert not torch.isfinite(moebius).all() or ((moebius - ref).abs() / ref).max() > 1e-9


@pytest.mark.parametrize("c", [0.1, 1.0, 4.0])
@pytest.mark.parametrize("gap", [0.5, 1e-6])
def test_dist_to_itself_is_zero_and_tiny_distances_keep_relative_precision(c, gap):
    x = _near_boundary(8, 4, c, gap, seed=4)
    d0 = P.dist(x, x, c)
    assert torch.equal(d0, torch.zeros_like(d0))
    h = 1e-9 * _near_boundary(8, 4, 1.0, 0.0, seed=5) / math.sqrt(c)
    y = x + h
    ref = torch.tensor([_mp_dist(a, b, c) for a, b in zip(x, y)], dtype=torch.float64)
    torch.testing.assert_close(P.dist(x, y, c), ref, rtol=1e-7, atol=0)  # ‖x − y‖ itself carries ~1e-8 relative rounding


def test_dist_is_symmetric_and_matches_the_radius_from_the_origin():
    c = 0.1
    x = _near_boundary(10, 3, c, 1e-6, seed=6)
    torch.testing.assert_close(P.dist(x, x.flip(0), c), P.dist(x.flip(0), x, c), rtol=1e-12, atol=0)
    torch.testing.assert_close(P.dist(torch.zeros_like(x), x, c), P.radius(x, c), rtol=1e-9, atol=0)


def test_dist_float32_inputs_stay_finite():
    c = 0.1
    x = _near_boundary(4, 3, c, 1e-4).float()
    d = P.dist(x, x.flip(0), c)
    assert d.dtype == torch.float32 and torch.isfinite(d).all()
    assert torch.equal(P.dist(x, x, c), torch.zeros(4))


@pytest.mark.parametrize("c", [0.1, 0.01, 4.0])
def test_projection_guard_uses_sqrt_c(c):
    """Rows beyond (1 − eps)/√c land exactly on that sphere, rows inside are untouched, at c ≠ 1."""
    limit = (1 - P.BALL_EPS) / math.sqrt(c)
    g = torch.Generator().manual_seed(0)
    u = torch.randn(6, 5, generator=g, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)
    scales = torch.tensor([0.5, 0.99, 1.0005, 1.5, 3.0, 10.0], dtype=torch.float64)[:, None] * limit
    x = u * scales
    out = P.project(x, c)
    norms = out.norm(dim=-1)
    inside = scales[:, 0] <= limit
    torch.testing.assert_close(out[inside], x[inside], rtol=0, atol=0)
    torch.testing.assert_close(norms[~inside], torch.full_like(norms[~inside], limit), rtol=1e-12, atol=0)
    torch.testing.assert_close(out / norms[:, None], u, rtol=1e-12, atol=1e-12)  # radial


@pytest.mark.parametrize("c", [0.1, 0.01])
def test_matvec_guard_keeps_results_inside_at_c_not_one(c):
    limit = (1 - P.BALL_EPS) / math.sqrt(c)
    x = _near_boundary(20, 4, c, 0.01, seed=7)
    y = P.mobius_matvec(torch.eye(4, dtype=torch.float64) * 50, x, c)
    norms = y.norm(dim=-1)
    assert (norms <= limit * (1 + 1e-12)).all() and (norms >= limit * (1 - 1e-9)).all()
    assert torch.isfinite(P.logmap0(y, c)).all()
