"""CP-Flow training (paper Alg. 1): maximum likelihood of the flow x = ∇G*(y), y ~ N(0, I).

The change of variables gives log p(x) = log N(∇G(x); 0, I) + log det ∇²G(x). Alg. 1 estimates the
gradient of the log-determinant by Hutchinson with a conjugate-gradient solve (CP-Flow's estimator):
with a Rademacher r and z = stopgrad(CG(∇²G, r)) ≈ [∇²G]⁻¹ r, the surrogate zᵀ ∇²G r has gradient
rᵀ [∇²G]⁻¹ ∂∇²G r, whose expectation is tr([∇²G]⁻¹ ∂∇²G) = ∂ log det ∇²G. ``logdet="exact"`` uses
``torch.logdet`` instead (small d only; the tests compare the two in 2-D).
"""

from __future__ import annotations

import torch

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.cpmla.mirror_map import ConvexPotential

LOGDETS = ("hutchinson", "exact")


def conjugate_gradient(hvp, b, iters=20, tol=1e-10):
    """Solve A z = b for each row (A symmetric positive definite, given by ``hvp(v) = A v``)."""
    z = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rs = (r * r).sum(1, keepdim=True)
    for _ in range(iters):
        Ap = hvp(p)
        alpha = rs / (p * Ap).sum(1, keepdim=True).clamp_min(1e-30)
        z = z + alpha * p
        r = r - alpha * Ap
        rs_new = (r * r).sum(1, keepdim=True)
        if float(rs_new.max().sqrt()) < tol:
            break
        p = r + (rs_new / rs.clamp_min(1e-30)) * p
        rs = rs_new
    return z


def logdet_surrogate(potential: ConvexPotential, x, n_probes=1, cg_iters=20, generator=None):
    """Per-sample Hutchinson surrogate whose parameter-gradient estimates ∂ log det ∇²G(x) (not its value)."""
    total = torch.zeros(len(x), dtype=x.dtype, device=x.device)
    with torch.no_grad():
        fixed = potential.hvp_operator(x)
    live = potential.hvp_operator(x)
    for _ in range(n_probes):
        r = torch.randint(0, 2, x.shape, generator=generator, device=x.device).to(x.dtype) * 2 - 1
        with torch.no_grad():
            z = conjugate_gradient(fixed, r, iters=cg_iters)  # stopgrad(CG(Hvp, r))
        total = total + (z * live(r)).sum(1)
    return total / n_probes


def exact_logdet(potential, x):
    return torch.logdet(potential.derivatives(x, hessian="full").hess)


def flow_loss(potential: ConvexPotential, x, logdet="hutchinson", n_probes=1, cg_iters=20, generator=None):
    """The loss whose gradient is that of the negative log-likelihood −mean log p(x) (Alg. 1)."""
    check_choice("logdet", logdet, LOGDETS)
    y = potential.grad(x)
    prior = -0.5 * (y * y).sum(1)
    ld = exact_logdet(potential, x) if logdet == "exact" else logdet_surrogate(potential, x, n_probes, cg_iters, generator)
    return -(prior + ld).mean()


def flow_sample(potential, n, generator=None, inverse="newton", tol=1e-6, max_iter=50, dtype=torch.float64, device="cpu"):
    """Samples of the flow alone: x = ∇G*(y), y ~ N(0, I)."""
    y = torch.randn(check_int("n", n, lo=1), potential.dim, generator=generator, dtype=dtype, device=device)
    return potential.inverse(y, x0=y, method=inverse, tol=tol, max_iter=max_iter).x


def fit_flow(potential, data, steps=300, batch=256, lr=5e-3, logdet="hutchinson", seed=0, weight_decay=0.0):
    """Fit a CP-Flow to ``data`` [N, d] by Adam on :func:`flow_loss` (Alg. 1); returns the loss history."""
    check_int("steps", steps, lo=1)
    check_int("batch", batch, lo=1)
    check_float("lr", lr, lo=0, lo_open=True)
    if data.shape[1] != potential.dim:
        raise ParameterError("data", tuple(data.shape), f"[N, {potential.dim}] (the flow's dimension)")
    gen = torch.Generator(device=data.device).manual_seed(seed)
    opt = torch.optim.Adam(potential.parameters(), lr=lr, weight_decay=weight_decay)
    history = []
    for _ in range(steps):
        idx = torch.randint(0, len(data), (min(batch, len(data)),), generator=gen, device=data.device)
        loss = flow_loss(potential, data[idx], logdet=logdet, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        history.append(float(loss.detach()))
    return history
