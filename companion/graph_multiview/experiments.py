"""The stages of paper 07's one-GPU study (:mod:`companion.graph_multiview.scale` lists them).

Each stage is ``fn(ctx) -> JSON-able result`` (:class:`companion.core.stages.StageContext`). All of them train
on one planted-motif set, built from the profile (``graphs``, ``tree_sizes``, ``noise``, the study's seed), with
the base :class:`~companion.graph_multiview.training.TrainConfig` (``profile["train"]``). The runs are small and
launch-bound, so a stage trains them side by side: every (method, fold) run is one job for a pool of
``workers`` processes (one thread each, on ``worker_device``), each of which builds the same motif set once
(:func:`run_jobs`). Jobs are queued fold by fold, so a stage cut by the deadline (``ctx.left()``; the pool is
then terminated) keeps whole folds. A method's summary (:func:`summarise`) holds its per-fold accuracies
(``acc``) and their fold indices (``fold``), which the claim rows pair and judge; each fold is its own seed.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from dataclasses import asdict

import numpy as np

from companion.core import ParameterError, check_choice, check_int, gpu_hidden_from_children, time_ms
from companion.graph_multiview.data import MotifDataset
from companion.graph_multiview.models import GraphBatch, MultiHeadGNN
from companion.graph_multiview.submix import WEIGHT_RULE
from companion.graph_multiview.training import METHODS, TrainConfig, fold_splits, run_fold, with_config

__all__ = ["ENCODERS", "heads_sweep", "label_noise", "label_ratio", "latency_ms", "main", "run_jobs", "study_data",
           "summarise"]

#: The ``main`` stage's encoders and the methods each runs (every method with GCN, Table 1's subset with the others).
ENCODERS = {"gcn": METHODS, "gin": ("vanilla", "ensemble", "gmimo", "gmv"), "gps": ("vanilla", "ensemble", "gmimo", "gmv")}
_WORKER: dict = {}  # a pool worker's motif graphs and cached views


def summarise(results: list[dict]) -> dict:
    """One method's jobs (:func:`run_jobs` results): per-fold accuracies in fold order with their folds, mean ±
    std, head disagreement and symmetric KL, training and view-caching seconds and epochs (means over folds)."""
    rs = sorted(results, key=lambda r: r["fold"])
    acc = np.array([r["acc"] for r in rs])
    mean = lambda key, nd: round(float(np.mean([r[key] for r in rs])), nd)  # noqa: E731
    return {"acc": [round(float(a), 2) for a in acc], "fold": [r["fold"] for r in rs],
            "acc_mean": round(float(acc.mean()), 2), "acc_std": round(float(acc.std(ddof=1)) if len(acc) > 1 else 0.0, 2),
            "folds": len(rs), "disagree": mean("disagree", 2), "sym_kl": mean("sym_kl", 4),
            "train_s": mean("train_seconds", 3), "cache_s": mean("cache_seconds", 3),
            "best_epoch": mean("best_epoch", 1), "epochs_run": mean("epochs_run", 1)}


def _data_args(p: dict) -> dict:
    return {"n_graphs": p["graphs"], "tree_sizes": tuple(p["tree_sizes"]), "noise": p["noise"]}


def study_data(ctx) -> tuple[list, TrainConfig]:
    """The profile's motif graphs and base training configuration, checked and built once per call."""
    if "graphs" not in ctx.shared:
        p = ctx.profile
        if p["weight_rule"] != WEIGHT_RULE:
            raise ParameterError("weight_rule", p["weight_rule"], f"{WEIGHT_RULE}, the M > 2 label-weight rule this code "
                                 "implements (companion.graph_multiview.submix.WEIGHT_RULE)")
        unknown = sorted(set(p["train"]) - set(TrainConfig.__dataclass_fields__))
        if unknown:
            raise ParameterError("train", unknown, f"fields of TrainConfig: {', '.join(TrainConfig.__dataclass_fields__)}")
        cfg = TrainConfig(**p["train"])
        check_int("folds", p["folds"], lo=2, hi=p["graphs"])
        check_int("sweep_folds", p["sweep_folds"], lo=1, hi=p["folds"])
        check_int("workers", p["workers"], lo=1)
        check_choice("worker_device", p["worker_device"], ("cpu", "cuda"))
        for m in p["heads_sweep"]:
            check_int("heads_sweep", m, lo=2)
        ds = MotifDataset(seed=ctx.seed, **_data_args(p))
        ctx.shared["graphs"], ctx.shared["train"] = [ds[i] for i in range(len(ds))], cfg
    return ctx.shared["graphs"], ctx.shared["train"]


def _init_worker(data_args: dict, seed: int) -> None:
    import torch

    torch.set_num_threads(1)
    ds = MotifDataset(seed=seed, **data_args)
    _WORKER.update(graphs=[ds[i] for i in range(len(ds))], views={}, splits={})


def _job(job: dict) -> dict:
    """One (method, fold) run in a pool worker: the fold's split, :func:`run_fold`, the numbers summaries keep."""
    graphs = _WORKER["graphs"]
    key = (job["folds"], job["seed"], job["label_ratio"])
    if key not in _WORKER["splits"]:
        _WORKER["splits"][key] = fold_splits(graphs, *key)
    tr, te = _WORKER["splits"][key][job["fold"]]
    r = run_fold(graphs, job["method"], TrainConfig(**job["cfg"]), tr, te, seed=job["seed"] + job["fold"],
                 label_noise=job["label_noise"], device=job["device"], view_cache=_WORKER["views"])
    return {"fold": job["fold"], "acc": r.acc, "disagree": r.disagree, "sym_kl": r.sym_kl,
            "train_seconds": r.train_seconds, "cache_seconds": r.cache_seconds, "best_epoch": r.best_epoch,
            "epochs_run": r.epochs_run}


def _pool(ctx):
    """The run's pool of ``workers`` spawned processes, started at its first stage and kept for the others
    (multiprocessing terminates it at exit); workers on ``"cpu"`` see no GPU
    (:func:`~companion.core.gpu_hidden_from_children`)."""
    if "pool" not in ctx.shared:
        p = ctx.profile
        with gpu_hidden_from_children() if p["worker_device"] == "cpu" else contextlib.nullcontext():
            ctx.shared["pool"] = mp.get_context("spawn").Pool(p["workers"], _init_worker, (_data_args(p), ctx.seed))
    return ctx.shared["pool"]


def run_jobs(ctx, jobs: list[tuple[tuple, str, TrainConfig, dict]], n_folds: int) -> dict[tuple, list[dict]]:
    """``{group: [job result per fold]}`` of every ``(group, method, cfg, settings)`` × fold ``0..n_folds-1``,
    run by a pool of ``workers`` processes and queued fold by fold (``settings``: ``label_noise``,
    ``label_ratio``). At the deadline the pool is terminated and the folds that finished are returned."""
    p = ctx.profile
    queue = [(group, {"method": method, "cfg": asdict(cfg), "folds": p["folds"], "fold": f, "seed": ctx.seed,
                      "device": p["worker_device"], "label_noise": 0.0, "label_ratio": 1.0, **settings})
             for f in range(n_folds) for group, method, cfg, settings in jobs]
    pool = _pool(ctx)
    out = {group: [] for group, *_ in jobs}
    try:
        pending = [(group, pool.apply_async(_job, (job,))) for group, job in queue]
        while pending and ctx.left() > 0:
            still = []
            for g, r in pending:
                if r.ready():
                    out[g].append(r.get())
                else:
                    still.append((g, r))
            pending = still
            time.sleep(0.02)
        if pending:
            ctx.log(f"  deadline: {len(pending)} of {len(queue)} runs not finished")
            pool.terminate()  # the unfinished runs stop here; a later stage starts a new pool
            pool.join()
            del ctx.shared["pool"]
    except BaseException:
        ctx.shared.pop("pool").terminate()
        raise
    return out


def _summaries(results: dict) -> dict:
    return {g: summarise(rs) for g, rs in results.items() if rs}


def main(ctx) -> dict:
    """``{encoder: {method: summary}}``: GCN × every method, then GIN and GraphGPS × {vanilla, ensemble, G-MIMO,
    GMV} (:data:`ENCODERS`), ``folds`` folds."""
    graphs, cfg = study_data(ctx)
    jobs = [((conv, m), m, with_config(cfg, conv=conv), {}) for conv, methods in ENCODERS.items() for m in methods]
    out = {}
    for (conv, m), s in _summaries(run_jobs(ctx, jobs, ctx.profile["folds"])).items():
        out.setdefault(conv, {})[m] = s
    for conv, table in out.items():
        ctx.log(f"  {conv}: " + ", ".join(f"{m} {v['acc_mean']:.1f}" for m, v in table.items()))
    return out


def heads_sweep(ctx) -> dict:
    """``{M: summary}``: GMV (GCN) with M sub-networks for each M of ``heads_sweep`` (the paper sweeps 2–10),
    ``sweep_folds`` folds."""
    graphs, cfg = study_data(ctx)
    jobs = [(str(m), "gmv", with_config(cfg, heads=m), {}) for m in ctx.profile["heads_sweep"]]
    return _summaries(run_jobs(ctx, jobs, ctx.profile["sweep_folds"]))


def _label_study(ctx, setting: str) -> dict:
    graphs, cfg = study_data(ctx)
    jobs = [((f"{int(100 * r)}%", m), m, cfg, {setting: r}) for r in ctx.profile[setting] for m in ("vanilla", "gmv")]
    out = {}
    for (level, m), s in _summaries(run_jobs(ctx, jobs, ctx.profile["sweep_folds"])).items():
        out.setdefault(level, {})[m] = s
    return out


def label_noise(ctx) -> dict:
    """``{"10%": {"vanilla": summary, "gmv": summary}, ...}``: both with each share of ``label_noise`` of the
    training labels flipped to another class, ``sweep_folds`` folds."""
    return _label_study(ctx, "label_noise")


def label_ratio(ctx) -> dict:
    """``{"75%": {"vanilla": summary, "gmv": summary}, ...}``: both trained on each share of ``label_ratio`` of the
    training labels, ``sweep_folds`` folds."""
    return _label_study(ctx, "label_ratio")


def latency_ms(ctx) -> dict:
    """Milliseconds of one inference batch (256 graphs, ``time_ms``) of an untrained model: vanilla (one head)
    first, then GMV (two heads, one shared encoder)."""
    import torch

    graphs, cfg = study_data(ctx)
    batch = GraphBatch(graphs[:256]).to(ctx.device)
    out = {}
    for name, heads in (("vanilla", 1), ("gmv", 2)):
        model = MultiHeadGNN(graphs[0].x.shape[1], 3, heads=heads, hidden=cfg.hidden).to(ctx.device).eval()
        with torch.no_grad():
            out[name] = round(time_ms(lambda: model.predict(batch), ctx.device), 4)
    return out
