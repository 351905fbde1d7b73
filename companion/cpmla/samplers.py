"""Langevin samplers: ULA and MALA (baselines) and the mirror Langevin discretisation of Alg. 2.

A *target* is any object with ``dim``, ``log_prob(x) -> [B]`` (up to a constant) and
``grad_log_prob(x) -> [B, d]``: the fixed targets of :mod:`~companion.cpmla.targets` or an EBM f_θ.

**ULA** (the paper's baseline form): x_{k+1} = x_k + (δ/2)∇f(x_k) + √(τδ) ε_k.
**MALA**: the same proposal, accepted with the Metropolis-Hastings ratio.
**Mirror Langevin** (Alg. 2, the "alternative forward" scheme of Jiang 2021 / Ahn & Chewi 2021; the
gradient is taken at the primal point, as the NeurIPS version fixes the ICLR one)::

    y_0 ~ N(0, I);  for k < T:  x_k = ∇G*(y_k);  y_{k+1} = y_k + η∇f(x_k) + √(2ητ) ξ_k,  ξ_k ~ N(0, ∇²G(x_k))

and x̂ = ∇G*(y_T). With G = ½‖x‖² it is ULA with δ = 2η for the same noise. The temperature τ (default 1, the
paper's Alg. 2) samples exp(f/τ): τ < 1 is the reduced noise of short-run EBM samplers (Nijkamp et al. 2019). The Hessian of the noise is
``"full"`` (symmetric square root), ``"diagonal"`` (the paper's practice) or ``"hutchinson"``
(estimated diagonal). Chains are re-initialised at every call (the paper keeps no persistent chains).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.cpmla.mirror_map import HESSIANS, INVERSE_METHODS, MirrorMap


class NonFiniteChain(FloatingPointError):
    """The target's gradient became NaN or infinite during a chain (step too large for the target?)."""

    def __init__(self, sampler, step, eta):
        self.sampler, self.step, self.eta = sampler, step, eta
        super().__init__(f"{sampler}: the energy gradient is not finite at step {step} (step size {eta:g}); "
                         "the chain diverged - lower the step size")


@dataclass
class ChainResult:
    """Final samples ``x`` [n, d]; ``xs`` / ``ys``: the recorded primal / dual states [T+1, n, d] (when asked);
    ``snapshots``: {step: x} at the requested steps; ``acceptance`` (MALA); ``max_residual`` (mirror: the largest
    inverse residual over the chain) and ``residuals`` (mirror: the final x̂ = ∇G*(y_T)'s per-sample residuals)."""

    x: torch.Tensor
    xs: torch.Tensor | None = None
    ys: torch.Tensor | None = None
    snapshots: dict = field(default_factory=dict)
    acceptance: float | None = None
    max_residual: float = 0.0
    residuals: torch.Tensor | None = None


def _check_common(target, x0, T, step, name):
    check_int("T", T, lo=1)
    check_float(name, step, lo=0, lo_open=True)
    if x0.ndim != 2 or x0.shape[1] != target.dim:
        raise ParameterError("x0", tuple(x0.shape), f"a [chains, {target.dim}] tensor (the target's dimension)")


def _grad(target, x, sampler, k, step):
    g = target.grad_log_prob(x)
    if not bool(torch.isfinite(g).all()):
        raise NonFiniteChain(sampler, k, step)
    return g


def ula(target, x0, T, delta, generator=None, record=False, snapshots=(), temperature=1.0):
    """T steps of the unadjusted Langevin algorithm with step δ and temperature τ from ``x0``."""
    _check_common(target, x0, T, delta, "delta")
    noise_scale = math.sqrt(check_float("temperature", temperature, lo=0) * delta)
    x, xs, snaps = x0.detach().clone(), [x0.detach().clone()] if record else None, {}
    for k in range(T):
        g = _grad(target, x, "ULA", k, delta)
        eps = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        x = x + 0.5 * delta * g + noise_scale * eps
        if record:
            xs.append(x.clone())
        if k + 1 in snapshots:
            snaps[k + 1] = x.clone()
    return ChainResult(x, torch.stack(xs) if record else None, None, snaps)


def mala(target, x0, T, delta, generator=None, record=False, snapshots=()):
    """T steps of the Metropolis-adjusted Langevin algorithm with step δ from ``x0``."""
    _check_common(target, x0, T, delta, "delta")
    x = x0.detach().clone()
    xs, snaps, accepted = [x.clone()] if record else None, {}, 0.0
    lp, g = target.log_prob(x), _grad(target, x, "MALA", 0, delta)
    for k in range(T):
        eps = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        prop = x + 0.5 * delta * g + math.sqrt(delta) * eps
        lp_p, g_p = target.log_prob(prop), _grad(target, prop, "MALA", k, delta)
        fwd = -((prop - x - 0.5 * delta * g) ** 2).sum(1) / (2 * delta)
        bwd = -((x - prop - 0.5 * delta * g_p) ** 2).sum(1) / (2 * delta)
        log_ratio = lp_p - lp + bwd - fwd
        u = torch.rand(len(x), generator=generator, dtype=x.dtype, device=x.device)
        acc = torch.log(u) < torch.nan_to_num(log_ratio, nan=-math.inf)
        x = torch.where(acc.unsqueeze(1), prop, x)
        lp, g = torch.where(acc, lp_p, lp), torch.where(acc.unsqueeze(1), g_p, g)
        accepted += float(acc.double().mean())
        if record:
            xs.append(x.clone())
        if k + 1 in snapshots:
            snaps[k + 1] = x.clone()
    return ChainResult(x, torch.stack(xs) if record else None, None, snaps, acceptance=accepted / T)


def mirror_langevin(target, potential: MirrorMap, y0, T, eta, hessian="full", inverse="newton",
                    inverse_tol=1e-6, inverse_max_iter=50, n_probes=8, generator=None, record=False,
                    snapshots=(), noise=None, inverse_raise=True, temperature=1.0):
    """Alg. 2's sampler: T mirror Langevin steps of size η from dual points ``y0`` (y_0 ~ N(0, I) in the paper).

    ``inverse_raise=False`` records the residual instead of raising :class:`InverseNotConverged` (for the
    ablation over iteration caps). ``noise`` (optional, [T, n, d]) fixes the standard-normal draws ε_k (ξ_k = [∇²G(x_k)]^{1/2} ε_k), which is
    how the reduction to ULA is tested. Returns the primal samples x̂ = ∇G*(y_T) and the largest inverse residual.
    """
    check_choice("hessian", hessian, HESSIANS)
    check_choice("inverse", inverse, INVERSE_METHODS)
    if potential.dim != target.dim:
        raise ParameterError("potential", f"dimension {potential.dim}",
                             f"the target's dimension {target.dim} (the EBM and the flow must live in the same space)")
    _check_common(target, y0, T, eta, "eta")
    noise_scale = math.sqrt(2 * eta * check_float("temperature", temperature, lo=0))
    if hessian == "full":
        potential.check_full()
    kw = dict(method=inverse, tol=inverse_tol, max_iter=inverse_max_iter, raise_on_fail=inverse_raise)
    y = y0.detach().clone()
    with torch.no_grad():
        inv = potential.inverse(y, x0=y, **kw)
    x, max_res = inv.x, inv.residual
    xs = ys = None
    snaps = {}
    if record:
        xs, ys = [x.clone()], [y.clone()]
    for k in range(T):
        g = _grad(target, x, "mirror Langevin", k, eta)
        eps = noise[k] if noise is not None else torch.randn(y.shape, generator=generator, dtype=y.dtype, device=y.device)
        with torch.no_grad():
            cached = inv.derivs.hess if (hessian == "full" and inv.derivs is not None and inv.derivs.hess is not None
                                         and inv.derivs.hess.ndim == 3) else None
            xi = potential.hessian_sqrt_noise(x, eps, hessian=hessian, n_probes=n_probes, generator=generator, hess=cached)
            y = y + eta * g + noise_scale * xi
            inv = potential.inverse(y, x0=x, **kw)
        x, max_res = inv.x, max(max_res, inv.residual)
        if record:
            xs.append(x.clone())
            ys.append(y.clone())
        if k + 1 in snapshots:
            snaps[k + 1] = x.clone()
    return ChainResult(x, torch.stack(xs) if record else None, torch.stack(ys) if record else None, snaps,
                       max_residual=max_res, residuals=inv.residuals)
