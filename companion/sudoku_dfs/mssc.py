"""Contextual Min-Sum Set Cover: the theory behind the L1 guessing loss (paper 06, App. E).

Paper: Giannoulis, Pantis, Tzamos, NeurIPS 2025 (arXiv 2509.22023), Appendix E.

A context (a stuck puzzle) draws a random set S of "good" elements (its backdoors) from a
distribution D over subsets of ``[n]``. A guesser must hit S.

* **Permutation (MSSC) cost** of an order tau: ``E_S[min{i : tau_i in S}]`` (1-based). Greedy -
  repeatedly take the element covering the most remaining probability - is 4-approximate and beating
  4 is NP-hard (Feige, Lovasz, Tetali 2002).
* **Non-adaptive randomised policy** pi (a distribution over elements, sampled with replacement, as
  in one-level guessing with restarts): expected trials ``E_S[1 / pi(S)]``. This objective is
  **convex** in pi, so the best such policy is found by convex optimisation.
* **Theorem E.2**: ``min_pi E[1/pi(S)] <= H_n * E[cover time of tau]`` for every order tau. Proof:
  with ``q_i = P(tau covers S exactly at position i)`` take ``pi(tau_i) ~ sqrt(q_i)``; then
  ``E[1/pi(S)] <= (sum_i sqrt(q_i))^2 <= (sum_i i q_i)(sum_i 1/i)`` by Cauchy-Schwarz.
* **Example E.1**: S = {1..n-1} w.p. 2/3 and S = {n} w.p. 1/3. The best order costs 4/3; ordering by
  marginals P(i in S) puts n last and costs (n+2)/3; the policy proportional to the marginals - what
  weighted cross-entropy (the L2 loss) converges to, Remark E.1 - needs Theta(n) expected trials,
  while maximising E[log pi(S)] (the L1 loss as trained) gives pi(S) = P(S) and 2 trials.

Distributions are given as a boolean matrix ``sets [K, n]`` (row k = the k-th possible S) and
probabilities ``prob [K]``. Greedy MSSC is here as the benchmark the paper compares with, not as a
solver the model uses.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize


def _check(sets, prob):
    A = np.asarray(sets, dtype=bool)
    q = np.asarray(prob, dtype=float)
    if A.ndim != 2 or q.ndim != 1 or A.shape[0] != q.shape[0]:
        raise ValueError(f"sets must be [K, n] and prob [K]; got {A.shape} and {q.shape}")
    if (q < 0).any() or not np.isclose(q.sum(), 1.0):
        raise ValueError("prob must be non-negative and sum to 1")
    if not A.any(1).all():
        raise ValueError("every set must be non-empty (a context without a good element cannot be covered)")
    return A, q


def cover_time(order, sets, prob) -> float:
    """``E_S[min{i : order_i in S}]`` (1-based; ``inf`` when some set with mass is never covered)."""
    A, q = _check(sets, prob)
    order = np.asarray(order)
    hit = A[:, order]  # [K, len(order)]
    first = np.where(hit.any(1), hit.argmax(1) + 1, np.inf)
    return float((q * first).sum())


def cover_position_probs(order, sets, prob) -> np.ndarray:
    """``q_i = P(order covers S exactly at position i)`` for i = 1..len(order)."""
    A, q = _check(sets, prob)
    hit = A[:, np.asarray(order)]
    first = hit.argmax(1)
    out = np.zeros(hit.shape[1])
    np.add.at(out, first[hit.any(1)], q[hit.any(1)])
    return out


def greedy_order(sets, prob) -> np.ndarray:
    """Greedy MSSC: repeatedly the element covering the most still-uncovered probability mass."""
    A, q = _check(sets, prob)
    n = A.shape[1]
    alive = np.ones(A.shape[0], dtype=bool)
    order = []
    remaining = list(range(n))
    while remaining:
        gains = (q[alive, None] * A[alive][:, remaining]).sum(0)
        j = remaining[int(np.argmax(gains))]
        order.append(j)
        remaining.remove(j)
        alive &= ~A[:, j]
    return np.array(order)


def marginal_order(sets, prob) -> np.ndarray:
    """Elements by decreasing marginal ``P(i in S)`` (ties by index)."""
    A, q = _check(sets, prob)
    return np.argsort(-(q[:, None] * A).sum(0), kind="stable")


def expected_trials(pi, sets, prob) -> float:
    """``E_S[1 / pi(S)]``: expected guesses of the non-adaptive policy ``pi`` with restarts."""
    A, q = _check(sets, prob)
    p = np.asarray(pi, dtype=float)
    mass = A @ p
    with np.errstate(divide="ignore"):
        return float(np.sum(np.where(q > 0, q / np.maximum(mass, 0.0), 0.0))) if (mass[q > 0] > 0).all() else float("inf")


def marginal_policy(sets, prob) -> np.ndarray:
    """pi proportional to the marginals: the optimum of weighted cross-entropy (the L2 loss)."""
    A, q = _check(sets, prob)
    m = (q[:, None] * A).sum(0)
    return m / m.sum()


def log_policy(sets, prob, iters: int = 2000, tol: float = 1e-12) -> np.ndarray:
    """argmax_pi E[log pi(S)]: the optimum of the L1 loss as trained (-log sum_{i in S} p_i).

    Concave maximisation over the simplex, solved by the EM fixed point
    ``pi_i <- sum_k q_k pi_i [i in S_k] / pi(S_k)``.
    """
    A, q = _check(sets, prob)
    pi = np.full(A.shape[1], 1.0 / A.shape[1])
    for _ in range(iters):
        mass = A @ pi
        new = pi * ((q / mass) @ A)
        new /= new.sum()
        if np.abs(new - pi).max() < tol:
            return new
        pi = new
    return pi


def optimal_policy(sets, prob, restarts: int = 1) -> tuple[np.ndarray, float]:
    """argmin_pi E[1/pi(S)] (convex) by L-BFGS over a softmax parametrisation; returns (pi, value)."""
    A, q = _check(sets, prob)
    n = A.shape[1]
    best = (None, np.inf)
    starts = [np.log(np.maximum(log_policy(A, q), 1e-12))] + [np.zeros(n)] * max(0, restarts - 1)
    for theta0 in starts:

        def f(theta):
            z = theta - theta.max()
            pi = np.exp(z) / np.exp(z).sum()
            mass = A @ pi
            val = float((q / mass).sum())
            g_pi = -((q / mass**2) @ A)
            g_theta = pi * (g_pi - pi @ g_pi)
            return val, g_theta

        res = minimize(f, theta0, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-12, "ftol": 1e-15})
        z = res.x - res.x.max()
        pi = np.exp(z) / np.exp(z).sum()
        val = expected_trials(pi, A, q)
        if val < best[1]:
            best = (pi, val)
    return best


def sqrt_policy(order, sets, prob) -> np.ndarray:
    """The policy of Theorem E.2: ``pi(order_i) ~ sqrt(q_i)``, q_i the cover-position probabilities."""
    A, _ = _check(sets, prob)
    qs = cover_position_probs(order, sets, prob)
    pi = np.zeros(A.shape[1])
    pi[np.asarray(order)] = np.sqrt(qs)
    return pi / pi.sum()


def theorem_e2_check(sets, prob) -> dict:
    """The chain of Theorem E.2 for the greedy order: every value, and whether each inequality holds."""
    A, q = _check(sets, prob)
    n = A.shape[1]
    order = greedy_order(A, q)
    qs = cover_position_probs(order, A, q)
    pi_sqrt = sqrt_policy(order, A, q)
    _, opt = optimal_policy(A, q)
    e_sqrt = expected_trials(pi_sqrt, A, q)
    cs = float(np.sqrt(qs).sum() ** 2)
    cover = cover_time(order, A, q)
    harmonic = float((1.0 / np.arange(1, n + 1)).sum())
    rhs = harmonic * cover
    eps = 1e-9 * max(1.0, rhs)
    return {
        "optimum": opt,
        "sqrt_policy": e_sqrt,
        "cauchy_schwarz": cs,
        "greedy_cover_time": cover,
        "H_n": harmonic,
        "bound": rhs,
        "holds": bool(opt <= e_sqrt + eps and e_sqrt <= cs + eps and cs <= rhs + eps),
    }


def example_e1(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Example E.1: S = {1..n-1} with probability 2/3 and S = {n} with probability 1/3 (0-based here)."""
    if n < 2:
        raise ValueError("Example E.1 needs n >= 2")
    A = np.zeros((2, n), dtype=bool)
    A[0, : n - 1] = True
    A[1, n - 1] = True
    return A, np.array([2 / 3, 1 / 3])


def example_e1_table(ns) -> list[dict]:
    """Every policy/order of Example E.1 for each n (what the notebook plots)."""
    rows = []
    for n in ns:
        A, q = example_e1(n)
        rows.append(
            {
                "n": n,
                "greedy order (cover time)": cover_time(greedy_order(A, q), A, q),
                "marginal order (cover time)": cover_time(marginal_order(A, q), A, q),
                "L2 / marginal policy (trials)": expected_trials(marginal_policy(A, q), A, q),
                "L1 / log policy (trials)": expected_trials(log_policy(A, q), A, q),
                "convex optimum (trials)": optimal_policy(A, q)[1],
            }
        )
    return rows


def random_instance(n: int, k: int, rng: np.random.Generator, density: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """A random distribution over ``k`` non-empty subsets of ``[n]`` (for the Theorem E.2 check)."""
    A = rng.random((k, n)) < density
    for row in A:
        if not row.any():
            row[rng.integers(n)] = True
    q = rng.dirichlet(np.ones(k))
    return A, q
