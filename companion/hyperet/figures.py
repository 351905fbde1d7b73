"""Static figures of the HyperET notebook (plotly; pure functions of their inputs).

* :func:`hierarchy_figure` — the idea: a three-level hierarchy embedded in the Poincaré disk with
  geodesic edges; radius grows with granularity.
* :func:`accuracy_figure`, :func:`curves_figure`, :func:`radius_figure` — the alignment experiment.

The explorers live in :mod:`.explorer`. Needs plotly (not on the GPU machine); the library modules do
not import this one.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import torch

from companion.hyperet.data import LEVELS, SHAPES
from companion.hyperet.poincare import _expmap0, _mobius_add, _mobius_scalar_mul, _radius, check_curvature
import companion.viz  # noqa: F401  (the theme and the mode bar)

LEVEL_COLOURS = {"fine": "#d62728", "mid": "#ff7f0e", "coarse": "#2ca02c"}
LEVEL_SYMBOLS = {"fine": "diamond", "mid": "square", "coarse": "star"}

__all__ = ["LEVEL_COLOURS", "LEVEL_SYMBOLS", "accuracy_figure", "curves_figure", "hierarchy_figure", "radius_figure"]


def _circle(r: float = 1.0, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    t = np.linspace(0, 2 * np.pi, n)
    return r * np.cos(t), r * np.sin(t)


def _disk_layout(fig: go.Figure, title: str, limit: float = 1.0) -> go.Figure:
    cx, cy = _circle(limit)
    fig.add_trace(go.Scatter(x=cx, y=cy, mode="lines", line=dict(color="black", width=1), name="boundary", hoverinfo="skip", showlegend=False))
    fig.update_layout(
        title=title,
        xaxis=dict(title="x₁ · √c", range=[-1.08 * limit, 1.08 * limit], zeroline=False),
        yaxis=dict(title="x₂ · √c", range=[-1.08 * limit, 1.08 * limit], scaleanchor="x", scaleratio=1, zeroline=False),
        width=620,
        height=560,
    )
    return fig


def _geodesic(x: torch.Tensor, y: torch.Tensor, c: float, steps: int = 24) -> np.ndarray:
    """Points on the geodesic from x to y: x ⊕ (t ⊗ ((−x) ⊕ y)), t ∈ [0, 1]."""
    d = _mobius_add(-x[None], y[None], c, False)
    ts = torch.linspace(0, 1, steps, dtype=torch.float64)[:, None]
    return _mobius_add(x[None].expand(steps, -1), _mobius_scalar_mul(ts, d.expand(steps, -1), c, False), c, False).numpy()


def hierarchy_figure(c: float = 1.0, step: float = 1.1) -> go.Figure:
    """The shapes hierarchy (family → shape → shape+colour) in the disk: tangent norm = depth × step."""
    c = check_curvature(c)
    sc = math.sqrt(c)
    nodes, edges = [("root", 0, 0.0, None)], []
    families = [("round", SHAPES[:3]), ("angular", SHAPES[3:])]
    for fi, (fam, shapes) in enumerate(families):
        fa = math.pi / 2 + fi * math.pi
        nodes.append((fam, 1, fa, 0))
        f_idx = len(nodes) - 1
        for si, shape in enumerate(shapes):
            sa = fa + (si - 1) * math.pi / 3.2
            nodes.append((shape, 2, sa, f_idx))
            s_idx = len(nodes) - 1
            for ci, col in enumerate(("red", "green", "blue")):
                nodes.append((f"{col} {shape}", 3, sa + (ci - 1) * math.pi / 10.5, s_idx))
    pts = []
    for name, depth, ang, parent in nodes:
        u = torch.tensor([[math.cos(ang), math.sin(ang)]], dtype=torch.float64) * depth * step / sc
        pts.append(_expmap0(u, c, False)[0])
        if parent is not None:
            edges.append((parent, len(pts) - 1))
    fig = go.Figure()
    for a, b in edges:
        g = _geodesic(pts[a], pts[b], c) * sc
        fig.add_trace(go.Scatter(x=g[:, 0], y=g[:, 1], mode="lines", line=dict(color="#999", width=1), hoverinfo="skip", showlegend=False))
    names = ["root", "coarse", "mid", "fine"]
    for depth in range(4):
        sel = [i for i, n in enumerate(nodes) if n[1] == depth]
        xy = torch.stack([pts[i] for i in sel]).numpy() * sc
        rad = [float(_radius(pts[i][None], c, False)) for i in sel]
        fig.add_trace(
            go.Scatter(
                x=xy[:, 0], y=xy[:, 1], mode="markers", name=f"{names[depth]} (Rad = {rad[0]:.1f})",
                text=[nodes[i][0] for i in sel], hovertemplate="%{text}<extra></extra>",
                marker=dict(size=[14, 11, 8, 6][depth], color=["black", LEVEL_COLOURS["coarse"], LEVEL_COLOURS["mid"], LEVEL_COLOURS["fine"]][depth]),
            )
        )
    return _disk_layout(fig, f"A 3-level hierarchy in the Poincaré disk (c = {c:g})<br><sup>equal hyperbolic steps per level: the radius reads off the granularity</sup>")


# ----------------------------------------------------------------------------------- experiment plots


def accuracy_figure(rows: list[dict], title: str = "Test accuracy per granularity after the alignment stage") -> go.Figure:
    fig = go.Figure()
    names = [r["variant"] for r in rows]
    for lv in LEVELS:
        fig.add_trace(go.Bar(x=names, y=[r[f"acc_{lv}"] for r in rows], name=lv, marker_color=LEVEL_COLOURS[lv]))
    lo = min(min(r[f"acc_{lv}"] for lv in LEVELS) for r in rows)
    fig.update_layout(barmode="group", title=title, xaxis_title="what trains in the encoder", yaxis=dict(title="accuracy", range=[max(0.0, lo - 0.05), 1.0]), height=430)
    return fig


def curves_figure(results: dict, highlight=("Euclidean diag (q,v)", "HRA diag (q,v)")) -> go.Figure:
    """Training loss per step for every variant; the highlighted pair drawn thick (they coincide)."""
    fig = go.Figure()
    for name, res in results.items():
        hl = name in highlight
        fig.add_trace(
            go.Scatter(
                y=res["losses"], mode="lines", name=name,
                line=dict(width=3 if hl else 1.2, dash="dot" if name == highlight[-1] else None),
                opacity=1.0 if hl else 0.6,
            )
        )
    fig.update_layout(title="Alignment loss (sum over the three levels): HRA diag and its Euclidean twin overlap", xaxis_title="step", yaxis=dict(title="loss", type="log"), height=430)
    return fig


def radius_figure(rows: list[dict]) -> go.Figure:
    fig = go.Figure()
    names = [r["variant"] for r in rows]
    fig.add_trace(go.Bar(x=names, y=[r["cls_Rad_before"] for r in rows], name="CLS token, before", marker_color="#bbbbbb"))
    fig.add_trace(go.Bar(x=names, y=[r["cls_Rad_after"] for r in rows], name="CLS token, after", marker_color="#1f77b4"))
    fig.add_trace(go.Bar(x=names, y=[r["patch_Rad_after"] for r in rows], name="patch tokens, after", marker_color="#9ecae1"))
    fig.update_layout(barmode="group", title="Hyperbolic radius Rad = 2‖h‖ of the encoder's output tokens (test images)", xaxis_title="variant", yaxis_title="mean Rad", height=430)
    return fig
