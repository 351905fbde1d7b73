"""Graphs of hollow message passing (HoMP, paper §3): the symmetrised kNN graph G, its non-backtracking
line graph L(G), and the backtracking array B that prunes L(G) step by step.

* **G** (§3, "graph"): every particle i sends to its k nearest neighbours and receives from them, i.e.
  the kNN adjacency made symmetric (A ∨ Aᵀ), no self-loops. Distance ties (coincident particles) are
  broken by particle index (a stable sort), so the graph is deterministic.
* **L(G)** (§3 step 2): its nodes are the directed edges (i, j) of G; its edges are
  E^lg = {((i, j), (j, k)) : (i, j) ∈ E, (j, k) ∈ E, i ≠ k}, a message from (i, j) to (j, k). They are
  generated **sorted by receiver** (then by sender): the senders of (j, k) are the reverses (i, j) of j's
  out-edges (j, i), which G's symmetry makes one contiguous block. The pruned per-step lists are masks of
  that list, so they stay sorted, and the segment sums over them need no sort (a CSR plan by
  ``searchsorted``, no host sync; the readout's plan is the reverse-edge map itself).
* **B** (§3 step 5): ``B(t)[e, k] = 1`` iff h^t_e depends on x_k; ``B(0)[(i, j), k] = 1[k = i]``
  (h⁰_ij = n_i). Before step t every line edge ((i, j), (j, k)) whose sender already depends on x_k is
  removed (the receiver (j, k) must never see x_k), then
  ``B(t+1)[(j, k)] = B(t)[(j, k)] ∨ ⋁_{senders (i, j) kept} B(t)[(i, j)]``.
  With pruning no h^t_ij ever depends on x_j, which is what Theorem 1 needs.

Everything is vectorised torch (CPU or CUDA) and batched: a batch of ``S`` samples of ``n`` particles is
the disjoint union of ``S`` graphs; node ids are global (``s * n + i``), B columns are local particle
indices (so B is ``(E, n)``, not ``(E, S n)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from companion.core import ParameterError

__all__ = ["HollowGraph", "knn_adjacency", "build_graph", "edge_csr", "line_graph", "prune_schedule", "check_coordinates"]


def check_coordinates(x, d: int | None = None, name: str = "x") -> torch.Tensor:
    """``x`` as a float tensor of shape (n, d) or (S, n, d) with finite entries; returns (S, n, d)."""
    if not isinstance(x, torch.Tensor):
        raise ParameterError(name, type(x).__name__, "a torch tensor of shape (n, d) or (samples, n, d)")
    if x.dim() == 2:
        x = x.unsqueeze(0)
    if x.dim() != 3 or x.shape[1] < 2 or x.shape[2] < 1:
        raise ParameterError(name, tuple(x.shape), "shape (n, d) or (samples, n, d) with n >= 2 particles")
    if d is not None and x.shape[2] != d:
        raise ParameterError(f"{name}.shape[-1]", x.shape[2], f"the model's dimension d = {d}")
    if not x.is_floating_point():
        raise ParameterError(f"{name}.dtype", x.dtype, "a floating-point dtype")
    if not bool(torch.isfinite(x).all()):
        raise ParameterError(name, "a tensor with NaN or inf", "finite coordinates")
    return x


def _check_k(k, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k < n:
        raise ParameterError("k", k, f"an integer with 1 <= k < n = {n} (the number of particles)")
    return k


def knn_adjacency(x: torch.Tensor, k: int) -> torch.Tensor:
    """Symmetrised kNN adjacency (S, n, n) bool without self-loops; ties broken by particle index."""
    x = check_coordinates(x)
    S, n, _ = x.shape
    k = _check_k(k, n)
    with torch.no_grad():
        dist = torch.cdist(x, x)
        eye = torch.eye(n, dtype=torch.bool, device=x.device)
        dist = dist.masked_fill(eye, float("inf"))
        order = torch.sort(dist, dim=-1, stable=True).indices[..., :k]  # stable: equal distances -> lower index
        adj = torch.zeros(S, n, n, dtype=torch.bool, device=x.device)
        adj.scatter_(2, order, True)
        return adj | adj.transpose(1, 2)


def full_adjacency(S: int, n: int, device=None) -> torch.Tensor:
    """The fully connected graph (k = n - 1): every ordered pair i != j."""
    return ~torch.eye(n, dtype=torch.bool, device=device).expand(S, n, n).clone()


def edge_csr(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ptr, rev)`` of a symmetric edge list sorted by (src, dst), as ``nonzero`` returns a symmetric adjacency
    (not checked here: see :func:`line_graph`): node v's out-edges are ``ptr[v]:ptr[v + 1]`` and ``rev[e]`` is
    the id of the reverse edge (dst[e], src[e]). By symmetry ``rev[ptr[v]:ptr[v + 1]]`` lists v's in-edges
    (i, v) in increasing i, i.e. ``Plan(perm=rev, offsets=ptr)`` is the CSR plan of the receivers ``dst``.
    Two ``searchsorted``, no sort, no host sync."""
    ptr = torch.searchsorted(src, torch.arange(num_nodes + 1, device=src.device))
    key = src * num_nodes + dst  # increasing along the sorted edge list
    return ptr, torch.searchsorted(key, dst * num_nodes + src)


def _line_graph(src: torch.Tensor, ptr: torch.Tensor, rev: torch.Tensor) -> torch.Tensor:
    """:func:`line_graph` from :func:`edge_csr`'s ``(ptr, rev)``, unchecked."""
    E = src.numel()
    device = src.device
    fan = (ptr[1:] - ptr[:-1])[src]  # receiver (j, k) hears the deg(j) in-edges (i, j) of j, less (k, j)
    recv = torch.repeat_interleave(torch.arange(E, device=device), fan)
    start = torch.repeat_interleave(torch.cumsum(fan, 0) - fan, fan)
    out = ptr[src[recv]] + torch.arange(recv.numel(), device=device) - start  # j's out-edge (j, i)
    keep = out != recv  # i = k: (k, j) -> (j, k) backtracks
    return torch.stack([rev[out[keep]], recv[keep]], 1)


def line_graph(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Non-backtracking line-graph edges (L, 2) = [sender edge (i, j), receiver edge (j, k)], k != i, sorted by
    receiver and, within a receiver, by sender (lexicographically by (receiver, sender)).

    ``src, dst``: a symmetric graph without self-loops, its edges sorted by (src, dst) with no duplicates (as
    ``nonzero`` lists a symmetric adjacency); checked here (one host sync), ``build_graph`` skips the check
    because its edge lists have that form by construction.
    """
    E = src.numel()
    ptr, rev = edge_csr(src, dst, num_nodes)
    key = src * num_nodes + dst
    found = key[rev.clamp(max=max(E - 1, 0))] == dst * num_nodes + src  # the reverse edge exists
    if not bool((key[1:] > key[:-1]).all() & found.all() & (src != dst).all()):
        raise ValueError("line_graph: src, dst must list a symmetric graph without self-loops, each edge once, sorted "
                         "by (src, dst) (as adj.nonzero() lists a symmetric adjacency adj)")
    return _line_graph(src, ptr, rev)


def _propagate(B: torch.Tensor, send: torch.Tensor, recv: torch.Tensor, chunk: int = 1 << 26) -> torch.Tensor:
    """``B'[r] = B[r] ∨ ⋁_{(s, r)} B[s]`` (an OR-scatter, done as an add-scatter in column chunks)."""
    out = B.clone()
    cols = max(1, chunk // max(1, send.numel()))
    for c0 in range(0, B.shape[1], cols):
        acc = torch.zeros(B.shape[0], min(cols, B.shape[1] - c0), dtype=torch.int32, device=B.device)
        acc.index_add_(0, recv, B[send, c0:c0 + cols].to(torch.int32))
        out[:, c0:c0 + cols] |= acc > 0
    return out


def prune_schedule(line_edges: torch.Tensor, src_local: torch.Tensor, dst_local: torch.Tensor, n: int,
                   steps: int, prune: bool = True, keep_B: bool = False):
    """Per-step line-edge lists after removal, the removed edges, and (optionally) B(0..steps).

    Returns ``(kept, removed, Bs)``: lists of (L_t, 2) tensors and, with ``keep_B``, the ``steps + 1``
    arrays B(t) of shape (E, n) (else the final one only). ``prune=False`` keeps every line edge (the
    ablation that shows the leakage) but still tracks B.
    """
    E = src_local.numel()
    B = torch.zeros(E, n, dtype=torch.bool, device=src_local.device)
    B[torch.arange(E, device=src_local.device), src_local] = True
    kept, removed, Bs = [], [], [B]
    send, recv = line_edges[:, 0], line_edges[:, 1]
    for _ in range(steps):
        bad = B[send, dst_local[recv]]  # the sender already depends on x_k, k the receiver's target
        ok = ~bad if prune else torch.ones_like(bad)
        kept.append(line_edges[ok])
        removed.append(line_edges[bad] if prune else line_edges[:0])
        B = _propagate(B, send[ok], recv[ok])
        Bs.append(B)
    return kept, removed, (Bs if keep_B else [Bs[-1]])


@dataclass
class HollowGraph:
    """G, L(G) and the pruned per-step line-edge lists for a batch of ``samples`` systems of ``n`` particles."""

    n: int
    samples: int
    src: torch.Tensor  # (E,) global sender particle of edge e = (i, j), sorted by (src, dst)
    dst: torch.Tensor  # (E,) global receiver particle
    ptr: torch.Tensor  # (S n + 1,) out-edges of node v: ptr[v]:ptr[v + 1] (edge_csr)
    rev: torch.Tensor  # (E,) the reverse edge (j, i) of each edge (i, j) (edge_csr)
    line_edges: torch.Tensor  # (L, 2) all non-backtracking line edges, sorted by receiver
    kept: list  # per step (L_t, 2), sorted by receiver
    removed: list  # per step
    B: list = field(default_factory=list)  # B(t), (E, n) bool; all steps when built with keep_B
    prune: bool = True
    plans: list | None = None  # CSR plans of the per-step receivers and the readout (NoBGNN.plans), built once

    @property
    def steps(self) -> int:
        return len(self.kept)

    def counts(self) -> list[int]:
        """Line edges used at each step (e.g. 100 -> 40 -> 26 for n = 9, 3-NN, paper check)."""
        return [int(e.shape[0]) for e in self.kept]

    def leaks(self) -> int:
        """How many final line-node states h^T_ij depend on x_j (0 with pruning, Theorem 1's condition)."""
        B = self.B[-1]
        return int(B[torch.arange(B.shape[0], device=B.device), self.dst % self.n].sum())


def build_graph(x: torch.Tensor, k: int | None, steps: int, prune: bool = True, keep_B: bool = False) -> HollowGraph:
    """The HoMP graph of coordinates ``x`` (n, d) or (S, n, d): kNN (``k``; ``None`` = fully connected),
    L(G) and the pruning schedule for ``steps`` line-graph message-passing steps."""
    x = check_coordinates(x)
    S, n, _ = x.shape
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ParameterError("steps", steps, "an integer >= 1 (line-graph message-passing steps)")
    adj = full_adjacency(S, n, x.device) if k is None else knn_adjacency(x, k)
    s, i, j = adj.nonzero(as_tuple=True)
    src, dst = s * n + i, s * n + j  # sorted by (src, dst) and symmetric: line_graph's conditions hold
    ptr, rev = edge_csr(src, dst, S * n)
    lg = _line_graph(src, ptr, rev)
    kept, removed, Bs = prune_schedule(lg, i, j, n, steps, prune=prune, keep_B=keep_B)
    return HollowGraph(n=n, samples=S, src=src, dst=dst, ptr=ptr, rev=rev, line_edges=lg, kept=kept, removed=removed,
                       B=Bs, prune=prune)
