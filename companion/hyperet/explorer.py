"""Figures and explorer update functions for the HyperET notebook (plotly; pure functions of their inputs).

* :func:`hierarchy_figure` — the idea: a three-level hierarchy embedded in the Poincaré disk with
  geodesic edges; radius grows with granularity.
* :func:`disk_projection` + :func:`disk_view` — the hyperbolic-embeddings explorer: a 2-D projection
  of image and text embeddings mapped into the disk with exp0; curvature c and a Möbius scale s move
  points radially (Theorem 1 in the readout).
* :func:`identity_view` — HRA vs its Euclidean twin over curvature × row norm (where the guards bite).
* :func:`accuracy_figure`, :func:`curves_figure`, :func:`radius_figure` — the alignment experiment.

Needs plotly (not on the GPU machine); the library modules do not import this one.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import torch

from companion.core.validation import check_choice, check_float
from companion.hyperet.data import LEVELS, SHAPES
from companion.hyperet.hra import identity_error_grid
from companion.hyperet.poincare import _expmap0, _mobius_add, _mobius_scalar_mul, _radius, check_curvature

LEVEL_COLOURS = {"fine": "#d62728", "mid": "#ff7f0e", "coarse": "#2ca02c"}
LEVEL_SYMBOLS = {"fine": "diamond", "mid": "square", "coarse": "star"}

__all__ = ["accuracy_figure", "curves_figure", "disk_projection", "disk_view", "hierarchy_figure", "identity_view", "radius_figure"]


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


# ------------------------------------------------------------------------------------ disk explorer


def disk_projection(image_emb: torch.Tensor, text_emb: dict[str, torch.Tensor]) -> dict:
    """Project image and text embeddings (same space) to 2-D tangent vectors at the origin.

    Each modality is centred at its own mean (removing the modality gap, which would otherwise be the
    first principal direction); the text centre is the mean of the three levels' means, so that the ten
    fine prompts do not outweigh the two coarse ones. A PCA is then fitted on both together, and each
    modality is scaled so that its median vector has norm 1. Returns numpy arrays: ``images`` and one
    per level.
    """
    texts = torch.cat([text_emb[lv] for lv in LEVELS]).double()
    imgs = image_emb.double()
    texts = texts - torch.stack([text_emb[lv].double().mean(0) for lv in LEVELS]).mean(0, keepdim=True)
    imgs = imgs - imgs.mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(torch.cat([texts / texts.norm(dim=1).mean(), imgs / imgs.norm(dim=1).mean()]), full_matrices=False)
    basis = v[:2].T
    t2, i2 = texts @ basis, imgs @ basis
    t_scale = t2.norm(dim=1).median().clamp_min(1e-12)
    i_scale = i2.norm(dim=1).median().clamp_min(1e-12)
    t2, i2 = t2 / t_scale, i2 / i_scale
    out, start = {"images": i2.numpy()}, 0
    for lv in LEVELS:
        k = len(text_emb[lv])
        out[lv] = t2[start : start + k].numpy()
        start += k
    return out


def disk_view(proj: dict, labels: np.ndarray, prompts: dict[str, list[str]], c: float = 1.0, s: float = 1.0, move: str = "images", class_names=None):
    """The explorer's update: exp0 of the 2-D tangent vectors at curvature c, then s ⊗_c on ``move``.

    Returns ``(figure, readout)``. Coordinates are shown times √c so the disk is always the unit disk.
    """
    c = check_curvature(c)
    s = check_float("s", s, lo=0.0, lo_open=True)
    check_choice("move", move, ("images", "text", "all"))
    sc = math.sqrt(c)
    fig = go.Figure()

    def place(xy: np.ndarray, scaled: bool):
        u = torch.as_tensor(xy, dtype=torch.float64)
        x = _expmap0(u, c, False)
        y = _mobius_scalar_mul(s, x, c, False) if scaled else x
        return x, y

    moved_img = move in ("images", "all")
    x_img, y_img = place(proj["images"], moved_img)
    labels = np.asarray(labels)
    names = class_names or [str(k) for k in range(int(labels.max()) + 1)]
    palette = ["#1f77b4", "#aec7e8", "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#17becf"]
    for k in range(int(labels.max()) + 1):
        sel = labels == k
        if sel.any():
            pts = y_img[torch.as_tensor(sel)].numpy() * sc
            fig.add_trace(go.Scatter(x=pts[:, 0], y=pts[:, 1], mode="markers", name=f"image: {names[k]}", marker=dict(size=5, opacity=0.55, color=palette[k % len(palette)]), legendgroup="img"))
    text_rads = {}
    max_err = float(((_radius(y_img, c, False) - (s if moved_img else 1.0) * _radius(x_img, c, False)).abs() / _radius(x_img, c, False).clamp_min(1e-300)).max())
    for lv in LEVELS:
        x_t, y_t = place(proj[lv], move in ("text", "all"))
        pts = y_t.numpy() * sc
        text_rads[lv] = float(_radius(y_t, c, False).mean())
        fig.add_trace(
            go.Scatter(
                x=pts[:, 0], y=pts[:, 1], mode="markers", name=f"text ({lv})", text=prompts[lv], hovertemplate="%{text}<extra></extra>",
                marker=dict(size=11, symbol=LEVEL_SYMBOLS[lv], color=LEVEL_COLOURS[lv], line=dict(color="black", width=1)),
            )
        )
    _disk_layout(fig, f"Image and text embeddings in the Poincaré disk<br><sup>c = {c:g}; s = {s:g} ⊗ applied to {move}</sup>")
    rad_before = float(_radius(x_img, c, False).mean())
    rad_after = float(_radius(y_img, c, False).mean())
    inball = float(y_img.norm(dim=-1).mean() * sc)
    readout = (
        f"images: mean Rad {rad_before:.3f} → {rad_after:.3f} (ratio {rad_after / rad_before:.3f}; Theorem 1 says s = {s if moved_img else 1.0:g}, "
        f"max relative error {max_err:.1e}); mean √c‖x‖ = {inball:.3f}. "
        + "text mean Rad: " + ", ".join(f"{lv} {text_rads[lv]:.2f}" for lv in LEVELS)
    )
    return fig, readout


# ------------------------------------------------------------------------------- identity heat map


def identity_view(structure: str = "diagonal", precision: str = "fp32", spread: float = 0.3):
    """Heat map of log10 relative error of HRA vs W0 W_sᵀ over curvature c × row norm ‖w‖."""
    check_choice("precision", precision, ("fp32", "fp64"))
    grid = identity_error_grid(structure, torch.float32 if precision == "fp32" else torch.float64, spread=check_float("spread", spread, lo=0.0, hi=2.0))
    z = np.log10(np.maximum(grid["rel_error"], 1e-17))
    fig = go.Figure(
        go.Heatmap(
            x=np.log10(grid["row_norm"]), y=np.log10(grid["c"]), z=z, zmin=-17, zmax=0, colorscale="Viridis",
            colorbar=dict(title="log10 rel. error"), hovertemplate="log10 ‖w‖ %{x:.2f}<br>log10 c %{y:.2f}<br>log10 err %{z:.1f}<extra></extra>",
        )
    )
    xs = np.log10(grid["row_norm"])
    fig.add_trace(go.Scatter(x=xs, y=2 * (np.log10(3.8) - xs), mode="lines", line=dict(color="white", dash="dash"), name="√c‖w‖ = 3.8"))
    fig.add_trace(go.Scatter(x=[np.log10(0.64)], y=[np.log10(0.01)], mode="markers+text", text=["CLIP-like, c = 0.01"], textposition="top right", marker=dict(color="red", size=10, symbol="x"), name="paper's regime"))
    fig.update_layout(
        title=f"HRA vs its Euclidean twin W0·W_sᵀ ({structure}, {precision})<br><sup>relative error; it leaves rounding level only where the guards bite</sup>",
        legend=dict(orientation="h", yanchor="top", y=-0.18, xanchor="left", x=0),
        xaxis=dict(title="log10 row norm ‖w‖ of W0", range=[xs[0], xs[-1]]),
        yaxis=dict(title="log10 curvature c", range=[-3, 1]),
        width=700, height=580,
    )
    ok = grid["rel_error"] < 1e-5
    c_i = int(np.argmin(np.abs(grid["c"] - 0.01)))
    n_i = int(np.argmin(np.abs(grid["row_norm"] - 0.64)))
    readout = f"{100 * ok.mean():.0f}% of the grid agrees within 1e-5; at c ≈ 0.01, ‖w‖ ≈ 0.64 the error is {grid['rel_error'][c_i, n_i]:.1e}"
    return fig, readout


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
