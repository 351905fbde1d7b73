"""Figures of paper 07's notebook: ST-PPR on one graph and the accuracy of the compared methods."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from companion.graph_multiview.data import MOTIFS
from companion.graph_multiview.explorer import _layout
from companion.graph_multiview.training import LABELS
import companion.viz  # noqa: F401  (the theme and the mode bar)


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


def scale_up_figure(gpu: dict | None) -> go.Figure:
    """The recorded GPU study: accuracy per method and encoder (mean ± std over folds, one dot per fold), the
    sub-network sweep, and vanilla against GMV under label noise and with fewer labels. Without a recorded
    study (None) the figure says so."""
    from plotly.subplots import make_subplots

    from companion.graph_multiview.scale import heads_stale, recipe_stale

    if not gpu:
        fig = go.Figure()
        fig.add_annotation(text="GPU study not recorded (python -m companion.bench graph_multiview)", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return fig.update_layout(title="GPU study: not recorded", height=200)

    sweep_title = "sub-networks M (GMV, GCN)" + ("<br>stale: recorded before the fix" if heads_stale(gpu) else "")
    fig = make_subplots(rows=1, cols=4, column_widths=[0.43, 0.19, 0.19, 0.19], horizontal_spacing=0.06,
                        subplot_titles=("methods × encoder", sweep_title, "label noise (GCN)", "labelled share (GCN)"))
    for conv, table in gpu.get("main", {}).items():
        fig.add_bar(x=[LABELS.get(m, m) for m in table], y=[v["acc_mean"] for v in table.values()],
                    error_y=dict(array=[v["acc_std"] for v in table.values()]), name=conv.upper(), offsetgroup=conv,
                    row=1, col=1)
        dots = [(LABELS.get(m, m), a, f) for m, v in table.items() for a, f in zip(v.get("acc", []), v.get("fold", []))]
        if dots:
            fig.add_box(x=[d[0] for d in dots], y=[d[1] for d in dots], hovertext=[f"fold {d[2]}" for d in dots],
                        boxpoints="all", fillcolor="rgba(0,0,0,0)", line=dict(width=0), marker=dict(size=4, color="black"),
                        offsetgroup=conv, name=f"{conv.upper()} folds", showlegend=False, row=1, col=1)
    sweep = gpu.get("heads_sweep") or {}
    if sweep:
        fig.add_scatter(x=[int(m) for m in sweep], y=[v["acc_mean"] for v in sweep.values()], mode="lines+markers",
                        error_y=dict(array=[v["acc_std"] for v in sweep.values()]), name="GMV, M heads",
                        line=dict(color="#D55E00"), row=1, col=2)
    for col, setting in ((3, "label_noise"), (4, "label_ratio")):
        table = gpu.get(setting) or {}
        for method, color in (("vanilla", "#777777"), ("gmv", "#D55E00")):
            xs = [k for k, t in table.items() if method in t]
            if xs:
                fig.add_scatter(x=xs, y=[table[k][method]["acc_mean"] for k in xs], mode="lines+markers",
                                error_y=dict(array=[table[k][method]["acc_std"] for k in xs]),
                                line=dict(color=color), name=LABELS.get(method, method), legendgroup=method,
                                showlegend=col == 3, row=1, col=col)
    fig.update_yaxes(title_text="test accuracy (%)", row=1, col=1)
    fig.update_xaxes(title_text="M", row=1, col=2)
    fig.update_xaxes(title_text="training labels flipped", row=1, col=3)
    fig.update_xaxes(title_text="training labels kept", row=1, col=4)
    stale = "<br>trained with an older recipe: rerun the study" if recipe_stale(gpu) else ""
    fig.update_layout(title=f"GPU study ({gpu.get('device', '?')}, {gpu.get('date', '?')}){stale}", barmode="group",
                      boxmode="group",
                      height=440, margin=dict(t=90))
    return fig
