"""The exact toy: a two-token "language model" with known semantic clusters, sampled many times at once.

An answer is two tokens: a *meaning* token ``c`` (cluster ``c`` of ``K``, Zipf probabilities
``p(c) ∝ c^(−a)``) then a *form* token ``j`` (one of ``m`` paraphrases, ``π(j | c)``). The true semantic
entropy is ``H[p(c)]`` (1.506 nats for ``K = 8``, ``a = 1.5``). The partial-sequence similarity is the
oracle a perfect partial NLI would give: after the meaning token, ``E(c ⊕ [TRUNC], s) = 1[c = c(s)]``.

Sampling follows Eq. 5 / Alg. 1 exactly (:mod:`~companion.diverse_sampling.sampler`): at step 1 the
top-``k`` meaning tokens are tilted by ``−λ · agg_{s∈S} E``; at step 2 every candidate shares the same
prefix and so the same penalty, and the tilt cancels (``q(j | c) = π(j | c)``). Everything is vectorised over
``trials`` independent sample sets, so thousands of repetitions take milliseconds.

The four estimators compared (per trial, ``N`` samples): **IID** (``λ = 0``, unit weights),
**steered** (unit weights: biased upwards, it over-represents rare meanings), **steered + IS**
(self-normalised ``p/q`` weights), **steered + IS + CV** (the chain-rule control variate, known mean 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from companion.core import ParameterError, check_float, check_int
from companion.diverse_sampling.sampler import check_steering, log_softmax

ESTIMATORS = ("iid", "steered", "steered_is", "steered_is_cv")
LABELS = {"iid": "IID", "steered": "steered, no IS", "steered_is": "steered + IS", "steered_is_cv": "steered + IS + CV"}

__all__ = ["ESTIMATORS", "LABELS", "ToyModel", "cluster_error_curve", "estimates", "simulate", "summary", "zipf_toy"]


@dataclass(frozen=True)
class ToyModel:
    """``p(c)`` (K,) and ``π(j | c)`` (K, m)."""

    cluster_probs: np.ndarray
    paraphrase_probs: np.ndarray

    @property
    def n_clusters(self) -> int:
        return len(self.cluster_probs)

    @property
    def true_se(self) -> float:
        p = self.cluster_probs
        return float(-np.sum(p * np.log(p)))


def zipf_toy(n_clusters: int = 8, n_paraphrases: int = 2, exponent: float = 1.5) -> ToyModel:
    """``K`` Zipf clusters (``p(c) ∝ c^(−exponent)``), ``m`` equally likely paraphrases each."""
    check_int("n_clusters", n_clusters, lo=2, hi=1000)
    check_int("n_paraphrases", n_paraphrases, lo=1, hi=100)
    check_float("exponent", exponent, lo=0.0, hi=10.0)
    w = np.arange(1, n_clusters + 1, dtype=float) ** -exponent
    return ToyModel(w / w.sum(), np.full((n_clusters, n_paraphrases), 1.0 / n_paraphrases))


def _penalty(counts: np.ndarray, i: int, aggregation: str) -> np.ndarray:
    """``agg_{s∈S} 1[c = c(s)]`` for every meaning token, from per-trial cluster counts over ``i`` samples."""
    if i == 0:
        return np.zeros(counts.shape)
    if aggregation == "max":
        return (counts > 0).astype(float)
    frac = counts / i
    if aggregation == "mean":
        return frac
    # median of i zeros/ones: 1 above half, 0 below, 0.5 at exactly half (np.median's even-count rule)
    return np.where(frac > 0.5, 1.0, np.where(frac < 0.5, 0.0, 0.5))


def _draw(logq: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One categorical draw per row of ``logq`` (inverse CDF)."""
    p = np.exp(logq)
    cdf = np.cumsum(p, axis=-1)
    u = rng.random((logq.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf < u).sum(axis=-1), logq.shape[-1] - 1)


def simulate(model: ToyModel, *, n: int, trials: int, lam: float, k: int | None = None, aggregation: str = "max",
             seed: int = 0) -> dict:
    """``trials`` independent runs of Alg. 1 drawing ``n`` answers each; per-token logs as arrays.

    Returns ``clusters``, ``forms`` (trials, n) and ``logp``, ``logq``, ``entropy`` (trials, n, 2).
    """
    K = model.n_clusters
    k = K if k is None else k
    check_steering(lam, k, K, aggregation, n)
    check_int("trials", trials, lo=1, hi=1_000_000)
    rng = np.random.default_rng(seed)
    logp1 = np.log(model.cluster_probs)
    h1 = float(-np.sum(model.cluster_probs * logp1))
    logpi = np.log(model.paraphrase_probs)
    h2 = -np.sum(model.paraphrase_probs * logpi, axis=1)
    cand = np.argsort(-logp1, kind="stable")[:k]
    counts = np.zeros((trials, K))
    out = {key: np.zeros((trials, n, 2)) for key in ("logp", "logq", "entropy")}
    clusters = np.zeros((trials, n), dtype=int)
    forms = np.zeros((trials, n), dtype=int)
    rows = np.arange(trials)
    for i in range(n):
        pen = _penalty(counts, i, aggregation)[:, cand]
        logits = np.broadcast_to(logp1, (trials, K)).copy()
        logits[:, cand] -= lam * pen
        logq1 = log_softmax(logits)
        c = _draw(logq1, rng)
        # step 2: every candidate form shares the prefix c, hence the penalty: q(j | c) = π(j | c)
        j = _draw(logpi[c], rng)
        clusters[:, i], forms[:, i] = c, j
        out["logp"][:, i, 0], out["logq"][:, i, 0] = logp1[c], logq1[rows, c]
        out["logp"][:, i, 1] = out["logq"][:, i, 1] = logpi[c, j]
        out["entropy"][:, i, 0], out["entropy"][:, i, 1] = h1, h2[c]
        counts[rows, c] += 1
    return {"clusters": clusters, "forms": forms, **out, "n_clusters": K, "lam": float(lam), "k": int(k),
            "aggregation": aggregation}


def _weighted_se(clusters: np.ndarray, w: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ``p^`` (trials, K) and ``Y_i = −log p^(c_i)`` (trials, n)."""
    phat = np.zeros((clusters.shape[0], K))
    np.add.at(phat, (np.arange(clusters.shape[0])[:, None].repeat(clusters.shape[1], 1), clusters), w)
    y = -np.log(np.take_along_axis(phat, clusters, axis=1))
    return phat, y


def estimates(sim: dict, *, weighted: bool = True, cv: bool = False) -> dict:
    """Per-trial SE estimates of one simulation: ``se`` (trials,), ``phat`` (trials, K), ``ess`` (trials,).

    ``weighted``: self-normalised ``p/q`` weights (else unit weights); ``cv``: subtract ``α*·Σ w~ Z`` with the
    chain-rule ``Z`` (known mean 0). Same numbers as :func:`~companion.diverse_sampling.estimators.control_variate`
    trial by trial.
    """
    logw = (sim["logp"] - sim["logq"]).sum(axis=-1)
    if weighted:
        if not np.all(np.isfinite(logw)):
            raise ParameterError("logq", "a zero proposal probability", "finite log q for every sample")
        w = np.exp(logw - logw.max(axis=1, keepdims=True))
    else:
        w = np.ones_like(logw)
    w = w / w.sum(axis=1, keepdims=True)
    phat, y = _weighted_se(sim["clusters"], w, sim["n_clusters"])
    se = np.sum(w * y, axis=1)
    if cv:
        z = -sim["logp"].sum(axis=-1) - sim["entropy"].sum(axis=-1)
        zbar = np.sum(w * z, axis=1, keepdims=True)
        ybar = np.sum(w * y, axis=1, keepdims=True)
        var = np.sum(w * (z - zbar) ** 2, axis=1)
        cov = np.sum(w * (y - ybar) * (z - zbar), axis=1)
        alpha = np.where(var > 1e-12, cov / np.where(var > 1e-12, var, 1.0), 0.0)
        se = se - alpha * zbar[:, 0]
    ess = 1.0 / (w.shape[1] * np.sum(w * w, axis=1))
    return {"se": se, "phat": phat, "ess": ess}


def summary(model: ToyModel, *, n: int, trials: int, lam: float, k: int | None = None, aggregation: str = "max",
            seed: int = 0) -> dict:
    """IID vs steered (no IS / IS / IS + CV) at one ``N``: SE estimates, bias, RMSE, clusters covered, ESS/N.

    IID and steered runs use different seeds of the same generator family (``seed``, ``seed + 1``).
    """
    iid = simulate(model, n=n, trials=trials, lam=0.0, k=k, aggregation=aggregation, seed=seed)
    st = simulate(model, n=n, trials=trials, lam=lam, k=k, aggregation=aggregation, seed=seed + 1)
    est = {"iid": estimates(iid, weighted=False), "steered": estimates(st, weighted=False),
           "steered_is": estimates(st), "steered_is_cv": estimates(st, cv=True)}
    truth = model.true_se
    covered = {name: np.array([len(set(r)) for r in s["clusters"].tolist()]) for name, s in (("iid", iid), ("steered", st))}
    return {
        "n": n, "trials": trials, "lam": float(lam), "k": int(model.n_clusters if k is None else k),
        "aggregation": aggregation, "true_se": truth,
        "se": {name: e["se"] for name, e in est.items()},
        "bias": {name: float(np.mean(e["se"]) - truth) for name, e in est.items()},
        "rmse": {name: float(np.sqrt(np.mean((e["se"] - truth) ** 2))) for name, e in est.items()},
        "covered": {name: float(v.mean()) for name, v in covered.items()},
        "covered_trials": covered,
        "ess": float(np.mean(est["steered_is"]["ess"])),
        "ess_min": float(np.min(est["steered_is"]["ess"])),
        "phat_is": est["steered_is"]["phat"].mean(axis=0),
        "iid_sim": iid, "steered_sim": st,
    }


def cluster_error_curve(model: ToyModel, *, ns, trials: int, lam: float, k: int | None = None,
                        aggregation: str = "max", seed: int = 0) -> dict:
    """Mean over trials of the IS cluster-probability estimate vs the truth, as ``N`` grows:
    ``L1 = Σ_c |E[p^_IS(c)] − p(c)|`` (the self-normalised estimator's bias, O(1/N)) and the mean
    per-trial ``Σ_c |p^_IS(c) − p(c)|``, beside the same for unweighted steered samples."""
    out = {"n": [], "bias_l1_is": [], "bias_l1_unweighted": [], "error_l1_is": []}
    for n in ns:
        st = simulate(model, n=int(n), trials=trials, lam=lam, k=k, aggregation=aggregation, seed=seed + int(n))
        ph = estimates(st)["phat"]
        pu = estimates(st, weighted=False)["phat"]
        out["n"].append(int(n))
        out["bias_l1_is"].append(float(np.abs(ph.mean(0) - model.cluster_probs).sum()))
        out["bias_l1_unweighted"].append(float(np.abs(pu.mean(0) - model.cluster_probs).sum()))
        out["error_l1_is"].append(float(np.abs(ph - model.cluster_probs).sum(1).mean()))
    return out
