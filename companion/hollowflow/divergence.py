"""The divergence ∇·b of a velocity b(x, t) three ways (paper §2.3 and Theorem 1), and the CNF likelihood.

* :func:`divergence_bruteforce` -- the exact trace Σ_{a} ∂b_a/∂x_a from N = n·d VJPs (one per output
  coordinate; with ``vectorize`` they run as one batched VJP through ``torch.vmap``);
* :func:`divergence_hollow` -- Theorem 1: tr J_b = tr J_τ = Σ_{c=1}^{d} v_cᵀ J_τ v_c with v_c = e_c ⊗ 1_n,
  J_τ the Jacobian of the readout with h^T detached: **d** VJPs, whatever n (and all samples at once);
* :func:`divergence_hutchinson` -- the unbiased estimate E_ε[εᵀ J ε] with Rademacher probes.

:func:`rk4_likelihood` integrates the augmented ODE (ẋ = b, ℓ̇ = −∇·b) with fixed-step RK4 (the paper:
20 steps) and returns log q(x) = log p₀(x₀) − ∫₀¹ ∇·b dt. ``scheme="classic"`` is the textbook RK4;
``scheme="3/8"`` is torchdiffeq's ``rk4`` (Kutta's 3/8 rule), used to compare with flow-matching's solver.
"""

from __future__ import annotations

import math

import torch

from companion.core import ParameterError
from companion.hollowflow.graph import check_coordinates

__all__ = ["divergence_bruteforce", "divergence_hollow", "divergence_hutchinson", "jacobian", "rk4_likelihood",
           "gaussian_log_prob", "DIVERGENCES"]

DIVERGENCES = ("hollow", "bruteforce", "hutchinson")


def _prepare(model, x):
    x = check_coordinates(x, model.d).detach().requires_grad_(True)
    return x


def divergence_bruteforce(model, x, t, graph=None, vectorize: bool = False, chunk: int | None = None):
    """Exact ∇·b from n·d VJPs of the full network; returns (b, div) with div of shape (S,)."""
    x = _prepare(model, x)
    S, n, d = x.shape
    g = graph if graph is not None or not getattr(model, "hollow", False) else model.graph(x)
    with torch.enable_grad():
        b = model(x, t, graph=g)
        flat = b.reshape(S, n * d)
        N = n * d
        if vectorize:
            div = torch.zeros(S, dtype=x.dtype, device=x.device)
            step = chunk or N
            for a0 in range(0, N, step):
                idx = torch.arange(a0, min(N, a0 + step), device=x.device)
                basis = torch.zeros(idx.numel(), S, N, dtype=x.dtype, device=x.device)
                basis[torch.arange(idx.numel()), :, idx] = 1.0
                (gr,) = torch.autograd.grad(flat, x, basis, retain_graph=True, is_grads_batched=True)
                div = div + gr.reshape(idx.numel(), S, N)[torch.arange(idx.numel()), :, idx].sum(0)
        else:
            div = torch.zeros(S, dtype=x.dtype, device=x.device)
            for a in range(N):
                (gr,) = torch.autograd.grad(flat[:, a].sum(), x, retain_graph=True)
                div = div + gr.reshape(S, N)[:, a]
    return b.detach(), div.detach()


def divergence_hollow(model, x, t, graph=None, prune_check: bool = False):
    """Theorem 1: ∇·b = Σ_c v_cᵀ J_τ v_c, v_c = e_c ⊗ 1_n, from d VJPs with h^T detached; returns (b, div).

    Exact for a :class:`~companion.hollowflow.nobgnn.NoBGNN` whose graph is pruned; on an unpruned one
    it silently misses the leaked diagonal terms (the ablation of the notebook)."""
    if not getattr(model, "hollow", False):
        raise ValueError("divergence_hollow needs a hollow model (NoBGNN); use divergence_bruteforce")
    x = _prepare(model, x)
    S, n, d = x.shape
    g = graph if graph is not None else model.graph(x)
    with torch.no_grad():
        s, p, s_node, _ = model.line_states(x, t, g)  # h^T: no graph kept, it is detached anyway
    with torch.enable_grad():
        b = model.readout(s, p, s_node, x, g)
        div = torch.zeros(S, dtype=x.dtype, device=x.device)
        for c in range(d):
            (gr,) = torch.autograd.grad(b[..., c].sum(), x, retain_graph=c < d - 1)
            div = div + gr[..., c].sum(-1)
    return b.detach(), div.detach()


def divergence_hutchinson(model, x, t, graph=None, probes: int = 1, generator: torch.Generator | None = None):
    """Unbiased Hutchinson estimate of ∇·b with ``probes`` Rademacher vectors; returns (b, div)."""
    if isinstance(probes, bool) or not isinstance(probes, int) or probes < 1:
        raise ParameterError("probes", probes, "an integer >= 1")
    x = _prepare(model, x)
    g = graph if graph is not None or not getattr(model, "hollow", False) else model.graph(x)
    with torch.enable_grad():
        b = model(x, t, graph=g)
        div = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for r in range(probes):
            eps = torch.randint(0, 2, x.shape, generator=generator, device=x.device).to(x.dtype) * 2 - 1
            (gr,) = torch.autograd.grad((b * eps).sum(), x, retain_graph=r < probes - 1)
            div = div + (gr * eps).flatten(1).sum(-1) / probes
    return b.detach(), div.detach()


def jacobian(model, x, t, graph=None, detach_h: bool = False) -> torch.Tensor:
    """The full (n·d × n·d) Jacobian ∂b/∂x of one configuration x (n, d), graph held fixed."""
    x = check_coordinates(x, model.d)
    if x.shape[0] != 1:
        raise ParameterError("x", tuple(x.shape), "one configuration of shape (n, d)")
    x = x[0].detach()
    g = graph if graph is not None or not getattr(model, "hollow", False) else model.graph(x)
    kw = {"detach_h": True} if detach_h else {}
    J = torch.autograd.functional.jacobian(lambda y: model(y, t, graph=g, **kw).reshape(-1), x)
    return J.reshape(x.numel(), x.numel())


def gaussian_log_prob(x: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
    """log N(x; 0, σ² I) over all n·d coordinates of each sample."""
    D = x[0].numel()
    return -0.5 * (x.flatten(1) ** 2).sum(-1) / sigma**2 - 0.5 * D * math.log(2 * math.pi * sigma**2)


def _div_fn(model, method, probes, generator, vectorize):
    if method == "hollow":
        return lambda y, t: divergence_hollow(model, y, t)
    if method == "bruteforce":
        return lambda y, t: divergence_bruteforce(model, y, t, vectorize=vectorize)
    return lambda y, t: divergence_hutchinson(model, y, t, probes=probes, generator=generator)


def rk4_likelihood(model, x, *, direction: str = "sample", steps: int = 20, method: str = "hollow",
                   scheme: str = "classic", sigma: float = 1.0, probes: int = 1, generator=None,
                   vectorize: bool = True, log=None):
    """Fixed-step RK4 on (x, ℓ) with ℓ̇ = −∇·b.

    ``direction="sample"``: ``x`` are prior draws x₀; integrates t: 0 → 1 and returns (x₁, log q(x₁)).
    ``direction="density"``: ``x`` are points x₁; integrates t: 1 → 0 and returns (x₀, log q(x₁)).

    A trajectory whose state, velocity or divergence turns non-finite (a poorly trained flow can blow up) is
    stopped at its last finite state and gets log q = +inf: as an importance sample its weight p/q is zero, so it
    stays in the sample count N and the ESS counts it as a miss; the other rows go on unchanged.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ParameterError("steps", steps, "an integer >= 1 (ODE steps)")
    if direction not in ("sample", "density"):
        raise ParameterError("direction", direction, "'sample' or 'density'")
    if method not in DIVERGENCES:
        raise ParameterError("method", method, "one of " + ", ".join(DIVERGENCES))
    if scheme not in ("classic", "3/8"):
        raise ParameterError("scheme", scheme, "'classic' or '3/8'")
    y = check_coordinates(x, model.d).detach()
    div = _div_fn(model, method, probes, generator, vectorize)

    dead = torch.zeros(y.shape[0], dtype=torch.bool, device=y.device)

    def f(t, z):
        b, dv = div(torch.where(dead[:, None, None], y, z), t)
        return b, -dv

    def finite(z, lz):
        """Marks the rows of a stage (z, its log-density term lz) that are no longer finite."""
        dead.logical_or_(~(torch.isfinite(z).flatten(1).all(1) & torch.isfinite(lz)))

    h = (1.0 if direction == "sample" else -1.0) / steps
    t = 0.0 if direction == "sample" else 1.0
    logp = torch.zeros(y.shape[0], dtype=y.dtype, device=y.device)
    log0 = gaussian_log_prob(y, sigma) if direction == "sample" else None
    for _ in range(steps):
        k1, l1 = f(t, y)
        finite(k1, l1)
        if scheme == "classic":
            k2, l2 = f(t + h / 2, y + h / 2 * k1)
            finite(k2, l2)
            k3, l3 = f(t + h / 2, y + h / 2 * k2)
            finite(k3, l3)
            k4, l4 = f(t + h, y + h * k3)
            y_new = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            logp_new = logp + h / 6 * (l1 + 2 * l2 + 2 * l3 + l4)
        else:  # Kutta's 3/8 rule (torchdiffeq's rk4_alt_step_func)
            k2, l2 = f(t + h / 3, y + h * k1 / 3)
            finite(k2, l2)
            k3, l3 = f(t + 2 * h / 3, y + h * (k2 - k1 / 3))
            finite(k3, l3)
            k4, l4 = f(t + h, y + h * (k1 - k2 + k3))
            y_new = y + h / 8 * (k1 + 3 * (k2 + k3) + k4)
            logp_new = logp + h / 8 * (l1 + 3 * (l2 + l3) + l4)
        finite(y_new, logp_new)
        y = torch.where(dead[:, None, None], y, y_new)
        logp = torch.where(dead, logp, logp_new)
        t = t + h
    inf = torch.full_like(logp, math.inf)
    if direction == "sample":
        return y, torch.where(dead, inf, log0 + logp)  # ℓ(1) = −∫₀¹ ∇·b
    return y, torch.where(dead, inf, gaussian_log_prob(y, sigma) - logp)  # ℓ(0) − ℓ(1) = +∫₀¹ ∇·b
