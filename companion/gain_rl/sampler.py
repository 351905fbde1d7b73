"""GAIN-RL's data schedule: Gaussian sampling over angle ranks and the μ update (paper, Sec. 4, steps 2-3).

The pool is sorted once by angle concentration, **descending** (rank 0 = the most concentrated prompt,
which the paper finds the model learns from first). Each epoch ``t`` draws ``subset`` distinct prompts
over ranks ``r`` with

    p_t(r) ∝ exp(−(r − μ_t)² / (2σ²))                                   (σ = 1000, μ_0 = 0 in the code)

and after the epoch moves the centre by

    μ_{t+1} = μ_t + clip( n·tanh(α(acc_t − β)) + n·tanh(γ·ang_t), adj_min, adj_max )

with ``acc_t`` the epoch's mean reward divided by the reward scale (the code writes ``acc/2`` for its
reward of 2.0; here ``reward_scale`` says it), ``ang_t`` the epoch's mean online angle signal
(:func:`companion.gain_rl.angle.online_angle`), and the code's ``n = 500, α = 2, β = 0.5, adj ∈ [0, 1000]``;
``γ = α`` by default, as in the code, which uses one ``α`` for both terms.

Deviations, each on purpose:

* sampling is Gumbel-top-k on ``log p`` (the same law as NumPy's ``choice(replace=False, p=p)``, which draws
  one at a time and renormalises), so ``p`` never underflows to 0/0 and a small σ still yields ``subset``
  distinct indices;
* μ is kept inside the pool, ``[0, N−1]``: the released sampler lets it run past the last rank, where
  ``exp`` of every rank underflows once μ − N exceeds ~38σ;
* the μ used for each draw is the updated one (the verl sampler). The TRL path draws with the *old* μ
  while returning the new one (``center_index=mean``), a one-epoch lag: ``lag=True`` reproduces it;
* the curriculum rebuilds each epoch's subset explicitly (``draw()``) instead of swapping a sampler inside
  ``train_dataloader.base_dataloader.batch_sampler``.

Baselines: :class:`UniformSampler` (what vanilla GRPO sees) and :class:`FilterSampler`, DAPO's dynamic
sampling (over-draw uniformly, keep the prompts whose group rewards are not all equal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from companion.core import ParameterError, check_bool, check_float, check_int

__all__ = ["FilterSampler", "GainSampler", "UniformSampler", "check_schedule", "end_of_pool_epoch",
           "gaussian_log_probs", "gaussian_probs", "gaussian_sample", "mu_step", "replay_mu"]


def gaussian_log_probs(n_pool: int, mu: float, sigma: float) -> np.ndarray:
    """``log p(r)`` for ranks ``0..n_pool-1`` (normalised in log space)."""
    check_int("n_pool", n_pool, lo=1)
    check_float("sigma", sigma, lo=0.0, lo_open=True)
    check_float("mu", mu)
    r = np.arange(n_pool)
    logits = -0.5 * ((r - mu) / sigma) ** 2
    m = logits.max()
    return logits - (m + math.log(np.exp(logits - m).sum()))


def gaussian_probs(n_pool: int, mu: float, sigma: float) -> np.ndarray:
    """``p(r) ∝ exp(−(r − μ)²/(2σ²))`` over ranks ``0..n_pool-1``."""
    return np.exp(gaussian_log_probs(n_pool, mu, sigma))


def gaussian_sample(n_pool: int, k: int, mu: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``k`` distinct ranks, sorted, drawn without replacement from :func:`gaussian_probs` (Gumbel-top-k)."""
    check_int("subset", k, lo=1, hi=n_pool)
    keys = gaussian_log_probs(n_pool, mu, sigma) + rng.gumbel(size=n_pool)
    return np.sort(np.argpartition(-keys, k - 1)[:k])


def check_schedule(*, n: float, alpha: float, beta: float, gamma: float | None, adj_min: float, adj_max: float,
                   reward_scale: float) -> None:
    """The update's parameters: ``n >= 0``, ``α, γ >= 0``, ``β ∈ [0, 1]``, ``adj_min <= adj_max``, scale ``> 0``."""
    check_float("n", n, lo=0.0)
    check_float("alpha", alpha, lo=0.0)
    if gamma is not None:
        check_float("gamma", gamma, lo=0.0)
    check_float("beta", beta, lo=0.0, hi=1.0)
    check_float("adj_min", adj_min)
    check_float("adj_max", adj_max)
    if adj_min > adj_max:
        raise ParameterError("adj_min", adj_min, f"a number <= adj_max = {adj_max}")
    check_float("reward_scale", reward_scale, lo=0.0, lo_open=True)


def mu_step(mean_reward: float, ang: float, *, n: float, alpha: float, beta: float, gamma: float | None = None,
            adj_min: float = 0.0, adj_max: float = 1000.0, reward_scale: float = 1.0) -> float:
    """The clipped adjustment ``clip(n·tanh(α(acc − β)) + n·tanh(γ·ang), adj_min, adj_max)``,
    ``acc = mean_reward / reward_scale``, ``γ = α`` when not given."""
    check_schedule(n=n, alpha=alpha, beta=beta, gamma=gamma, adj_min=adj_min, adj_max=adj_max,
                   reward_scale=reward_scale)
    gamma = alpha if gamma is None else gamma
    acc = mean_reward / reward_scale
    adj = n * math.tanh(alpha * (acc - beta)) + n * math.tanh(gamma * ang)
    return float(min(max(adj, adj_min), adj_max))


def replay_mu(signals, n_pool: int, *, mu0: float = 0.0, **schedule) -> np.ndarray:
    """μ_0, μ_1, ... that the recorded per-epoch ``(mean_reward, ang)`` signals give under ``schedule``
    (μ kept in ``[0, n_pool−1]``)."""
    mus = [float(mu0)]
    for mean_reward, ang in signals:
        mus.append(min(max(mus[-1] + mu_step(mean_reward, ang, **schedule), 0.0), n_pool - 1.0))
    return np.array(mus)


def end_of_pool_epoch(mu_after, n_pool: int):
    """The first epoch (1-based) whose update leaves μ at the last rank ``n_pool − 1`` (None if it never does).

    ``mu_after``: μ after each epoch's update (``GainSampler.history[t]["mu_after"]``, or ``mu_used[1:]`` of a
    run without the lag). With ``adj_min >= 0`` μ never moves back, so from the next epoch on every draw is
    centred on the least concentrated prompt."""
    check_int("n_pool", n_pool, lo=1)
    for t, mu in enumerate(mu_after):
        if float(mu) >= n_pool - 1:
            return t + 1
    return None


@dataclass
class GainSampler:
    """The GAIN-RL curriculum over a pool whose items are ``order`` (sorted by concentration, descending).

    ``draw()`` gives the epoch's items; ``update(mean_reward, ang)`` moves μ after the epoch. ``history``
    records, per epoch, the μ used for the draw, the signals and the μ after the update."""

    order: np.ndarray
    subset: int
    sigma: float
    n: float
    alpha: float = 2.0
    beta: float = 0.5
    gamma: float | None = None
    adj_min: float = 0.0
    adj_max: float = 1000.0
    reward_scale: float = 1.0
    lag: bool = False
    mu0: float = 0.0
    seed: int = 0
    history: list = field(default_factory=list)

    name = "GAIN"

    def __post_init__(self):
        self.order = np.asarray(self.order)
        N = len(self.order)
        if N < 1 or len(np.unique(self.order)) != N:
            raise ParameterError("order", f"{N} items", "a non-empty permutation of the pool's indices")
        check_int("subset", self.subset, lo=1, hi=N)
        check_float("sigma", self.sigma, lo=0.0, lo_open=True)
        check_schedule(n=self.n, alpha=self.alpha, beta=self.beta, gamma=self.gamma, adj_min=self.adj_min,
                       adj_max=self.adj_max, reward_scale=self.reward_scale)
        check_bool("lag", self.lag)
        check_float("mu0", self.mu0, lo=0.0, hi=N - 1.0)
        self.mu = float(self.mu0)
        self._previous_mu = float(self.mu0)
        self.rng = np.random.default_rng(self.seed)

    @property
    def schedule(self) -> dict:
        return {"n": self.n, "alpha": self.alpha, "beta": self.beta, "gamma": self.gamma, "adj_min": self.adj_min,
                "adj_max": self.adj_max, "reward_scale": self.reward_scale}

    def draw(self) -> np.ndarray:
        """The pool items of this epoch (ranks drawn around μ, or the previous μ with ``lag``)."""
        mu = self._previous_mu if self.lag else self.mu
        ranks = gaussian_sample(len(self.order), self.subset, mu, self.sigma, self.rng)
        self.history.append({"mu_used": mu, "ranks": ranks})
        return self.order[ranks]

    def update(self, mean_reward: float, ang: float) -> float:
        """Move μ by the clipped adjustment; returns the new μ."""
        adj = mu_step(mean_reward, ang, **self.schedule)
        self._previous_mu = self.mu
        self.mu = min(max(self.mu + adj, 0.0), len(self.order) - 1.0)
        if self.history:
            self.history[-1].update(mean_reward=float(mean_reward), ang=float(ang), adjustment=adj, mu_after=self.mu)
        return self.mu


@dataclass
class UniformSampler:
    """Vanilla GRPO: ``subset`` distinct prompts uniformly at random each epoch."""

    n_pool: int
    subset: int
    seed: int = 0
    name = "uniform"

    def __post_init__(self):
        check_int("subset", self.subset, lo=1, hi=self.n_pool)
        self.rng = np.random.default_rng(self.seed)
        self.history = []

    def draw(self) -> np.ndarray:
        return np.sort(self.rng.choice(self.n_pool, self.subset, replace=False))

    def update(self, mean_reward: float, ang: float) -> None:
        self.history.append({"mean_reward": float(mean_reward), "ang": float(ang)})


@dataclass
class FilterSampler(UniformSampler):
    """DAPO-style dynamic sampling: draw ``oversample × subset`` candidates uniformly; the training loop
    generates their groups and keeps those whose rewards are not all equal (zero advantage otherwise),
    up to ``subset`` (fewer when too few survive)."""

    oversample: float = 2.0
    name = "filter"

    def __post_init__(self):
        super().__post_init__()
        check_float("oversample", self.oversample, lo=1.0)

    def draw(self) -> np.ndarray:
        k = min(self.n_pool, int(math.ceil(self.oversample * self.subset)))
        return self.rng.choice(self.n_pool, k, replace=False)
