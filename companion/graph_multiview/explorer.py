"""The graph-mixing explorer of paper 07 (GMV).

Tab ``"mixing"``: source, target and mixed graph side by side. Source and target nodes are coloured by their
PPR score from the ST-PPR root (``S[:, v]``, teleport β); the sampled subgraph V′_src and its image φ(V′_src)
are drawn large with a numbered outline (node i of V′_src carries the same number as φ(V′_src[i])); in the
mixed graph kept target edges are grey and inserted edges (images of source edges under φ) orange, inserted
nodes orange. Controls: the two graphs, p, q, w, β and the size-formula reading; the readout gives w_src,
w_trg (Eq. 2), |V_mix|, the edge counts and s_PPR / s_2.

Tab ``"heads"``: head 1 against head 2, the probability each gives the true class of every test graph, for
the runs the notebook trained (two-head vanilla, G-MIMO, GMV, ...), with D_disagree and the symmetric KL.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.graph_multiview.data import MOTIFS
from companion.graph_multiview.sampling import READINGS, ppr_matrix
from companion.graph_multiview.submix import st_submix
from companion.graph_multiview.training import LABELS, head_diversity
import companion.viz  # noqa: F401  (the theme and the mode bar)

TABS = ("mixing", "heads")
KEPT, INSERTED = "#9a9a9a", "#E69F00"


@dataclass(frozen=True)
class ExplorerData:
    """``graphs``: the graphs offered as source and target; ``heads``: ``{method: (probs (N, M, C), y (N,))}``
    from trained runs (may be empty); ``seed`` fixes the root and the samples."""

    graphs: tuple
    heads: dict = field(default_factory=dict)
    seed: int = 0


def _layout(g, seed):
    G = nx.Graph()
    G.add_nodes_from(range(g.num_nodes))
    G.add_edges_from(g.edge_index.numpy().T.tolist())
    pos = nx.spring_layout(G, seed=seed, iterations=80) if G.number_of_edges() else nx.circular_layout(G)
    return np.array([pos[i] for i in range(g.num_nodes)])


def _edges(fig, pos, pairs, color, col, name, width=1.5, legend=True):
    xs, ys = [], []
    for u, v in pairs:
        xs += [pos[u, 0], pos[v, 0], None]
        ys += [pos[u, 1], pos[v, 1], None]
    fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(color=color, width=width), name=name, hoverinfo="skip",
                    showlegend=legend, row=1, col=col)


def _nodes(fig, pos, color, col, *, name, highlight=(), numbers=None, colorscale="Viridis", cmax=None, showscale=False,
           text=None):
    n = len(pos)
    hi = np.zeros(n, bool)
    hi[list(highlight)] = True
    size = np.where(hi, 17, 9)
    line_w = np.where(hi, 2.5, 0.5)
    labels = [""] * n
    if numbers is not None:
        for i, node in enumerate(numbers):
            labels[node] = str(i)
    marker = dict(size=size, line=dict(width=line_w, color="black"))
    if isinstance(color, str) or (isinstance(color, list) and isinstance(color[0], str)):
        marker["color"] = color
    else:
        marker.update(color=color, colorscale=colorscale, cmin=0, cmax=cmax, showscale=showscale,
                      colorbar=dict(title="PPR", len=0.6, x=1.02) if showscale else None)
    fig.add_scatter(x=pos[:, 0], y=pos[:, 1], mode="markers+text", marker=marker, text=labels,
                    textposition="top center", textfont=dict(size=10), name=name, showlegend=False,
                    hovertext=text, hoverinfo="text", row=1, col=col)


def mixing_view(data: ExplorerData, source=0, target=1, p=0.4, q=0.6, w=3, beta=0.15, reading="product"):
    n = len(data.graphs)
    check_int("source", source, lo=0, hi=n - 1)
    check_int("target", target, lo=0, hi=n - 1)
    if source == target:
        raise ParameterError("target", target, f"a graph other than the source ({source})")
    check_float("beta", beta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    check_choice("reading", reading, READINGS)
    src, trg = data.graphs[source], data.graphs[target]
    rng = np.random.default_rng(data.seed)
    mixed = st_submix(src, trg, rng, p=p, q=q, w=w, beta=beta, reading=reading)
    a, b = mixed.samples[0]
    v_src, v_trg = mixed.phi[0]
    ps, pt = _layout(src, data.seed), _layout(trg, data.seed)
    s_src, s_trg = ppr_matrix(src.edge_index, src.num_nodes, beta), ppr_matrix(trg.edge_index, trg.num_nodes, beta)
    col_s, col_t = s_src[:, a.root], s_trg[:, b.root]
    cmax = float(max(col_s.max(), col_t.max()))
    fig = make_subplots(rows=1, cols=3, subplot_titles=(
        f"source #{source} ({MOTIFS[int(src.y)]}), V′_src numbered", f"target #{target} ({MOTIFS[int(trg.y)]}), φ(V′_src) numbered",
        "mixed graph (V_mix = V_trg)"), horizontal_spacing=0.04)
    src_pairs = sorted({(min(u, v), max(u, v)) for u, v in src.edge_index.numpy().T.tolist()})
    trg_pairs = sorted({(min(u, v), max(u, v)) for u, v in trg.edge_index.numpy().T.tolist()})
    inside_s = set(v_src.tolist())
    _edges(fig, ps, [e for e in src_pairs if not (e[0] in inside_s and e[1] in inside_s)], KEPT, 1, "edges", legend=False)
    _edges(fig, ps, [e for e in src_pairs if e[0] in inside_s and e[1] in inside_s], INSERTED, 1, "source edges inserted",
           width=3, legend=False)
    inside_t = set(v_trg.tolist())
    _edges(fig, pt, [e for e in trg_pairs if not (e[0] in inside_t and e[1] in inside_t)], KEPT, 2, "kept target edges",
           legend=False)
    _edges(fig, pt, [e for e in trg_pairs if e[0] in inside_t and e[1] in inside_t], "#D55E00", 2,
           "target edges removed", width=1.5, legend=True)
    fig.data[-1].line.dash = "dot"
    _nodes(fig, ps, col_s, 1, name="source", highlight=v_src, numbers=v_src, cmax=cmax,
           text=[f"node {i}: PPR {col_s[i]:.3f}" + (" (root)" if i == a.root else "") for i in range(len(ps))])
    _nodes(fig, pt, col_t, 2, name="target", highlight=v_trg, numbers=v_trg, cmax=cmax, showscale=True,
           text=[f"node {i}: PPR {col_t[i]:.3f}" + (" (root)" if i == b.root else "") for i in range(len(pt))])
    _edges(fig, pt, mixed.kept, KEPT, 3, "kept target edges E′_trg")
    _edges(fig, pt, mixed.inserted[0], INSERTED, 3, "inserted edges E′_src = φ(source edges)", width=3)
    owner = mixed.owner.numpy()
    _nodes(fig, pt, [INSERTED if o == 0 else "#56B4E9" for o in owner], 3, name="mixed", highlight=v_trg, numbers=v_trg,
           text=[f"node {i}: from {'source' if o == 0 else 'target'}" for i, o in enumerate(owner)])
    for c in (1, 2, 3):
        fig.update_xaxes(visible=False, row=1, col=c)
        fig.update_yaxes(visible=False, row=1, col=c)
    fig.update_layout(title=f"ST-SubMix: p = {p}, q = {q}, w = {w}, β = {beta}, size reading '{reading}'", height=430,
                      legend=dict(orientation="h", y=-0.05))
    readout = (f"w_src = {mixed.weights[0]:.3f}, w_trg = {mixed.weights[1]:.3f} · |V_mix| = {mixed.num_nodes} "
               f"(= |V_trg|) · |E′_trg| kept = {len(mixed.kept)}, |E′_src| inserted = {len(mixed.inserted[0])}, "
               f"|E_mix| = {len(mixed.kept) + len(mixed.inserted[0])} · s = {len(v_src)} nodes mapped "
               f"(source: s_PPR = {a.s_ppr}, s_2 = {a.s_2}; target: s_PPR = {b.s_ppr}, s_2 = {b.s_2})")
    return fig, readout


def heads_view(data: ExplorerData, method=None):
    if not data.heads:
        fig = go.Figure()
        fig.add_annotation(text="no trained runs passed to the explorer", showarrow=False)
        fig.update_layout(title="head 1 against head 2", height=430)
        return fig, "no trained runs"
    method = next(iter(data.heads)) if method is None else method
    check_choice("method", method, list(data.heads))
    fig = go.Figure()
    parts = []
    for name, (probs, y) in data.heads.items():
        probs, y = np.asarray(probs), np.asarray(y)
        idx = np.arange(len(y))
        p1, p2 = probs[idx, 0, y], probs[idx, 1, y]
        dis, kl = head_diversity(torch.as_tensor(probs))
        parts.append(f"{LABELS.get(name, name)}: D_disagree {dis:.1f} %, sym. KL {kl:.3f}")
        fig.add_scatter(x=p1, y=p2, mode="markers", name=f"{LABELS.get(name, name)} (D_dis {dis:.1f} %, KL {kl:.2f})",
                        marker=dict(size=9 if name == method else 6, opacity=1.0 if name == method else 0.35))
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", line=dict(dash="dot", color="grey"), name="heads agree")
    fig.update_layout(title=f"head 1 vs head 2: probability of the true class on {len(y)} test graphs",
                      xaxis_title="head 1: p(true class)", yaxis_title="head 2: p(true class)", height=430,
                      xaxis_range=[-0.02, 1.02], yaxis_range=[-0.02, 1.02])
    return fig, " · ".join(parts)


def explorer_view(data: ExplorerData, tab="mixing", source=0, target=1, p=0.4, q=0.6, w=3, beta=0.15,
                  reading="product", method=None):
    """The figure and readout of one tab for one setting of the controls (pure: seeded by ``data.seed``)."""
    check_choice("tab", tab, TABS)
    if tab == "mixing":
        return mixing_view(data, source, target, p, q, w, beta, reading)
    return heads_view(data, method)


def explorer_controls(data: ExplorerData, **initial):
    """The ipywidgets controls, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as wd

    names = [(f"#{i} {MOTIFS[int(g.y)]} ({g.num_nodes} nodes)", i) for i, g in enumerate(data.graphs)]
    v = dict(tab="mixing", source=0, target=1, p=0.4, q=0.6, w=3, beta=0.15, reading="product",
             method=next(iter(data.heads), None))
    v.update(initial)
    st = {"description_width": "initial"}
    fs = dict(continuous_update=False, style=st, readout_format=".2f")
    controls = {
        "tab": wd.ToggleButtons(options=[("graph mixing", "mixing"), ("head 1 vs head 2", "heads")], value=v["tab"]),
        "source": wd.Dropdown(options=names, value=v["source"], description="source", style=st),
        "target": wd.Dropdown(options=names, value=v["target"], description="target", style=st),
        "p": wd.FloatSlider(value=v["p"], min=0.05, max=1.0, step=0.05, description="p", **fs),
        "q": wd.FloatSlider(value=v["q"], min=0.0, max=1.0, step=0.05, description="q", **fs),
        "w": wd.IntSlider(value=v["w"], min=1, max=10, description="w", continuous_update=False, style=st),
        "beta": wd.FloatSlider(value=v["beta"], min=0.05, max=0.95, step=0.05, description="β", **fs),
        "reading": wd.Dropdown(options=list(READINGS), value=v["reading"], description="size reading", style=st),
    }
    if data.heads:
        controls["method"] = wd.Dropdown(options=[(LABELS.get(m, m), m) for m in data.heads], value=v["method"],
                                         description="highlight", style=st)
    return controls
