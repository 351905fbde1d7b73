"""The stages of paper 07's one-GPU study (:mod:`companion.graph_multiview.scale` lists them).

Each stage is ``fn(ctx) -> JSON-able result`` (:class:`companion.core.stages.StageContext`). All of them train
on one planted-motif set, built from the profile (``graphs``, ``tree_sizes``, ``noise``, the study's seed) once
per call and kept in ``ctx.shared`` with the base :class:`~companion.graph_multiview.training.TrainConfig`
(``profile["train"]``). A method's summary (:func:`summarise`) holds its per-fold accuracies (``acc``), which
the claim rows judge; each fold is its own seed. A loop over encoders or settings stops when ``ctx.left()``
runs out, after its first item (a started :func:`~companion.graph_multiview.training.compare` stops after its
current fold, its first always runs): the result holds what was done.
"""

from __future__ import annotations

import numpy as np

from companion.core import ParameterError, check_int, time_ms
from companion.graph_multiview.data import MotifDataset
from companion.graph_multiview.models import GraphBatch, MultiHeadGNN
from companion.graph_multiview.submix import WEIGHT_RULE
from companion.graph_multiview.training import METHODS, TrainConfig, compare, with_config

__all__ = ["ENCODERS", "heads_sweep", "label_noise", "label_ratio", "latency_ms", "main", "study_data", "summarise"]

#: The ``main`` stage's encoders and the methods each runs (every method with GCN, Table 1's subset with the others).
ENCODERS = {"gcn": METHODS, "gin": ("vanilla", "ensemble", "gmimo", "gmv"), "gps": ("vanilla", "ensemble", "gmimo", "gmv")}


def summarise(runs) -> dict:
    """Per method: the per-fold accuracies and their mean ± std, head disagreement and symmetric KL, training and
    view-caching seconds (means over folds)."""
    out = {}
    for m, rs in runs.items():
        acc = np.array([r.acc for r in rs])
        out[m] = {"acc": [round(float(a), 2) for a in acc], "acc_mean": round(float(acc.mean()), 2),
                  "acc_std": round(float(acc.std(ddof=1)) if len(acc) > 1 else 0.0, 2), "folds": len(rs),
                  "disagree": round(float(np.mean([r.disagree for r in rs])), 2),
                  "sym_kl": round(float(np.mean([r.sym_kl for r in rs])), 4),
                  "train_s": round(float(np.mean([r.train_seconds for r in rs])), 3),
                  "cache_s": round(float(np.mean([r.cache_seconds for r in rs])), 3)}
    return out


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
        check_int("sweep_folds", p["sweep_folds"], lo=1, hi=p["folds"])
        for m in p["heads_sweep"]:
            check_int("heads_sweep", m, lo=2)
        ds = MotifDataset(p["graphs"], seed=ctx.seed, tree_sizes=tuple(p["tree_sizes"]), noise=p["noise"])
        ctx.shared["graphs"], ctx.shared["train"] = [ds[i] for i in range(len(ds))], cfg
    return ctx.shared["graphs"], ctx.shared["train"]


def _stop(ctx):
    return lambda: ctx.left() <= 0


def main(ctx) -> dict:
    """``{encoder: {method: summary}}``: GCN × every method, then GIN and GraphGPS × {vanilla, ensemble, G-MIMO,
    GMV} (:data:`ENCODERS`), ``folds`` folds; the mixed views are cached once and shared by the encoders."""
    graphs, cfg = study_data(ctx)
    out, views = {}, {}
    for conv, methods in ENCODERS.items():
        if out and ctx.left() <= 0:
            ctx.log(f"  {conv}: not run (deadline)")
            break
        runs = compare(graphs, methods, with_config(cfg, conv=conv), folds=ctx.profile["folds"], seed=ctx.seed,
                       device=ctx.device, view_cache=views, should_stop=_stop(ctx))
        out[conv] = summarise(runs)
        ctx.log(f"  {conv}: " + ", ".join(f"{m} {v['acc_mean']:.1f}" for m, v in out[conv].items()))
    return out


def heads_sweep(ctx) -> dict:
    """``{M: summary}``: GMV (GCN) with M sub-networks for each M of ``heads_sweep`` (the paper sweeps 2–10),
    ``sweep_folds`` folds."""
    graphs, cfg = study_data(ctx)
    out = {}
    for m in ctx.profile["heads_sweep"]:
        if out and ctx.left() <= 0:
            break
        runs = compare(graphs, ["gmv"], with_config(cfg, heads=m), folds=ctx.profile["folds"], seed=ctx.seed,
                       device=ctx.device, max_folds=ctx.profile["sweep_folds"], should_stop=_stop(ctx))
        out[str(m)] = summarise(runs)["gmv"]
    return out


def _label_study(ctx, setting: str) -> dict:
    graphs, cfg = study_data(ctx)
    out = {}
    for r in ctx.profile[setting]:
        if out and ctx.left() <= 0:
            break
        out[f"{int(100 * r)}%"] = summarise(compare(graphs, ["vanilla", "gmv"], cfg, folds=ctx.profile["folds"],
                                                    seed=ctx.seed, device=ctx.device, max_folds=ctx.profile["sweep_folds"],
                                                    should_stop=_stop(ctx), **{setting: r}))
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
