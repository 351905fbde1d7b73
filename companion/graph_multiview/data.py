"""Data for paper 07 (GMV): generated planted-motif graphs and a loader for TU sets in DGCNN's format.

**Planted motifs** (:func:`motif_graph`, :class:`MotifDataset`). A random tree of ``n_tree`` nodes (each
new node joins a uniformly chosen earlier node) with one motif attached by a single edge; the label is
the motif: 0 = cycle (6 nodes), 1 = house (5 nodes: a square with a roof), 2 = 3x3 grid. ``noise`` adds
that fraction of extra random edges (relative to the graph's edge count) anywhere in the graph, which
blurs the motifs. Node features are a one-hot of the degree (capped at ``MAX_DEGREE``), as TU practice
does for graphs without node labels. Nothing is downloaded: the graphs are generated from a seed.

**TU sets in DGCNN's single-file format** (:func:`load_dgcnn_txt`). The file (as shipped by
github.com/muhanzhang/pytorch_DGCNN, e.g. ``MUTAG.txt``) is::

    N                      number of graphs
    n l                    graph header: number of nodes, graph label
    t m v1 ... vm [a ...]  one line per node: node tag, number of neighbours, the neighbours (0-based)

Node tags become one-hot features, labels are mapped to 0..C-1 in sorted (numeric) order. A file whose counts do
not match its headers raises :class:`TUFormatError` with the line number. The TU sets themselves are
**not shipped** with this project (TU Dortmund collection, Morris et al. 2020); the loader is tested on
a small file the tests write. :data:`PAPER_STATS` holds the averages the paper's sets have, for
:func:`dataset_stats` to be compared with when a user points the loader at a local copy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset

from companion.core import ParameterError, check_float, check_int

MOTIFS = ("cycle", "house", "grid")
MAX_DEGREE = 6  # degree one-hot width is MAX_DEGREE + 1 (degrees above are capped)
PAPER_STATS = {  # average nodes and (undirected) edges per graph, TU collection
    "MUTAG": {"graphs": 188, "nodes": 17.93, "edges": 19.79},
    "PROTEINS": {"graphs": 1113, "nodes": 39.06, "edges": 72.82},
}


def _motif_edges(kind: str) -> tuple[int, list[tuple[int, int]]]:
    if kind == "cycle":
        return 6, [(i, (i + 1) % 6) for i in range(6)]
    if kind == "house":
        return 5, [(0, 1), (1, 2), (2, 3), (3, 0), (0, 4), (1, 4)]
    if kind == "grid":
        e = [(r * 3 + c, r * 3 + c + 1) for r in range(3) for c in range(2)]
        e += [(r * 3 + c, (r + 1) * 3 + c) for r in range(2) for c in range(3)]
        return 9, e
    raise ParameterError("motif", kind, "one of " + ", ".join(MOTIFS))


def undirected(edges, n: int) -> torch.Tensor:
    """``edge_index`` (2, 2|E|) with both directions of each undirected edge, self-loops and duplicates dropped."""
    pairs = {(min(u, v), max(u, v)) for u, v in edges if u != v}
    if not pairs:
        return torch.empty(2, 0, dtype=torch.long)
    a = np.array(sorted(pairs), dtype=np.int64).T
    ei = torch.from_numpy(np.concatenate([a, a[::-1]], axis=1).copy())
    if int(ei.max()) >= n:
        raise ValueError(f"edge endpoint {int(ei.max())} out of range for {n} nodes")
    return ei


def degree_features(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    deg = torch.zeros(n, dtype=torch.long)
    if edge_index.numel():
        deg.scatter_add_(0, edge_index[0], torch.ones(edge_index.shape[1], dtype=torch.long))
    return torch.nn.functional.one_hot(deg.clamp(max=MAX_DEGREE), MAX_DEGREE + 1).float()


def motif_graph(label: int, rng: np.random.Generator, n_tree: int = 12, noise: float = 0.0) -> Data:
    """One planted-motif graph: a random tree of ``n_tree`` nodes plus motif ``MOTIFS[label]``."""
    check_int("label", label, lo=0, hi=len(MOTIFS) - 1)
    check_int("n_tree", n_tree, lo=1)
    check_float("noise", noise, lo=0.0, hi=1.0)
    m, medges = _motif_edges(MOTIFS[label])
    edges = [(i, int(rng.integers(0, i))) for i in range(1, n_tree)]
    edges += [(n_tree + u, n_tree + v) for u, v in medges]
    edges.append((int(rng.integers(0, n_tree)), n_tree + int(rng.integers(0, m))))
    n = n_tree + m
    for _ in range(int(round(noise * len(edges)))):
        u, v = rng.choice(n, 2, replace=False)
        edges.append((int(u), int(v)))
    ei = undirected(edges, n)
    return Data(x=degree_features(ei, n), edge_index=ei, y=torch.tensor([label]), num_nodes=n)


class MotifDataset(InMemoryDataset):
    """``n_graphs`` planted-motif graphs (balanced labels, shuffled), built in memory from ``seed``.

    Tree sizes are drawn uniformly from ``tree_sizes`` (inclusive range), so graphs have different sizes.
    """

    def __init__(self, n_graphs: int = 400, seed: int = 0, tree_sizes: tuple[int, int] = (8, 20), noise: float = 0.0):
        check_int("n_graphs", n_graphs, lo=len(MOTIFS))
        lo, hi = tree_sizes
        check_int("tree_sizes[0]", lo, lo=1)
        check_int("tree_sizes[1]", hi, lo=lo)
        check_float("noise", noise, lo=0.0, hi=1.0)
        self.noise = noise
        super().__init__(None)
        rng = np.random.default_rng(seed)
        labels = rng.permutation(np.arange(n_graphs) % len(MOTIFS))
        graphs = [motif_graph(int(y), rng, int(rng.integers(lo, hi + 1)), noise) for y in labels]
        self.data, self.slices = self.collate(graphs)

    @property
    def num_classes(self) -> int:  # all labels are present by construction
        return len(MOTIFS)


class TUFormatError(ValueError):
    """A DGCNN-format file whose counts do not match its headers."""


def _label_key(s: str):
    """Numeric order for integer labels / tags (-1 before 1), text order otherwise."""
    try:
        return (0, int(s), "")
    except ValueError:
        return (1, 0, s)


def load_dgcnn_txt(path) -> list[Data]:
    """Graphs from a TU set in DGCNN's single-file text format (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no DGCNN-format file at {path} (the TU sets are not shipped; pass a local copy)")
    lines = [ln.split() for ln in path.read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    pos = 0

    def take(what):
        nonlocal pos
        if pos >= len(lines):
            raise TUFormatError(f"{path.name}: file ends early, expected {what} at line {pos + 1}")
        pos += 1
        return lines[pos - 1]

    try:
        n_graphs = int(take("the number of graphs")[0])
    except ValueError as e:
        raise TUFormatError(f"{path.name}: line 1 must be the number of graphs") from e
    raw, tags, labels = [], {}, {}
    for g in range(n_graphs):
        head = take(f"graph {g}'s header 'n label'")
        if len(head) != 2:
            raise TUFormatError(f"{path.name}: line {pos}: graph header must be 'n label', got {' '.join(head)!r}")
        n, label = int(head[0]), head[1]
        labels.setdefault(label, len(labels))
        node_tags, edges = [], []
        for i in range(n):
            row = take(f"node {i} of graph {g} (header says {n} nodes)")
            if len(row) < 2 or len(row) < 2 + int(row[1]):
                raise TUFormatError(f"{path.name}: line {pos}: node says {row[1] if len(row) > 1 else '?'} "
                                    f"neighbours but lists {max(len(row) - 2, 0)}")
            tags.setdefault(row[0], len(tags))
            node_tags.append(row[0])
            for v in row[2:2 + int(row[1])]:
                v = int(v)
                if not 0 <= v < n:
                    raise TUFormatError(f"{path.name}: line {pos}: neighbour {v} outside 0..{n - 1}")
                edges.append((i, v))
        raw.append((n, label, node_tags, edges))
    if pos != len(lines):
        raise TUFormatError(f"{path.name}: header says {n_graphs} graphs but {len(lines) - pos} more lines follow")
    label_map = {k: i for i, k in enumerate(sorted(labels, key=_label_key))}
    tag_map = {k: i for i, k in enumerate(sorted(tags, key=_label_key))}
    out = []
    for n, label, node_tags, edges in raw:
        x = torch.nn.functional.one_hot(torch.tensor([tag_map[t] for t in node_tags], dtype=torch.long),
                                        len(tag_map)).float()
        out.append(Data(x=x, edge_index=undirected(edges, n), y=torch.tensor([label_map[label]]), num_nodes=n))
    return out


def dataset_stats(graphs) -> dict:
    """Number of graphs, average nodes and average undirected edges per graph."""
    graphs = list(graphs)
    return {"graphs": len(graphs), "nodes": float(np.mean([g.num_nodes for g in graphs])),
            "edges": float(np.mean([g.edge_index.shape[1] / 2 for g in graphs]))}


STATS_RTOL = 0.02  # relative tolerance when a local TU copy's averages are compared with PAPER_STATS


def check_against_paper(name: str, graphs) -> dict:
    """:func:`dataset_stats` of a local TU copy beside :data:`PAPER_STATS` ``[name]``; ``ok`` when the graph
    count is equal and the average node and edge counts agree within ``STATS_RTOL``."""
    if name not in PAPER_STATS:
        raise ParameterError("name", name, "one of " + ", ".join(PAPER_STATS))
    got, ref = dataset_stats(graphs), PAPER_STATS[name]
    ok = got["graphs"] == ref["graphs"] and all(abs(got[k] - ref[k]) <= STATS_RTOL * ref[k] for k in ("nodes", "edges"))
    return {"ok": ok, "measured": got, "paper": ref}
