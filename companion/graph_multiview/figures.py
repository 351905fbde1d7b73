"""Figures of paper 07's notebook: ST-PPR on one graph and the accuracy of the compared methods."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from companion.graph_multiview.data import MOTIFS
from companion.graph_multiview.explorer import _layout
from companion.graph_multiview.training import LABELS


def st_ppr_figure(graph, sample, seed: int = 0) -> go.Figure:
    """One graph, nodes coloured by PPR from the root; V′'s PPR / DFS / BFS parts marked, V′ numbered in PPR order."""
    pos = _layout(graph, seed)
    fig = go.Figure()
    xs, ys = [], []
    for u, v in graph.edge_index.numpy().T.tolist():
        if u < v:
            xs += [pos[u, 0], pos[v, 0], None]
            ys += [pos[u, 1], pos[v, 1], None]
    fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(color="#bbbbbb", width=1.5), hoverinfo="skip", name="edges")
    order = {int(n): i for i, n in enumerate(sample.nodes)}
    fig.add_scatter(x=pos[:, 0], y=pos[:, 1], mode="markers+text",
                    marker=dict(size=[18 if i in order else 9 for i in range(len(pos))], color=sample.scores,
                                colorscale="Viridis", showscale=True, colorbar=dict(title="S[:, v]"),
                                line=dict(width=[2.5 if i in order else 0.5 for i in range(len(pos))], color="black")),
                    text=[str(order[i]) if i in order else "" for i in range(len(pos))], textposition="top center",
                    hovertext=[f"node {i}: PPR {sample.scores[i]:.3f}" for i in range(len(pos))], hoverinfo="text",
                    name="nodes (V′ large, numbered in PPR order)")
    for part, sym, name in ((sample.ppr, "diamond-open", "V′_PPR"), (sample.dfs, "square-open", "V′_DFS"),
                            (sample.bfs, "circle-open", "V′_BFS")):
        part = list(part)
        if part:
            fig.add_scatter(x=pos[part, 0], y=pos[part, 1], mode="markers", hoverinfo="skip", name=name,
                            marker=dict(symbol=sym, size=26, line=dict(width=2)))
    fig.add_scatter(x=[pos[sample.root, 0]], y=[pos[sample.root, 1]], mode="markers", name="root v",
                    marker=dict(symbol="star", size=14, color="#D55E00"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.update_layout(title=f"ST-PPR on a {MOTIFS[int(graph.y)]} graph: |V′| = {len(sample.nodes)} of {graph.num_nodes} "
                            f"(s_PPR = {sample.s_ppr}, s_2 = {sample.s_2}, budget ⌊p·|G|⌋ = {sample.budget})", height=420)
    return fig


def accuracy_figure(runs: dict) -> go.Figure:
    """Test accuracy per method: one dot per fold and the mean."""
    fig = go.Figure()
    names = [LABELS.get(m, m) for m in runs]
    for m, rs in runs.items():
        acc = [r.acc for r in rs]
        fig.add_scatter(x=[LABELS.get(m, m)] * len(acc), y=acc, mode="markers", marker=dict(size=9, opacity=0.6),
                        showlegend=False, hovertext=[f"fold {i}" for i in range(len(acc))])
        fig.add_scatter(x=[LABELS.get(m, m)], y=[float(np.mean(acc))], mode="markers", showlegend=False,
                        marker=dict(symbol="line-ew-open", size=30, line=dict(width=3, color="black")))
    fig.update_layout(title="Planted-motif test accuracy (dots: folds, bar: mean)", xaxis=dict(categoryarray=names),
                      yaxis_title="accuracy (%)", height=380)
    return fig
