"""The diversity-steered proposal (paper Eq. 5 / Alg. 1 for autoregressive models, Eq. 7 / Alg. 2 for
masked diffusion models).

At each decoding step the base model's next-token distribution is tilted away from meanings already in
the sample set ``S``::

    q~(y_t | y_<t) ∝ p(y_t | y_<t) · exp(−λ · agg_{s∈S} E(y_≤t ⊕ [TRUNC], s))          (Eq. 5)

``E`` is a similarity in ``[0, 1]`` (:mod:`~companion.diverse_sampling.similarity`: bidirectional
entailment of a partial-sequence NLI model), ``agg`` is ``max`` (the paper's default), ``mean`` or
``median``. Only the top-``k`` candidates under the base model are scored (Alg. 1); with ``S`` empty
(the first sample) nothing is penalised. No gradient of the LLM or of the scorer is used.

**Reading of top-k.** Alg. 1 scores "the full vocabulary or the top-k under the base model". Here the
other ``V − k`` tokens keep their base logits (they are not cut), so ``q > 0`` wherever ``p > 0`` and the
importance weights ``p/q`` stay consistent; with ``λ = 0`` (any ``k``) the proposal is exactly ``p``.

**Adaptive λ** (App. B.3, equation garbled). Read as a within-sequence controller that sets each step's
λ *before* that step's token is drawn: ``λ_t = max(0, λ_{t−1} + η (Ē_t − E_target))`` from ``λ_{−1}`` = the
``lam`` passed (0 in the paper's reading), with ``Ē_t = Σ_c p(c | y_<t) · agg_s E(y_<t ⊕ c ⊕ [TRUNC], s)`` the
similarity the step's next token would have under the base model (top-``k`` candidates scored, the rest
count 0) and ``E_target = 0.3``; then ``q`` is tilted with ``λ_t``. An inference documented as such. An
earlier reading updated λ from the similarity of the token just drawn, ``λ_{t+1} = λ_t + η (E_t − E_target)``:
λ then turned positive only after the meaning word had been drawn, so on answers whose meaning is decided
by one word it never steered (IID sampling, ESS/N = 1). The across-sequence update on the variance of running
SE estimates (``η_seq``, ``V_target``) is not implemented.

Every sampler logs, per token, ``log p``, ``log q``, the base entropy ``H(p(·|y_<t))`` (for the control
variate), the aggregated similarity of the drawn token, ``λ_t`` and (adaptive schedule) ``Ē_t``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from companion.core import ParameterError, check_choice, check_float, check_int

AGGREGATIONS = ("max", "mean", "median")
E_TARGET = 0.3  # App. B.3's target entailment for the adaptive schedule
#: The adaptive-λ schedule :func:`steered_sample` runs (module docstring): λ set before each draw from the step's
#: expected similarity. A recorded study names it in its profile; one without it predates it.
ADAPTIVE_SCHEDULE = "pre-draw expected similarity"

__all__ = [
    "ADAPTIVE_SCHEDULE",
    "AGGREGATIONS",
    "E_TARGET",
    "Sample",
    "DiversityTilt",
    "aggregate",
    "check_steering",
    "log_softmax",
    "steered_mdm_sample",
    "steered_sample",
    "tilted_logprobs",
    "topk_candidates",
]


def check_steering(lam: float, k: int, vocab_size: int, aggregation: str = "max", n: int | None = None,
                   eta: float = 0.0, e_target: float = E_TARGET) -> None:
    """Validate the steering parameters: λ ≥ 0, 1 ≤ k ≤ V, a known aggregation, N ≥ 1, η ≥ 0, E_target ∈ [0, 1]."""
    check_float("lam", lam, lo=0.0)
    check_int("k", k, lo=1, hi=int(vocab_size))
    check_choice("aggregation", aggregation, AGGREGATIONS)
    if n is not None:
        check_int("n", n, lo=1)
    check_float("eta", eta, lo=0.0)
    check_float("e_target", e_target, lo=0.0, hi=1.0)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def aggregate(similarity: np.ndarray, aggregation: str = "max") -> np.ndarray:
    """Aggregate ``E(candidate, s)`` over ``s ∈ S`` (last axis); an empty ``S`` gives 0 (no penalty)."""
    check_choice("aggregation", aggregation, AGGREGATIONS)
    e = np.asarray(similarity, dtype=float)
    if e.shape[-1] == 0:
        return np.zeros(e.shape[:-1])
    return {"max": np.max, "mean": np.mean, "median": np.median}[aggregation](e, axis=-1)


def topk_candidates(logp: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` most likely next tokens under the base model (last axis, most likely first)."""
    logp = np.asarray(logp, dtype=float)
    check_int("k", k, lo=1, hi=logp.shape[-1])
    idx = np.argsort(-logp, axis=-1, kind="stable")
    return idx[..., :k]


def tilted_logprobs(logp: np.ndarray, candidates: np.ndarray, penalty: np.ndarray, lam: float) -> np.ndarray:
    """``log q~`` of Eq. 5: ``log p − λ·penalty`` on the candidates, base logits elsewhere, renormalised."""
    check_float("lam", lam, lo=0.0)
    logits = np.array(logp, dtype=float, copy=True)
    cand = np.asarray(candidates)
    pen = np.asarray(penalty, dtype=float)
    if cand.shape != pen.shape:
        raise ValueError(f"candidates {cand.shape} and penalty {pen.shape} must have the same shape")
    base = np.take_along_axis(logits, cand, axis=-1)
    np.put_along_axis(logits, cand, base - lam * pen, axis=-1)
    return log_softmax(logits)


def _entropy(logp: np.ndarray) -> float:
    p = np.exp(logp)
    keep = p > 0
    return float(-np.sum(p[keep] * logp[keep]))


@dataclass
class Sample:
    """One sampled answer with its per-token logs (``log p``, ``log q``, base entropy, similarity, λ)."""

    tokens: tuple
    logp: list = field(default_factory=list)
    logq: list = field(default_factory=list)
    entropy: list = field(default_factory=list)
    similarity: list = field(default_factory=list)
    lam: list = field(default_factory=list)
    expected_similarity: list = field(default_factory=list)

    @property
    def log_weight(self) -> float:
        """``log p(s) − log q(s)``."""
        return float(np.sum(self.logp) - np.sum(self.logq))


def _sample_index(logq: np.ndarray, rng: np.random.Generator) -> int:
    p = np.exp(logq - np.max(logq))
    return int(rng.choice(len(p), p=p / p.sum()))


def steered_sample(next_logprobs: Callable[[tuple], np.ndarray],
                   score: Callable[[list, list], np.ndarray], *, n: int, lam: float = 1.0, k: int = 8,
                   aggregation: str = "max", eos: int, max_len: int, vocab_size: int,
                   adaptive: bool = False, eta: float = 1.0, e_target: float = E_TARGET,
                   rng: np.random.Generator | int = 0, prefix: tuple = ()) -> list[Sample]:
    """Alg. 1: draw ``n`` answers one after another, each from the tilted proposal against the earlier ones.

    ``next_logprobs(tokens) -> (V,)`` base log-probabilities after ``prefix + tokens`` (the answer so far).
    ``score(candidates, S) -> (k, |S|)``: ``E(candidate ⊕ [TRUNC], s)`` for candidate answers (token tuples;
    one ending in ``eos`` is complete, the scorer adds ``[TRUNC]`` otherwise) against the finished answers
    ``S`` (token tuples without ``eos``). ``adaptive`` uses ``λ_t`` from the schedule (module docstring:
    set before each draw from the step's expected similarity ``Ē_t``; ``lam`` is then the starting value,
    0 in the paper's reading, and ``eta`` the step size) instead of a fixed λ. An answer that reaches
    ``max_len`` without ``eos`` stops there (its logged probabilities are those of that prefix under ``p``
    and ``q``).
    """
    check_steering(lam, k, vocab_size, aggregation, n, eta, e_target)
    check_int("max_len", max_len, lo=1)
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    done: list[tuple] = []
    out: list[Sample] = []
    for _ in range(n):
        toks: tuple = ()
        smp = Sample(tokens=())
        lam_t = float(lam)
        for t in range(max_len):
            logp = np.asarray(next_logprobs(toks), dtype=float)
            if logp.shape != (vocab_size,):
                raise ValueError(f"next_logprobs returned shape {logp.shape}, expected ({vocab_size},)")
            cand = topk_candidates(logp, k)
            if done and lam_t > 0 or (done and adaptive):
                sims = np.asarray(score([toks + (int(c),) for c in cand], done), dtype=float)
                pen = aggregate(sims, aggregation)
            else:
                pen = np.zeros(k)
            if adaptive:  # λ_t from this step's expected similarity, before the token is drawn
                e_bar = float(np.sum(np.exp(logp[cand]) * pen))
                lam_t = max(0.0, lam_t + eta * (e_bar - e_target))
                smp.expected_similarity.append(e_bar)
            logq = tilted_logprobs(logp, cand, pen, lam_t)
            y = _sample_index(logq, rng)
            if not np.isfinite(logq[y]):
                raise ParameterError("logq", "a zero proposal probability", "a finite log q for every sampled token")
            e_y = float(pen[list(cand).index(y)]) if y in cand else (
                float(aggregate(np.asarray(score([toks + (y,)], done), dtype=float), aggregation)[0]) if done else 0.0)
            smp.logp.append(float(logp[y]))
            smp.logq.append(float(logq[y]))
            smp.entropy.append(_entropy(logp))
            smp.similarity.append(e_y)
            smp.lam.append(lam_t)
            if y == eos:
                break
            toks = toks + (y,)
        smp.tokens = toks
        out.append(smp)
        done.append(toks)
    return out


def steered_mdm_sample(denoise_logprobs: Callable[[np.ndarray], np.ndarray],
                       score: Callable[[np.ndarray, list], np.ndarray], *, n: int, length: int, mask_id: int,
                       vocab_size: int, lam: float = 1.0, k: int = 8, aggregation: str = "max",
                       order: str = "random", rng: np.random.Generator | int = 0) -> list[Sample]:
    """Alg. 2 (masked diffusion, Eq. 7): unmask one position per step, tilting its candidates.

    ``denoise_logprobs(tokens) -> (length, V)``: the denoiser's per-position log-probabilities for a partly
    masked sequence. ``score(candidate_sequences (k, length), S) -> (k, |S|)``: the similarity of each
    partially denoised candidate (remaining positions still ``mask_id``) to the finished samples. The
    unmasking order (``"random"`` or ``"left-to-right"``) is drawn independently of the model, so it
    cancels in ``p/q``: the weights are those of the path given the order.
    """
    check_steering(lam, k, vocab_size, aggregation, n)
    check_int("length", length, lo=1)
    check_choice("order", order, ("random", "left-to-right"))
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    done: list[np.ndarray] = []
    out = []
    for _ in range(n):
        seq = np.full(length, mask_id, dtype=int)
        positions = rng.permutation(length) if order == "random" else np.arange(length)
        smp = Sample(tokens=())
        for pos in positions:
            logp = np.asarray(denoise_logprobs(seq.copy()), dtype=float)[pos]
            cand = topk_candidates(logp, k)
            if done and lam > 0:
                cands = np.repeat(seq[None], k, axis=0)
                cands[:, pos] = cand
                pen = aggregate(np.asarray(score(cands, done), dtype=float), aggregation)
            else:
                pen = np.zeros(k)
            logq = tilted_logprobs(logp, cand, pen, lam)
            y = _sample_index(logq, rng)
            smp.logp.append(float(logp[y]))
            smp.logq.append(float(logq[y]))
            smp.entropy.append(_entropy(logp))
            smp.similarity.append(float(pen[list(cand).index(y)]) if y in cand else 0.0)
            smp.lam.append(float(lam))
            seq[pos] = y
        smp.tokens = tuple(int(v) for v in seq)
        out.append(smp)
        done.append(seq.copy())
    return out


class DiversityTilt:
    """Eq. 5 as a Hugging Face ``LogitsProcessor`` for ``model.generate(..., logits_processor=[...])``.

    ``score_fn(input_ids (B, L), candidates (B, k)) -> (B, k)`` returns the aggregated similarity of each
    candidate continuation to the answers already in ``S`` (the caller owns ``S`` and the prompt length).
    The processor records per step the base and tilted log-probabilities of the token generated at the
    previous step; after ``generate`` call :meth:`finish` with the returned sequences to collect the last
    step, then :attr:`logp` and :attr:`logq` are ``(B, T)`` arrays. Pass ``top_k=0`` (and no temperature)
    to ``generate`` so no other warper changes ``q``.
    """

    def __init__(self, score_fn, *, lam: float, k: int, vocab_size: int):
        check_steering(lam, k, vocab_size)
        self.score_fn, self.lam, self.k = score_fn, float(lam), int(k)
        self._last = None
        self.logp_steps: list = []
        self.logq_steps: list = []
        self.entropy_steps: list = []

    def _record(self, input_ids) -> None:
        if self._last is None:
            return
        import torch

        lp, lq = self._last
        tok = input_ids[:, -1:].to(lp.device)
        self.logp_steps.append(torch.gather(lp, 1, tok)[:, 0].cpu().numpy())
        self.logq_steps.append(torch.gather(lq, 1, tok)[:, 0].cpu().numpy())
        self.entropy_steps.append((-(lp.exp() * lp).nan_to_num().sum(-1)).cpu().numpy())
        self._last = None

    def __call__(self, input_ids, scores):
        import torch

        self._record(input_ids)
        logp = torch.log_softmax(scores.float(), dim=-1)
        cand = torch.topk(logp, self.k, dim=-1).indices
        if self.lam > 0:
            pen = torch.as_tensor(np.asarray(self.score_fn(input_ids, cand), dtype=np.float32), device=scores.device)
            logits = logp.clone()
            logits.scatter_(1, cand, torch.gather(logp, 1, cand) - self.lam * pen)
        else:
            logits = logp
        logq = torch.log_softmax(logits, dim=-1)
        self._last = (logp.detach(), logq.detach())
        return logq.to(scores.dtype)

    def finish(self, sequences) -> None:
        """Record the token chosen at the last step (``sequences`` as returned by ``generate``)."""
        self._record(sequences)

    @property
    def logp(self) -> np.ndarray:
        return np.stack(self.logp_steps, axis=1)

    @property
    def logq(self) -> np.ndarray:
        return np.stack(self.logq_steps, axis=1)

    @property
    def entropy(self) -> np.ndarray:
        return np.stack(self.entropy_steps, axis=1)


def sequence_arrays(samples: Sequence[Sample]) -> dict:
    """Zero-padded ``(N, T)`` arrays of ``logp``, ``logq``, ``entropy`` from :class:`Sample` objects."""
    t = max(len(s.logp) for s in samples)
    arr = {key: np.zeros((len(samples), t)) for key in ("logp", "logq", "entropy")}
    for i, s in enumerate(samples):
        for key in arr:
            v = getattr(s, key)
            arr[key][i, : len(v)] = v
    return arr
