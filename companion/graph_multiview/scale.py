"""The one-GPU (H200) study of paper 07 (GMV) and the reader of its committed results. No plotly import.

:func:`run_scale_up` (run by ``benchmarks/graph_multiview_gpu.py``) works on a larger and harder planted-motif
set (more graphs, larger trees, 20 % extra random edges) because the TU sets cannot be shipped or
downloaded; OGB, REDDIT and COLLAB are not reproduced either. Stages, each skipped once ``deadline`` seconds
have passed (the JSON is written after every stage):

1. ``main``: GCN × every method, then GIN and GraphGPS × {vanilla, ensemble, G-MIMO, GMV}, ``folds`` folds;
2. ``heads_sweep``: GMV (GCN) with M = 2, 4, 6, 10 sub-networks (the paper sweeps 2–10);
3. ``label_noise``: vanilla vs GMV with 10 / 20 / 40 % of the training labels flipped;
4. ``label_ratio``: vanilla vs GMV with 75 / 50 / 25 / 10 % of the training labels;
5. ``latency_ms``: one inference batch (``time_ms``), vanilla (one head) against GMV (two heads).

``stages`` runs a subset; ``previous`` (an earlier payload of the same profile) keeps the stages it holds, so
a study can be completed (or one stage redone) over several GPU calls: ``runs`` lists the seconds each call
took. Every method's summary holds its per-fold accuracies (``acc``), which the claim rows judge, and
``weight_rule`` records, per stage run, the :data:`~companion.graph_multiview.submix.WEIGHT_RULE` of the
views it trained on (a ``heads_sweep`` recorded without it predates the fix of the M > 2 label weights).
"""

from __future__ import annotations

import json
import time

import numpy as np

from companion.core import ParameterError, check_choice, recorded_results, time_ms
from companion.graph_multiview.data import MotifDataset
from companion.graph_multiview.models import GraphBatch, MultiHeadGNN
from companion.graph_multiview.submix import WEIGHT_RULE
from companion.graph_multiview.training import METHODS, TrainConfig, compare, with_config

RESULTS_NAME = "graph_multiview_gpu"
GPU_PROFILE = {
    "graphs": 720,
    "tree_sizes": (10, 36),
    "noise": 0.2,
    "folds": 3,
    "epochs": 30,
    "batch_size": 64,
    "hidden": 64,
    "views_per_graph": 2,
    "heads_sweep": (2, 4, 6, 10),
    "label_noise": (0.1, 0.2, 0.4),
    "label_ratio": (0.75, 0.5, 0.25, 0.1),
    "sweep_folds": 3,  # three folds, so the sweep and the label studies can be judged (the rule needs 3 seeds)
}
SMOKE_PROFILE = {**GPU_PROFILE, "graphs": 24, "tree_sizes": (3, 5), "folds": 2, "epochs": 1, "batch_size": 12,
                 "hidden": 8, "views_per_graph": 1, "heads_sweep": (2, 3), "label_noise": (0.2,),
                 "label_ratio": (0.5,), "sweep_folds": 2}
OTHER_CONVS_METHODS = ("vanilla", "ensemble", "gmimo", "gmv")


def recorded() -> dict | None:
    """The committed results of ``benchmarks/graph_multiview_gpu.py`` (None when not recorded yet)."""
    return recorded_results(RESULTS_NAME)


def heads_stale(gpu: dict) -> bool:
    """True when a payload's sub-network sweep predates the current M > 2 label-weight rule (no ``weight_rule``
    for it, or an older one): its numbers do not measure this code until the stage is rerun."""
    return "heads_sweep" in gpu and gpu.get("weight_rule", {}).get("heads_sweep", 1) < WEIGHT_RULE


def summarise(runs) -> dict:
    out = {}
    for m, rs in runs.items():
        acc = np.array([r.acc for r in rs])
        out[m] = {"acc": [round(float(a), 2) for a in acc], "acc_mean": round(float(acc.mean()), 2), "acc_std": round(float(acc.std(ddof=1)) if len(acc) > 1 else 0.0, 2),
                  "folds": len(rs), "disagree": round(float(np.mean([r.disagree for r in rs])), 2),
                  "sym_kl": round(float(np.mean([r.sym_kl for r in rs])), 4),
                  "train_s": round(float(np.mean([r.train_seconds for r in rs])), 3),
                  "cache_s": round(float(np.mean([r.cache_seconds for r in rs])), 3)}
    return out


STAGES = ("main", "heads_sweep", "label_noise", "label_ratio", "latency_ms")


def run_scale_up(config=None, *, device="cuda", deadline: float = 120.0, seed: int = 0, log=print, save=None,
                 stages=STAGES, previous: dict | None = None) -> dict:
    """Run ``stages`` (of the module docstring); ``save(payload)`` is called after every stage. With
    ``previous``, its recorded stages are kept (its profile and seed must be this run's)."""
    cfg_d = dict(GPU_PROFILE if config is None else config)
    for name in stages:
        check_choice("stage", name, STAGES)
    t0 = time.perf_counter()
    ds = MotifDataset(cfg_d["graphs"], seed=seed, tree_sizes=tuple(cfg_d["tree_sizes"]), noise=cfg_d["noise"])
    graphs = [ds[i] for i in range(len(ds))]
    cfg = TrainConfig(hidden=cfg_d["hidden"], epochs=cfg_d["epochs"], batch_size=cfg_d["batch_size"],
                      views_per_graph=cfg_d["views_per_graph"])
    payload = {"config": {**cfg_d, "train": {k: v for k, v in vars(cfg).items()}},
               "not_reproduced": "TU sets, OGB, REDDIT, COLLAB: data not shipped / not downloadable", "skipped": []}
    if previous is not None:
        same = {k: v for k, v in previous.get("config", {}).items() if k != "train"}
        if same != json.loads(json.dumps({k: v for k, v in payload["config"].items() if k != "train"})) \
                or previous.get("seed", seed) != seed:
            raise ParameterError("previous", "a payload of another profile or seed", f"the profile {cfg_d} and seed {seed}")
        payload.update({k: previous[k] for k in STAGES if k in previous and k not in stages})
        payload["skipped"] = [s for s in previous.get("skipped", []) if s.split(":")[0] not in stages]
        payload["runs"] = list(previous.get("runs", [{"stages": [k for k in STAGES if k in previous],
                                                       "seconds": previous.get("seconds")}]))
        payload["weight_rule"] = {k: v for k, v in previous.get("weight_rule", {}).items() if k not in stages}
    payload["seed"] = seed
    left = lambda: deadline - (time.perf_counter() - t0)  # noqa: E731

    def stage(name, fn):
        if name not in stages:
            return
        if left() <= 0:
            payload["skipped"].append(name)
            log(f"[{name}] skipped (deadline)")
            return
        ts = time.perf_counter()
        payload[name] = fn()
        payload.setdefault("weight_rule", {})[name] = WEIGHT_RULE
        log(f"[{name}] done in {time.perf_counter() - ts:.1f} s ({time.perf_counter() - t0:.1f} s total)")
        if save:
            save(payload)

    def main():
        out, views = {}, {}
        for conv, methods in (("gcn", METHODS), ("gin", OTHER_CONVS_METHODS), ("gps", OTHER_CONVS_METHODS)):
            if left() <= 0:
                payload["skipped"].append(f"main:{conv}")
                continue
            runs = compare(graphs, methods, with_config(cfg, conv=conv), folds=cfg_d["folds"], seed=seed, device=device,
                           view_cache=views, should_stop=lambda: left() <= 0)
            out[conv] = summarise(runs)
            log(f"  {conv}: " + ", ".join(f"{m} {v['acc_mean']:.1f}" for m, v in out[conv].items()))
        return out

    def heads():
        out = {}
        for m in cfg_d["heads_sweep"]:
            if left() <= 0:
                break
            runs = compare(graphs, ["gmv"], with_config(cfg, heads=m), folds=cfg_d["folds"], seed=seed, device=device,
                           max_folds=cfg_d["sweep_folds"], should_stop=lambda: left() <= 0)
            out[str(m)] = summarise(runs)["gmv"]
        return out

    def label_study(setting):
        """Vanilla vs GMV at each value of ``setting`` (``label_noise`` or ``label_ratio``)."""
        out = {}
        for r in cfg_d[setting]:
            if left() <= 0:
                break
            out[f"{int(100 * r)}%"] = summarise(compare(graphs, ["vanilla", "gmv"], cfg, folds=cfg_d["folds"], seed=seed,
                                                        device=device, max_folds=cfg_d["sweep_folds"],
                                                        should_stop=lambda: left() <= 0, **{setting: r}))
        return out

    def latency():
        import torch

        batch = GraphBatch(graphs[:256]).to(device)
        out = {}
        for name, heads in (("vanilla", 1), ("gmv", 2)):
            model = MultiHeadGNN(graphs[0].x.shape[1], 3, heads=heads, hidden=cfg.hidden).to(device).eval()
            with torch.no_grad():
                out[name] = round(time_ms(lambda: model.predict(batch), device), 4)
        return out

    stage("main", main)
    stage("heads_sweep", heads)
    stage("label_noise", lambda: label_study("label_noise"))
    stage("label_ratio", lambda: label_study("label_ratio"))
    stage("latency_ms", latency)
    payload["seconds"] = round(time.perf_counter() - t0, 1)
    if previous is not None:
        payload["runs"].append({"stages": list(stages), "seconds": payload["seconds"]})
    return payload
