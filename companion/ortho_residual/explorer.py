"""The residual-stream explorer of paper 10 (plotly, ipywidgets; notebook only).

Left: x, f, its parallel and orthogonal parts and x_{n+1} under both rules, in 3-D, for a chosen angle
between x and f and ratio ||f|| / ||x||. Right: per-block curves of the trained tiny ViTs (||x_l||,
|cos(x_l, f_l)|, rho_par, rho_ortho across the 2 x depth residual adds) for one model and training step;
the readout gives |cos(x, f_perp)| of that snapshot's recorded (x, f) projected in the chosen precision.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.core import ParameterError, check_choice, check_float
from companion.ortho_residual.experiments import PRECISIONS
from companion.viz import COLORS

_PALETTE = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)
_MODEL_COLOR = {"linear": _PALETTE[0], "feature": _PALETTE[1 % len(_PALETTE)], "global": _PALETTE[2 % len(_PALETTE)]}
_PANELS = (("x_norm", "‖x_l‖ (mean over tokens)"), ("abs_cos_x_out", "|cos(x_l, f_l)|"),
           ("rho_par", "ρ_par = ‖f_∥‖²/‖x‖²"), ("rho_ortho", "ρ_⊥ = ‖f_⊥‖²/‖x‖²"))


def geometry(angle_deg: float, ratio: float) -> dict:
    """x = e1 (unit), f at ``angle_deg`` from x with ||f|| = ratio, tilted out of the x-y plane."""
    check_float("angle", angle_deg, lo=0.0, hi=180.0)
    check_float("ratio", ratio, lo=0.0, lo_open=True)
    t = math.radians(angle_deg)
    x = np.array([1.0, 0.0, 0.0])
    f = ratio * np.array([math.cos(t), math.sin(t) * math.cos(0.6), math.sin(t) * math.sin(0.6)])
    f_par = (f @ x) / (x @ x) * x
    f_perp = f - f_par
    return {"x": x, "f": f, "f_par": f_par, "f_perp": f_perp, "x_lin": x + f, "x_orth": x + f_perp}


def _arrow(fig, start, end, name, color, dash=None, **rc):
    fig.add_trace(go.Scatter3d(x=[start[0], end[0]], y=[start[1], end[1]], z=[start[2], end[2]], mode="lines+markers",
                               name=name, line=dict(color=color, width=6, dash=dash),
                               marker=dict(size=[0, 5], color=color)), **rc)


def projection_traces(fig, angle_deg: float, ratio: float, **rc) -> dict:
    g = geometry(angle_deg, ratio)
    o = np.zeros(3)
    _arrow(fig, o, g["x"], "x_n (stream)", "#222222", **rc)
    _arrow(fig, g["x"], g["x"] + g["f"], "f (branch output)", _PALETTE[3 % len(_PALETTE)], **rc)
    _arrow(fig, g["x"], g["x"] + g["f_par"], "f_∥ (dropped)", "#999999", dash="dash", **rc)
    _arrow(fig, g["x"], g["x"] + g["f_perp"], "f_⊥ (added)", _MODEL_COLOR["feature"], dash="dot", **rc)
    _arrow(fig, o, g["x_lin"], "x_{n+1} linear", _MODEL_COLOR["linear"], **rc)
    _arrow(fig, o, g["x_orth"], "x_{n+1} orthogonal", _MODEL_COLOR["feature"], **rc)
    return g


def projection_figure(angle_deg: float = 120.0, ratio: float = 0.8) -> go.Figure:
    """The idea in one picture: the linear add can shorten x, the orthogonal add cannot."""
    fig = go.Figure()
    g = projection_traces(fig, angle_deg, ratio)
    fig.update_layout(title=f"angle(x, f) = {angle_deg:.0f}°, ‖f‖/‖x‖ = {ratio:.2f}: ‖x_{{n+1}}‖ linear "
                            f"{np.linalg.norm(g['x_lin']):.2f}, orthogonal {np.linalg.norm(g['x_orth']):.2f} (‖x_n‖ = 1)",
                      height=480, scene=dict(aspectmode="data", xaxis_title="e1 (along x)", yaxis_title="e2", zaxis_title="e3"))
    return fig


def explorer_view(data: dict, *, angle: float = 120.0, ratio: float = 0.8, model: str = "feature", step: int | None = None,
                  precision: str = "bf16"):
    """``data = {"runs": {mode: train_vit result}}``; returns ``(figure, readout)``."""
    runs = data["runs"]
    check_choice("model", model, list(runs))
    check_choice("precision", precision, PRECISIONS)
    snaps = runs[model]["snapshots"]
    steps = [s["step"] for s in snaps]
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise ParameterError("step", step, f"one of the snapshot steps {steps}")
    rows = snaps[steps.index(step)]["rows"]
    fig = make_subplots(rows=2, cols=3, specs=[[{"type": "scene", "rowspan": 2}, {}, {}], [None, {}, {}]],
                        column_widths=[0.44, 0.28, 0.28], horizontal_spacing=0.07, vertical_spacing=0.16,
                        subplot_titles=("one residual add, both rules", *(t for _, t in _PANELS)))
    g = projection_traces(fig, angle, ratio, row=1, col=1)
    idx = list(range(len(rows)))
    labels = [f"{r['block']}{r['add'][0]}" for r in rows]
    for k, (key, _title) in enumerate(_PANELS):
        r_, c_ = 1 + k // 2, 2 + k % 2
        for name, res in runs.items():
            srows = res["snapshots"][min(steps.index(step), len(res["snapshots"]) - 1)]["rows"]
            fig.add_trace(go.Scatter(x=idx, y=[s[key] for s in srows], mode="lines+markers", name=name,
                                     legendgroup=name, showlegend=k == 0,
                                     line=dict(color=_MODEL_COLOR.get(name), width=3 if name == model else 1),
                                     opacity=1.0 if name == model else 0.35), row=r_, col=c_)
        fig.update_xaxes(tickvals=idx, ticktext=labels, title_text="add (block, a=attn m=MLP)" if r_ == 2 else None,
                         row=r_, col=c_)
    fig.update_yaxes(type="log", row=2, col=2)
    fig.update_yaxes(type="log", row=2, col=3)
    fig.update_layout(height=560, title=f"Residual stream: {model} model at step {step}",
                      scene=dict(aspectmode="data", xaxis_title="e1", yaxis_title="e2", zaxis_title="e3"),
                      legend=dict(orientation="h", y=-0.12))
    cos_p = float(np.mean([r[f"cos_{precision}"] for r in rows]))
    cos_max = float(np.max([r[f"cos_{precision}"] for r in rows]))
    readout = (f"this add: ‖x_{{n+1}}‖ linear {np.linalg.norm(g['x_lin']):.3f} vs orthogonal {np.linalg.norm(g['x_orth']):.3f} "
               f"(‖x_n‖ = 1)   |   {model} model, step {step}: |cos(x, f_⊥)| with the projection in {precision}: "
               f"mean {cos_p:.1e}, max {cos_max:.1e} over {len(rows)} adds")
    return fig, readout


def explorer_controls(data: dict, *, model: str = "feature") -> dict:
    import ipywidgets as w

    runs = data["runs"]
    steps = [s["step"] for s in runs[model]["snapshots"]]
    return {
        "angle": w.FloatSlider(value=120.0, min=0.0, max=180.0, step=5.0, description="angle(x,f) °"),
        "ratio": w.FloatSlider(value=0.8, min=0.1, max=3.0, step=0.05, description="‖f‖/‖x‖"),
        "model": w.Dropdown(options=list(runs), value=model, description="model"),
        "step": w.SelectionSlider(options=steps, value=steps[-1], description="step"),
        "precision": w.Dropdown(options=list(PRECISIONS), value="bf16", description="precision"),
    }
