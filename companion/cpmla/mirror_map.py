"""The mirror map: a convex potential G, its gradient ∇G, Hessian ∇²G and inverse ∇G* (paper §3, App. I).

**CP-Flow potential** (Huang et al. 2021, re-implemented; the paper uses it as the mirror map). An
input-convex network (ICNN) with K hidden layers,

    a_0 = A_0 x + b_0,   a_k = W_k⁺ z_{k-1} + A_k x + b_k,   z_k = s(a_k),   ICNN(x) = w⁺·z_{K-1} + a·x,

with non-negative z-path weights W⁺ = softplus(W) and the Gaussian-softplus s(t) = tΦ(t) + φ(t) (convex,
non-decreasing, s' = Φ, s'' = φ > 0), so ICNN is convex. The potential is CP-Flow's

    G(x) = softplus(w₁)·ICNN(x) + (softplus(w₀) + α)/2 ‖x‖²,            α = 1e-4 (paper: G_α = G_ϑ + α/2‖x‖²),

so ∇²G ⪰ αI and ∇G is invertible.

**Derivatives in closed form.** Every non-linearity is element-wise and everything else is linear, so with
the adjoints u_k = ∂ICNN/∂z_k (non-negative: W⁺ ≥ 0, s' ≥ 0) and the input Jacobians J_k = ∂a_k/∂x,

    ∇ICNN = a + Σ_k A_kᵀ (u_k ⊙ s'(a_k)),      ∇²ICNN = Σ_k J_kᵀ diag(u_k ⊙ s''(a_k)) J_k  (⪰ 0).

The exact diagonal Σ_k (u_k ⊙ s''(a_k))ᵀ J_k² costs O(B h d) per layer, a Hessian-vector product too, the
full Hessian O(B h d²). (The paper replaces ∇²G by its diagonal "in practice" without saying how it is
computed; the options here are ``"full"``, ``"diagonal"`` - exact, equal to d Hessian-vector products,
tested against autograd - and ``"hutchinson"``, the Rademacher estimate E[v ⊙ ∇²G v].)

**The inverse ∇G*(y) = argmin_x G(x) − ⟨x, y⟩** (the paper does not say how it is computed; CP-Flow's
convex-optimisation inverse is the natural reading): ``"newton"`` (batched, damped, for d ≤
:data:`MAX_FULL_DIM`) or ``"lbfgs"`` (``torch.optim.LBFGS`` with strong-Wolfe line search, as CP-Flow),
warm-started, with a tolerance and an iteration cap; the residual max_b ‖∇G(x_b) − y_b‖ is reported and
:class:`InverseNotConverged` is raised when it stays above the tolerance.

:class:`QuadraticPotential` G = ½xᵀAx gives the fixed maps: A = cI (mirror Langevin = ULA with step
δ = 2η/c) and A = Σ⁻¹ (the Newton map of a Gaussian target, its optimal preconditioner).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from companion.core import ParameterError, check_choice, check_float, check_int

ALPHA = 1e-4  # the paper's strong-convexity constant (App. I)
MAX_FULL_DIM = 512  # the full Hessian (and Newton's inverse) is refused above this dimension
HESSIANS = ("full", "diagonal", "hutchinson")
INVERSE_METHODS = ("newton", "lbfgs")
_SQRT_2PI = math.sqrt(2 * math.pi)


def gaussian_softplus(t: torch.Tensor) -> torch.Tensor:
    """CP-Flow's Gaussian-softplus s(t) = tΦ(t) + φ(t): convex, non-decreasing, s' = Φ, s'' = φ."""
    return 0.5 * t * (1 + torch.erf(t / math.sqrt(2))) + torch.exp(-0.5 * t * t) / _SQRT_2PI


class InverseNotConverged(RuntimeError):
    """∇G*(y) did not reach its tolerance within the iteration cap; ``residual`` says how far it got."""

    def __init__(self, method, residual, tol, max_iter):
        self.method, self.residual, self.tol, self.max_iter = method, residual, tol, max_iter
        super().__init__(
            f"the inverse mirror map ({method}) stopped at residual max‖∇G(x) − y‖ = {residual:.3g} after "
            f"{max_iter} iterations, above tol={tol:g}: raise max_iter, loosen tol or use a warm start")


@dataclass
class Derivatives:
    """G(x) [B], ∇G(x) [B, d] and, when asked, ∇²G(x): [B, d, d] (``"full"``) or its diagonal [B, d]."""

    value: torch.Tensor
    grad: torch.Tensor
    hess: torch.Tensor | None = None


@dataclass
class InverseResult:
    """x = ∇G*(y), the residual max_b ‖∇G(x_b) − y_b‖, the iterations, (Newton) the derivatives at x and the
    per-sample residuals ‖∇G(x_b) − y_b‖ [B]."""

    x: torch.Tensor
    residual: float
    iterations: int
    derivs: Derivatives | None = None
    residuals: torch.Tensor | None = None


class MirrorMap(nn.Module):
    """A strongly convex potential G on R^d with closed-form derivatives and a numerical inverse."""

    dim: int

    def derivatives(self, x: torch.Tensor, hessian: str | None = None) -> Derivatives:  # pragma: no cover
        raise NotImplementedError

    def hvp(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    # -- conveniences ------------------------------------------------------------------------------------
    def value(self, x):
        return self.derivatives(x).value

    def grad(self, x):
        """∇G(x), the forward mirror map (primal → dual)."""
        return self.derivatives(x).grad

    def check_full(self, what="the full Hessian"):
        if self.dim > MAX_FULL_DIM:
            raise ParameterError("hessian", "full", f"'diagonal' or 'hutchinson' above d = {MAX_FULL_DIM} "
                                 f"({what} at d = {self.dim} costs O(B d^2) memory)")

    def hessian(self, x):
        self.check_full()
        return self.derivatives(x, hessian="full").hess

    def hessian_diag(self, x):
        """The exact diagonal of ∇²G(x) (equal to d Hessian-vector products with the unit vectors)."""
        return self.derivatives(x, hessian="diagonal").hess

    def hessian_diag_hutchinson(self, x, n_probes: int = 8, generator=None):
        """The Hutchinson estimate of diag ∇²G(x): the mean of v ⊙ ∇²G v over Rademacher probes v."""
        check_int("n_probes", n_probes, lo=1)
        total = torch.zeros_like(x)
        for _ in range(n_probes):
            v = torch.randint(0, 2, x.shape, generator=generator, device=x.device).to(x.dtype) * 2 - 1
            total = total + v * self.hvp(x, v)
        return total / n_probes

    def hessian_sqrt_noise(self, x, eps, hessian="full", n_probes=8, generator=None, floor=None, hess=None):
        """[∇²G(x)]^{1/2} ε for the chain's noise: the symmetric square root (``"full"``), or the square
        root of the exact or Hutchinson diagonal (clipped below at ``floor``, default α, since an estimate
        can be negative). ``hess``: the full Hessian at x when already computed."""
        check_choice("hessian", hessian, HESSIANS)
        if hessian == "full":
            self.check_full()
            H = self.derivatives(x, hessian="full").hess if hess is None else hess
            if self.dim == 2:  # closed form: √M = (M + √det M · I) / √(tr M + 2√det M)
                a, b, c = H[:, 0, 0], H[:, 0, 1], H[:, 1, 1]
                sd = (a * c - b * b).clamp_min(0).sqrt()
                t = (a + c + 2 * sd).sqrt()
                return torch.stack([(a + sd) * eps[:, 0] + b * eps[:, 1], b * eps[:, 0] + (c + sd) * eps[:, 1]], 1) / t.unsqueeze(1)
            evals, evecs = torch.linalg.eigh(H)
            root = evals.clamp_min(0).sqrt()
            return torch.einsum("bij,bj->bi", evecs, root * torch.einsum("bji,bj->bi", evecs, eps))
        if hessian == "diagonal":
            diag = self.hessian_diag(x)
        else:
            diag = self.hessian_diag_hutchinson(x, n_probes=n_probes, generator=generator)
        lo = self.strong_convexity if floor is None else floor
        return diag.clamp_min(lo).sqrt() * eps

    @property
    def strong_convexity(self) -> float:
        return ALPHA

    # -- the inverse ∇G* --------------------------------------------------------------------------------
    def inverse(self, y: torch.Tensor, x0: torch.Tensor | None = None, method: str = "newton",
                tol: float = 1e-6, max_iter: int = 50, raise_on_fail: bool = True) -> InverseResult:
        """∇G*(y) = argmin_x G(x) − ⟨x, y⟩, from ``x0`` (default: y), to residual ≤ ``tol``."""
        check_choice("method", method, INVERSE_METHODS)
        check_float("tol", tol, lo=0, lo_open=True)
        check_int("max_iter", max_iter, lo=1)
        if y.ndim != 2 or y.shape[1] != self.dim:
            raise ParameterError("y", tuple(y.shape), f"a [batch, {self.dim}] tensor")
        x = (y if x0 is None else x0).detach().clone()
        with torch.no_grad():
            if method == "newton":
                self.check_full("Newton's inverse")
                x, iters, derivs = self._newton(x, y, tol, max_iter)
            else:
                (x, iters), derivs = self._lbfgs(x, y, tol, max_iter), None
            grad = derivs.grad if derivs is not None else self.grad(x)
            residuals = (grad - y).norm(dim=1)
            residual = float(residuals.max()) if len(y) else 0.0
        if raise_on_fail and not residual <= tol:
            raise InverseNotConverged(method, residual, tol, max_iter)
        return InverseResult(x, residual, iters, derivs, residuals)

    def _newton(self, x, y, tol, max_iter):
        """Damped Newton on φ(x) = G(x) − ⟨x, y⟩; one full-derivative pass per iteration (the pass at the
        accepted point is reused for the next step and returned, so a chain can reuse its Hessian)."""
        d = self.derivatives(x, hessian="full")
        for it in range(max_iter):
            r = d.grad - y
            if float(r.norm(dim=1).max()) <= tol:
                return x, it, d
            step = torch.linalg.solve(d.hess, r.unsqueeze(-1)).squeeze(-1)
            phi0 = d.value - (x * y).sum(1)
            slope = (r * step).sum(1)
            t = torch.ones(len(x), 1, dtype=x.dtype, device=x.device)
            for _ in range(30):  # per-sample backtracking (Armijo) where the full step does not decrease φ
                cand = x - t * step
                dc = self.derivatives(cand, hessian="full")
                phi = dc.value - (cand * y).sum(1)
                bad = phi > phi0 - 1e-4 * t.squeeze(1) * slope + 1e-12 * phi0.abs().clamp_min(1)
                if not bool(bad.any()):
                    break
                t = torch.where(bad.unsqueeze(1), t * 0.5, t)
            x, d = cand, dc
        return x, max_iter, d

    def _lbfgs(self, x, y, tol, max_iter):
        x = x.clone().requires_grad_(True)
        opt = torch.optim.LBFGS([x], lr=1.0, max_iter=max_iter, history_size=20, line_search_fn="strong_wolfe",
                                tolerance_grad=tol / math.sqrt(self.dim), tolerance_change=0.0)
        count = [0]

        def closure():
            count[0] += 1
            with torch.no_grad():
                d = self.derivatives(x.detach())
                x.grad = d.grad - y
                return (d.value - (x.detach() * y).sum(1)).sum()

        opt.step(closure)
        return x.detach(), count[0]


class QuadraticPotential(MirrorMap):
    """G(x) = ½ xᵀ A x with A symmetric positive definite (``scale·I`` or a given matrix)."""

    def __init__(self, A: torch.Tensor):
        super().__init__()
        A = torch.as_tensor(A)
        if A.ndim != 2 or A.shape[0] != A.shape[1]:
            raise ParameterError("A", tuple(A.shape), "a square [d, d] matrix")
        A = 0.5 * (A + A.T)
        lmin = float(torch.linalg.eigvalsh(A).min())
        if not lmin > 0:
            raise ParameterError("A", f"min eigenvalue {lmin:.3g}", "a positive definite matrix")
        self.register_buffer("A", A)
        self.dim = A.shape[0]
        self._lmin = lmin

    @classmethod
    def identity(cls, dim: int, scale: float = 1.0, dtype=torch.float64):
        check_float("scale", scale, lo=0, lo_open=True)
        return cls(scale * torch.eye(check_int("dim", dim, lo=1), dtype=dtype))

    @property
    def strong_convexity(self) -> float:
        return self._lmin

    def derivatives(self, x, hessian=None):
        A = self.A.to(x.dtype)
        g = x @ A
        value = 0.5 * (g * x).sum(1)
        if hessian is None:
            return Derivatives(value, g)
        check_choice("hessian", hessian, ("full", "diagonal"))
        if hessian == "full":
            return Derivatives(value, g, A.expand(len(x), -1, -1))
        return Derivatives(value, g, torch.diagonal(A).expand(len(x), -1))

    def hvp(self, x, v):
        return v @ self.A.to(x.dtype)

    def inverse(self, y, x0=None, method="newton", tol=1e-6, max_iter=50, raise_on_fail=True):
        """Closed form A⁻¹y (the method, warm start and cap are not needed for a quadratic)."""
        check_float("tol", tol, lo=0, lo_open=True)
        x = torch.linalg.solve(self.A.to(y.dtype), y.T).T
        residual = float((self.grad(x) - y).norm(dim=1).max()) if len(y) else 0.0
        return InverseResult(x, residual, 1)


class ConvexPotential(MirrorMap):
    """CP-Flow's potential G = softplus(w₁)·ICNN + (softplus(w₀) + α)/2 ‖x‖² (one CP-Flow block)."""

    def __init__(self, dim: int, hidden: int = 32, depth: int = 2, alpha: float = ALPHA, seed: int | None = None,
                 dtype=torch.float64):
        super().__init__()
        self.dim = check_int("dim", dim, lo=1)
        self.hidden = check_int("hidden", hidden, lo=1)
        self.depth = check_int("depth", depth, lo=1)
        self.alpha = check_float("alpha", alpha, lo=0, lo_open=True)
        gen = torch.Generator().manual_seed(seed) if seed is not None else None

        def rand(*shape, scale):
            return nn.Parameter(torch.randn(*shape, generator=gen, dtype=dtype) * scale)

        self.A = nn.ParameterList([rand(hidden, dim, scale=1 / math.sqrt(dim)) for _ in range(depth)])
        self.b = nn.ParameterList([rand(hidden, scale=0.1) for _ in range(depth)])
        # z-path weights, made non-negative by softplus; initialised so softplus(W) ≈ 1/hidden
        init = math.log(math.expm1(1.0 / hidden))
        self.W = nn.ParameterList([nn.Parameter(torch.full((hidden, hidden), init, dtype=dtype)
                                                + 0.1 * torch.randn(hidden, hidden, generator=gen, dtype=dtype) / hidden)
                                   for _ in range(depth - 1)])
        self.w_out = nn.Parameter(torch.full((hidden,), init, dtype=dtype))
        self.a_out = nn.Parameter(torch.zeros(dim, dtype=dtype))
        self.w1 = nn.Parameter(torch.zeros((), dtype=dtype))  # softplus(w₁): scale of the ICNN
        self.w0 = nn.Parameter(torch.full((), math.log(math.expm1(0.5)), dtype=dtype))  # softplus(w₀) = 0.5

    @property
    def strong_convexity(self) -> float:
        return self.alpha

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def with_alpha(self, alpha: float) -> "ConvexPotential":
        """The same network (shared parameters) with another α."""
        other = copy.copy(self)
        other.alpha = check_float("alpha", alpha, lo=0, lo_open=True)
        return other

    def _forward(self, x):
        """Per layer: Φ(a_k) and φ(a_k) (s' and s''), the input Jacobians J_k = ∂a_k/∂x and the adjoints
        u_k = ∂ICNN/∂z_k; returns (ICNN(x), d1, d2, J, u, A)."""
        As = list(self.A)
        Ws = [F.softplus(W) for W in self.W]
        d1s, d2s, jac = [], [], []
        z = J = None
        for k in range(self.depth):
            if k == 0:
                a = x @ As[0].T + self.b[0]
                Ja = As[0].expand(len(x), -1, -1)
            else:
                a = z @ Ws[k - 1].T + x @ As[k].T + self.b[k]
                Ja = torch.matmul(Ws[k - 1], J) + As[k]
            d1 = 0.5 * (1 + torch.erf(a * (1 / math.sqrt(2))))
            d2 = torch.exp(-0.5 * a * a) * (1 / _SQRT_2PI)
            z = a * d1 + d2  # Gaussian-softplus
            J = d1.unsqueeze(-1) * Ja
            d1s.append(d1)
            d2s.append(d2)
            jac.append(Ja)
        w_out = F.softplus(self.w_out)
        out = z @ w_out + x @ self.a_out
        u = w_out.expand(len(x), -1)
        adj = [None] * self.depth
        for k in reversed(range(self.depth)):
            adj[k] = u
            if k > 0:
                u = (u * d1s[k]) @ Ws[k - 1]
        return out, d1s, d2s, jac, adj, As

    def derivatives(self, x, hessian=None):
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ParameterError("x", tuple(x.shape), f"a [batch, {self.dim}] tensor")
        out, d1s, d2s, jac, adj, As = self._forward(x)
        scale = F.softplus(self.w1)
        quad = F.softplus(self.w0) + self.alpha
        g = self.a_out.expand(len(x), -1)
        for k in range(self.depth):
            g = g + (adj[k] * d1s[k]) @ As[k]
        value = scale * out + 0.5 * quad * (x * x).sum(1)
        grad = scale * g + quad * x
        if hessian is None:
            return Derivatives(value, grad)
        check_choice("hessian", hessian, ("full", "diagonal"))
        if hessian == "full":
            self.check_full()
            H = 0
            for k in range(self.depth):
                c = (adj[k] * d2s[k]).unsqueeze(-1)
                H = H + torch.matmul((c * jac[k]).transpose(1, 2), jac[k])
            H = scale * H + quad * torch.eye(self.dim, dtype=x.dtype, device=x.device)
        else:
            H = sum(((adj[k] * d2s[k]).unsqueeze(-1) * jac[k] * jac[k]).sum(1) for k in range(self.depth))
            H = scale * H + quad
        return Derivatives(value, grad, H)

    def hvp_operator(self, x):
        """v ↦ ∇²G(x) v in O(B h d) per layer, without forming the Hessian (the forward pass is shared)."""
        _, _, d2s, jac, adj, _ = self._forward(x)
        coef = [adj[k] * d2s[k] for k in range(self.depth)]
        scale, quad = F.softplus(self.w1), F.softplus(self.w0) + self.alpha

        def apply(v):
            out = torch.zeros_like(v)
            for k in range(self.depth):
                Jv = torch.matmul(jac[k], v.unsqueeze(-1)).squeeze(-1)
                out = out + torch.matmul((coef[k] * Jv).unsqueeze(1), jac[k]).squeeze(1)
            return scale * out + quad * v

        return apply

    def hvp(self, x, v):
        """∇²G(x) v."""
        return self.hvp_operator(x)(v)

    def icnn(self, x):
        """ICNN(x) alone (for the convexity check along segments)."""
        return self._forward(x)[0]
