"""ST-SubMix (paper, Alg. 2): the target's ST-PPR subgraph is **replaced** by the source's.

For a source ``G_src`` and a target ``G_trg`` (a different graph):

1. ST-PPR (:func:`~companion.graph_multiview.sampling.st_ppr`) on both; ``s = min(|V′_src|, |V′_trg|)``;
   both lists are truncated to their first s nodes (PPR order);
2. the one-to-one map ``φ: V′_src[i] → V′_trg[i]``;
3. ``E′_trg`` = target edges **not inside** V′_trg (an edge with one end outside is kept);
   ``E′_src = {(φ(u), φ(v)) : (u, v) ∈ E_src, u, v ∈ V′_src}``;
4. ``V_mix = V_trg``, ``E_mix = E′_src ∪ E′_trg``, ``X_mix = X_trg`` with ``X_mix[φ(V′_src)] = X_src[V′_src]``;
5. label weights (Eq. 2): ``w_src = 1 − |E′_trg| / |E_mix|``, ``w_trg = |E′_trg| / |E_mix|``;
6. one-hot assignment matrices ``E_src`` (the nodes φ(V′_src)) and ``E_trg`` (the rest): ``E_src + E_trg = I``.

**More than two sub-networks** (the paper sweeps 2–10 but does not say how the views are formed; *inferred*):
with M heads, M − 1 sources are inserted one after another into disjoint parts of the same target (the
target's ST-PPR for source k excludes the nodes already replaced). Head k < M − 1 belongs to source k,
head M − 1 to the target, and the assignment matrices are the node masks of each owner. A target edge
whose two ends were replaced by two *different* sources belongs to neither: it stays in ``E_mix`` (as
Alg. 2 keeps the edges that cross the boundary of φ(V′_src)) but is credited to no head (``between``). The
weights are the shares of the credited edges: ``w_k = |E′_k| / C`` and ``w_trg = |E′_trg| / C`` with
``C = Σ_k |E′_k| + |E′_trg|`` (they sum to 1), where ``E′_trg`` keeps only target edges with at least one
end still the target's. For M = 2 there are no such edges, ``C = |E_mix|`` and this is exactly Alg. 2.

When no edge is credited (graphs without edges, or every edge joins two sources), Eq. 2 is undefined; the
weights fall back to the node shares ``|φ(V′_k)| / |V_mix|`` (stated deviation). ``mode="union"`` gives the *decomposition without
mixing* ablation: the disjoint union of target and sources, owners per component, the same weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch_geometric.data import Data

from companion.core import ParameterError, check_choice
from companion.graph_multiview.sampling import BETA, check_sampling, neighbours, ppr_matrix, st_ppr

MODES = ("replace", "union")
# Version of the label-weight rule for M > 2 heads, recorded with every GPU stage that mixes views. 1: a target
# edge whose ends went to two different sources was kept and credited to the target;
# 2: such an edge is credited to no head. For M = 2 both give the same views.
WEIGHT_RULE = 2


@dataclass
class MixedGraph:
    """A mixed view: ``x``, ``edge_index`` (both directions), ``owner`` (the head each node belongs to),
    ``phi`` (one ``(src_nodes, trg_nodes)`` pair per source), label weights ``weights`` (one per head),
    ``kept`` / ``inserted`` undirected edge lists (target edges kept and credited to the target, images of
    source edges), ``between`` (target edges whose two ends went to two different sources: in ``E_mix``,
    credited to no head; always empty for M = 2)."""

    x: torch.Tensor
    edge_index: torch.Tensor
    owner: torch.Tensor
    phi: list
    weights: np.ndarray
    kept: list
    inserted: list
    samples: list
    between: list = field(default_factory=list)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    def assignment_matrices(self) -> list[torch.Tensor]:
        """The one-hot (diagonal) assignment matrices ``E_k`` (|V_mix| × |V_mix|), one per head."""
        m = len(self.weights)
        return [torch.diag((self.owner == k).float()) for k in range(m)]

    def to_data(self, labels) -> Data:
        """A torch_geometric ``Data`` with ``y_heads`` (labels per head) and ``w_heads`` (Eq. 2 weights)."""
        return Data(x=self.x, edge_index=self.edge_index, owner=self.owner, num_nodes=self.num_nodes,
                    y_heads=torch.as_tensor(labels, dtype=torch.long).view(1, -1),
                    w_heads=torch.as_tensor(self.weights, dtype=torch.float).view(1, -1))


def _pairs(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    if not edge_index.numel():
        return set()
    ei = edge_index.cpu().numpy()
    a, b = np.minimum(ei[0], ei[1]), np.maximum(ei[0], ei[1])
    keep = a != b
    return set(zip(a[keep].tolist(), b[keep].tolist()))


def _edge_index(pairs) -> torch.Tensor:
    if not pairs:
        return torch.empty(2, 0, dtype=torch.long)
    a = torch.tensor(sorted(pairs), dtype=torch.long).T
    return torch.cat([a, a.flip(0)], dim=1)


def st_submix(sources, target: Data, rng: np.random.Generator, *, p: float = 0.4, q: float = 0.6, w: int = 10,
              beta: float = BETA, reading: str = "product", mode: str = "replace",
              ppr_cache: dict | None = None) -> MixedGraph:
    """Mix one or more source graphs into ``target`` (Alg. 2; see the module docstring).

    ``sources``: a ``Data`` or a list of them (M − 1 sources for M heads). ``ppr_cache`` (a dict, filled here) maps ``(id(graph), β)``
    to its :func:`ppr_matrix`, neighbour lists and edge set, so cached views do not recompute them."""
    check_sampling(p, q, w, beta, reading)
    check_choice("mode", mode, MODES)
    sources = [sources] if isinstance(sources, Data) else list(sources)
    if not sources:
        raise ParameterError("sources", sources, "at least one source graph (a target alone is not a mix)")
    for g in sources:
        if g.x.shape[1] != target.x.shape[1]:
            raise ParameterError("source.x", tuple(g.x.shape), f"feature width {target.x.shape[1]} of the target")
        if g is target:
            raise ParameterError("sources", "the target itself", "source graphs different from the target")
    m = len(sources) + 1
    if mode == "union":
        return _union(sources, target)

    cache = {} if ppr_cache is None else ppr_cache

    def info(g):
        """(PPR matrix, neighbour lists, undirected edge set) of ``g``, computed once per graph."""
        key = (id(g), beta)
        if key not in cache:
            cache[key] = (ppr_matrix(g.edge_index, g.num_nodes, beta), neighbours(g.edge_index, g.num_nodes),
                          _pairs(g.edge_index))
        return cache[key]

    n_trg = target.num_nodes
    x = target.x.clone()
    owner = torch.full((n_trg,), m - 1, dtype=torch.long)
    s_trg_ppr, trg_nbrs, trg_pairs = info(target)
    removed, inserted, phis, samples = set(), [], [], []
    taken: set[int] = set()
    for k, src in enumerate(sources):
        if len(taken) >= n_trg:
            phis.append((np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)))
            inserted.append([])  # a target with no node left for this source: the source gets weight 0
            samples.append(None)
            continue
        s_src_ppr, src_nbrs, src_pairs = info(src)
        a = st_ppr(src.edge_index, src.num_nodes, rng, p=p, q=q, w=w, beta=beta, reading=reading, ppr=s_src_ppr,
                   nbrs=src_nbrs)
        b = st_ppr(target.edge_index, n_trg, rng, p=p, q=q, w=w, beta=beta, reading=reading, exclude=taken,
                   ppr=s_trg_ppr, nbrs=trg_nbrs)
        s = min(len(a.nodes), len(b.nodes))
        v_src, v_trg = a.nodes[:s], b.nodes[:s]
        phi = dict(zip(v_src.tolist(), v_trg.tolist()))
        inside = set(v_trg.tolist())
        removed |= {e for e in trg_pairs if e[0] in inside and e[1] in inside}
        ins = {(min(phi[u], phi[v]), max(phi[u], phi[v])) for u, v in src_pairs if u in phi and v in phi}
        inserted.append(sorted(ins))
        x[torch.as_tensor(v_trg)] = src.x[torch.as_tensor(v_src)].to(x.dtype)
        owner[torch.as_tensor(v_trg)] = k
        taken |= inside
        phis.append((v_src, v_trg))
        samples.append((a, b))
    own = owner.tolist()
    survivors = trg_pairs - removed
    # a surviving target edge with both ends replaced (necessarily by two different sources) is no one's
    between = sorted(e for e in survivors if own[e[0]] != m - 1 and own[e[1]] != m - 1)
    kept = sorted(survivors.difference(between))
    counts = np.array([len(e) for e in inserted] + [len(kept)], dtype=float)
    if counts.sum() > 0:
        weights = counts / counts.sum()
    else:
        weights = np.array([(owner == k).sum().item() for k in range(m)], dtype=float) / n_trg
    all_pairs = set(kept).union(between, *map(set, inserted))
    return MixedGraph(x, _edge_index(all_pairs), owner, phis, weights, kept, inserted, samples, between)


def _union(sources, target) -> MixedGraph:
    """Disjoint union (sources first, then the target), owners per component (decomposition without mixing)."""
    graphs = [*sources, target]
    xs, pairs, owner, offset, per = [], set(), [], 0, []
    for k, g in enumerate(graphs):
        gp = {(u + offset, v + offset) for u, v in _pairs(g.edge_index)}
        per.append(sorted(gp))
        pairs |= gp
        xs.append(g.x)
        owner += [k] * g.num_nodes
        offset += g.num_nodes
    counts = np.array([len(e) for e in per], dtype=float)
    owner_t = torch.tensor(owner, dtype=torch.long)
    weights = counts / counts.sum() if counts.sum() > 0 else np.array(
        [g.num_nodes for g in graphs], dtype=float) / offset
    return MixedGraph(torch.cat(xs), _edge_index(pairs), owner_t, [], weights, per[-1], per[:-1], [])


def mixing_invariants(graphs, n_pairs: int, rng: np.random.Generator, **kwargs) -> dict:
    """Alg. 2's invariants over ``n_pairs`` random (source, target) pairs of ``graphs`` (M = 2):
    ``identity_err`` = max |E_src + E_trg − I|, ``weight_err`` = max |w_src + w_trg − 1|, ``size_errors``
    (|V_mix| ≠ |V_trg|), ``feature_errors`` (X_mix ≠ X_trg outside φ(V′_src) or ≠ X_src on it), ``non_images``
    (inserted edges that are not images of source edges under φ) and ``removed_inside`` (target edges inside
    φ(V′_src) that survived)."""
    graphs = list(graphs)
    if len(graphs) < 2:
        raise ParameterError("graphs", len(graphs), "at least two graphs")
    out = dict(pairs=0, identity_err=0.0, weight_err=0.0, size_errors=0, feature_errors=0, non_images=0,
               removed_inside=0, mean_w_src=0.0)
    cache = {}
    for _ in range(n_pairs):
        i, j = rng.choice(len(graphs), 2, replace=False)
        src, trg = graphs[int(i)], graphs[int(j)]
        mx = st_submix(src, trg, rng, ppr_cache=cache, **kwargs)
        e_src, e_trg = mx.assignment_matrices()
        out["identity_err"] = max(out["identity_err"], float((e_src + e_trg - torch.eye(mx.num_nodes)).abs().max()))
        out["weight_err"] = max(out["weight_err"], abs(float(mx.weights.sum()) - 1.0))
        out["size_errors"] += int(mx.num_nodes != trg.num_nodes)
        v_src, v_trg = mx.phi[0]
        outside = torch.ones(trg.num_nodes, dtype=torch.bool)
        outside[torch.as_tensor(v_trg)] = False
        out["feature_errors"] += int(not torch.equal(mx.x[outside], trg.x[outside])
                                     or not torch.equal(mx.x[torch.as_tensor(v_trg)], src.x[torch.as_tensor(v_src)]))
        phi = dict(zip(v_src.tolist(), v_trg.tolist()))
        images = {(min(phi[u], phi[v]), max(phi[u], phi[v])) for u, v in _pairs(src.edge_index) if u in phi and v in phi}
        out["non_images"] += len(set(mx.inserted[0]) - images)
        inside = set(v_trg.tolist())
        out["removed_inside"] += sum(1 for u, v in mx.kept if u in inside and v in inside)
        out["mean_w_src"] += float(mx.weights[0]) / n_pairs
        out["pairs"] += 1
    return out


def credit_errors(graphs, n_mixes: int, heads: int, rng: np.random.Generator, **kwargs) -> dict:
    """The M > 2 label-weight rule over ``n_mixes`` random mixes of ``heads − 1`` sources into a target:
    ``miscredited`` (target-credited edges with no end left to the target, or inserted edges not inside their
    source's nodes), ``weight_err`` (max |w − credited-edge shares|, or |Σw − 1| where none is credited) and
    ``between`` (edges credited to no head: the case the rule decides)."""
    graphs = list(graphs)
    if len(graphs) < heads:
        raise ParameterError("graphs", len(graphs), f"at least heads = {heads} graphs")
    out = dict(mixes=0, miscredited=0, weight_err=0.0, between=0)
    cache = {}
    for _ in range(n_mixes):
        picked = rng.choice(len(graphs), heads, replace=False)
        trg, *srcs = [graphs[int(i)] for i in picked]
        mx = st_submix(srcs, trg, rng, ppr_cache=cache, **kwargs)
        own = mx.owner.tolist()
        out["miscredited"] += sum(own[u] != heads - 1 and own[v] != heads - 1 for u, v in mx.kept)
        out["miscredited"] += sum(own[u] != k or own[v] != k for k, ins in enumerate(mx.inserted) for u, v in ins)
        counts = np.array([len(e) for e in mx.inserted] + [len(mx.kept)], dtype=float)
        want = counts / counts.sum() if counts.sum() else None
        err = float(np.abs(mx.weights - want).max()) if want is not None else abs(float(mx.weights.sum()) - 1.0)
        out["weight_err"] = max(out["weight_err"], err)
        out["between"] += len(mx.between)
        out["mixes"] += 1
    return out
