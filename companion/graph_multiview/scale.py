"""The one-GPU (H200) study of paper 07 (GMV) and the reader of its committed results. No plotly import.

What it runs, stage by stage (bodies in :mod:`companion.graph_multiview.experiments`), on a larger and harder
planted-motif set than the notebook's (720 graphs, trees of 10–36 nodes, 20 % extra random edges; hidden 64,
two cached views per graph), 10 stratified folds as the paper does, with the training recipe of
:mod:`companion.graph_multiview.training` (AdamW 1e-3, at most 80 epochs, early stop after 15 epochs without a
better accuracy on 10 % of the training fold held out, the best-validation epoch tested; the same for every
method):

1. ``main``: GCN × every method, then GIN and GraphGPS × {vanilla, ensemble, G-MIMO, GMV}, 10 folds;
2. ``heads_sweep``: GMV (GCN) with M = 2 … 10 sub-networks, the first 5 folds;
3. ``label_noise``: vanilla vs GMV with 10 / 20 / 40 % of the training labels flipped, 5 folds;
4. ``label_ratio``: vanilla vs GMV with 75 / 50 / 25 / 10 % of the training labels, 5 folds;
5. ``latency_ms``: one inference batch on the GPU (``time_ms``), vanilla (one head) against GMV (two heads).

The runs are small and launch-bound (a few milliseconds a step on one GPU, as on one CPU core), so stages 1–4
train them side by side: each (method, fold) run is one job for ``workers`` single-thread processes on
``worker_device`` (``"cpu"``: the host's cores; ``"cuda"`` shares the one GPU). Jobs are queued fold by fold and
a stage cut by the deadline keeps the folds that finished. The smoke profile runs the same pool with 2 workers.

Not reproduced: the TU sets, OGB, REDDIT and COLLAB (not shipped, not downloadable here). The profile names the
M > 2 label-weight rule it runs (``weight_rule``, :data:`~companion.graph_multiview.submix.WEIGHT_RULE`): a
payload of an older rule holds a sub-network sweep that does not measure this code (:func:`heads_stale`), and
``--resume`` refuses it as another profile. Likewise ``recipe``
(:data:`~companion.graph_multiview.training.RECIPE`): a payload trained with an older recipe
(:func:`recipe_stale`) does not measure this trainer. Run it with ``python -m companion.bench graph_multiview``
(``--smoke``: a tiny CPU run); ``--stages heads_sweep --resume benchmarks/results/graph_multiview_gpu.json``
redoes one stage and keeps the others.
"""

from dataclasses import asdict

from companion.core.stages import Stage, study_functions
from companion.graph_multiview import experiments as E
from companion.graph_multiview.submix import WEIGHT_RULE
from companion.graph_multiview.training import RECIPE, TrainConfig

__all__ = ["DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "heads_stale", "recipe_stale", "recorded",
           "run_scale_up"]

RESULTS_NAME = "graph_multiview_gpu"
DEADLINE_S = 290
GPU_PROFILE = {
    "graphs": 720, "tree_sizes": [10, 36], "noise": 0.2, "folds": 10,
    "sweep_folds": 5,  # the sweep and the label studies on the first 5 of the 10 folds (the fold count is in each row)
    "heads_sweep": list(range(2, 11)), "label_noise": [0.1, 0.2, 0.4], "label_ratio": [0.75, 0.5, 0.25, 0.1],
    "train": asdict(TrainConfig(hidden=64, epochs=80, patience=15, batch_size=64, views_per_graph=2)),
    "workers": 15, "worker_device": "cpu", "recipe": RECIPE, "weight_rule": WEIGHT_RULE, "seed": 0,
}
SMOKE_PROFILE = {
    **GPU_PROFILE, "graphs": 24, "tree_sizes": [3, 5], "folds": 3, "sweep_folds": 2, "heads_sweep": [2, 3],
    "label_noise": [0.2], "label_ratio": [0.5], "workers": 2,
    "train": asdict(TrainConfig(hidden=8, epochs=2, patience=1, batch_size=12, views_per_graph=1)),
}
STAGES = (  # needs_s: CPU-seconds of the runs (measured per epoch on one core) / 15 workers, plus the pool's start
    Stage("main", E.main, needs_s=150),
    Stage("heads_sweep", E.heads_sweep, needs_s=40),
    Stage("label_noise", E.label_noise, needs_s=30),
    Stage("label_ratio", E.label_ratio, needs_s=25),
    Stage("latency_ms", E.latency_ms, needs_s=5),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)


def heads_stale(gpu: dict) -> bool:
    """True when a payload's sub-network sweep ran under an older M > 2 label-weight rule than this code's (its
    profile names none, or an older one): its numbers do not measure this code until the study is rerun."""
    return "heads_sweep" in gpu and gpu.get("profile", {}).get("weight_rule", 1) < WEIGHT_RULE


def recipe_stale(gpu: dict) -> bool:
    """True when a payload's runs were trained with an older recipe than this code's (its profile names none, or
    an older ``recipe``): its accuracies do not measure this trainer until the study is rerun."""
    return gpu.get("profile", {}).get("recipe", 1) < RECIPE
