"""companion.cpmla: the mirror map, its inverse, the samplers' known truths and bad input."""

import math

import numpy as np
import pytest
import torch

from companion.core import ParameterError
from companion.cpmla.cpflow import conjugate_gradient, exact_logdet, fit_flow, logdet_surrogate
from companion.cpmla.ebm import EBM, cd_loss
from companion.cpmla.metrics import energy_distance, kid, sliced_w2
from companion.cpmla.mirror_map import (MAX_FULL_DIM, ConvexPotential, InverseNotConverged, QuadraticPotential,
                                        gaussian_softplus)
from companion.cpmla.samplers import NonFiniteChain, mala, mirror_langevin, ula
from companion.cpmla.targets import (eight_gaussians, ill_conditioned_gaussian, newton_stationary_covariance,
                                     upsampled_digits)

D64 = torch.float64


@pytest.fixture(scope="module")
def G():
    torch.manual_seed(0)
    return ConvexPotential(2, hidden=16, seed=0)


def _autograd_derivs(G, x):
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(G.derivatives(x).value.sum(), x, create_graph=True)
    H = torch.stack([torch.autograd.grad(g[:, i].sum(), x, retain_graph=True)[0] for i in range(x.shape[1])], 1)
    return g.detach(), H.detach()


def test_gaussian_softplus_is_the_integral_of_phi():
    t = torch.linspace(-5, 5, 101, dtype=D64, requires_grad=True)
    s = gaussian_softplus(t)
    (d1,) = torch.autograd.grad(s.sum(), t, create_graph=True)
    (d2,) = torch.autograd.grad(d1.sum(), t)
    assert torch.allclose(d1, 0.5 * (1 + torch.erf(t / math.sqrt(2))))
    assert bool((d2 > 0).all()) and float(s.detach().min()) > 0


@pytest.mark.parametrize("dim", [2, 5])
def test_closed_form_derivatives_match_autograd(dim):
    G = ConvexPotential(dim, hidden=7, depth=3, seed=1)
    x = torch.randn(9, dim, dtype=D64)
    d = G.derivatives(x, hessian="full")
    g, H = _autograd_derivs(G, x)
    assert torch.allclose(d.grad, g, atol=1e-12) and torch.allclose(d.hess, H, atol=1e-12)
    # exact diagonal = d Hessian-vector products with unit vectors
    assert torch.allclose(G.hessian_diag(x), torch.diagonal(H, dim1=1, dim2=2), atol=1e-12)
    v = torch.randn(9, dim, dtype=D64)
    assert torch.allclose(G.hvp(x, v), torch.einsum("bij,bj->bi", H, v), atol=1e-12)


def test_hutchinson_diagonal_is_unbiased(G):
    x = torch.randn(4, 2, dtype=D64)
    est = G.hessian_diag_hutchinson(x, n_probes=4000, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(est, G.hessian_diag(x), rtol=0.1, atol=0.02)


def test_icnn_convex_on_segments_and_hessian_at_least_alpha(G):
    g = torch.Generator().manual_seed(3)
    a, b = 3 * torch.randn(500, 2, generator=g, dtype=D64), 3 * torch.randn(500, 2, generator=g, dtype=D64)
    lam = torch.rand(500, 1, generator=g, dtype=D64)
    lhs = G.icnn(lam * a + (1 - lam) * b)
    assert bool((lhs <= lam[:, 0] * G.icnn(a) + (1 - lam[:, 0]) * G.icnn(b) + 1e-12).all())
    with torch.no_grad():
        assert float(torch.linalg.eigvalsh(G.hessian(a)).min()) >= G.alpha


@pytest.mark.parametrize("method", ["newton", "lbfgs"])
def test_inverse_mirror_map_roundtrip(G, method):
    x = 2 * torch.randn(64, 2, dtype=D64)
    with torch.no_grad():
        res = G.inverse(G.grad(x), method=method, tol=1e-7, max_iter=500)
    assert float((res.x - x).abs().max()) < 1e-5 and res.residual <= 1e-7


def test_inverse_that_misses_its_tolerance_raises_with_the_residual(G):
    y = 5 * torch.randn(32, 2, dtype=D64)
    with pytest.raises(InverseNotConverged, match="residual") as err:
        G.inverse(y, x0=torch.zeros_like(y), method="newton", tol=1e-14, max_iter=1)
    assert err.value.residual > 1e-14
    assert G.inverse(y, x0=torch.zeros_like(y), tol=1e-14, max_iter=1, raise_on_fail=False).residual > 0


def test_quadratic_g_reproduces_ula_exactly():
    target = ill_conditioned_gaussian(100.0)
    g = torch.Generator().manual_seed(0)
    x0, eps, eta = torch.randn(16, 2, generator=g, dtype=D64), torch.randn(7, 16, 2, generator=g, dtype=D64), 0.003
    mirror = mirror_langevin(target, QuadraticPotential.identity(2), x0, 7, eta, noise=eps).x
    x = x0.clone()
    for k in range(7):  # ULA, δ = 2η: x + (δ/2)∇f + √δ ε
        x = x + eta * target.grad_log_prob(x) + math.sqrt(2 * eta) * eps[k]
    assert torch.allclose(mirror, x, atol=1e-13)
    # and the library ULA draws the same noise from the same generator
    a = ula(target, x0, 7, 2 * eta, generator=torch.Generator().manual_seed(5)).x
    b = mirror_langevin(target, QuadraticPotential.identity(2), x0, 7, eta, generator=torch.Generator().manual_seed(5)).x
    assert torch.allclose(a, b, atol=1e-13)


@pytest.mark.parametrize("diag", [False, True])
def test_newton_map_stationary_law_matches_the_exact_formula(diag):
    target = ill_conditioned_gaussian(100.0)
    newton = QuadraticPotential(target.precision)
    g = torch.Generator().manual_seed(1)
    y0 = target.sample(20000, g) @ target.precision
    eta = 0.1
    chain = mirror_langevin(target, newton, y0, 120, eta, hessian="diagonal" if diag else "full", generator=g)
    exact = newton_stationary_covariance(target.cov, eta, noise_diag=diag)
    emp = torch.cov(chain.x.T)
    assert float((chain.x.mean(0) - target.mean).norm()) < 4 * math.sqrt(float(torch.trace(exact)) / len(y0))
    assert float(torch.linalg.norm(emp - exact) / torch.linalg.norm(exact)) < 0.05
    if not diag:  # the full-Hessian bias is exactly 1/(1 − η/2)
        assert torch.allclose(exact, target.cov / (1 - eta / 2))


def test_mala_is_exact_on_a_gaussian():
    target = ill_conditioned_gaussian(10.0, offset=0.0)
    g = torch.Generator().manual_seed(2)
    out = mala(target, target.sample(4000, g), 50, 0.05, generator=g)
    assert 0.2 < out.acceptance <= 1.0
    assert float(torch.linalg.norm(torch.cov(out.x.T) - target.cov) / torch.linalg.norm(target.cov)) < 0.08


def _mala_variance_ratio(mala_fn, delta, n=10000, T=50, seed=0):
    """Per-coordinate variance of MALA's chains over the target's, started at exact samples of N(0, diag(1, 1/4))."""
    from companion.cpmla.targets import GaussianTarget

    target = GaussianTarget([0.0, 0.0], [[1.0, 0.0], [0.0, 0.25]])
    g = torch.Generator().manual_seed(seed)
    out = mala_fn(target, target.sample(n, g), T, delta, generator=g)
    return out.x.var(0) / torch.diag(target.cov), out.x.mean(0), out.acceptance


def test_mala_keeps_the_gaussian_at_a_large_step():
    """At δ = 1 (4x the smaller variance) the Metropolis-Hastings ratio carries the whole correction: ULA's
    proposal alone inflates the variance by a third or more, and an acceptance ratio with a wrong term (no Hastings
    correction, the reverse proposal's drift at the wrong point, a flipped sign, a wrong proposal variance) moves
    the stationary variance by 15 % or more, while exact MALA started at the target stays there."""
    from companion.cpmla.targets import GaussianTarget

    target = GaussianTarget([0.0, 0.0], [[1.0, 0.0], [0.0, 0.25]])
    g = torch.Generator().manual_seed(1)
    ula_var = ula(target, target.sample(10000, g), 50, 1.0, generator=g).x.var(0) / torch.diag(target.cov)
    assert bool((ula_var > 1.25).all()), ula_var  # the step is large enough for the bias to show
    var, mean, acc = _mala_variance_ratio(mala, 1.0)
    assert 0.2 < acc < 0.9, acc
    assert float((var - 1).abs().max()) < 0.05, var
    assert float(mean.abs().max()) < 0.05, mean


def test_hutchinson_logdet_gradient_agrees_with_exact(G):
    x = torch.randn(32, 2, dtype=D64)
    params = list(G.parameters())

    def grads(loss):
        return torch.cat([torch.zeros_like(p).flatten() if g is None else g.flatten()
                          for p, g in zip(params, torch.autograd.grad(loss, params, allow_unused=True))])

    exact = grads(exact_logdet(G, x).mean())
    draws = torch.stack([grads(logdet_surrogate(G, x, n_probes=1, generator=torch.Generator().manual_seed(s)).mean())
                         for s in range(200)])
    se = draws.std(0) / math.sqrt(len(draws))
    assert bool(((draws.mean(0) - exact).abs() <= 5 * se + 1e-10).all())


def test_conjugate_gradient_solves_spd_systems():
    A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=D64)
    b = torch.randn(5, 2, dtype=D64)
    z = conjugate_gradient(lambda v: v @ A, b, iters=5)
    assert torch.allclose(z @ A, b, atol=1e-10)


def test_fit_flow_lowers_the_loss_and_cd_loss_sign():
    target = eight_gaussians()
    G = ConvexPotential(2, hidden=8, seed=0)
    hist = fit_flow(G, target.sample(512, torch.Generator().manual_seed(0)), steps=40, batch=128, lr=1e-2, logdet="exact")
    assert np.mean(hist[-5:]) < np.mean(hist[:5])
    ebm = EBM(2, hidden=8, seed=0)
    x = torch.randn(10, 2, dtype=D64)
    assert float(cd_loss(ebm, x, x).detach()) == pytest.approx(0.0, abs=1e-12)
    assert torch.allclose(ebm.grad_log_prob(x), _grad(ebm, x))


def _grad(ebm, x):
    x = x.clone().requires_grad_(True)
    return torch.autograd.grad(ebm(x).sum(), x)[0]


def test_metrics_known_values():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(500, 2, generator=g, dtype=D64)
    assert energy_distance(a, a) == pytest.approx(0.0, abs=1e-12)
    assert sliced_w2(a, a + torch.tensor([3.0, 0.0], dtype=D64)) > 1.0
    assert energy_distance(a, a + 1) > energy_distance(a, torch.randn(500, 2, generator=g, dtype=D64))
    f = torch.randn(200, 8, generator=g)
    assert abs(kid(f, torch.randn(200, 8, generator=g))) < 0.5 < kid(f, f + 3)


def test_digits_are_upsampled_and_scaled():
    x = upsampled_digits(16, n=50)
    assert x.shape == (50, 256) and x.min() >= -1 - 1e-6 and x.max() <= 1 + 1e-6


def test_bad_input_names_the_parameter():
    with pytest.raises(ParameterError, match="alpha"):
        ConvexPotential(2, alpha=0.0)
    with pytest.raises(ParameterError, match="alpha"):
        ConvexPotential(2, alpha=-1e-3)
    target = ill_conditioned_gaussian()
    G = ConvexPotential(2, seed=0)
    y = torch.randn(4, 2, dtype=D64)
    with pytest.raises(ParameterError, match="eta"):
        mirror_langevin(target, G, y, 3, 0.0)
    with pytest.raises(ParameterError, match="T"):
        mirror_langevin(target, G, y, 0, 0.1)
    with pytest.raises(ParameterError, match="dimension"):
        mirror_langevin(target, ConvexPotential(3, seed=0), y, 3, 0.1)
    big = ConvexPotential(MAX_FULL_DIM + 1, hidden=2, seed=0)
    with pytest.raises(ParameterError, match="diagonal"):
        big.hessian(torch.randn(1, MAX_FULL_DIM + 1, dtype=D64))
    with pytest.raises(ParameterError, match="hessian"):
        mirror_langevin(target, G, y, 3, 0.1, hessian="exact")


def test_non_finite_gradient_mid_chain_is_a_clear_error():
    target = ill_conditioned_gaussian(100.0)
    with pytest.raises(NonFiniteChain, match="step"):
        ula(target, torch.randn(8, 2, dtype=D64), 2000, 1.0)


def test_every_sampler_starts_from_the_same_primal_points(G):
    """Review item 10: the learned mirror chain used to start at y₀ ~ N(0, I), i.e. from the pre-fitted flow's own
    samples, while ULA started at x₀ ~ N(0, I): the comparison measured the flow, not the sampler. Every sampler
    of the fixed-target comparison now starts from the same x₀ (a mirror chain at y₀ = ∇G(x₀))."""
    from companion.cpmla.experiments import SAMPLERS, compare_fixed_target, run_sampler, step_sizes

    target = ill_conditioned_gaussian(10.0)
    etas, _ = step_sizes(target, G, 0.2)
    x0 = torch.randn(16, 2, generator=torch.Generator().manual_seed(0), dtype=D64)
    for name in SAMPLERS:
        chain = run_sampler(name, target, G, 16, 1, etas, torch.Generator().manual_seed(1), record=True, x0=x0)
        assert torch.allclose(chain.xs[0], x0, atol=1e-6), name
    out = compare_fixed_target(target, G, Ts=(1, 2), n_chains=20, seeds=(0, 1), samplers=SAMPLERS[:2])
    assert len(out["start"]) == 2 and out["start_law"] == "normal"
    at_target = compare_fixed_target(target, G, Ts=(1,), n_chains=200, seeds=(0,), samplers=SAMPLERS[:1],
                                     start="target")
    assert at_target["start"][0] < 0.1 < out["start"][0]  # exact target samples vs N(0, I) far from the mean
    with pytest.raises(ParameterError):
        compare_fixed_target(target, G, Ts=(1,), n_chains=20, seeds=(0,), start="flow")


def test_gpu_study_stages_refuse_a_bad_profile_and_a_missing_seed_stage():
    """The GPU study's stage bodies: a wrong profile value fails early with a ParameterError naming its key, and a
    sampling stage run without a seed stage in the same call says what to run."""
    from companion.core.stages import StageContext
    from companion.cpmla import study
    from companion.cpmla.scale import SMOKE_PROFILE

    def ctx(**profile):
        return StageContext(profile={**SMOKE_PROFILE, **profile}, device="cpu", log=lambda *a: None, results={})

    with pytest.raises(ParameterError, match="hessian"):
        study.seed_run(ctx(hessian="exact"), 0)
    with pytest.raises(ParameterError, match="dtype"):
        study.seed_run(ctx(dtype="bfloat16"), 0)
    for stage in (study.sampling_time, study.hessian_ablation, study.lbfgs_ablation):
        with pytest.raises(RuntimeError, match="--stages seed_0"):
            stage(ctx())


def test_residual_stats_known_values():
    from companion.cpmla.study import residual_stats

    got = residual_stats(torch.tensor([1e-4, 2e-4, 5e-4, 2e-3]), 1e-3)
    assert got == pytest.approx({"median": 2e-4, "max": 2e-3, "share_converged": 0.75})


def test_samplers_share_their_start_and_noise():
    """With the mirror map G = ½‖x‖² the CPMLA chain is ULA with δ = 2η (same start, same Gaussian draws), so
    compare_samplers must give the two identical samples; CP-Flow alone is its own flow's map of the same y₀."""
    from companion.cpmla.ebm import EBM
    from companion.cpmla.study import compare_samplers

    ebm = EBM(3, hidden=8, seed=0)
    identity, doubled = QuadraticPotential.identity(3), QuadraticPotential.identity(3, scale=2.0)
    y0 = torch.randn(16, 3, generator=torch.Generator().manual_seed(0), dtype=D64)
    P = {"inverse": "lbfgs", "inverse_tol": 1e-6, "inverse_max_iter": 5, "T": 4, "eta": 0.05, "hessian": "diagonal",
         "temperature": 0.5}
    out = compare_samplers(ebm, identity, doubled, y0, P, seed=3)
    assert torch.allclose(out["samples"]["cpmla"], out["samples"]["langevin"], atol=1e-12)
    assert torch.allclose(out["start"], y0) and torch.allclose(out["samples"]["cpflow"], y0 / 2)


def test_cooperative_training_records_the_energy_per_epoch():
    from companion.cpmla.cooperative import CoopConfig, cooperative_train

    data = torch.from_numpy(upsampled_digits(8, n=64)).double()
    res = cooperative_train(data, CoopConfig(epochs=2, batch=32, T=1, flow_hidden=4, ebm_hidden=8, hessian="diagonal",
                                             inverse="lbfgs", inverse_tol=1e-3, eval_epochs=(), energy_reg=1e-2))
    assert len(res.history["f_data"]) == len(res.history["f_samples"]) == 2
    assert all(math.isfinite(v) for v in res.history["f_data"] + res.history["f_samples"])


def test_temperature_scales_only_the_noise():
    from companion.cpmla.targets import GaussianTarget

    target = GaussianTarget(torch.zeros(2), torch.eye(2))
    x0 = torch.ones(4, 2, dtype=torch.float64)
    cold = ula(target, x0, 3, 0.1, generator=torch.Generator().manual_seed(0), temperature=0.0).x
    assert torch.allclose(cold, x0 * 0.95 ** 3)  # noiseless ULA on N(0, I): x ← (1 − δ/2) x
    hot = ula(target, x0, 1, 0.1, generator=torch.Generator().manual_seed(1), temperature=0.25).x
    eps = torch.randn(4, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.allclose(hot, 0.95 * x0 + math.sqrt(0.25 * 0.1) * eps)
    with pytest.raises(ParameterError, match="temperature"):
        ula(target, x0, 1, 0.1, temperature=-1.0)
    # with G = ½‖x‖² the mirror chain at temperature τ is ULA (δ = 2η) at the same τ
    mirror = mirror_langevin(target, QuadraticPotential.identity(2), x0, 3, 0.05, generator=torch.Generator().manual_seed(2),
                             temperature=0.25).x
    assert torch.allclose(mirror, ula(target, x0, 3, 0.1, generator=torch.Generator().manual_seed(2), temperature=0.25).x)
