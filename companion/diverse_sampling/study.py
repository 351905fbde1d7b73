"""The stages of paper 19's one-GPU study (:mod:`companion.diverse_sampling.scale` lists them).

Each stage is ``fn(ctx) -> JSON-able result`` (:class:`companion.core.stages.StageContext`). ``text_model``
trains the word LM (on ``ctx.device``) and the partial NLI and hands them to the sweeps in ``ctx.shared``; a
sweep run without it in the same call (``--stages``) builds them again from the same profile and seed. Sampling
runs on the CPU with one thread (one token at a time: a GPU or more threads gain nothing at this size). A sweep
stops at ``ctx.left()``, after its first point; its result lists the points done.
"""

from __future__ import annotations

import time

import numpy as np

from companion.core import ParameterError, limit_threads
from companion.diverse_sampling import similarity as S
from companion.diverse_sampling import textqa as TQ
from companion.diverse_sampling.sampler import ADAPTIVE_SCHEDULE
from companion.models import ModelUnavailableError

__all__ = ["OracleNLI", "build_text", "k_sweep", "seed_values", "sweep", "text_model"]


class OracleNLI:
    """The exact partial similarity of the templated answers (used when MiniLM is unavailable): a (partial)
    answer entails a full answer iff every templated answer it begins has that answer's meaning."""

    def __init__(self, data):
        self.keys = {k for _, (_, _, ks) in TQ.TYPES.items() for k in ks}

    def _key(self, text):
        return next((w for w in text.split() if w in self.keys), None)

    def similarity(self, candidates, answers):
        out = np.zeros((len(candidates), len(answers)))
        for i, (text, _tr) in enumerate(candidates):
            ka = self._key(text)
            for j, s in enumerate(answers):
                out[i, j] = float(ka is not None and ka == self._key(s))
        return out

    def entails(self, a, b):
        return self._key(a) == self._key(b)


def seed_values(r: dict) -> dict:
    """Per seed of one :func:`~companion.diverse_sampling.textqa.run_text_experiment` result: the ratio of mean
    meanings covered (steered over IID), the AUROC gain of steered + IS over IID (None where undefined) and
    the mean ESS/N."""
    iid, st = np.asarray(r["covered_iid"], dtype=float), np.asarray(r["covered_steered"], dtype=float)
    gains = [b - a for a, b in zip(r["auroc_seeds"]["iid"], r["auroc_seeds"]["steered_is"])]
    return {"covered_ratio_seeds": (st.mean(1) / iid.mean(1)).tolist(),
            "auroc_gain_seeds": [None if not np.isfinite(g) else float(g) for g in gains],
            "ess_seeds": np.asarray(r["ess"], dtype=float).mean(1).tolist()}


def build_text(profile: dict, seed: int, device: str) -> dict:
    """Data (``questions_per_type`` per type), the word LM (width ``lm_dim``, ``lm_steps``) trained on ``device``,
    the partial NLI on MiniLM trained ``nli_steps`` (or the oracle where the MiniLM package is missing) and the
    model's exact truth."""
    data = TQ.make_qa(profile["questions_per_type"], seed=seed)
    model, losses = TQ.train_lm(data, steps=profile["lm_steps"], dim=profile["lm_dim"], seed=seed, device=device)
    model = model.cpu()
    try:
        nli = S.load_partial_nli(seed=seed)
    except ModelUnavailableError as exc:  # the GPU machine may lack the MiniLM package: the oracle instead
        nli, info, scorer = OracleNLI(data), {"error": repr(exc)}, "oracle partial similarity (MiniLM unavailable)"
    else:
        pairs = S.prefix_pairs(*TQ.nli_training_answers(data))
        info = S.train_partial_nli(nli, pairs, steps=profile["nli_steps"], seed=seed)
        scorer = "MiniLM partial NLI ([TRUNC] row + head)"
    return {"data": data, "model": model, "nli": nli, "truth": TQ.model_truth(model, data), "lm_losses": losses,
            "nli_info": info, "scorer": scorer}


def _text(ctx) -> dict:
    if "text" not in ctx.shared:
        t0 = time.perf_counter()
        if ctx.profile["adaptive_schedule"] != ADAPTIVE_SCHEDULE:
            raise ParameterError("adaptive_schedule", ctx.profile["adaptive_schedule"],
                                 f"{ADAPTIVE_SCHEDULE!r}, the schedule steered_sample runs")
        ctx.shared["text"] = build_text(ctx.profile, ctx.seed, ctx.device)
        ctx.log(f"built the text model in {time.perf_counter() - t0:.1f} s; scorer: {ctx.shared['text']['scorer']}")
    return ctx.shared["text"]


def text_model(ctx) -> dict:
    """Train the word LM on the templated QA and the partial NLI (:func:`build_text`): the scorer used, the NLI's
    training record and the LM's final loss."""
    text = _text(ctx)
    return {"scorer": text["scorer"], "nli_info": {k: v for k, v in text["nli_info"].items() if k != "losses"},
            "lm_final_loss": text["lm_losses"][-1]}


def sweep(ctx) -> list[dict]:
    """For each N of ``ns`` and each λ schedule of ``schedules`` (fixed, or adaptive with η = its ``lam``), IID vs
    steered sampling at top-``k`` over the ``seeds``: meanings covered, AUROC of SE (IID, steered + IS, + CV,
    the exact model SE), RMSE, ESS/N and milliseconds per sample, with the per-seed ratios and gains the claims
    judge."""
    text, p = _text(ctx), ctx.profile
    points = []
    with limit_threads(1):
        for n in p["ns"]:
            for sched, spec in p["schedules"].items():
                if points and ctx.left() <= 0:
                    ctx.log(f"sweep: stopped before N={n} {sched} (deadline)")
                    return points
                t = time.perf_counter()
                r = TQ.run_text_experiment(text["model"], text["nli"], text["data"], text["truth"], n=n,
                                           lam=0.0 if spec["adaptive"] else spec["lam"], k=p["k"],
                                           adaptive=spec["adaptive"], eta=spec["lam"], seeds=p["seeds"])
                dt = time.perf_counter() - t
                points.append({"n": n, "schedule": sched, "adaptive": bool(spec["adaptive"]), "k": p["k"],
                               "seeds": list(p["seeds"]), **seed_values(r), "auroc_iid": r["auroc"]["iid"][0],
                               "auroc_is": r["auroc"]["steered_is"][0], "auroc_is_cv": r["auroc"]["steered_is_cv"][0],
                               "auroc_truth": r["auroc_truth"], "covered_iid": float(r["covered_iid"].mean()),
                               "covered_steered": float(r["covered_steered"].mean()), "ess": float(r["ess"].mean()),
                               "rmse_iid": r["rmse_iid"], "rmse_is": r["rmse_steered_is"],
                               "rmse_is_cv": r["rmse_steered_is_cv"],
                               "ms_per_sample": 1e3 * dt / (2 * n * len(p["seeds"]) * r["n_questions"])})
                ctx.log(points[-1])
    return points


def k_sweep(ctx) -> list[dict]:
    """Steered sampling at N = ``k_sweep_n`` with fixed λ = ``k_sweep_lam``, for each k of ``k_sweep``, on the first
    seed: meanings covered, ESS/N and AUROC of steered + IS."""
    text, p = _text(ctx), ctx.profile
    out = []
    with limit_threads(1):
        for k in p["k_sweep"]:
            if out and ctx.left() <= 0:
                break
            r = TQ.run_text_experiment(text["model"], text["nli"], text["data"], text["truth"], n=p["k_sweep_n"],
                                       lam=p["k_sweep_lam"], k=k, seeds=p["seeds"][:1])
            out.append({"k": k, "n": p["k_sweep_n"], "covered_steered": float(r["covered_steered"].mean()),
                        "ess": float(r["ess"].mean()), "auroc_is": r["auroc"]["steered_is"][0]})
    return out
