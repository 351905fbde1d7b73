"""Debiased semantic-uncertainty estimators (paper §3.3-3.4, App. B.4).

Samples ``s_1..s_N`` come from the steered proposal ``q``; the target is the base model ``p``.

* **Importance weights** (§3.3): ``w_i = p(s_i) / q(s_i) = exp(sum_t log p(y_t|y_<t) - log q(y_t|y_<t))``
  from the per-token conditionals logged while sampling; self-normalised ``w~_i = w_i / sum_j w_j``.
  A zero proposal probability (``log q = -inf``) cannot carry a weight and raises.
* **Semantic entropy**: ``p^(c) = sum_i w~_i 1[s_i in c]`` and
  ``H^ = -sum_c p^(c) log p^(c) = sum_i w~_i Y_i`` with ``Y_i = -log p^(c(s_i))``. With unit weights it is
  the plug-in (discrete) semantic entropy of Kuhn et al. / Farquhar et al.
* **Control variate** (§3.4, Eq. 10 is garbled in the public text). The reading "centre
  ``X_i = -log p(s_i)`` by its own weighted mean and subtract ``alpha * sum_i w~_i (X_i - mu_X)``" makes the
  correction identically zero (``sum_i w~_i (X_i - sum_j w~_j X_j) = 0``), so :func:`control_variate`
  refuses ``known_mean=None`` and :func:`naive_cv_correction` exists only to show that it is zero. The
  default control variate is ``Z_i = -log p(s_i) - sum_t H(p(. | s_{i,<t}))``, whose mean under ``p`` is
  zero by the chain rule (``E_p[-log p(y_t|y_<t) | y_<t] = H(p(.|y_<t))``), from logits the sampler has
  already computed. Then ``H^_cv = H^ - alpha* (sum_i w~_i Z_i - 0)`` with
  ``alpha* = sum w~ (Y-Ybar)(Z-Zbar) / sum w~ (Z-Zbar)^2`` (weighted centring only inside ``alpha*``).
* **Mutual information** from iterative-prompting pairs (Yadkori et al., n = 2):
  ``I^ = sum p^(c1,c2) log[p^(c1,c2) / (p^(c1) p^(c2))]`` with joint pair weights.
* **ESS/N** ``= (sum w)^2 / (N sum w^2)``, **AUROC** (scikit-learn), **jackknife** standard errors,
  **ROUGE-L F1** (LCS on whitespace tokens, as ``rouge-score`` without stemming),
  and greedy bidirectional-entailment clustering (Kuhn et al., App. B.4).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from companion.core import ParameterError

__all__ = [
    "cluster_probs",
    "control_variate",
    "chain_rule_cv",
    "ess_fraction",
    "greedy_cluster",
    "importance_weights",
    "jackknife",
    "mutual_information",
    "naive_cv_correction",
    "normalise",
    "rouge_l",
    "semantic_entropy",
]


def importance_weights(logp, logq) -> np.ndarray:
    """``w_i = exp(log p(s_i) - log q(s_i))`` from sequence log-probabilities (or per-token rows, summed).

    ``logp``/``logq``: shape ``(N,)`` or ``(N, T)`` (per-token conditionals, padded with 0). Returns
    unnormalised weights rescaled by ``exp(-max log w)`` for stability (self-normalised use only).
    """
    lp = np.asarray(logp, dtype=float)
    lq = np.asarray(logq, dtype=float)
    if lp.shape != lq.shape:
        raise ValueError(f"logp and logq must have the same shape, got {lp.shape} and {lq.shape}")
    if lp.ndim == 2:
        lp, lq = lp.sum(axis=1), lq.sum(axis=1)
    if np.any(np.isneginf(lq)) or np.any(np.isnan(lq)):
        raise ParameterError("logq", "a zero or NaN proposal probability",
                             "q(s_i) > 0 for every sample: a sample the proposal could not draw has no weight")
    if np.any(np.isnan(lp)) or np.any(np.isposinf(lp)):
        raise ValueError("logp contains NaN or +inf")
    logw = lp - lq
    if logw.size == 0:
        raise ParameterError("N", 0, "at least one sample")
    return np.exp(logw - np.max(logw))


def normalise(weights) -> np.ndarray:
    """Self-normalised weights ``w~ = w / sum w`` (unit weights give ``1/N``)."""
    w = np.asarray(weights, dtype=float)
    if w.ndim != 1 or w.size == 0:
        raise ParameterError("weights", w.shape, "a non-empty 1-D array")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ParameterError("weights", "negative or non-finite", "finite non-negative weights")
    total = w.sum()
    if total <= 0:
        raise ParameterError("weights", "all zero", "at least one positive weight")
    return w / total


def ess_fraction(weights) -> float:
    """Effective sample size over N, ``(sum w)^2 / (N sum w^2)`` in ``(0, 1]``; 1 for equal weights."""
    w = normalise(weights)
    return float(1.0 / (w.size * np.sum(w * w)))


def cluster_probs(clusters: Sequence[int], weights=None) -> dict:
    """``p^(c) = sum_i w~_i 1[s_i in c]`` (unit weights when ``weights`` is None)."""
    c = [x.item() if isinstance(x, np.generic) else (tuple(x) if isinstance(x, (list, np.ndarray)) else x)
         for x in clusters]
    w = normalise(np.ones(len(c)) if weights is None else weights)
    if len(w) != len(c):
        raise ValueError(f"{len(c)} cluster labels but {len(w)} weights")
    out: dict = {}
    for ci, wi in zip(c, w):
        out[ci] = out.get(ci, 0.0) + float(wi)
    return out


def semantic_entropy(clusters: Sequence[int], weights=None) -> float:
    """``H^ = -sum_c p^(c) log p^(c)`` over the weighted cluster frequencies (nats)."""
    p = np.array(list(cluster_probs(clusters, weights).values()))
    p = p[p > 0]
    return float(-np.sum(p * np.log(p)))


def chain_rule_cv(logp_tokens, entropies) -> np.ndarray:
    """``Z_i = -log p(s_i) - sum_t H(p(. | s_{i,<t}))``: mean zero under ``p`` (chain rule).

    ``logp_tokens``/``entropies``: ``(N, T)`` per-token log p(y_t|y_<t) and H(p(.|y_<t)), zero-padded after
    the end of each sequence (the end token's step included).
    """
    lp = np.asarray(logp_tokens, dtype=float)
    h = np.asarray(entropies, dtype=float)
    if lp.shape != h.shape:
        raise ValueError(f"logp_tokens and entropies must have the same shape, got {lp.shape} and {h.shape}")
    return -lp.sum(axis=-1) - h.sum(axis=-1)


def naive_cv_correction(weights, x) -> float:
    """The garbled Eq. 10 read literally: ``sum_i w~_i (X_i - mu_X)`` with ``mu_X = sum_j w~_j X_j``.

    Always zero up to rounding: kept only so the notebook can show it; :func:`control_variate` refuses it.
    """
    w = normalise(weights)
    x = np.asarray(x, dtype=float)
    return float(np.sum(w * (x - np.sum(w * x))))


def control_variate(clusters: Sequence[int], weights, z, known_mean: float | None = 0.0) -> tuple[float, float]:
    """``H^_cv = H^ - alpha* (sum_i w~_i Z_i - known_mean)``; returns ``(H^_cv, alpha*)``.

    ``z``: a control variate with ``E_p[Z] = known_mean`` (default: :func:`chain_rule_cv`, mean 0).
    ``known_mean=None`` (centring by the weighted sample mean) is refused: that correction is zero.
    """
    if known_mean is None:
        raise ParameterError("known_mean", None, "the control variate's mean under p, known independently of the "
                             "samples (centring by its own weighted mean makes the correction identically zero)")
    w = normalise(weights)
    z = np.asarray(z, dtype=float)
    c = np.asarray(clusters)
    if not (len(z) == len(c) == len(w)):
        raise ValueError("clusters, weights and z must have the same length")
    probs = cluster_probs(c, w)
    y = np.array([-np.log(probs[ci]) for ci in c.tolist()])
    h = float(np.sum(w * y))
    zbar, ybar = np.sum(w * z), np.sum(w * y)
    var = float(np.sum(w * (z - zbar) ** 2))
    alpha = float(np.sum(w * (y - ybar) * (z - zbar)) / var) if var > 1e-12 else 0.0
    return h - alpha * (float(zbar) - float(known_mean)), alpha


def mutual_information(c1: Sequence[int], c2: Sequence[int], weights=None) -> float:
    """``I^ = sum p^(c1,c2) log[p^(c1,c2) / (p^(c1) p^(c2))]`` from weighted iterative-prompting pairs.

    Pairs ``(s1, s2)``: ``s2`` is sampled with ``s1`` in the prompt (Yadkori et al.); marginals are the
    weighted frequencies of each position.
    """
    a, b = np.asarray(c1), np.asarray(c2)
    if a.shape != b.shape:
        raise ValueError("c1 and c2 must have the same length")
    joint = cluster_probs(list(zip(a.tolist(), b.tolist())), weights)
    m1: dict = {}
    m2: dict = {}
    for (x, y), v in joint.items():
        m1[x] = m1.get(x, 0.0) + v
        m2[y] = m2.get(y, 0.0) + v
    return float(sum(v * np.log(v / (m1[x] * m2[y])) for (x, y), v in joint.items() if v > 0))


def jackknife(values, statistic: Callable[[np.ndarray], float]) -> tuple[float, float]:
    """``(statistic(all), leave-one-out jackknife standard error)`` over the first axis of ``values``."""
    v = np.asarray(values)
    n = len(v)
    if n < 2:
        raise ParameterError("values", n, "at least 2 items for a jackknife")
    full = float(statistic(v))
    loo = np.array([statistic(np.delete(v, i, axis=0)) for i in range(n)], dtype=float)
    se = float(np.sqrt((n - 1) / n * np.sum((loo - loo.mean()) ** 2)))
    return full, se


def _lcs(a: list, b: list) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1 on lower-cased alphanumeric tokens (``rouge_score.RougeScorer(["rougeL"])``, no stemmer)."""
    import re

    tok = lambda s: re.sub(r"[^a-z0-9]+", " ", s.lower()).split()  # noqa: E731 - rouge-score's tokenizer
    p, r = tok(prediction), tok(reference)
    if not p or not r:
        return 0.0
    lcs = _lcs(p, r)
    if lcs == 0:
        return 0.0
    prec, rec = lcs / len(p), lcs / len(r)
    return 2 * prec * rec / (prec + rec)


def greedy_cluster(items: Sequence, entails: Callable[[object, object], bool]) -> list[int]:
    """Kuhn et al.'s greedy clustering: ``items[i]`` joins the first cluster whose representative (first
    member) it entails and that entails it (bidirectional entailment); otherwise it opens a new cluster."""
    reps: list = []
    labels = []
    for it in items:
        for k, rep in enumerate(reps):
            if entails(it, rep) and entails(rep, it):
                labels.append(k)
                break
        else:
            reps.append(it)
            labels.append(len(reps) - 1)
    return labels
