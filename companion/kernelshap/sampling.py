"""Sampling coalitions for the sketched Shapley problem (paper, Sec. 2.2 and App. F).

Every distribution depends on the subset size only: ``p_S ∝ k(S)^τ ‖u_S‖^{2(1-τ)}`` with the
Shapley kernel ``k(S) = (d-1) / (C(d,s) s (d-s))`` and leverage ``‖u_S‖² ∝ 1/C(d,s)``, hence

    P(size = s) ∝ (s (d - s))^(-τ),    s = 1 … d-1,

with τ = 1 the kernel weights (KernelSHAP), τ = 0 leverage / ℓ2-squared (LeverageSHAP, uniform over
sizes) and τ = ½ the paper's modified ℓ2. A sample is returned as boolean masks with the diagonal of
SᵀS for each row (the *squared* sketch weight), so that E[SᵀS] = I. The weights are kept as logarithms:
at d = 3072 a leverage-sampled subset of size d/2 has p_S ≈ e^-2120, so 1/p_S overflows float64 while
the product with the Shapley kernel k(S) that the estimators need is of order one.

- with replacement: m i.i.d. rows, weight ``1 / (m p_S)``;
- without replacement: each subset independently with ``q_S = min(1, c p_S)``, c chosen (exactly, in
  log space; the paper uses a search) so that the expected number of rows is m, weight ``1 / q_S``;
  counts per size are Binomial(C(d,s), q_s), or Poisson(C(d,s) q_s) when C(d,s) > 1e10 (as in the
  paper's App. F), then that many distinct uniform subsets of the size.
- paired: every sampled S comes with its complement (p_S = p_{S^c}, so the weights are unchanged).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln

DISTRIBUTIONS = {"kernel": 1.0, "modified": 0.5, "leverage": 0.0}
POISSON_ABOVE = 1e10
ENUMERATE_BELOW = 200_000


@dataclass
class Sample:
    """Sampled coalitions: ``masks`` [n, d] bool (a torch tensor when sampled on a device), the log of
    the diagonal of SᵀS per row, the subset sizes, and whether rows come in pairs (S, S^c)."""

    masks: np.ndarray
    log_weights: np.ndarray  # [n] log of the diagonal of SᵀS
    sizes: np.ndarray  # [n] |S| per row (known at sampling time: no device round trip)
    paired: bool = False

    @property
    def weights(self) -> np.ndarray:
        """The diagonal of SᵀS (may overflow to inf for large d; the estimators use log_weights)."""
        with np.errstate(over="ignore"):
            return np.exp(self.log_weights)

    @property
    def equations(self) -> int:
        """Rows that constrain the regression: a pair (S, S^c) is one equation in 1^⊥ (z_S + z_Sc = 1)."""
        return len(self.sizes) // 2 if self.paired else len(self.sizes)


def tau_of(distribution) -> float:
    """τ for a named distribution, or a number in [0, 1] as is."""
    if isinstance(distribution, str):
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution {distribution!r} is not one of {', '.join(DISTRIBUTIONS)} (or a τ in [0, 1])")
        return DISTRIBUTIONS[distribution]
    tau = float(distribution)
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"τ = {tau} must lie in [0, 1]")
    return tau


def log_binom(d: int, s) -> np.ndarray:
    s = np.asarray(s, dtype=float)
    return gammaln(d + 1) - gammaln(s + 1) - gammaln(d - s + 1)


def size_distribution(d: int, distribution="leverage") -> np.ndarray:
    """P(size = s) for s = 1 … d-1 (index s-1)."""
    s = np.arange(1, d)
    logp = -tau_of(distribution) * np.log(s * (d - s))
    p = np.exp(logp - logp.max())
    return p / p.sum()


def subset_log_prob(d: int, distribution) -> np.ndarray:
    """log p_S for a subset of size s (index s-1): log P(size=s) - log C(d, s)."""
    return np.log(size_distribution(d, distribution)) - log_binom(d, np.arange(1, d))


def random_masks(sizes: np.ndarray, d: int, rng: np.random.Generator, device=None):
    """Uniform subsets with the given sizes, one per row (a torch tensor on ``device`` if given).

    Row i holds the features whose random rank is below sizes[i] (one sort per row, ranks scattered).
    """
    sizes = np.asarray(sizes)
    if device is not None:
        import torch

        gen = torch.Generator(device=device).manual_seed(int(rng.integers(2**62)))
        order = torch.rand((len(sizes), d), generator=gen, device=device).argsort(1)
        ranks = torch.empty_like(order).scatter_(1, order, torch.arange(d, device=device).expand(len(sizes), d))
        return ranks < torch.as_tensor(sizes, device=device)[:, None]
    order = np.argsort(rng.random((len(sizes), d)), axis=1)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(d)[None, :], axis=1)
    return ranks < sizes[:, None]


def _with_replacement(d, m, distribution, paired, rng, device=None) -> Sample:
    draws = m // 2 if paired else m
    sizes = rng.choice(np.arange(1, d), size=draws, p=size_distribution(d, distribution))
    masks = random_masks(sizes, d, rng, device)
    log_weights = -np.log(m) - subset_log_prob(d, distribution)[sizes - 1]
    if paired:  # E[count of S] = (m/2) p_S + (m/2) p_{S^c} = m p_S: the weights are unchanged
        masks_cat = np.concatenate if device is None else _torch_cat
        masks, log_weights, sizes = masks_cat([masks, ~masks]), np.tile(log_weights, 2), np.concatenate([sizes, d - sizes])
    return Sample(masks, log_weights, sizes, paired)


def inclusion_log_probs(d: int, m: int, distribution, paired: bool = True) -> np.ndarray:
    """log q_s per size for sampling without replacement, q_S = min(1, c p_S) with E[#rows] = m.

    Σ_s C(d,s) min(1, c p_s) is piecewise linear in c, so c is found exactly: saturate the sizes in
    order of decreasing p_s while the saturated buckets leave room, then c = (m − Σ_sat C(d,s)) /
    Σ_unsat P(size = s). All in log space except the saturated counts, which never exceed m.
    (Pairing does not change q: a pair {S, S^c} is kept with probability q_s and holds two rows.)
    """
    if d < 63 and m >= 2**d - 2:
        return np.zeros(d - 1)  # every coalition is kept (exactly, not up to rounding)
    s = np.arange(1, d)
    logp, logc_s, log_size_p = subset_log_prob(d, distribution), log_binom(d, s), np.log(size_distribution(d, distribution))
    order = np.argsort(-logp, kind="stable")
    saturated_rows = 0.0
    for k in range(d - 1):
        rest = order[k:]
        room = m - saturated_rows
        log_c = np.log(room) - np.logaddexp.reduce(log_size_p[rest]) if room > 0 else -np.inf
        if log_c + logp[order[k]] <= 0:  # the next candidate need not saturate: consistent
            log_q = np.minimum(0.0, log_c + logp)
            log_q[order[:k]] = 0.0  # the saturated sizes (also when they use up m exactly: room = 0)
            return log_q
        saturated_rows += np.exp(logc_s[order[k]])
    return np.zeros(d - 1)  # m = 2^d − 2: every coalition is kept


def _enumerated_subsets(d: int, s: int, count: int, rng, contain_first: bool = False) -> np.ndarray:
    """``count`` distinct uniform subsets of size s from an enumerated pool (optionally all holding feature 0)."""
    pool_d, pool_s = (d - 1, s - 1) if contain_first else (d, s)
    combos = np.array(list(itertools.combinations(range(pool_d), pool_s)), dtype=np.int64).reshape(-1, pool_s)
    masks = np.zeros((count, pool_d), bool)
    np.put_along_axis(masks, combos[rng.choice(len(combos), size=count, replace=False)], True, axis=1)
    if contain_first:
        masks = np.concatenate([np.ones((count, 1), bool), masks], axis=1)
    return masks


def _distinct_draws(d: int, sizes: np.ndarray, paired: bool, rng) -> np.ndarray:
    """Distinct uniform subsets with the given sizes (one row per entry), by rejection of repeats.

    Drawing i.i.d. and keeping first occurrences is sequential sampling without replacement, so each
    size's set is uniform among sets of its count. With ``paired``, a size-d/2 row stands for the pair
    {S, S^c} and is stored as its member holding feature 0. Used where a pool is large against its count.
    """
    rows = np.zeros((0, d), bool)
    needed = np.asarray(sizes)
    while len(needed):
        draws = random_masks(needed, d, rng)
        if paired:
            draws[(2 * needed == d) & ~draws[:, 0]] ^= True  # S -> S^c, the same size d/2
        rows = np.concatenate([rows, draws])
        _, first = np.unique(np.packbits(rows, axis=1), axis=0, return_index=True)
        needed = np.delete(rows, first, axis=0).sum(1)  # repeats: draw that many again, size by size
        rows = rows[np.sort(first)]
    return rows


def _torch_cat(tensors):
    import torch

    return torch.cat(tensors)


def _without_replacement(d, m, distribution, paired, rng) -> Sample:
    log_q = inclusion_log_probs(d, m, distribution, paired)
    blocks, counts = [], np.zeros(d, dtype=np.int64)  # counts[s]: drawn subsets of size s
    for s in range(1, d):
        if paired and s > d - s:
            continue  # drawn as complements of size d - s
        half = paired and 2 * s == d  # pairs {S, S^c} of equal size: draw the member holding feature 0
        log_pool = log_binom(d, s) - (np.log(2) if half else 0.0)
        if log_pool > np.log(POISSON_ABOVE):
            count = int(rng.poisson(np.exp(log_pool + log_q[s - 1])))
        else:
            count = int(rng.binomial(int(round(np.exp(log_pool))), np.exp(log_q[s - 1])))
        if count and np.exp(log_pool) < ENUMERATE_BELOW and count > np.exp(log_pool) / 4:
            blocks.append(_enumerated_subsets(d, s, count, rng, contain_first=half))
        else:
            counts[s] = count
    sizes = np.repeat(np.arange(d), counts)
    blocks.append(_distinct_draws(d, sizes, paired, rng) if len(sizes) else np.zeros((0, d), bool))
    masks = np.concatenate(blocks)
    if paired:
        masks = np.concatenate([masks, ~masks])
    sizes = masks.sum(1)
    return Sample(masks, -log_q[sizes - 1] if len(sizes) else np.zeros(0), sizes, paired)


def sample_subsets(d: int, m: int, distribution="leverage", *, replacement: bool = True, paired: bool = True,
                   rng: np.random.Generator | None = None, device=None) -> Sample:
    """Draw a sketch of the 2^d - 2 proper, non-empty coalitions with (expected) m rows.

    ``device`` (with replacement only) draws the masks with torch on that device, for large d and m.
    """
    if not isinstance(d, (int, np.integer)) or d < 2:
        raise ValueError(f"d = {d!r}: Shapley estimation needs at least 2 features")
    if not isinstance(m, (int, np.integer)) or m < 2:
        raise ValueError(f"m = {m!r}: the sample budget must be an integer >= 2")
    if paired and replacement and m % 2:
        raise ValueError(f"m = {m}: paired sampling with replacement draws m/2 pairs, so m must be even")
    if not replacement and m > 2**d - 2:
        raise ValueError(f"m = {m} exceeds the 2^d - 2 = {2**d - 2} coalitions available without replacement")
    rng = rng or np.random.default_rng()
    if device is not None:
        if not replacement:
            raise ValueError("sampling on a device is implemented for sampling with replacement only")
        return _with_replacement(d, m, distribution, paired, rng, device)
    return (_with_replacement if replacement else _without_replacement)(d, m, distribution, paired, rng)
