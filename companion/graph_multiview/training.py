"""One trainer for GMV and its baselines, with cached views and head-diversity metrics.

Methods (:data:`METHODS`), all with the same encoder, optimiser (Adam, weight decay = R(θ)) and epochs:

* ``vanilla`` — one head, cross-entropy on plain graphs; ``dropedge`` / ``dropnode`` — the same with
  ``torch_geometric.utils.dropout_edge`` / ``dropout_node`` (rate ``drop_rate``) on every batch;
* ``two_head`` — M heads on plain graphs, ``(1/M) Σ_k CE(ŷᵏ, y)`` (GMV with α = 0 and no mixing);
* ``ensemble`` — M independently initialised one-head models, probabilities averaged;
* ``gmimo`` — G-MIMO: M heads, head k trained on its own shuffled stream of plain graphs (one forward over the
  disjoint union of the M batches); ``gmimo_shape="mimo"`` adds one first-layer convolution per stream;
* ``mixed_single`` — ablation "mixed views only": one head on ST-SubMix views with the soft label
  ``w_src·y_src + w_trg·y_trg`` (the role SubMix plays in the paper's tables; SubMix's own sampler is not
  implemented);
* ``decomposition`` — ablation "decomposition only": GMV's loss on the disjoint union of source and target
  (no replacement);
* ``gmv`` — the full method: ST-SubMix views (M − 1 sources into one target), ``ℓ_mix + α ℓ_view``.

Views are **generated once and cached** (``views_per_graph`` per training graph, each graph the source,
targets drawn uniformly from the other training graphs — the paper draws them from the same batch); the
caching time is reported separately from the training time. Each epoch every training graph contributes one
of its cached views. Hidden size, lr, epochs, batch size and w are not stated in the paper: they are the
:class:`TrainConfig` fields. There is no validation-based model selection: the last epoch's model is tested.

Metrics: accuracy; ``D_disagree`` — the share (%) of test graphs on which two heads' arg-max differ;
``D_KL`` — the symmetric KL ``KL(p¹‖p²) + KL(p²‖p¹)`` between heads, averaged over test graphs (both averaged
over head pairs when M > 2).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import global_mean_pool
from torch_geometric.utils import dropout_edge, dropout_node

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.graph_multiview.models import AVERAGES, CONVS, GraphBatch, MultiHeadGNN, gmv_loss, multi_head_ce
from companion.graph_multiview.sampling import BETA, READINGS, check_sampling
from companion.graph_multiview.submix import st_submix

METHODS = ("vanilla", "dropedge", "dropnode", "two_head", "ensemble", "gmimo", "mixed_single", "decomposition", "gmv")
VIEW_METHODS = ("mixed_single", "decomposition", "gmv")
LABELS = {"vanilla": "vanilla", "dropedge": "DropEdge", "dropnode": "DropNode", "two_head": "two-head vanilla",
          "ensemble": "ensemble", "gmimo": "G-MIMO", "mixed_single": "mixed views only",
          "decomposition": "decomposition only", "gmv": "GMV"}


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs besides the data (defaults: the issue's hidden 64, Adam 1e-2, batch 32, w = 10)."""

    conv: str = "gcn"
    hidden: int = 64
    layers: int = 3
    lr: float = 1e-2
    weight_decay: float = 5e-4
    epochs: int = 40
    batch_size: int = 32
    dropout: float = 0.5
    heads: int = 2
    alpha: float = 2.0
    p: float = 0.4
    q: float = 0.6
    w: int = 10
    beta: float = BETA
    reading: str = "product"
    views_per_graph: int = 4
    average: str = "prob"
    drop_rate: float = 0.2
    gmimo_shape: str = "mhead"

    def __post_init__(self):
        check_choice("conv", self.conv, CONVS)
        check_int("hidden", self.hidden, lo=4)
        check_int("layers", self.layers, lo=1)
        check_float("lr", self.lr, lo=0.0, lo_open=True)
        check_float("weight_decay", self.weight_decay, lo=0.0)
        check_int("epochs", self.epochs, lo=1)
        check_int("batch_size", self.batch_size, lo=2)
        check_float("dropout", self.dropout, lo=0.0, hi=1.0, hi_open=True)
        check_int("heads", self.heads, lo=2)
        check_float("alpha", self.alpha, lo=0.0)
        check_sampling(self.p, self.q, self.w, self.beta, self.reading)
        check_int("views_per_graph", self.views_per_graph, lo=1)
        check_choice("average", self.average, AVERAGES)
        check_float("drop_rate", self.drop_rate, lo=0.0, hi=1.0, hi_open=True)
        check_choice("gmimo_shape", self.gmimo_shape, ("mhead", "mimo"))


def head_diversity(probs: torch.Tensor) -> tuple[float, float]:
    """``(D_disagree in %, symmetric KL)`` of head probabilities ``(N, M, C)``, averaged over head pairs."""
    n, m, _ = probs.shape
    if m < 2:
        return 0.0, 0.0
    p = probs.clamp_min(1e-12)
    dis, kl = [], []
    for i in range(m):
        for j in range(i + 1, m):
            dis.append((p[:, i].argmax(-1) != p[:, j].argmax(-1)).float().mean().item() * 100)
            lij = (p[:, i] * (p[:, i].log() - p[:, j].log())).sum(-1)
            lji = (p[:, j] * (p[:, j].log() - p[:, i].log())).sum(-1)
            kl.append((lij + lji).mean().item())
    return float(np.mean(dis)), float(np.mean(kl))


def kfold(labels, k: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified k-fold ``(train, test)`` index pairs."""
    labels = np.asarray(labels)
    check_int("folds", k, lo=2, hi=len(labels))
    rng = np.random.default_rng(seed)
    fold = np.empty(len(labels), dtype=int)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        fold[idx] = (np.arange(len(idx)) + rng.integers(k)) % k
    return [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(k)]


def build_views(graphs, train_idx, cfg: TrainConfig, *, mode: str = "replace", sources_per_view: int | None = None,
                seed: int = 0) -> tuple[list[list], float]:
    """``views[i]`` = ``views_per_graph`` cached mixed ``Data`` for training graph ``train_idx[i]`` (as a source),
    and the seconds it took. Labels per head: the sources' then the target's."""
    if len(train_idx) < 2:
        raise ParameterError("train_idx", len(train_idx), "at least two training graphs (a mix needs a target)")
    n_src = cfg.heads - 1 if sources_per_view is None else sources_per_view
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    cache = {}  # PPR matrix, neighbours and edge set once per graph
    views = []
    for pos, i in enumerate(train_idx):
        mine = []
        for _ in range(cfg.views_per_graph):
            others = rng.choice(np.delete(np.asarray(train_idx), pos), n_src, replace=len(train_idx) - 1 < n_src)
            srcs = [graphs[int(i)]] + [graphs[int(j)] for j in others[1:]]
            trg = graphs[int(others[0])]
            mixed = st_submix(srcs, trg, rng, p=cfg.p, q=cfg.q, w=cfg.w, beta=cfg.beta, reading=cfg.reading,
                              mode=mode, ppr_cache=cache)
            mine.append(mixed.to_data([int(g.y) for g in srcs] + [int(trg.y)]))
        views.append(mine)
    return views, time.perf_counter() - t0


def _batches(n, bs, rng):
    perm = rng.permutation(n)
    return [perm[i:i + bs] for i in range(0, n, bs) if len(perm[i:i + bs]) >= 2 or n < 2]


def _noisy(y, rate, n_classes, rng):
    y = np.array(y)
    flip = rng.random(len(y)) < rate
    y[flip] = (y[flip] + rng.integers(1, n_classes, flip.sum())) % n_classes
    return y


def training_graphs(graphs, train_idx, label_noise: float, n_classes: int, seed: int) -> list:
    """Copies of the training graphs whose labels carry ``label_noise`` (a share flipped to another class)."""
    y = _noisy([int(graphs[int(i)].y) for i in train_idx], label_noise, n_classes, np.random.default_rng(seed + 10**6))
    out = []
    for i, yi in zip(train_idx, y):
        g = graphs[int(i)].clone()
        g.y = torch.tensor([int(yi)])
        out.append(g)
    return out


def view_kind(method: str, cfg: TrainConfig):
    """``(mode, sources per view)`` of a view method's cached views."""
    return ("union" if method == "decomposition" else "replace", 1 if method == "mixed_single" else cfg.heads - 1)


@dataclass
class RunResult:
    method: str
    acc: float
    disagree: float
    sym_kl: float
    train_seconds: float
    cache_seconds: float
    head_probs: np.ndarray  # (N_test, M, C)
    y_test: np.ndarray
    loss: list
    config: dict

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("head_probs")
        d.pop("y_test")
        return d


def train_method(method: str, graphs, train_idx, test_idx, cfg: TrainConfig | None = None, *, seed: int = 0,
                 label_noise: float = 0.0, device="cpu", views=None, cache_seconds: float = 0.0) -> RunResult:
    """Train ``method`` on ``graphs[train_idx]``, test on ``graphs[test_idx]`` (plain graphs, one pass).

    ``views`` may pass cached views built by :func:`build_views` on :func:`training_graphs` (same seed and
    noise); ``cache_seconds`` is then their building time."""
    cfg = cfg or TrainConfig()
    check_choice("method", method, METHODS)
    check_float("label_noise", label_noise, lo=0.0, hi=1.0, hi_open=True)
    graphs = list(graphs)
    train_idx, test_idx = np.asarray(train_idx), np.asarray(test_idx)
    if len(train_idx) < 2:
        raise ParameterError("train_idx", len(train_idx), "at least two training graphs")
    widths = {g.x.shape[1] for g in graphs}
    if len(widths) != 1:
        raise ParameterError("graphs", sorted(widths), "graphs with one node-feature width")
    n_classes = max(int(g.y) for g in graphs) + 1
    in_dim = widths.pop()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    dev = torch.device(device)
    # labels the trainer sees (label noise flips a share of the training labels)
    train_graphs = training_graphs(graphs, train_idx, label_noise, n_classes, seed)
    heads = 1 if method in ("vanilla", "dropedge", "dropnode", "mixed_single") else cfg.heads
    n_models = cfg.heads if method == "ensemble" else 1
    first = cfg.heads if (method == "gmimo" and cfg.gmimo_shape == "mimo") else 1
    models = [MultiHeadGNN(in_dim, n_classes, heads=1 if method == "ensemble" else heads, hidden=cfg.hidden,
                           layers=cfg.layers, conv=cfg.conv, dropout=cfg.dropout, first_convs=first).to(dev)
              for _ in range(n_models)]
    cache_s = cache_seconds
    if method in VIEW_METHODS and views is None:
        mode, n_src = view_kind(method, cfg)
        views, cache_s = build_views(train_graphs, list(range(len(train_graphs))), cfg, mode=mode,
                                     sources_per_view=n_src, seed=seed)
    opts = [torch.optim.Adam(m.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay) for m in models]
    losses = []
    n = len(train_graphs)
    t0 = time.perf_counter()
    for _epoch in range(cfg.epochs):
        ep = []
        for model, opt in zip(models, opts):
            model.train()
            streams = ([_batches(n, cfg.batch_size, rng) for _ in range(cfg.heads)] if method == "gmimo"
                       else [_batches(n, cfg.batch_size, rng)])
            for step in range(len(streams[0])):
                if method in VIEW_METHODS:
                    items = [views[j][int(rng.integers(len(views[j])))] for j in streams[0][step]]
                    data = GraphBatch(items).to(dev)
                    mix, view, present = model.view_logits(data)
                    if method == "mixed_single":
                        loss = gmv_loss(mix.expand(-1, data.y_heads.shape[1], -1), None, None, data.y_heads,
                                        data.w_heads, 0.0)
                    else:
                        loss = gmv_loss(mix, view, present, data.y_heads, data.w_heads, cfg.alpha)
                elif method == "gmimo":
                    items = []
                    for k, s in enumerate(streams):
                        for j in s[min(step, len(s) - 1)]:
                            g = train_graphs[int(j)].clone()
                            g.stream = torch.full((g.num_nodes,), k, dtype=torch.long)
                            g.k = torch.tensor([k])
                            items.append(g)
                    data = GraphBatch(items).to(dev)
                    h = model.embed(data.x, data.edge_index, data.batch, stream=data.stream if first > 1 else None)
                    logits = model.head_logits(global_mean_pool(h, data.batch, size=data.num_graphs))
                    picked = logits[torch.arange(data.num_graphs, device=dev), data.k]
                    loss = F.cross_entropy(picked, data.y) * cfg.heads
                else:
                    data = GraphBatch([train_graphs[int(j)] for j in streams[0][step]]).to(dev)
                    if method == "dropedge":
                        data.edge_index, _ = dropout_edge(data.edge_index, p=cfg.drop_rate, force_undirected=True)
                    elif method == "dropnode":
                        data.edge_index, _, _ = dropout_node(data.edge_index, p=cfg.drop_rate,
                                                             num_nodes=data.num_nodes)
                    loss = multi_head_ce(model(data), data.y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                ep.append(loss.item())
        losses.append(float(np.mean(ep)))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t0
    test = GraphBatch([graphs[int(i)] for i in test_idx]).to(dev)
    for model in models:
        model.eval()
    if method == "ensemble":
        probs = torch.cat([m.head_probs(test) for m in models], dim=1)
        pred = probs.mean(1)
    else:
        probs = models[0].head_probs(test)
        pred = models[0].predict(test, cfg.average)
    y_test = test.y.cpu().numpy()
    acc = float((pred.argmax(-1).cpu().numpy() == y_test).mean() * 100)
    dis, kl = head_diversity(probs.cpu())
    return RunResult(method, acc, dis, kl, train_s, cache_s, probs.cpu().numpy(), y_test, losses,
                     {**asdict(cfg), "seed": seed, "label_noise": label_noise})


def compare(graphs, methods, cfg: TrainConfig, *, folds: int = 3, seed: int = 0, label_noise: float = 0.0,
            label_ratio: float = 1.0, device="cpu", max_folds: int | None = None,
            view_cache: dict | None = None, should_stop=None) -> dict[str, list[RunResult]]:
    """``{method: [RunResult per fold]}`` on stratified folds (seed ``seed + fold`` for each run).

    ``view_cache`` (a dict) keeps the cached views across calls on the same ``graphs`` (e.g. other encoders);
    ``should_stop()`` is asked before every fold after the first (a time budget): when true, no further folds run."""
    check_float("label_ratio", label_ratio, lo=0.0, hi=1.0, lo_open=True)
    graphs = list(graphs)
    labels = [int(g.y) for g in graphs]
    n_classes = max(labels) + 1
    out = {m: [] for m in methods}
    for f, (tr, te) in enumerate(kfold(labels, folds, seed)[:max_folds]):
        if f and should_stop is not None and should_stop():
            break
        if label_ratio < 1.0:
            tr = np.random.default_rng(seed + f).permutation(tr)[:max(2, int(round(label_ratio * len(tr))))]
        cached = {} if view_cache is None else view_cache  # views shared by the methods of a fold, built once
        for m in methods:
            views, secs = None, 0.0
            if m in VIEW_METHODS:
                key = (*view_kind(m, cfg), f, folds, seed, label_noise, label_ratio, cfg.p, cfg.q, cfg.w, cfg.beta,
                       cfg.reading, cfg.views_per_graph, id(graphs[0]), len(graphs))
                if key not in cached:
                    tg = training_graphs(graphs, tr, label_noise, n_classes, seed + f)
                    cached[key] = build_views(tg, list(range(len(tg))), cfg, mode=key[0], sources_per_view=key[1],
                                              seed=seed + f)
                views, secs = cached[key]
            out[m].append(train_method(m, graphs, tr, te, cfg, seed=seed + f, label_noise=label_noise, device=device,
                                       views=views, cache_seconds=secs))
    return out


def with_config(cfg: TrainConfig, **changes) -> TrainConfig:
    """A copy of ``cfg`` with ``changes`` (validated)."""
    return replace(cfg, **changes)


__all__ = ["LABELS", "METHODS", "READINGS", "RunResult", "TrainConfig", "build_views", "compare", "head_diversity",
           "kfold", "train_method", "with_config"]
