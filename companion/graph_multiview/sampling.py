"""ST-PPR subgraph sampling (paper, Alg. 1).

Given a graph G with |G| nodes, an augmentation ratio p, a structure ratio q and a walk length w:

1. a root v (uniform);
2. sizes ``s_PPR`` and ``s_2 = ⌊(p·|G| − s_PPR) / 2⌋``;
3. personalised PageRank from v, with teleport β = 0.15 (Klicpera et al. 2019, reconstructed):
   ``S = β (I − (1 − β) T)⁻¹`` and ``V′_PPR`` = the top-``s_PPR`` nodes of ``S[:, v]``;
4. ``V_DFS = DFS(G, v, w)``, ``V_BFS = BFS(G, v, w)`` (depth at most w); ``s_2`` nodes sampled from each;
5. ``V′ = merge(V′_PPR, V′_DFS, V′_BFS)`` ordered by ``S[:, v]`` (descending).

**The size formula is garbled** in the paper: ``s_PPR = max{U(0, p)·|G| ∘ q, 0}``. Both readings are
selectable through ``reading``:

* ``"product"`` (default, *inferred*): ``s_PPR = ⌊u·|G|·q⌋`` with u ~ U(0, p);
* ``"difference"``: ``s_PPR = max{⌊(u − q)·|G|⌋, 0}`` — the reading in which the ``max{·, 0}`` does
  something. At the paper's defaults (p = 0.4 < q = 0.6) it is always 0, so only DFS/BFS nodes are
  sampled; that is why the product is the usable reading.

``T`` is the symmetric ``D^{-1/2} A D^{-1/2}`` of the paper's formula (``normalization="sym"``, what the
sampler uses); ``"rw"`` gives ``A D⁻¹``, whose column v is exactly networkx's
``pagerank(G, alpha=1 − β, personalization={v: 1})``. Since ``D^{-1/2} A D^{-1/2} = D^{-1/2} (A D⁻¹) D^{1/2}``,
``S_sym = D^{-1/2} S_rw D^{1/2}``: ``S_sym[u, v] = √(d_v / d_u) · PPR_v(u)``, a PageRank vector re-weighted
by ``1/√d_u``, so its ranking favours low-degree nodes and differs from PageRank's (:func:`ppr_reference`
checks the sampler's matrix against networkx through this identity). Isolated nodes get ``D^{-1/2} = 0``.
PPR candidates are the nodes with a positive score (reachable from v). The root is always in V′ (a graph
without edges returns ``[v]``); V′ holds at most ``max(1, ⌊p·|G|⌋)`` nodes (when adding the root would
exceed it, the lowest-scored non-root node is dropped). ``exclude`` removes nodes from every candidate set
(used when several sources are mixed into one target). The PPR matrix is a dense inverse: fine for the
small graphs of graph classification (tens to hundreds of nodes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from companion.core import ParameterError, check_choice, check_float, check_int

BETA = 0.15  # teleport probability (paper)
READINGS = ("product", "difference")
NORMALIZATIONS = ("sym", "rw")


def check_sampling(p=0.4, q=0.6, w=10, beta=BETA, reading="product") -> None:
    """Validate ST-PPR's parameters: p in (0, 1], q in [0, 1], w >= 1, β in (0, 1), a known reading."""
    check_float("p", p, lo=0.0, hi=1.0, lo_open=True)
    check_float("q", q, lo=0.0, hi=1.0)
    check_int("w", w, lo=1)
    check_float("beta", beta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    check_choice("reading", reading, READINGS)


def adjacency(edge_index: torch.Tensor, n: int) -> np.ndarray:
    """Dense symmetric 0/1 adjacency (float64) of an ``edge_index``."""
    check_int("num_nodes", n, lo=1)
    a = np.zeros((n, n))
    if edge_index.numel():
        ei = edge_index.cpu().numpy()
        a[ei[0], ei[1]] = 1.0
        a[ei[1], ei[0]] = 1.0
    np.fill_diagonal(a, 0.0)
    return a


def ppr_matrix(edge_index: torch.Tensor, n: int, beta: float = BETA, normalization: str = "sym") -> np.ndarray:
    """``S = β (I − (1 − β) T)⁻¹`` with ``T = D^{-1/2} A D^{-1/2}`` (``"sym"``) or ``A D⁻¹`` (``"rw"``).

    ``S[:, v]`` is the PPR vector of root v (for ``"rw"``, a probability vector)."""
    check_float("beta", beta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    check_choice("normalization", normalization, NORMALIZATIONS)
    a = adjacency(edge_index, n)
    d = a.sum(0)
    with np.errstate(divide="ignore"):
        if normalization == "sym":
            r = np.where(d > 0, 1.0 / np.sqrt(d), 0.0)
            t = r[:, None] * a * r[None, :]
        else:
            t = a * np.where(d > 0, 1.0 / d, 0.0)[None, :]
    return beta * np.linalg.inv(np.eye(n) - (1 - beta) * t)


def ppr_size(n: int, p: float, q: float, u: float, reading: str = "product") -> tuple[int, int]:
    """``(s_PPR, s_2)`` for a graph of n nodes and a draw u ~ U(0, p) (see the module docstring)."""
    check_choice("reading", reading, READINGS)
    if reading == "product":
        s_ppr = int(np.floor(u * n * q))
    else:
        s_ppr = max(int(np.floor((u - q) * n)), 0)
    s_2 = max(int(np.floor((p * n - s_ppr) / 2)), 0)
    return s_ppr, s_2


def neighbours(edge_index: torch.Tensor, n: int) -> list[list[int]]:
    """Sorted neighbour lists (self-loops dropped)."""
    out = [set() for _ in range(n)]
    if edge_index.numel():
        for u, v in edge_index.cpu().numpy().T.tolist():
            if u != v:
                out[u].add(v)
                out[v].add(u)
    return [sorted(s) for s in out]


def dfs_nodes(nbrs, v: int, depth: int) -> list[int]:
    """Preorder DFS from v, descending at most ``depth`` edges (networkx ``dfs_preorder_nodes`` order)."""
    seen, order, stack = {v}, [v], [(v, iter(nbrs[v]), 0)]
    while stack:
        u, it, d = stack[-1]
        for x in it:
            if x not in seen and d < depth:
                seen.add(x)
                order.append(x)
                stack.append((x, iter(nbrs[x]), d + 1))
                break
        else:
            stack.pop()
    return order


def bfs_nodes(nbrs, v: int, depth: int) -> list[int]:
    """Nodes within ``depth`` hops of v in BFS order."""
    seen, order, queue = {v}, [v], deque([(v, 0)])
    while queue:
        u, d = queue.popleft()
        if d == depth:
            continue
        for x in nbrs[u]:
            if x not in seen:
                seen.add(x)
                order.append(x)
                queue.append((x, d + 1))
    return order


@dataclass(frozen=True)
class STPPRSample:
    """The result of Alg. 1: ``nodes`` (V′ in PPR order, root included), the root, the root's PPR column,
    and the parts (``ppr``, ``dfs``, ``bfs``) before merging, with the sizes used."""

    nodes: np.ndarray
    root: int
    scores: np.ndarray
    ppr: tuple
    dfs: tuple
    bfs: tuple
    s_ppr: int
    s_2: int
    budget: int


def st_ppr(edge_index: torch.Tensor, n: int, rng: np.random.Generator, *, p: float = 0.4, q: float = 0.6, w: int = 10,
           beta: float = BETA, reading: str = "product", normalization: str = "sym", root: int | None = None,
           exclude=(), ppr: np.ndarray | None = None, nbrs=None) -> STPPRSample:
    """ST-PPR (Alg. 1) on one graph. ``ppr`` and ``nbrs`` may pass a precomputed :func:`ppr_matrix` and
    :func:`neighbours` (cached views)."""
    check_sampling(p, q, w, beta, reading)
    check_int("num_nodes", n, lo=1)
    excluded = {int(x) for x in exclude}
    free = [i for i in range(n) if i not in excluded]
    if not free:
        raise ParameterError("exclude", sorted(excluded), f"fewer than all {n} nodes (no root left)")
    if root is None:
        root = int(rng.choice(free))
    elif root in excluded or not 0 <= root < n:
        raise ParameterError("root", root, f"a node in 0..{n - 1} not in exclude")
    s = ppr_matrix(edge_index, n, beta, normalization) if ppr is None else ppr
    col = s[:, root]
    budget = max(1, int(np.floor(p * n)))
    s_ppr, s_2 = ppr_size(n, p, q, float(rng.uniform(0.0, p)), reading)
    order = sorted((i for i in free if col[i] > 0), key=lambda i: (-col[i], i))
    v_ppr = order[:s_ppr]
    nbrs = neighbours(edge_index, n) if nbrs is None else nbrs
    if excluded:  # excluded nodes are neither visited nor passed through
        nbrs = [[] if u in excluded else [x for x in row if x not in excluded] for u, row in enumerate(nbrs)]
    dfs = dfs_nodes(nbrs, root, w)
    bfs = bfs_nodes(nbrs, root, w)
    v_dfs = [int(x) for x in rng.choice(dfs, min(s_2, len(dfs)), replace=False)] if s_2 else []
    v_bfs = [int(x) for x in rng.choice(bfs, min(s_2, len(bfs)), replace=False)] if s_2 else []
    merged = sorted({root, *v_ppr, *v_dfs, *v_bfs}, key=lambda i: (i != root, -col[i], i))
    merged = merged[:budget]
    merged.sort(key=lambda i: (-col[i], i))
    return STPPRSample(np.array(merged, dtype=np.int64), int(root), col, tuple(v_ppr), tuple(v_dfs), tuple(v_bfs),
                       s_ppr, s_2, budget)


def ppr_reference(graphs, beta: float = BETA, p: float = 0.4, every: int = 4) -> dict:
    """The sampler's PPR matrix (``normalization="sym"``) against an independent truth, networkx's PageRank:
    ``S_sym[u, v] = √(d_v / d_u) · pagerank(G, alpha = 1 − β, personalization = {v: 1})[u]`` for every node u
    and every ``every``-th root v of each graph (roots and nodes of degree > 0).

    Returns ``err`` (the largest absolute difference), ``roots`` (how many were checked) and ``top_differs``
    (at how many of them the top-``max(1, ⌊p·|G|⌋)`` set by ``S_sym[:, v]`` differs from PageRank's: what the
    symmetric normalisation changes in ST-PPR's choice)."""
    import networkx as nx

    check_float("beta", beta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    check_float("p", p, lo=0.0, hi=1.0, lo_open=True)
    check_int("every", every, lo=1)
    err, roots, differs = 0.0, 0, 0
    for g in graphs:
        n = int(g.num_nodes)
        G = nx.Graph()
        G.add_nodes_from(range(n))
        G.add_edges_from((u, v) for u, v in g.edge_index.cpu().numpy().T.tolist() if u != v)
        deg = np.array([G.degree(u) for u in range(n)], dtype=float)
        s = ppr_matrix(g.edge_index, n, beta, normalization="sym")
        live = np.flatnonzero(deg > 0)
        top = max(1, int(np.floor(p * n)))
        for v in live[::every].tolist():
            pr = nx.pagerank(G, alpha=1 - beta, personalization={v: 1}, tol=1e-13, max_iter=10000)
            pr = np.array([pr[u] for u in range(n)])
            ref = np.sqrt(deg[v] / np.where(deg > 0, deg, 1.0)) * pr
            err = max(err, float(np.abs(s[live, v] - ref[live]).max()))
            by_sym = sorted(range(n), key=lambda i: (-s[i, v], i))[:top]
            by_pr = sorted(range(n), key=lambda i: (-pr[i], i))[:top]
            differs += int(set(by_sym) != set(by_pr))
            roots += 1
    return {"err": err, "roots": roots, "top_differs": differs}
