"""The stages of paper 19's one-GPU study (:mod:`companion.diverse_sampling.scale` lists them).

Each stage is ``fn(ctx) -> JSON-able result`` (:class:`companion.core.stages.StageContext`). ``text_model``
trains the word LM and the partial NLI (both on ``ctx.device``) and hands them to the sweeps in ``ctx.shared``;
a sweep run without it in the same call (``--stages``) builds them again from the same profile and seed.

**The scorer** is the profile's ``nli_encoder``: ``"all-MiniLM-L6-v2"`` (the bundled package), a folder relative
to the repository root (the float16 copy written by ``python -m companion.diverse_sampling.scale``, upcast
to float32 on load) or ``"oracle"`` (the templates' exact partial similarity, :class:`OracleNLI`). An
encoder that cannot be loaded fails the stage: nothing falls back to the oracle silently.

**Points.** A sweep is a list of points ``(N, schedule, k, seed)``, each one pass over every question
(:func:`run_point`), in order of importance (the profile lists ``ns`` so). With ``workers`` > 0 they run in
that many spawned processes, one thread each, every one rebuilding the LM and the scorer on the CPU from the
same state (:func:`worker_state`; one pool serves both sweeps); ``workers = 0`` runs them one after another in
this process the same way.
Each point starts from an empty similarity cache, so its result does not depend on which process ran it or
what ran before. At ``ctx.left()`` the pool is stopped (after the first point) and the finished points kept.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import torch

from companion.core import ParameterError, limit_threads
from companion.diverse_sampling import similarity as S
from companion.diverse_sampling import textqa as TQ
from companion.diverse_sampling.sampler import ADAPTIVE_SCHEDULE
from companion.models.loading import MINILM

__all__ = ["ESTIMATORS", "ORACLE", "OracleNLI", "build_text", "encoder_source", "k_sweep", "run_point", "run_points",
           "sweep", "sweep_rows", "text_model", "worker_pool", "worker_state"]

ORACLE = "oracle"
FIRST_POINT_S = 120.0  # the longest a pool may take to start and finish its first point, whatever the deadline
ESTIMATORS = ("iid", "steered_unweighted", "steered_is", "steered_is_cv")
REPO = Path(__file__).resolve().parents[2]


class OracleNLI:
    """The exact partial similarity of the templated answers (an explicit profile choice, ``nli_encoder =
    "oracle"``): a (partial) answer entails a full answer iff every templated answer it begins has that
    answer's meaning."""

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

    def clear_cache(self) -> None:
        """Nothing is cached."""


def encoder_source(name: str) -> str:
    """The profile's ``nli_encoder`` as :func:`companion.models.load_model` takes it: the bundled MiniLM's name,
    or a folder (relative to the repository root unless absolute)."""
    if not isinstance(name, str) or not name or name == ORACLE:
        raise ParameterError("nli_encoder", name, f"{MINILM!r}, a folder of an encoder, or {ORACLE!r}")
    return name if name == MINILM else str(REPO / name)


def scorer_name(profile: dict) -> str:
    enc = profile["nli_encoder"]
    if enc == ORACLE:
        return "oracle partial similarity (exact, from the templates)"
    return f"MiniLM partial NLI ([TRUNC] row + head; encoder {enc}, float32)"


def build_text(profile: dict, seed: int, device: str) -> dict:
    """Data (``questions_per_type`` per type), the word LM (width ``lm_dim``, ``lm_steps``) and the partial NLI
    (``nli_steps``; or the oracle when the profile names it) trained on ``device``, then moved to the CPU, and
    the model's exact truth. An encoder that cannot be loaded raises
    :class:`~companion.models.ModelUnavailableError`."""
    data = TQ.make_qa(profile["questions_per_type"], seed=seed)
    model, losses = TQ.train_lm(data, steps=profile["lm_steps"], dim=profile["lm_dim"], seed=seed, device=device)
    model = model.cpu()
    if profile["nli_encoder"] == ORACLE:
        nli, info = OracleNLI(data), {}
    else:
        nli = S.load_partial_nli(encoder_source(profile["nli_encoder"]), seed=seed, dtype="float32").to(device)
        info = S.train_partial_nli(nli, S.prefix_pairs(*TQ.nli_training_answers(data)), steps=profile["nli_steps"],
                                   seed=seed)
        nli = nli.cpu()
        nli.clear_cache()
    return {"data": data, "model": model, "nli": nli, "truth": TQ.model_truth(model, data), "lm_losses": losses,
            "nli_info": info, "scorer": scorer_name(profile)}


def worker_state(text: dict, profile: dict) -> dict:
    """What a process needs to rebuild the LM and the scorer of ``text`` on its CPU (all picklable)."""
    nli = None
    if profile["nli_encoder"] != ORACLE:
        head = {k: v.detach().cpu().clone() for k, v in text["nli"].head.state_dict().items()}
        nli = {"source": encoder_source(profile["nli_encoder"]), "hidden": text["nli"].head[0].out_features,
               "trunc": text["nli"].trunc.detach().cpu().clone(), "head": head}
    lm = text["model"]
    return {"data": text["data"], "truth": text["truth"], "nli": nli, "lm_dim": lm.emb.embedding_dim,
            "lm": {k: v.detach().cpu().clone() for k, v in lm.state_dict().items()}}


_WORKER: dict = {}


def _init(state: dict) -> None:
    """Rebuild the LM and the scorer from :func:`worker_state` (in a worker, or in this process)."""
    data = state["data"]
    model = TQ.WordLM(len(data.vocab), state["lm_dim"])
    model.load_state_dict(state["lm"])
    if state["nli"] is None:
        nli = OracleNLI(data)
    else:
        nli = S.load_partial_nli(state["nli"]["source"], hidden=state["nli"]["hidden"], dtype="float32")
        with torch.no_grad():
            nli.trunc.copy_(state["nli"]["trunc"])
        nli.head.load_state_dict(state["nli"]["head"])
    _WORKER.update(model=model.eval(), nli=nli, data=data, truth=state["truth"])


def _finite(x) -> float | None:
    return float(x) if np.isfinite(x) else None


def run_point(spec: dict) -> dict:
    """One point ``{"n", "schedule", "lam", "adaptive", "k", "seed"}`` on the rebuilt LM and scorer: IID vs
    steered on every question (:func:`~companion.diverse_sampling.textqa.run_text_experiment`, one seed), with
    the mean meanings covered, AUROC, bias and RMSE of each SE estimator against the model's exact SE, ESS/N and
    the seconds taken."""
    w = _WORKER
    w["nli"].clear_cache()
    t = time.perf_counter()
    with limit_threads(1):
        r = TQ.run_text_experiment(w["model"], w["nli"], w["data"], w["truth"], n=spec["n"],
                                   lam=0.0 if spec["adaptive"] else spec["lam"], k=spec["k"],
                                   adaptive=spec["adaptive"], eta=spec["lam"], seeds=[spec["seed"]])
    err = {e: np.asarray(r[e][0]) - r["true_se"] for e in ESTIMATORS}
    auc = {e: _finite(r["auroc_seeds"][e][0]) for e in ESTIMATORS}  # None: the errors have one class
    return {**spec, "covered_iid": float(r["covered_iid"].mean()), "covered_steered": float(r["covered_steered"].mean()),
            "auroc": auc, "auroc_truth": _finite(r["auroc_truth"]), "bias": {e: float(v.mean()) for e, v in err.items()},
            "rmse": {e: float(np.sqrt(np.mean(v ** 2))) for e, v in err.items()}, "ess": float(r["ess"].mean()),
            "seconds": time.perf_counter() - t, "samples": 2 * spec["n"] * r["n_questions"]}


def run_points(specs: list[dict], *, pool=None, state: dict | None = None, left=lambda: float("inf"),
               log=print) -> list[dict]:
    """Run ``specs`` (in order of importance) in ``pool`` (:func:`worker_pool`), or without one in this process,
    one after another, on the LM and scorer rebuilt from ``state`` (:func:`worker_state`), until ``left()``
    seconds are gone, after the first point; returns the finished points in the order of ``specs``. A pool
    stopped at the deadline is terminated (its running points are lost); one whose first point does not finish
    within ``max(left(), FIRST_POINT_S)`` seconds (workers that cannot start) raises :class:`TimeoutError`."""
    if (pool is None) == (state is None):
        raise ParameterError("run_points", "pool and state" if pool else "neither pool nor state",
                             "a worker pool, or the state to run the points in this process")
    if pool is None:
        _init(state)
        out = []
        for spec in specs:
            if out and left() <= 0:
                log(f"stopped before {spec} (deadline)")
                break
            out.append(run_point(spec))
        return out
    jobs = [pool.apply_async(run_point, (spec,)) for spec in specs]
    jobs[0].wait(min(max(left(), FIRST_POINT_S), 86400.0))  # finite: a wait without a deadline still ends
    if not jobs[0].ready():
        pool.terminate()
        raise TimeoutError(f"the first point did not finish in time: the worker processes may have failed to start "
                           f"(their tracebacks are printed above); {specs[0]}")
    while not all(j.ready() for j in jobs) and left() > 0:
        time.sleep(0.05)
    done = [j.get() for j in jobs if j.ready()]  # a point that raised raises here
    if len(done) < len(jobs):
        log(f"stopped {len(jobs) - len(done)} of {len(jobs)} points at the deadline")
        pool.terminate()
    return done


def worker_pool(state: dict, workers: int):
    """``workers`` spawned processes, each with the LM and the scorer rebuilt from ``state`` (:func:`_init`)."""
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ParameterError("workers", workers, "an int >= 1 (or 0 in the profile: the points run in this process)")
    return mp.get_context("spawn").Pool(workers, initializer=_init, initargs=(state,))


def _mean(vals) -> float | None:
    """The mean of the values that are not None (None when none is)."""
    vals = [v for v in vals if v is not None]
    return float(np.mean(vals)) if vals else None


def sweep_rows(points: list[dict]) -> list[dict]:
    """One row per (N, schedule) of finished points: per-seed values (``*_seeds``, what the claims judge) and their
    means; milliseconds per sample on one CPU core."""
    rows = []
    for n, sched in dict.fromkeys((p["n"], p["schedule"]) for p in points):
        ps = [p for p in points if p["n"] == n and p["schedule"] == sched]
        gains = [None if p["auroc"]["iid"] is None or p["auroc"]["steered_is"] is None
                 else p["auroc"]["steered_is"] - p["auroc"]["iid"] for p in ps]
        rows.append({
            "n": n, "schedule": sched, "adaptive": ps[0]["adaptive"], "k": ps[0]["k"], "seeds": [p["seed"] for p in ps],
            "covered_ratio_seeds": [p["covered_steered"] / p["covered_iid"] for p in ps], "auroc_gain_seeds": gains,
            "ess_seeds": [p["ess"] for p in ps],
            "bias_seeds": {e: [p["bias"][e] for p in ps] for e in ESTIMATORS},
            "rmse_seeds": {e: [p["rmse"][e] for p in ps] for e in ESTIMATORS},
            "covered_iid": _mean([p["covered_iid"] for p in ps]),
            "covered_steered": _mean([p["covered_steered"] for p in ps]),
            "auroc_iid": _mean([p["auroc"]["iid"] for p in ps]), "auroc_is": _mean([p["auroc"]["steered_is"] for p in ps]),
            "auroc_is_cv": _mean([p["auroc"]["steered_is_cv"] for p in ps]), "auroc_truth": ps[0]["auroc_truth"],
            "ess": _mean([p["ess"] for p in ps]), "rmse_iid": _mean([p["rmse"]["iid"] for p in ps]),
            "rmse_is": _mean([p["rmse"]["steered_is"] for p in ps]),
            "rmse_is_cv": _mean([p["rmse"]["steered_is_cv"] for p in ps]),
            "ms_per_sample": 1e3 * sum(p["seconds"] for p in ps) / sum(p["samples"] for p in ps)})
    return rows


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
    t0 = time.perf_counter()
    text = _text(ctx)
    return {"scorer": text["scorer"], "nli_encoder": ctx.profile["nli_encoder"],
            "nli_info": {k: v for k, v in text["nli_info"].items() if k != "losses"},
            "lm_final_loss": text["lm_losses"][-1], "seconds": time.perf_counter() - t0}


def _run(ctx, specs: list[dict], *, last: bool) -> list[dict]:
    """Run ``specs`` with the profile's ``workers`` (0: in this process). The pool is made once per call and kept
    in ``ctx.shared`` for the next stage; ``last`` (the study's last stage) or a deadline cut closes it."""
    text, workers = _text(ctx), ctx.profile["workers"]
    if workers == 0:
        return run_points(specs, state=worker_state(text, ctx.profile), left=ctx.left, log=ctx.log)
    if "pool" not in ctx.shared:
        ctx.shared["pool"] = worker_pool(worker_state(text, ctx.profile), workers)
        ctx.log(f"started {workers} worker processes")
    pool = ctx.shared["pool"]
    try:
        out = run_points(specs, pool=pool, left=ctx.left, log=ctx.log)
    except BaseException:
        ctx.shared.pop("pool").terminate()
        raise
    if last or len(out) < len(specs):
        ctx.shared.pop("pool").terminate()
    return out


def sweep(ctx) -> list[dict]:
    """For each N of ``ns`` (in order of importance), each λ schedule of ``schedules`` (fixed, or adaptive with
    η = its ``lam``) and each seed, IID vs steered sampling at top-``k``; one row per (N, schedule)
    (:func:`sweep_rows`), rows in the order of N."""
    p = ctx.profile
    specs = [{"n": n, "schedule": sched, "lam": spec["lam"], "adaptive": bool(spec["adaptive"]), "k": p["k"], "seed": s}
             for n in p["ns"] for sched, spec in p["schedules"].items() for s in p["seeds"]]
    rows = sweep_rows(_run(ctx, specs, last=False))
    for r in rows:
        ctx.log({k: r[k] for k in ("n", "schedule", "seeds", "covered_iid", "covered_steered", "ess", "ms_per_sample")})
    return sorted(rows, key=lambda r: r["n"])


def k_sweep(ctx) -> list[dict]:
    """Steered sampling at N = ``k_sweep_n`` with fixed λ = ``k_sweep_lam``, for each k of ``k_sweep``, on the first
    seed: meanings covered, ESS/N and AUROC of steered + IS."""
    p = ctx.profile
    specs = [{"n": p["k_sweep_n"], "schedule": f"fixed λ={p['k_sweep_lam']:g}", "lam": p["k_sweep_lam"],
              "adaptive": False, "k": k, "seed": p["seeds"][0]} for k in p["k_sweep"]]
    return [{"k": r["k"], "n": r["n"], "covered_steered": r["covered_steered"], "ess": r["ess"],
             "auroc_is": r["auroc"]["steered_is"]} for r in _run(ctx, specs, last=True)]
