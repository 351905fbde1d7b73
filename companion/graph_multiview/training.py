"""One trainer for GMV and its baselines, with cached views and head-diversity metrics.

Methods (:data:`METHODS`), all with the same encoder, optimiser and stopping rule (the recipe below):

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
:class:`TrainConfig` fields.

**The recipe** (the same for every method). AdamW: the weight decay R(θ) is *decoupled* (``θ ← θ − lr·λ·θ``).
With Adam's coupled L2 term (``λθ`` added to the gradient), a run whose loss sits on the ln C plateau of the
first epochs has a data gradient far smaller than ``λθ``; Adam normalises the sum, so every weight moves by
about ``lr`` per step towards zero, the encoder's weights reach zero within ~20 epochs and the model predicts
one class (33.3 % on three balanced classes) — what a third of the earlier GPU runs showed. lr 1e-3 (at 1e-2
more than half of GCN's ReLU units die in the first epoch and the test accuracy swings by ±10 pp between
epochs). Model selection: ``val_share`` of the training fold (stratified, its labels as noisy or as scarce as
the rest) is held out; the model is evaluated on it after every epoch, training stops after ``patience``
epochs without a better validation accuracy (at most ``epochs``), and the test accuracy is that of the best
validation epoch (ties: the lower validation loss).

Metrics: accuracy; ``D_disagree`` — the share (%) of test graphs on which two heads' arg-max differ;
``D_KL`` — the symmetric KL ``KL(p¹‖p²) + KL(p²‖p¹)`` between heads, averaged over test graphs (both averaged
over head pairs when M > 2).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import global_mean_pool
from torch_geometric.utils import dropout_edge, dropout_node

from companion.core import ParameterError, Timer, check_choice, check_float, check_int
from companion.graph_multiview.models import AVERAGES, CONVS, GraphBatch, MultiHeadGNN, gmv_loss, multi_head_ce
from companion.graph_multiview.sampling import BETA, READINGS, check_sampling
from companion.graph_multiview.submix import st_submix

RECIPE = 2  # the training recipe's version (1: Adam with coupled L2, fixed epochs, last epoch tested; 2: below)
METHODS = ("vanilla", "dropedge", "dropnode", "two_head", "ensemble", "gmimo", "mixed_single", "decomposition", "gmv")
VIEW_METHODS = ("mixed_single", "decomposition", "gmv")
LABELS = {"vanilla": "vanilla", "dropedge": "DropEdge", "dropnode": "DropNode", "two_head": "two-head vanilla",
          "ensemble": "ensemble", "gmimo": "G-MIMO", "mixed_single": "mixed views only",
          "decomposition": "decomposition only", "gmv": "GMV"}


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs besides the data (defaults: hidden 64, AdamW 1e-3, batch 32, w = 10; ``epochs`` is
    the most epochs a run trains, ``patience`` and ``val_share`` the early-stopping rule)."""

    conv: str = "gcn"
    hidden: int = 64
    layers: int = 3
    lr: float = 1e-3
    weight_decay: float = 5e-4
    epochs: int = 40
    patience: int = 15
    val_share: float = 0.1
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
        check_int("patience", self.patience, lo=1)
        check_float("val_share", self.val_share, lo=0.0, hi=0.5, lo_open=True)
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


def split_validation(labels, share: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stratified ``(fit, val)`` positions: ``round(share · n_c)`` of each class (at least one, where the class has
    two or more) go to ``val``; ``fit`` keeps at least one of every class."""
    labels = np.asarray(labels)
    check_float("val_share", share, lo=0.0, hi=0.5, lo_open=True)
    if len(labels) < 2:
        raise ParameterError("labels", len(labels), "at least two training graphs (one to fit, one to validate)")
    rng = np.random.default_rng(seed + 2 * 10**6)
    val = []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        if len(idx) >= 2:
            val.extend(idx[:min(len(idx) - 1, max(1, int(round(share * len(idx)))))])
    val = np.sort(np.array(val, dtype=int))
    return np.setdiff1d(np.arange(len(labels)), val), val


def build_views(graphs, train_idx, cfg: TrainConfig, *, mode: str = "replace", sources_per_view: int | None = None,
                seed: int = 0) -> tuple[list[list], float]:
    """``views[i]`` = ``views_per_graph`` cached mixed ``Data`` for training graph ``train_idx[i]`` (as a source),
    and the CPU seconds (process time) it took. Labels per head: the sources' then the target's."""
    if len(train_idx) < 2:
        raise ParameterError("train_idx", len(train_idx), "at least two training graphs (a mix needs a target)")
    n_src = cfg.heads - 1 if sources_per_view is None else sources_per_view
    rng = np.random.default_rng(seed)
    cache = {}  # PPR matrix, neighbours and edge set once per graph
    views = []
    with Timer(clock="process") as timer:
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
    return views, timer.seconds


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
    best_epoch: int  # 1-based epoch whose model was tested (best validation accuracy)
    epochs_run: int  # epochs trained before the early stop (at most cfg.epochs)
    head_probs: np.ndarray  # (N_test, M, C)
    y_test: np.ndarray
    loss: list
    config: dict

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("head_probs")
        d.pop("y_test")
        return d


def fit_and_val(graphs, train_idx, label_noise: float, n_classes: int, seed: int, val_share: float) -> tuple[list, list]:
    """The training fold's graphs (labels with ``label_noise``) split by :func:`split_validation` into the graphs
    the model fits and the held-out validation graphs that pick its best epoch."""
    tg = training_graphs(graphs, train_idx, label_noise, n_classes, seed)
    fit, val = split_validation([int(g.y) for g in tg], val_share, seed)
    return [tg[int(i)] for i in fit], [tg[int(i)] for i in val]


def _evaluate(models, method: str, data, average: str):
    """``(head probabilities (N, M, C), class probabilities (N, C))`` on plain graphs (eval mode)."""
    for model in models:
        model.eval()
    if method == "ensemble":
        probs = torch.cat([m.head_probs(data) for m in models], dim=1)
        return probs, probs.mean(1)
    return models[0].head_probs(data), models[0].predict(data, average)


def train_method(method: str, graphs, train_idx, test_idx, cfg: TrainConfig | None = None, *, seed: int = 0,
                 label_noise: float = 0.0, device="cpu", views=None, cache_seconds: float = 0.0) -> RunResult:
    """Train ``method`` on ``graphs[train_idx]`` (less its validation share), test the best-validation epoch's
    model on ``graphs[test_idx]`` (plain graphs, one pass).

    ``views`` may pass cached views built by :func:`build_views` on the fit graphs of :func:`fit_and_val` (same
    seed, noise and ``val_share``); ``cache_seconds`` is then their building time.

    ``train_seconds``: the training loop's wall clock on a GPU; on the CPU its process time, the work of the
    single-threaded loop, which other processes sharing the cores do not inflate (wall-clock times of these
    0.2 s runs on a loaded 2-core machine moved the GMV / vanilla ratio from 1.2 to as much as 2.0)."""
    cfg = cfg or TrainConfig()
    check_choice("method", method, METHODS)
    check_float("label_noise", label_noise, lo=0.0, hi=1.0, hi_open=True)
    graphs = list(graphs)
    train_idx, test_idx = np.asarray(train_idx), np.asarray(test_idx)
    if len(train_idx) < 3:
        raise ParameterError("train_idx", len(train_idx), "at least three training graphs (two to fit, one to validate)")
    widths = {g.x.shape[1] for g in graphs}
    if len(widths) != 1:
        raise ParameterError("graphs", sorted(widths), "graphs with one node-feature width")
    n_classes = max(int(g.y) for g in graphs) + 1
    in_dim = widths.pop()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    dev = torch.device(device)
    # labels the trainer sees (label noise flips a share of the training labels, validation included)
    train_graphs, val_graphs = fit_and_val(graphs, train_idx, label_noise, n_classes, seed, cfg.val_share)
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
    opts = [torch.optim.AdamW(m.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay) for m in models]
    val = GraphBatch(val_graphs).to(dev)
    losses, best, best_state, since, epoch = [], None, None, 0, 0
    n = len(train_graphs)
    cuda = dev.type == "cuda"
    with Timer(cuda_sync=cuda, clock="wall" if cuda else "process") as timer:
        for epoch in range(1, cfg.epochs + 1):
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
            _, p_val = _evaluate(models, method, val, cfg.average)
            score = ((p_val.argmax(-1) == val.y).float().mean().item(),
                     -F.nll_loss(p_val.clamp_min(1e-12).log(), val.y).item())
            if best is None or score > best[0]:
                best, since = (score, epoch), 0
                best_state = [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in models]
            else:
                since += 1
                if since >= cfg.patience:
                    break
    train_s = timer.seconds
    for model, state in zip(models, best_state):
        model.load_state_dict(state)
    test = GraphBatch([graphs[int(i)] for i in test_idx]).to(dev)
    probs, pred = _evaluate(models, method, test, cfg.average)
    y_test = test.y.cpu().numpy()
    acc = float((pred.argmax(-1).cpu().numpy() == y_test).mean() * 100)
    dis, kl = head_diversity(probs.cpu())
    return RunResult(method, acc, dis, kl, train_s, cache_s, best[1], epoch, probs.cpu().numpy(), y_test, losses,
                     {**asdict(cfg), "seed": seed, "label_noise": label_noise})


def compare(graphs, methods, cfg: TrainConfig, *, folds: int = 3, seed: int = 0, label_noise: float = 0.0,
            label_ratio: float = 1.0, device="cpu", max_folds: int | None = None,
            view_cache: dict | None = None, should_stop=None) -> dict[str, list[RunResult]]:
    """``{method: [RunResult per fold]}`` on stratified folds (seed ``seed + fold`` for each run).

    ``view_cache`` (a dict) keeps the cached views across calls on the same ``graphs`` (e.g. other encoders);
    ``should_stop()`` is asked before every fold after the first (a time budget): when true, no further folds run."""
    folds_run = fold_splits(graphs, folds, seed, label_ratio)[:max_folds]
    out = {m: [] for m in methods}
    for f, (tr, te) in enumerate(folds_run):
        if f and should_stop is not None and should_stop():
            break
        for m in methods:
            out[m].append(run_fold(graphs, m, cfg, tr, te, seed=seed + f, label_noise=label_noise, device=device,
                                   view_cache=view_cache))
    return out


def fold_splits(graphs, folds: int, seed: int = 0, label_ratio: float = 1.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """The stratified ``(train, test)`` folds of ``graphs``; with ``label_ratio`` < 1 only that share of each
    training fold keeps its label (drawn with seed ``seed + fold``)."""
    check_float("label_ratio", label_ratio, lo=0.0, hi=1.0, lo_open=True)
    out = []
    for f, (tr, te) in enumerate(kfold([int(g.y) for g in graphs], folds, seed)):
        if label_ratio < 1.0:
            tr = np.random.default_rng(seed + f).permutation(tr)[:max(3, int(round(label_ratio * len(tr))))]
        out.append((tr, te))
    return out


def run_fold(graphs, method: str, cfg: TrainConfig, train_idx, test_idx, *, seed: int, label_noise: float = 0.0,
             device="cpu", view_cache: dict | None = None) -> RunResult:
    """One :func:`train_method` run; a view method's cached views are kept in ``view_cache`` (when given) under
    everything they depend on, so the methods and encoders of one fold build them once."""
    views, secs = None, 0.0
    if method in VIEW_METHODS:
        cached = {} if view_cache is None else view_cache
        train_idx = np.asarray(train_idx)
        key = (*view_kind(method, cfg), seed, label_noise, cfg.val_share, cfg.p, cfg.q, cfg.w, cfg.beta,
               cfg.reading, cfg.views_per_graph, id(graphs[0]), len(graphs), train_idx.tobytes())
        if key not in cached:
            n_classes = max(int(g.y) for g in graphs) + 1
            fit, _ = fit_and_val(graphs, train_idx, label_noise, n_classes, seed, cfg.val_share)
            cached[key] = build_views(fit, list(range(len(fit))), cfg, mode=key[0], sources_per_view=key[1], seed=seed)
        views, secs = cached[key]
    return train_method(method, graphs, train_idx, test_idx, cfg, seed=seed, label_noise=label_noise, device=device,
                        views=views, cache_seconds=secs)


def with_config(cfg: TrainConfig, **changes) -> TrainConfig:
    """A copy of ``cfg`` with ``changes`` (validated)."""
    return replace(cfg, **changes)


__all__ = ["LABELS", "METHODS", "READINGS", "RECIPE", "RunResult", "TrainConfig", "build_views", "compare", "fit_and_val",
           "fold_splits", "head_diversity", "kfold", "run_fold", "split_validation", "train_method", "with_config"]
