"""The rotation-calibration explorer of paper 08 (plotly, ipywidgets; notebook only).

One view of one layer's activations X rotated by R (a fixed rotation, or a calibrated one at an optimisation
step): the histogram of the rotated entries (log counts) with the INT-b grid of a typical token, the
per-channel max |y|, the calibration loss curve, the INT-b quant MSE of every rotation, and the 2-D picture
(a Laplace cloud with one outlier direction rotated by an angle, with Whip, variance and kurtosis against
the angle). The readout gives quant MSE, kurtosis, outlier fraction (|y| > 3·rms), max |y|, ‖RᵀR − I‖∞ and
the W-A layer output error.

``data = {"sources": {name: layer_study result}, "angle": angle_study result, "cloud": [N, 2] tensor}``.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.dartquant.experiment import FIXED, layer_metrics, rotation_2d, run_key
from companion.dartquant.quant import act_grid, check_bits, quantize_activations
from companion.dartquant.whip import LOSSES
from companion.viz import COLORS

ROTATIONS = FIXED + ("qr_orth", "cayley", "riemannian")
LABELS = {"identity": "identity", "random": "random orthogonal", "hadamard": "random Hadamard (QuaRot)",
          "qr_orth": "QR-Orth", "cayley": "Cayley (torch)", "riemannian": "Riemannian SGD (geoopt)"}
DISPLAY_TOKENS = 1024
HIST_BINS = 120
_PAL = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)


def _color(i: int) -> str:
    return _PAL[i % len(_PAL)]


def rotation_for(study: dict, rotation: str, loss: str, step: int | None):
    """``(R, label, run or None, step)`` for the controls. A method/loss pair not calibrated on this source falls
    back to that method's Whip run (or QR-Orth + Whip), and the label says so."""
    check_choice("rotation", rotation, ROTATIONS)
    check_choice("loss", loss, list(LOSSES))
    if rotation in FIXED:
        return study["fixed"][rotation], LABELS[rotation], None, None
    key = run_key(rotation, loss)
    note = ""
    if key not in study["runs"]:  # not calibrated on this source: show the Whip run of the same method
        fallback = run_key(rotation, "whip") if run_key(rotation, "whip") in study["runs"] else run_key("qr_orth", "whip")
        note = f" ({key} not calibrated on this source; showing {fallback})"
        key = fallback
    run = study["runs"][key]
    steps = sorted(run.snapshots)
    step = steps[-1] if step is None else step
    if step not in run.snapshots:
        raise ParameterError("step", step, f"one of the snapshot steps {steps}")
    return run.snapshots[step], f"{LABELS[run.method]} + {run.loss_name}{note}", run, step


def explorer_view(data: dict, *, source: str = "synthetic", rotation: str = "qr_orth", loss: str = "whip",
                  bits: int = 4, step: int | None = None, angle: float = 30.0):
    """The figure and readout for one setting of the controls (pure: no randomness, no state)."""
    check_choice("source", source, list(data["sources"]))
    check_bits(bits)
    check_float("angle", angle, lo=0.0, hi=180.0)
    if step is not None:
        check_int("step", step, lo=0)
    study = data["sources"][source]
    r, label, run, step = rotation_for(study, rotation, loss, step)
    x = study["x"]
    xs = x[:DISPLAY_TOKENS]
    with torch.no_grad():
        y = (xs @ r).float()
        y0 = xs.float()
    m = layer_metrics(x, r, bits, study.get("w"))

    fig = make_subplots(rows=2, cols=3, horizontal_spacing=0.08, vertical_spacing=0.16,
                        subplot_titles=("rotated entries y = xR (log counts),<br>INT grid of a median token",
                                        "per-channel max |y|", "2-D: Laplace cloud rotated by θ",
                                        "calibration loss", f"INT{bits} quant MSE of every rotation",
                                        "losses against θ (÷ value at 0°)"))
    lim = float(max(y0.abs().max(), 1.0))
    edges = np.linspace(-lim, lim, HIST_BINS + 1)  # binned here: the page gets HIST_BINS counts, not every entry
    centres, width = (edges[:-1] + edges[1:]) / 2, edges[1] - edges[0]
    for values, name, colour, opacity, group in ((y0, "identity", "#bbbbbb", 0.6, "identity"),
                                                 (y, label, _color(0), 0.8, "rotated")):
        counts, _ = np.histogram(values.flatten().numpy(), bins=edges)
        fig.add_trace(go.Bar(x=centres, y=counts, width=width, name=name, marker_color=colour, marker_line_width=0,
                             opacity=opacity, legendgroup=group, showlegend=False), row=1, col=1)
    ranges = (y.amax(-1) - y.amin(-1))
    mid = int(torch.argsort(ranges)[len(ranges) // 2])
    grid = act_grid(y[mid], bits).numpy()
    fig.add_trace(go.Scatter(x=grid, y=np.full(len(grid), 0.7), mode="markers", name=f"INT{bits} levels",
                             marker=dict(symbol="line-ns-open", size=14, color=_color(3)), showlegend=False),
                  row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="value", row=1, col=1)

    ch = np.arange(y.shape[1])
    fig.add_trace(go.Scatter(x=ch, y=y0.abs().amax(0).numpy(), mode="lines", line=dict(color="#bbbbbb"),
                             name="identity", legendgroup="identity"), row=1, col=2)
    fig.add_trace(go.Scatter(x=ch, y=y.abs().amax(0).numpy(), mode="lines", line=dict(color=_color(0)),
                             name=label, legendgroup="rotated"), row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_xaxes(title_text="channel", row=1, col=2)

    cloud = data["cloud"][:600] @ rotation_2d(angle)
    fig.add_trace(go.Scatter(x=cloud[:, 0].numpy(), y=cloud[:, 1].numpy(), mode="markers",
                             marker=dict(size=3, color=_color(1), opacity=0.5), showlegend=False), row=1, col=3)
    c = float(data["cloud"].abs().max())
    fig.update_xaxes(range=[-c, c], title_text="channel 1", row=1, col=3)
    fig.update_yaxes(range=[-c, c], title_text="channel 2", row=1, col=3)

    shown = run
    if shown is None:
        shown = study["runs"].get(run_key("qr_orth", "whip"))
    if shown is not None:
        fig.add_trace(go.Scatter(y=shown.losses, mode="lines", line=dict(color=_color(0) if run else "#bbbbbb"),
                                 name=f"{shown.method} + {shown.loss_name}", showlegend=False), row=2, col=1)
        if run is not None:
            fig.add_trace(go.Scatter(x=[min(step, len(run.losses) - 1)], y=[run.losses[min(step, len(run.losses) - 1)]],
                                     mode="markers", marker=dict(size=10, color=_color(3)), showlegend=False), row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_yaxes(title_text=f"{(run or shown).loss_name if (run or shown) else ''} loss (per batch)", row=2, col=1)

    names, mses = [], []
    for k, rr in study["fixed"].items():
        names.append(k)
        mses.append(float(((quantize_activations(x @ rr, bits) - x @ rr) ** 2).mean()))
    for k, rn in study["runs"].items():
        names.append(k)
        yy = x @ rn.rotation
        mses.append(float(((quantize_activations(yy, bits) - yy) ** 2).mean()))
    current = rotation if rotation in FIXED else run_key(run.method, run.loss_name)
    fig.add_trace(go.Bar(x=names, y=mses, marker_color=[_color(3) if n == current else _color(0) for n in names],
                         showlegend=False), row=2, col=2)
    fig.update_yaxes(type="log", title_text="MSE", row=2, col=2)

    a = data["angle"]
    for i, name in enumerate(LOSSES):
        v = np.asarray(a[name])
        fig.add_trace(go.Scatter(x=a["angles"], y=v / v[0], mode="lines", name=name, line=dict(color=_color(i))),
                      row=2, col=3)
    fig.add_vline(x=angle, line_dash="dot", row=2, col=3)
    fig.update_xaxes(title_text="θ (degrees)", row=2, col=3)
    fig.update_layout(height=680, bargap=0.05, barmode="overlay",
                      title=f"{source}: {label}" + (f" at step {step}" if run is not None else ""),
                      legend=dict(orientation="h", y=-0.12))

    c2 = data["cloud"] @ rotation_2d(angle)
    losses2d = ", ".join(f"{n} {float(fn(c2)):.3g}" for n, fn in LOSSES.items())
    readout = (f"INT{bits} quant MSE {m['quant_mse']:.3g} · kurtosis {m['kurtosis']:.3g} · outliers (|y| > 3·rms) "
               f"{100 * m['outlier_frac']:.3f} % · max |y| {m['max_abs']:.3g} · ‖RᵀR − I‖∞ {m['orth_err']:.1e}"
               + (f" · W{bits}A{bits} layer error {m['layer_err']:.3g}" if "layer_err" in m else "")
               + f"   |   2-D at θ = {angle:g}°: {losses2d}")
    return fig, readout


def explorer_controls(data: dict, source: str = "synthetic") -> dict:
    """The ipywidgets, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as w

    study = data["sources"][source]
    steps = study["snapshot_steps"]
    style = {"description_width": "initial"}
    return {
        "source": w.Dropdown(options=list(data["sources"]), value=source, description="data", style=style),
        "rotation": w.Dropdown(options=[(LABELS[r], r) for r in ROTATIONS], value="qr_orth", description="rotation",
                               style=style),
        "loss": w.Dropdown(options=list(LOSSES), value="whip", description="loss (learned)", style=style),
        "bits": w.IntSlider(value=4, min=2, max=8, description="bits", style=style, continuous_update=False),
        "step": w.SelectionSlider(options=steps, value=steps[-1], description="step", style=style,
                                  continuous_update=False),
        "angle": w.FloatSlider(value=30.0, min=0.0, max=180.0, step=2.5, description="2-D angle θ", style=style,
                               continuous_update=False),
    }
