"""The explorers of the HyperET notebook (plotly + ipywidgets; the update functions are pure).

* :func:`explorer_data` + :func:`explorer_view` + :func:`explorer_controls` — the hyperbolic-embeddings
  explorer: a 2-D projection of image and text embeddings mapped into the disk with exp0; curvature c
  and a Möbius scale s move points radially (Theorem 1 in the readout). :func:`disk_view` is the same
  view with its inputs spelled out.
* :func:`identity_view` + :func:`identity_controls` — HRA vs its Euclidean twin over curvature × row
  norm (where the guards bite).

Static figures are in :mod:`.figures`. Needs plotly (not on the GPU machine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch

from companion.core.validation import check_choice, check_float
from companion.hyperet.data import LEVELS
from companion.hyperet.figures import LEVEL_COLOURS, LEVEL_SYMBOLS, _disk_layout
from companion.hyperet.hra import identity_error_grid
from companion.hyperet.poincare import _expmap0, _mobius_scalar_mul, _radius, check_curvature
import companion.viz  # noqa: F401  (the theme and the mode bar)

__all__ = ["DiskData", "disk_projection", "disk_view", "explorer_controls", "explorer_data", "explorer_view", "identity_controls", "identity_view"]


@dataclass(frozen=True)
class DiskData:
    """What the disk explorer shows: 2-D tangent vectors (:func:`disk_projection`), labels, prompts."""

    proj: dict
    labels: np.ndarray
    prompts: dict
    class_names: list


def explorer_data(image_emb: torch.Tensor, text_emb: dict, labels, prompts: dict, class_names=None) -> DiskData:
    """Precompute the disk explorer's data from image and text embeddings of one space."""
    labels = np.asarray(labels)
    names = list(class_names) if class_names is not None else [str(k) for k in range(int(labels.max()) + 1)]
    return DiskData(disk_projection(image_emb, text_emb), labels, prompts, names)


def explorer_view(data: DiskData, c: float = 0.3, s: float = 1.0, move: str = "images"):
    """The disk explorer's update: ``(figure, readout)`` for curvature ``c`` and Möbius scale ``s``."""
    return disk_view(data.proj, data.labels, data.prompts, c=c, s=s, move=move, class_names=data.class_names)


def explorer_controls(data: DiskData | None = None, c: float = 0.3, s: float = 1.0, move: str = "images") -> dict:
    """The disk explorer's widgets (curvature on a log slider, Möbius scale, what s applies to)."""
    import ipywidgets as widgets

    c = check_float("c", c, lo=1e-3, hi=10.0)
    s = check_float("s", s, lo=0.2, hi=3.0)
    check_choice("move", move, ("images", "text", "all"))
    return {
        "c": widgets.FloatLogSlider(value=c, base=10, min=-3, max=1, step=0.1, description="curvature c"),
        "s": widgets.FloatSlider(value=s, min=0.2, max=3.0, step=0.05, description="Möbius scale s"),
        "move": widgets.Dropdown(options=["images", "text", "all"], value=move, description="apply s to"),
    }


def identity_controls() -> dict:
    """The identity explorer's widgets (structure of W_s, precision, spread of W_s around the identity)."""
    import ipywidgets as widgets

    return {
        "structure": widgets.Dropdown(options=["diagonal", "block", "banded", "full"], value="diagonal", description="W_s"),
        "precision": widgets.Dropdown(options=["fp32", "fp64"], value="fp32", description="precision"),
        "spread": widgets.FloatSlider(value=0.3, min=0.0, max=1.5, step=0.1, description="spread"),
    }


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
