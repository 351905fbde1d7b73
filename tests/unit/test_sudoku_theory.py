"""Paper 06, App. E: contextual Min-Sum Set Cover, Example E.1, Theorem E.2, and the L1/L2 guess policy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from companion.sudoku_dfs import mssc
from companion.sudoku_dfs.backdoors import find_backdoors
from companion.sudoku_dfs.generator import generate_puzzle
from companion.sudoku_dfs.policy import (
    FEATURES,
    fit_policy,
    move_features,
    n_empty_of,
    oracle_probability,
    policy_data,
    policy_loss,
    success_probability,
)


def test_example_e1_exact_values():
    n = 20
    A, q = mssc.example_e1(n)
    assert mssc.cover_time(mssc.greedy_order(A, q), A, q) == pytest.approx(4 / 3)
    assert mssc.cover_time(mssc.marginal_order(A, q), A, q) == pytest.approx((n + 2) / 3)
    # marginal policy: pi(S1) = 2(n-1)/(2n-1), pi({n}) = 1/(2n-1)
    e_marg = (2 / 3) * (2 * n - 1) / (2 * (n - 1)) + (1 / 3) * (2 * n - 1)
    assert mssc.expected_trials(mssc.marginal_policy(A, q), A, q) == pytest.approx(e_marg)
    assert mssc.expected_trials(mssc.log_policy(A, q), A, q) == pytest.approx(2.0, abs=1e-6)
    # convex optimum: pi(S1) = sqrt(2)/(1+sqrt(2)), value (1+sqrt(2))^2/3
    assert mssc.optimal_policy(A, q)[1] == pytest.approx((1 + math.sqrt(2)) ** 2 / 3, rel=1e-6)


def test_cover_time_brute_force_and_greedy_within_4():
    import itertools

    rng = np.random.default_rng(1)
    for _ in range(5):
        A, q = mssc.random_instance(6, 5, rng)
        best = min(mssc.cover_time(p, A, q) for p in itertools.permutations(range(6)))
        greedy = mssc.cover_time(mssc.greedy_order(A, q), A, q)
        assert best - 1e-12 <= greedy <= 4 * best + 1e-12
        qs = mssc.cover_position_probs(mssc.greedy_order(A, q), A, q)
        assert qs.sum() == pytest.approx(1.0) and (np.arange(1, 7) * qs).sum() == pytest.approx(greedy)


def test_theorem_e2_holds_on_random_instances():
    rng = np.random.default_rng(0)
    for _ in range(20):
        A, q = mssc.random_instance(10, 7, rng)
        r = mssc.theorem_e2_check(A, q)
        assert r["holds"], r
        assert r["optimum"] <= r["sqrt_policy"] + 1e-9


def test_nonadaptive_objective_is_convex():
    rng = np.random.default_rng(2)
    A, q = mssc.random_instance(8, 6, rng)
    for _ in range(50):
        a, b = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
        lam = rng.random()
        mid = mssc.expected_trials(lam * a + (1 - lam) * b, A, q)
        assert mid <= lam * mssc.expected_trials(a, A, q) + (1 - lam) * mssc.expected_trials(b, A, q) + 1e-9


def test_optimal_policy_beats_random_policies():
    rng = np.random.default_rng(3)
    A, q = mssc.random_instance(7, 5, rng)
    _, opt = mssc.optimal_policy(A, q)
    for _ in range(200):
        assert opt <= mssc.expected_trials(rng.dirichlet(np.ones(7)), A, q) + 1e-9


def test_mssc_input_errors():
    with pytest.raises(ValueError, match="non-empty"):
        mssc.cover_time([0, 1], np.array([[False, False]]), np.array([1.0]))
    with pytest.raises(ValueError, match="sum to 1"):
        mssc.greedy_order(np.array([[True, False]]), np.array([0.5]))


@pytest.fixture(scope="module")
def infos():
    return find_backdoors([generate_puzzle(9, 50_000 + i)[0] for i in range(40)])


def test_policy_features_and_losses(infos):
    stuck = [i for i in infos if i.needs_guess and i.n_backdoors]
    f = move_features(stuck[0].fixpoint, stuck[0].moves)
    assert f.shape == (len(stuck[0].moves), len(FEATURES)) and np.isfinite(f).all()
    data = policy_data(infos)
    import torch

    theta = torch.zeros(len(FEATURES), dtype=torch.float64)
    # uniform policy: L1 = mean log(#moves / #backdoors); L2 = mean sum_S log #moves
    m, g = data.mask.sum(1), data.good.sum(1)
    assert float(policy_loss(theta, data, "l1")) == pytest.approx(np.mean(np.log(m / g)))
    assert float(policy_loss(theta, data, "l2")) == pytest.approx(np.mean(g * np.log(m)))
    # a uniform policy is exactly the lower-bound oracle
    w = np.zeros(len(FEATURES) + 1)
    assert np.allclose(success_probability(w, data), oracle_probability(data, "lower"))
    assert np.all(oracle_probability(data, "upper", n_empty_of(infos)) >= oracle_probability(data, "lower"))


def test_l1_fit_minimises_the_log_of_the_trials_in_sample(infos):
    """L1 = -log p(S) = log(expected trials): its fit has the smallest mean log-trials on its own data."""
    data = policy_data(infos)
    logt = {k: np.log(1 / success_probability(fit_policy(data, k, ridge=0.0), data)).mean() for k in ("l1", "l2")}
    uniform = np.log(1 / oracle_probability(data, "lower")).mean()
    assert logt["l1"] <= logt["l2"] + 1e-6
    assert logt["l1"] <= uniform + 1e-6  # the uniform policy (lower-bound oracle) is one of the candidates
