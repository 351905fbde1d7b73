"""The fixed-target comparison: ULA, MALA and mirror Langevin (Newton map, learned ICNN with the full or the
diagonal Hessian) against the number of steps T, on targets with exact samples.

**Step sizes.** Each sampler runs at the same fraction ``eta_scale`` of its own stability scale 1/L, where L
is the relative smoothness of −log p with respect to the sampler's potential G (Jiang 2021's L-relative
smoothness): L = max over exact target samples of λ_max([∇²G]⁻¹ ∇²(−log p)). For ULA and MALA G = ½‖x‖²
(L = λ_max of the target's Hessian, 100 on the κ = 100 Gaussian); ULA's step is δ = 2η (the mirror scheme
with G = ½‖x‖²). This is this companion's choice (the paper compares at a fixed step 1e-2 on images).

**Starts.** Every sampler starts from the same primal points x_0 ~ N(0, I) in each seed: mirror chains at
y_0 = ∇G(x_0), so that x_0 = ∇G*(y_0). (Alg. 2 draws y_0 ~ N(0, I) instead, which starts a learned map fitted
to the target beforehand from the flow's own samples: that would measure the pre-fitted flow, not the
sampler.) The energy distance of the common start (T = 0) is recorded beside the chains'.
"""

from __future__ import annotations

import torch

from companion.core import check_choice, check_float, check_int
from companion.cpmla.cpflow import fit_flow
from companion.cpmla.metrics import energy_distance, sliced_w2
from companion.cpmla.mirror_map import ConvexPotential, QuadraticPotential
from companion.cpmla.samplers import mala, mirror_langevin, ula

SAMPLERS = ("ULA", "MALA", "mirror: Newton map", "mirror: learned ICNN", "mirror: learned ICNN, diagonal Hessian")


def relative_smoothness(target, potential, x) -> float:
    """max_x λ_max([∇²G(x)]⁻¹ ∇²(−log p)(x)) over the points ``x`` (the generalised eigenvalue problem)."""
    Hf = target.hessian_neg_log_prob(x)
    with torch.no_grad():
        HG = potential.derivatives(x, hessian="full").hess
    L = torch.linalg.cholesky(HG)
    Linv = torch.linalg.inv(L)
    M = Linv @ Hf @ Linv.transpose(1, 2)
    return float(torch.linalg.eigvalsh(0.5 * (M + M.transpose(1, 2)))[:, -1].max())


def learned_potential(target, n_data=2000, steps=300, hidden=32, seed=0, logdet="exact", alpha=1e-4):
    """A CP-Flow fitted by maximum likelihood to exact samples of ``target`` (CPMLAprt's pre-training)."""
    gen = torch.Generator().manual_seed(seed)
    potential = ConvexPotential(target.dim, hidden=hidden, alpha=alpha, seed=seed)
    history = fit_flow(potential, target.sample(n_data, gen), steps=steps, batch=256, lr=1e-2, logdet=logdet, seed=seed)
    return potential, history


def step_sizes(target, learned, eta_scale, seed=0):
    """{sampler family: η} at ``eta_scale`` / L for each potential (see the module docstring)."""
    check_float("eta_scale", eta_scale, lo=0, lo_open=True, hi=1.0)
    x = target.sample(500, torch.Generator().manual_seed(seed + 7))
    maps = {"euclidean": QuadraticPotential.identity(target.dim), "newton": QuadraticPotential(torch.linalg.inv(target.covariance)),
            "learned": learned}
    Ls = {k: relative_smoothness(target, m, x) for k, m in maps.items()}
    return {k: eta_scale / v for k, v in Ls.items()}, Ls


def run_sampler(name, target, learned, n, T, etas, generator, snapshots=(), record=False, x0=None):
    """One batch of ``n`` chains of ``name`` (one of :data:`SAMPLERS`) for T steps from the primal points ``x0``
    (drawn from N(0, I) when None); a mirror chain starts at y_0 = ∇G(x_0)."""
    if x0 is None:
        x0 = torch.randn(n, target.dim, generator=generator, dtype=torch.float64)
    if name == "ULA":
        return ula(target, x0, T, 2 * etas["euclidean"], generator=generator, snapshots=snapshots, record=record)
    if name == "MALA":
        return mala(target, x0, T, 2 * etas["euclidean"], generator=generator, snapshots=snapshots, record=record)
    if name == "mirror: Newton map":
        potential, eta, hessian = QuadraticPotential(torch.linalg.inv(target.covariance)), etas["newton"], "full"
    else:
        potential, eta = learned, etas["learned"]
        hessian = "diagonal" if name.endswith("diagonal Hessian") else "full"
    with torch.no_grad():
        y0 = potential.grad(x0)
    return mirror_langevin(target, potential, y0, T, eta, hessian=hessian, generator=generator,
                           snapshots=snapshots, record=record)


STARTS = ("normal", "target")


def compare_fixed_target(target, learned, Ts=(3, 10, 30), n_chains=500, seeds=(0, 1, 2), eta_scale=0.2,
                         n_reference=1000, samplers=SAMPLERS, start="normal"):
    """Energy distance and sliced W2 to exact samples after each T in ``Ts`` for every sampler and seed.

    Every sampler of a seed starts from the same x_0: x_0 ~ N(0, I) (``start="normal"``, how fast a chain reaches
    the target) or exact target samples (``start="target"``: a chain started at the target that drifts away shows
    the sampler's own stationary bias). Returns
    ``{"rows": [{sampler, T, seed, energy_distance, sliced_w2}], "start", "etas", "L", "floor"}``; ``start`` is
    the energy distance of the common start x_0 (T = 0) per seed, ``floor`` the energy distance between two
    independent exact sample sets of the same sizes (the metric's noise), per seed."""
    check_int("n_chains", n_chains, lo=10)
    check_choice("start", start, STARTS)
    Ts = tuple(sorted({check_int("T", t, lo=1) for t in Ts}))
    etas, Ls = step_sizes(target, learned, eta_scale)
    rows, floors, starts = [], [], []
    for seed in seeds:
        gen = torch.Generator().manual_seed(1000 + seed)
        ref = target.sample(n_reference, gen)
        floors.append(energy_distance(target.sample(n_chains, gen), ref))
        x0 = (torch.randn(n_chains, target.dim, generator=gen, dtype=torch.float64) if start == "normal"
              else target.sample(n_chains, gen))
        starts.append(energy_distance(x0, ref))
        for name in samplers:
            chain = run_sampler(name, target, learned, n_chains, max(Ts), etas, gen, snapshots=Ts, x0=x0)
            for t in Ts:
                x = chain.snapshots[t]
                rows.append({"sampler": name, "T": t, "seed": seed, "energy_distance": energy_distance(x, ref),
                             "sliced_w2": sliced_w2(x, ref)})
    return {"rows": rows, "start": starts, "start_law": start, "etas": etas, "L": Ls, "floor": floors,
            "eta_scale": eta_scale}
