"""Targets, samples, training and metrics of the Boltzmann-generator experiments (paper §5, App. D).

* Energies (Klein et al. 2023, Köhler et al. 2020): Lennard-Jones clusters (LJ13, LJ55) with the harmonic
  CoM oscillator, U(x) = (ε/2τ) Σ_{i≠j} [(r_m/d_ij)^12 − 2(r_m/d_ij)^6] + (c/2) Σ_i ‖x_i − x̄‖²
  (ε = r_m = τ = 1, c = 0.5), and the double well DW4, U = (1/2τ) Σ_{i<j} [a(d_ij−d₀) + b(d_ij−d₀)² +
  c(d_ij−d₀)⁴] (a = 0, b = −4, c = 0.9, d₀ = 4).
* Samples by MALA (Metropolis-adjusted Langevin), vectorised over chains in torch (CPU or GPU; the issue's
  "numpy on the CPU" is the same algorithm in torch so that one code path serves both), step size tuned
  to ≈ 0.6 acceptance during burn-in. A local ``.npy`` file of the published sets can be loaded instead
  (:func:`load_samples`); nothing is downloaded.
* The CoM: U is translation invariant, so the samples' CoM is set to a Gaussian N(0, σ₀²/n I) that
  matches the prior N(0, σ₀² I)'s CoM, and the target density on R^{nd} is
  log p(x) = −U(x) − n‖x̄‖²/(2σ₀²) + const. (The paper works in the CoM-free subspace; projecting b onto it
  couples all Jacobian blocks, so here the flow carries the CoM along instead. A deviation.)
* Flow matching (σ = 0): x_t = (1−t)x₀ + t x₁, target x₁ − x₀; minibatch exact OT pairing (assignment,
  = torchcfm's ``OTPlanSampler("exact")`` with uniform weights) then equivariant alignment of each x₀ to
  its x₁ (Hungarian particle permutation, then Kabsch rotation), as Klein et al. 2023 -- applied per pair
  after the batch OT rather than inside the OT cost (cheaper; a deviation).
* Metrics: Kish ESS = (Σw)²/(N Σw²); ESS_rem drops 1 % of log-weights at each end (biased, always shown
  with ESS); EffSU = (ESS/time) relative to the baseline; 68 % bootstrap intervals.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from companion.core import ParameterError

__all__ = ["SYSTEMS", "energy", "target_log_prob", "mala", "lj_samples", "load_samples", "ot_pairs", "align",
           "train_cfm", "kish_ess", "ess_rem", "bootstrap_interval", "effsu"]

SYSTEMS = {"DW4": (4, 2), "LJ13": (13, 3), "LJ55": (55, 3)}  # name -> (n, d)


def _pdist(x):
    n = x.shape[-2]
    i, j = torch.triu_indices(n, n, 1, device=x.device)
    return (x[..., i, :] - x[..., j, :]).norm(dim=-1)


def energy(system: str, x: torch.Tensor) -> torch.Tensor:
    """U(x) for samples x of shape (S, n, d)."""
    if system not in SYSTEMS:
        raise ParameterError("system", system, "one of " + ", ".join(SYSTEMS))
    n, d = SYSTEMS[system]
    if x.dim() != 3 or tuple(x.shape[1:]) != (n, d):
        raise ParameterError("x", tuple(x.shape), f"(samples, {n}, {d}) for {system}")
    r = _pdist(x)
    if system == "DW4":
        u = r - 4.0
        return 0.5 * (-4.0 * u**2 + 0.9 * u**4).sum(-1)
    inv6 = (1.0 / r.clamp_min(1e-6)) ** 6
    lj = (inv6**2 - 2 * inv6).sum(-1)  # (ε/2τ) Σ_{i≠j} = Σ_{i<j}
    osc = 0.25 * ((x - x.mean(1, keepdim=True)) ** 2).sum((-1, -2))  # c/2 with c = 0.5
    return lj + osc


def target_log_prob(system: str, x: torch.Tensor, sigma0: float = 1.0) -> torch.Tensor:
    """Unnormalised log p(x) = −U(x) − n‖x̄‖²/(2σ₀²) on R^{nd} (the CoM factor matches the prior's)."""
    n = x.shape[1]
    return -energy(system, x) - n * (x.mean(1) ** 2).sum(-1) / (2 * sigma0**2)


def _init(system, chains, gen, dtype, device):
    n, d = SYSTEMS[system]
    if system == "DW4":
        return torch.randn(chains, n, d, generator=gen, dtype=dtype).to(device) * 2.0
    side = math.ceil(n ** (1 / 3))
    grid = torch.stack(torch.meshgrid(*[torch.arange(side, dtype=dtype)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
    x = (grid - grid.mean(0)) * 1.1
    return (x[None] + 0.05 * torch.randn(chains, n, d, generator=gen, dtype=dtype)).to(device)


def mala(system: str, *, chains: int = 64, steps: int = 1000, burn_in: int = 500, thin: int = 10, seed: int = 0,
         step_size: float = 1e-3, dtype=torch.float64, device="cpu") -> dict:
    """MALA on exp(−U): returns {"samples": (chains * kept, n, d) CoM-free, "acceptance", "step_size"}."""
    for name, v, lo in (("chains", chains, 1), ("steps", steps, 1), ("burn_in", burn_in, 0), ("thin", thin, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ParameterError(name, v, f"an integer >= {lo}")
    gen = torch.Generator().manual_seed(seed)
    x = _init(system, chains, gen, dtype, device)

    def u_grad(y):
        y = y.detach().requires_grad_(True)
        u = energy(system, y)
        (g,) = torch.autograd.grad(u.sum(), y)
        return u.detach(), g

    u, g = u_grad(x)
    # the proposals' noise is drawn where the chains live (a CPU generator would cost a host-to-device copy per step)
    noise_gen = gen if torch.device(device).type == "cpu" else torch.Generator(device=device).manual_seed(seed)
    eta = torch.full((chains, 1, 1), step_size, dtype=dtype, device=device)
    kept, acc_total, n_total = [], 0.0, 0
    for it in range(burn_in + steps):
        noise = torch.randn(x.shape, generator=noise_gen, dtype=dtype, device=device)
        y = x - eta * g + torch.sqrt(2 * eta) * noise
        uy, gy = u_grad(y)
        fwd = ((y - x + eta * g) ** 2).sum((-1, -2)) / (4 * eta[:, 0, 0])
        bwd = ((x - y + eta * gy) ** 2).sum((-1, -2)) / (4 * eta[:, 0, 0])
        log_a = -uy + u - bwd + fwd
        accept = torch.log(torch.rand(chains, generator=noise_gen, dtype=dtype, device=device)) < log_a
        x = torch.where(accept[:, None, None], y, x)
        u = torch.where(accept, uy, u)
        g = torch.where(accept[:, None, None], gy, g)
        if it < burn_in:  # per-chain Robbins-Monro step-size adaptation toward 0.6 acceptance
            eta = eta * torch.exp(0.05 * (accept.to(dtype) - 0.6))[:, None, None]
        else:
            acc_total = acc_total + accept.to(dtype).mean()  # a tensor: no device sync per step
            n_total += 1
            if (it - burn_in) % thin == thin - 1:
                kept.append(x.clone())
    s = torch.cat(kept) if kept else x.clone()
    s = s - s.mean(1, keepdim=True)
    return {"samples": s, "acceptance": float(acc_total) / max(1, n_total), "step_size": float(eta.mean())}


def lj_samples(system: str, count: int, *, seed: int = 0, sigma0: float = 1.0, **mala_kw) -> torch.Tensor:
    """``count`` target samples: MALA configurations with a fresh CoM ~ N(0, σ₀²/n I)."""
    n, d = SYSTEMS[system]
    chains = mala_kw.pop("chains", 64)
    thin = mala_kw.pop("thin", 10)
    steps = thin * math.ceil(count / chains)
    s = mala(system, chains=chains, steps=steps, thin=thin, seed=seed, **mala_kw)["samples"][:count]
    gen = torch.Generator().manual_seed(seed + 1)
    com = torch.randn(s.shape[0], 1, d, generator=gen, dtype=s.dtype) * sigma0 / math.sqrt(n)
    return s + com.to(s.device)


def load_samples(path, system: str) -> torch.Tensor:
    """Samples from a local ``.npy`` (e.g. the published LJ13 set of Klein et al.), reshaped to (S, n, d)."""
    p = Path(path)
    if not p.is_file():
        raise ParameterError("path", str(path), "an existing local .npy file (nothing is downloaded)")
    n, d = SYSTEMS[system]
    a = np.load(p)
    if a.size % (n * d):
        raise ParameterError("path", str(path), f"an array with a multiple of n·d = {n * d} entries for {system}")
    x = torch.as_tensor(a, dtype=torch.float64).reshape(-1, n, d)
    return x - x.mean(1, keepdim=True)


def ot_pairs(x0: torch.Tensor, x1: torch.Tensor) -> np.ndarray:
    """Exact minibatch OT with uniform weights: the assignment minimising Σ‖x₀_σ(b) − x₁_b‖²; returns σ."""
    C = torch.cdist(x0.flatten(1), x1.flatten(1)) ** 2
    rows, cols = linear_sum_assignment(C.detach().cpu().numpy())
    sigma = np.empty(len(cols), dtype=int)
    sigma[cols] = rows
    return sigma


def align(x0: torch.Tensor, x1: torch.Tensor) -> torch.Tensor:
    """Equivariant alignment of each x₀ to its x₁: particle permutation (Hungarian), then Kabsch rotation.

    Batched: one (B, n, n) cost tensor is moved to the CPU for the B assignments, and the Kabsch rotations
    R = V D Uᵀ (H = (y − ȳ)ᵀ(x₁ − x̄₁) = U Σ Vᵀ, D = diag(1, …, sign det(V Uᵀ))) are one batched SVD, so a
    training step on a GPU costs a handful of launches rather than a few per pair."""
    C = (torch.cdist(x1, x0) ** 2).detach().cpu().numpy()
    perm = torch.as_tensor(np.stack([linear_sum_assignment(c)[1] for c in C]), device=x0.device)
    y = torch.gather(x0, 1, perm[..., None].expand_as(x0))
    mu = y.mean(1, keepdim=True)
    H = (y - mu).transpose(1, 2) @ (x1 - x1.mean(1, keepdim=True))
    U, _, Vt = torch.linalg.svd(H)
    V, Ut = Vt.transpose(1, 2), U.transpose(1, 2)
    D = torch.ones(H.shape[:2], dtype=H.dtype, device=H.device)
    D[:, -1] = torch.sign(torch.det(V @ Ut))
    R = V @ (D[..., None] * Ut)
    return (y - mu) @ R.transpose(1, 2) + mu


def train_cfm(model, data: torch.Tensor, *, iterations: int = 200, batch: int = 64, lr: float = 5e-4, seed: int = 0,
              sigma0: float = 1.0, equivariant_ot: bool = True, seconds: float | None = None, lr_final: float | None = None,
              log_every: int = 0, log=print) -> list[float]:
    """Conditional flow matching with minibatch OT (and equivariant alignment); Adam; returns the losses.

    Runs ``iterations`` steps, or fewer (at least one) when ``seconds`` (a wall-clock budget) runs out first; one Adam state
    throughout. With ``lr_final`` the learning rate decays from ``lr`` to ``lr_final`` on a cosine of the progress
    max(step / iterations, elapsed / seconds), so a time-limited run still ends at ``lr_final``."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ParameterError("iterations", iterations, "an integer >= 1")
    if seconds is not None and not seconds > 0:
        raise ParameterError("seconds", seconds, "None or a positive training budget in seconds")
    gen = torch.Generator().manual_seed(seed)
    params = [q for q in model.parameters() if q.requires_grad]
    state = [(torch.zeros_like(q), torch.zeros_like(q)) for q in params]
    losses = []
    dtype = next(model.parameters()).dtype
    t0 = time.perf_counter()
    for it in range(iterations):
        progress = it / iterations
        if seconds is not None:
            elapsed = time.perf_counter() - t0
            if it and elapsed >= seconds:  # at least one step
                break
            progress = max(progress, elapsed / seconds)
        step_lr = lr if lr_final is None else lr_final + 0.5 * (lr - lr_final) * (1 + math.cos(math.pi * progress))
        idx = torch.randint(0, data.shape[0], (batch,), generator=gen)
        x1 = data[idx].to(dtype)
        x0 = torch.randn(x1.shape, generator=gen, dtype=dtype).to(x1.device) * sigma0
        x0 = x0[torch.as_tensor(ot_pairs(x0, x1), device=x1.device)]
        if equivariant_ot:
            x0 = align(x0, x1)
        t = torch.rand(batch, generator=gen, dtype=dtype).to(x1.device)
        xt = (1 - t[:, None, None]) * x0 + t[:, None, None] * x1
        loss = ((model(xt, t) - (x1 - x0)) ** 2).mean()
        grads = torch.autograd.grad(loss, params)
        _adam_step(params, grads, state, it + 1, step_lr)
        losses.append(loss.detach())
        if log_every and (it + 1) % log_every == 0:
            log(f"iteration {it + 1}: loss {float(torch.stack(losses[-log_every:]).mean()):.4f}")
    return torch.stack(losses).tolist()


@torch.no_grad()
def _adam_step(params, grads, state, step, lr, b1=0.9, b2=0.999, eps=1e-8):
    """Adam (Kingma & Ba), the update of ``torch.optim.Adam`` written out: creating a torch optimizer imports
    torch._dynamo (about 2 s of CPU), a large share of the notebook's budget."""
    for q, g, (m, v) in zip(params, grads, state):
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (v / (1 - b2**step)).sqrt_().add_(eps)
        q.addcdiv_(m, denom, value=-lr / (1 - b1**step))


def kish_ess(log_w) -> float:
    """Kish's effective sample size as a fraction of N: (Σw)² / (N Σw²), from log-weights.

    Non-finite log-weights count by their meaning, over all N samples: −inf is a zero weight (the sample stays in
    N); +inf is a weight that outweighs every finite one, so the m samples at +inf share all the weight (as equals)
    and the ESS is m / N. All weights zero gives 0. A NaN log-weight has no meaning and raises ``ParameterError``."""
    lw = np.asarray(log_w, dtype=float).ravel()
    if lw.size == 0:
        raise ParameterError("log_w", log_w, "at least one log-weight")
    if np.isnan(lw).any():
        raise ParameterError("log_w", f"{int(np.isnan(lw).sum())} NaN of {lw.size}", "log-weights without NaN "
                             "(+inf and -inf are allowed: an overwhelming and a zero weight)")
    top = np.isposinf(lw)
    if top.any():
        w = top.astype(float)  # the +inf samples carry all the weight, equally
    elif np.isneginf(lw).all():
        return 0.0
    else:
        w = np.exp(lw - lw.max())  # exp(-inf) = 0: a zero weight
    return float(w.sum() ** 2 / (lw.size * (w**2).sum()))


def ess_rem(log_w, fraction: float = 0.01) -> float:
    """ESS after removing ``fraction`` of the log-weights at each end (the paper's ESS_rem; biased)."""
    lw = np.asarray(log_w, dtype=float).ravel()
    if np.isnan(lw).any():  # sorted to an end, a NaN would be trimmed away unseen
        raise ParameterError("log_w", f"{int(np.isnan(lw).sum())} NaN of {lw.size}", "log-weights without NaN")
    lw = np.sort(lw)
    m = int(math.floor(fraction * len(lw)))
    return kish_ess(lw[m:len(lw) - m] if m else lw)


def bootstrap_interval(log_w, stat=kish_ess, resamples: int = 1000, level: float = 0.68, seed: int = 0):
    """(low, high) percentile bootstrap interval of ``stat`` at ``level`` (paper: 68 %, 1000 resamples)."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ParameterError("resamples", resamples, "an integer >= 1 (bootstrap resamples)")
    lw = np.asarray(log_w, dtype=float)
    rng = np.random.default_rng(seed)
    vals = np.array([stat(lw[rng.integers(0, len(lw), len(lw))]) for _ in range(resamples)])
    q = (1 - level) / 2
    return float(np.quantile(vals, q)), float(np.quantile(vals, 1 - q))


def effsu(ess_model: float, seconds_model: float, ess_base: float, seconds_base: float) -> float:
    """Effective speed-up: (ESS per second of the model) / (ESS per second of the baseline)."""
    if min(seconds_model, seconds_base) <= 0:
        raise ParameterError("seconds", (seconds_model, seconds_base), "positive times")
    if ess_base <= 0:
        return math.inf
    return (ess_model / seconds_model) / (ess_base / seconds_base)


def log_weights(system: str, x1: torch.Tensor, log_q: torch.Tensor, sigma0: float = 1.0) -> np.ndarray:
    """log w = log p(x₁) − log q(x₁) (unnormalised)."""
    return (target_log_prob(system, x1, sigma0) - log_q).detach().cpu().numpy()

