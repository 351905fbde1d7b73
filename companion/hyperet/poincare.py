"""Poincaré-ball operations with curvature ``-c`` (HyperET, Peng et al., NeurIPS 2025, Sec. 3.1).

The ball is ``D_c = {x : c‖x‖² < 1}``. Every operation acts on the last dimension of a tensor (rows are
points), as in the official code, and follows the paper's equations::

    exp0(u)   = tanh(√c‖u‖) · u / (√c‖u‖)                                   (Eq. 2)
    log0(y)   = artanh(√c‖y‖) · y / (√c‖y‖)                                 (Eq. 3)
    x ⊕_c y   = ((1 + 2c⟨x,y⟩ + c‖y‖²) x + (1 − c‖x‖²) y) / (1 + 2c⟨x,y⟩ + c²‖x‖²‖y‖²)
    s ⊗_c x   = (1/√c) tanh(s · artanh(√c‖x‖)) · x/‖x‖                      (Eq. 6)
    M ⊗_c x   = (1/√c) tanh((‖Mx‖/‖x‖) · artanh(√c‖x‖)) · Mx/‖Mx‖           (Eq. 9)
    d_c(x, y) = (2/√c) artanh(√c ‖(−x) ⊕_c y‖) = (1/√c) arcosh(1 + 2c‖x−y‖²/((1−c‖x‖²)(1−c‖y‖²))),
    Rad x = d_c(x, 0) = (2/√c) artanh(√c‖x‖)

Theorem 1: ``Rad(s ⊗_c x) = s · Rad x`` (s > 0). Theorem 2: ``Rad(M ⊗_c x) = (‖Mx‖/‖x‖) · Rad x``.

Numerical guards. With ``guards=True`` (the default) the functions reproduce the guards of the official
repository (``Fine-tuning/HyperET/adapter_*.py``): norms clamped below at 1e-5, ``artanh`` arguments
clamped to ±(1 − 1e-5), ``tanh`` arguments to ±15, the Möbius matvec result projected back inside
``(1 − 1e-3)/√c``, and 1e-5 added to the Möbius-addition denominator. With ``guards=False`` the exact
formulas are evaluated (only 0/0 at the origin is resolved, to the limit value); that is what the
theorem tests and the "where do the guards bite" heat map compare against. Deviation: where the
official code would divide 0 by 0 (a row whose image ``Mx`` is exactly zero) and return a NaN gradient,
we return 0 with a finite gradient.

Public functions validate their inputs (``c > 0``, points strictly inside the ball where a point is
expected) and raise :class:`companion.core.ParameterError`; the ``_``-prefixed twins skip the checks
for use inside training loops.
"""

from __future__ import annotations

import math

import torch

from companion.core.validation import ParameterError, check_bool, check_float

MIN_NORM = 1e-5  # clamp_min on every norm in the official code
ARTANH_EPS = 1e-5  # artanh argument clamped to ±(1 − ARTANH_EPS)
TANH_CLAMP = 15.0  # tanh argument clamped to ±15
BALL_EPS = 1e-3  # Möbius matvec results projected inside (1 − BALL_EPS)/√c
ADD_EPS = 1e-5  # added to the Möbius-addition denominator

__all__ = [
    "ARTANH_EPS",
    "BALL_EPS",
    "MIN_NORM",
    "TANH_CLAMP",
    "artanh",
    "check_curvature",
    "check_in_ball",
    "dist",
    "dist0",
    "expmap0",
    "logmap0",
    "mobius_add",
    "mobius_matvec",
    "mobius_scalar_mul",
    "project",
    "radius",
]


# --------------------------------------------------------------------------------------------- checks


def check_curvature(c) -> float:
    """``c`` as a float, or :class:`ParameterError` unless it is a finite number > 0."""
    if isinstance(c, torch.Tensor):
        if c.numel() != 1:
            raise ParameterError("c", tuple(c.shape), "a single positive number (the ball has curvature -c)")
        c = float(c.item())
    return check_float("c", c, lo=0.0, lo_open=True)


def check_in_ball(x: torch.Tensor, c: float, name: str = "x") -> torch.Tensor:
    """Raise :class:`ParameterError` unless every row of ``x`` lies strictly inside ``D_c``."""
    if not isinstance(x, torch.Tensor):
        raise ParameterError(name, type(x).__name__, "a torch.Tensor of points (rows on the last dimension)")
    if not torch.is_floating_point(x):
        raise ParameterError(name, str(x.dtype), "a floating-point tensor")
    scaled = math.sqrt(c) * x.detach().norm(dim=-1)
    if not torch.isfinite(scaled).all():
        raise ParameterError(name, "non-finite values", "finite coordinates")
    if scaled.numel() and bool((scaled >= 1).any()):
        worst = float(scaled.max())
        raise ParameterError(
            name,
            f"a point with sqrt(c)*||x|| = {worst:.6g}",
            f"points strictly inside the Poincaré ball of curvature -{c:g}, i.e. ||x|| < 1/sqrt(c) = {1 / math.sqrt(c):.6g}",
        )
    return x


def _check_tensor(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ParameterError(name, type(x).__name__, "a torch.Tensor")
    if not torch.is_floating_point(x):
        raise ParameterError(name, str(x.dtype), "a floating-point tensor")
    return x


# ----------------------------------------------------------------------------------- scalar functions


class _Artanh(torch.autograd.Function):
    """artanh with the official clamp at ±(1 − 1e-5) and the derivative 1/(1 − x²) at the clamped x."""

    @staticmethod
    def forward(ctx, x):
        x = x.clamp(-1 + ARTANH_EPS, 1 - ARTANH_EPS)
        ctx.save_for_backward(x)
        return 0.5 * (torch.log1p(x) - torch.log1p(-x))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output / (1 - x**2)


def artanh(x: torch.Tensor, guards: bool = True) -> torch.Tensor:
    """Inverse hyperbolic tangent; clamped like the official code when ``guards``."""
    return _Artanh.apply(x) if guards else torch.atanh(x)


def _tanh(x: torch.Tensor, guards: bool) -> torch.Tensor:
    return x.clamp(-TANH_CLAMP, TANH_CLAMP).tanh() if guards else x.tanh()


def _norm(x: torch.Tensor, guards: bool) -> torch.Tensor:
    n = x.norm(dim=-1, p=2, keepdim=True)
    return n.clamp_min(MIN_NORM) if guards else n


def _safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den with den == 0 replaced by 1 (callers zero those rows themselves)."""
    return num / torch.where(den == 0, torch.ones_like(den), den)


# ------------------------------------------------------------------------------------ maps at origin


def _expmap0(u: torch.Tensor, c: float, guards: bool = True) -> torch.Tensor:
    sqrt_c = c**0.5
    un = _norm(u, guards)
    if guards:
        return _tanh(sqrt_c * un, True) * u / (sqrt_c * un)
    # exact: tanh(√c‖u‖)/(√c‖u‖) → 1 at the origin
    scale = torch.where(un == 0, torch.ones_like(un), _safe_div(torch.tanh(sqrt_c * un), sqrt_c * un))
    return scale * u


def _logmap0(y: torch.Tensor, c: float, guards: bool = True) -> torch.Tensor:
    sqrt_c = c**0.5
    yn = _norm(y, guards)
    if guards:
        return y / yn / sqrt_c * artanh(sqrt_c * yn, True)
    scale = torch.where(yn == 0, torch.ones_like(yn), _safe_div(torch.atanh(sqrt_c * yn), sqrt_c * yn))
    return scale * y


def project(x: torch.Tensor, c: float, eps: float = BALL_EPS) -> torch.Tensor:
    """Pull rows with ‖x‖ > (1 − eps)/√c back onto that sphere (the official ``_project``)."""
    c = check_curvature(c)
    return _project(x, c, eps)


def _project(x: torch.Tensor, c: float, eps: float = BALL_EPS) -> torch.Tensor:
    norm = x.norm(dim=-1, keepdim=True, p=2).clamp_min(MIN_NORM)
    maxnorm = (1 - eps) / c**0.5
    return torch.where(norm > maxnorm, x / norm * maxnorm, x)


def expmap0(u: torch.Tensor, c: float, *, guards: bool = True) -> torch.Tensor:
    """Eq. 2: map tangent vectors at the origin (rows of ``u``) into the ball ``D_c``."""
    c = check_curvature(c)
    check_bool("guards", guards)
    return _expmap0(_check_tensor("u", u), c, guards)


def logmap0(y: torch.Tensor, c: float, *, guards: bool = True) -> torch.Tensor:
    """Eq. 3: map points of ``D_c`` (rows of ``y``) to the tangent space at the origin."""
    c = check_curvature(c)
    check_bool("guards", guards)
    check_in_ball(y, c, "y")
    return _logmap0(y, c, guards)


# ------------------------------------------------------------------------------------- Möbius algebra


def _mobius_add(x: torch.Tensor, y: torch.Tensor, c: float, guards: bool = True) -> torch.Tensor:
    x2 = x.pow(2).sum(dim=-1, keepdim=True)
    y2 = y.pow(2).sum(dim=-1, keepdim=True)
    xy = (x * y).sum(dim=-1, keepdim=True)
    num = (1 + 2 * c * xy + c * y2) * x + (1 - c * x2) * y
    denom = 1 + 2 * c * xy + c**2 * x2 * y2
    return num / (denom + ADD_EPS) if guards else num / denom


def mobius_add(x: torch.Tensor, y: torch.Tensor, c: float, *, guards: bool = True) -> torch.Tensor:
    """Möbius addition ``x ⊕_c y`` of points of ``D_c`` (row-wise, broadcasting)."""
    c = check_curvature(c)
    check_bool("guards", guards)
    check_in_ball(x, c, "x")
    check_in_ball(y, c, "y")
    return _mobius_add(x, y, c, guards)


def _mobius_scalar_mul(s, x: torch.Tensor, c: float, guards: bool = True) -> torch.Tensor:
    sqrt_c = c**0.5
    xn = _norm(x, guards)
    out = _tanh(s * artanh(sqrt_c * xn, guards), guards) * x / (xn * sqrt_c)
    if not guards:
        out = torch.where(xn == 0, torch.zeros_like(out), out)
    return out


def mobius_scalar_mul(s, x: torch.Tensor, c: float, *, guards: bool = True) -> torch.Tensor:
    """Eq. 6: ``s ⊗_c x``, which moves ``x`` along its ray so that its radius is multiplied by ``s``."""
    c = check_curvature(c)
    check_bool("guards", guards)
    check_in_ball(x, c, "x")
    if not isinstance(s, torch.Tensor):
        s = check_float("s", s)
    return _mobius_scalar_mul(s, x, c, guards)


def _mobius_matvec(m: torch.Tensor, x: torch.Tensor, c: float, guards: bool = True) -> torch.Tensor:
    """Official ``_mobius_matvec``: rows of x are points, the result row is M ⊗_c x_row (mx = x Mᵀ)."""
    sqrt_c = c**0.5
    xn = _norm(x, guards)
    mx = x @ m.transpose(-1, -2)
    mxn = mx.norm(dim=-1, keepdim=True, p=2)
    zero = mxn == 0
    res = _tanh(_safe_div(mxn, xn) * artanh(sqrt_c * xn, guards), guards) * _safe_div(mx, mxn * sqrt_c)
    res = torch.where(zero, torch.zeros_like(res), res)
    return _project(res, c) if guards else res


def mobius_matvec(m: torch.Tensor, x: torch.Tensor, c: float, *, guards: bool = True) -> torch.Tensor:
    """Eq. 9: ``M ⊗_c x`` for every row ``x`` of ``x`` (``m`` is ``[n_out, n_in]``, ``x`` is ``[..., n_in]``)."""
    c = check_curvature(c)
    check_bool("guards", guards)
    _check_tensor("m", m)
    check_in_ball(x, c, "x")
    if m.dim() < 2 or m.shape[-1] != x.shape[-1]:
        raise ParameterError("m", tuple(m.shape), f"a matrix [n_out, {x.shape[-1]}] matching x's last dimension")
    return _mobius_matvec(m, x, c, guards)


# ---------------------------------------------------------------------------------- distance, radius


def _radius(x: torch.Tensor, c: float, guards: bool = True) -> torch.Tensor:
    sqrt_c = c**0.5
    return 2 / sqrt_c * artanh(sqrt_c * x.norm(dim=-1), guards)


def radius(x: torch.Tensor, c: float, *, guards: bool = False) -> torch.Tensor:
    """Hyperbolic radius ``Rad x = d_c(x, 0) = (2/√c) artanh(√c‖x‖)`` of each row (shape ``x.shape[:-1]``).

    ``Rad(exp0(h)) = 2‖h‖`` for every c: the hyperbolic radius of a mapped token is twice its Euclidean
    norm. (The official visualisation plots the in-ball norm ‖exp0(h)‖ instead, which saturates at 1/√c.)
    """
    c = check_curvature(c)
    check_bool("guards", guards)
    check_in_ball(x, c, "x")
    return _radius(x, c, guards)


def dist0(x: torch.Tensor, c: float, *, guards: bool = False) -> torch.Tensor:
    """Distance to the origin; the same as :func:`radius` (geoopt's name)."""
    return radius(x, c, guards=guards)


def _dist_exact(x: torch.Tensor, y: torch.Tensor, c: float) -> torch.Tensor:
    """``d_c(x, y)`` in the arcosh form, finite and accurate near the boundary and at ``x = y``.

    ``d_c(x, y) = (1/√c) arcosh(1 + z)``, ``z = 2c‖x − y‖² / ((1 − c‖x‖²)(1 − c‖y‖²))``, the same function
    as ``(2/√c) artanh(√c‖(−x) ⊕_c y‖)``. The Möbius form loses everything when ``√c‖(−x) ⊕_c y‖`` rounds
    to 1 (a point within ~1e-8 of the boundary at c = 0.1 gives inf, and its 0/0 denominator NaN); here
    ``1 − c‖x‖²`` is formed as ``(1 − √c‖x‖)(1 + √c‖x‖)`` (no cancellation beyond the input's own),
    ``‖x − y‖`` directly, and ``arcosh(1 + z) = log1p(z + √(z(z + 2)))`` keeps small distances to full
    relative precision (``dist(x, x) = 0`` exactly). Computed in float64, returned in the inputs' dtype.
    """
    dtype = torch.promote_types(x.dtype, y.dtype)
    x64, y64 = x.double(), y.double()
    sqrt_c = math.sqrt(c)
    sx, sy = sqrt_c * x64.norm(dim=-1), sqrt_c * y64.norm(dim=-1)
    gap = (1 - sx) * (1 + sx) * (1 - sy) * (1 + sy)
    z = 2 * c * (x64 - y64).pow(2).sum(dim=-1) / gap
    return (torch.log1p(z + torch.sqrt(z * (z + 2))) / sqrt_c).to(dtype)


def dist(x: torch.Tensor, y: torch.Tensor, c: float, *, guards: bool = False) -> torch.Tensor:
    """Geodesic distance ``d_c(x, y) = (2/√c) artanh(√c ‖(−x) ⊕_c y‖)`` row-wise.

    ``guards=False`` (the default) evaluates the equivalent arcosh form (:func:`_dist_exact`): finite
    for every pair of points inside the ball and accurate to ~1e-10 relative even within 1e-6 of the
    boundary (tested against mpmath). ``guards=True`` is the official chain: the Möbius form with the
    clamped artanh and the 1e-5 denominator guard.
    """
    c = check_curvature(c)
    check_bool("guards", guards)
    check_in_ball(x, c, "x")
    check_in_ball(y, c, "y")
    if not guards:
        return _dist_exact(x, y, c)
    sqrt_c = c**0.5
    return 2 / sqrt_c * artanh(sqrt_c * _mobius_add(-x, y, c, guards).norm(dim=-1), guards)
