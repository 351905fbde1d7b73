"""The progressive-layer explorer of paper 05 (4DGCPro).

Top row: the ground-truth frame, the render c^l with layers ≤ l, and the Gaussians as 1-σ ellipses
coloured by layer (layers above l faint). Bottom row: the timeline of mean‖Δμ_t‖ with the τ_μ line and
the group boundaries it implies, and the frame's RD curve (bytes of layers ≤ l' against PSNR of c^l',
l' = 1..L) with the current l marked.

Controls: l, λ_Ψ, Ψ mode, frame, τ_μ. The frame's decoded Gaussians (from the notebook's coded
sequence) are re-layered with the chosen λ_Ψ and Ψ mode *without retraining* and re-coded as a keyframe
for the byte count; τ_μ regroups the recorded motion timeline (the sequence itself is not re-fitted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.core import check_choice, check_float, check_int
from companion.gaussian_video.bitstream import encode_key
from companion.gaussian_video.pipeline import _eval, motion_groups
from companion.gaussian_video.significance import PSI_MODES, significance, split_layers
from companion.viz import COLORS

LAYER_COLORS = COLORS
TAU_RANGE = (0.05, 10.0)
LAMBDA_RANGE = (1e-5, 1.0)


@dataclass(frozen=True)
class ExplorerData:
    """The coded sequence the explorer looks at."""

    frames: object        # [T, H, W, 3] ground truth
    decoded: list         # (Gaussians2D, layer) per frame: the encoder's decoded state
    mean_dmu: list        # mean‖Δμ_t‖ per frame (NaN for frame 0)
    L: int
    lambda_psi: float     # the notebook's λ_Ψ (the controls' initial value)
    psi_mode: str
    tau_mu: float


def _ellipses(g, idx, n_pts: int = 20):
    """x, y of the 1-σ ellipses of Gaussians ``idx`` (None-separated for one scatter trace)."""
    t = np.linspace(0, 2 * math.pi, n_pts)
    xs, ys = [], []
    mu, sc, th = g.mu.numpy(), g.scales().numpy(), g.theta[:, 0].numpy()
    for i in idx:
        c, s = math.cos(th[i]), math.sin(th[i])
        ex, ey = sc[i, 0] * np.cos(t), sc[i, 1] * np.sin(t)
        xs += list(mu[i, 0] + c * ex - s * ey) + [None]
        ys += list(mu[i, 1] + s * ex + c * ey) + [None]
    return xs, ys


def explorer_view(data: ExplorerData, l=None, lambda_psi=None, psi_mode=None, frame=0, tau_mu=None):
    """The figure and readout for one setting of the controls (pure)."""
    L = data.L
    l = L if l is None else check_int("l", l, lo=1, hi=L)
    lambda_psi = data.lambda_psi if lambda_psi is None else check_float("lambda_psi", lambda_psi, lo=0.0)
    psi_mode = data.psi_mode if psi_mode is None else check_choice("psi_mode", psi_mode, PSI_MODES)
    T = len(data.decoded)
    frame = check_int("frame", frame, lo=0, hi=T - 1)
    tau_mu = data.tau_mu if tau_mu is None else check_float("tau_mu", tau_mu, lo=0.0, lo_open=True)

    g, _ = data.decoded[frame]
    gt = data.frames[frame]
    H, W, _ = gt.shape
    layer = split_layers(significance(g.alpha(), g.scales(), lambda_psi, psi_mode), L)
    psnrs = _eval(g, layer, gt, L)
    enc, _ = encode_key(g, layer, L)
    bytes_ = [enc.bytes_upto(k) for k in range(1, L + 1)]
    with_masks = g.render(H, W, masks=(layer <= l).float()[None])[0].clamp(0, 1)

    fig = make_subplots(rows=2, cols=3, specs=[[{}, {}, {}], [{"colspan": 2}, None, {}]],
                        subplot_titles=("ground truth", f"render, layers ≤ {l}", "Gaussians by layer",
                                        "mean‖Δμ_t‖ and groups", "RD curve of this frame"),
                        vertical_spacing=0.14, horizontal_spacing=0.06, row_heights=[0.58, 0.42])
    fig.add_trace(go.Image(z=(gt.numpy() * 255).astype(np.uint8)), 1, 1)
    fig.add_trace(go.Image(z=(with_masks.numpy() * 255).astype(np.uint8)), 1, 2)
    for k in range(1, L + 1):
        idx = np.nonzero((layer == k).numpy())[0]
        xs, ys = _ellipses(g, idx)
        fig.add_scatter(x=xs, y=ys, mode="lines", row=1, col=3, name=f"layer {k}", legendgroup="layers",
                        line=dict(color=LAYER_COLORS[(k - 1) % len(LAYER_COLORS)], width=1.2 if k <= l else 0.6),
                        opacity=1.0 if k <= l else 0.2)
    fig.update_xaxes(range=[0, W], row=1, col=3, showticklabels=False)
    fig.update_yaxes(range=[H, 0], row=1, col=3, showticklabels=False, scaleanchor="x3")

    dmu = np.array(data.mean_dmu, dtype=float)
    groups = motion_groups(np.nan_to_num(dmu, nan=0.0), tau_mu)
    fig.add_scatter(x=list(range(T)), y=dmu.tolist(), mode="lines+markers", name="mean‖Δμ_t‖ (px)",
                    line=dict(color=COLORS[0]), row=2, col=1)
    fig.add_hline(y=tau_mu, line_dash="dash", line_color="#D55E00", row=2, col=1,
                  annotation_text=f"τ_μ = {tau_mu:.2g}", annotation_position="top left")
    for s in groups:
        fig.add_vline(x=s - 0.5 if s > 0 else -0.5, line_color="#999999", line_dash="dot", row=2, col=1)
    fig.add_scatter(x=[frame], y=[dmu[frame] if np.isfinite(dmu[frame]) else 0.0], mode="markers",
                    marker=dict(size=12, symbol="circle-open", color="#000000"), name="this frame", row=2, col=1)
    fig.update_xaxes(title_text="frame t", row=2, col=1)
    fig.update_yaxes(title_text="pixels", row=2, col=1)

    fig.add_scatter(x=bytes_, y=psnrs, mode="lines+markers", name="layers 1..L", row=2, col=3,
                    text=[f"l = {k}" for k in range(1, L + 1)], line=dict(color="#009E73"))
    fig.add_scatter(x=[bytes_[l - 1]], y=[psnrs[l - 1]], mode="markers", name=f"l = {l}", row=2, col=3,
                    marker=dict(size=14, symbol="star", color="#D55E00"))
    fig.update_xaxes(title_text="bytes (layers ≤ l)", row=2, col=3)
    fig.update_yaxes(title_text="PSNR (dB)", row=2, col=3)
    fig.update_layout(height=640, title=f"Frame {frame}: layers ≤ {l} of {L}, Ψ mode {psi_mode}, λ_Ψ = {lambda_psi:.3g}",
                      legend=dict(orientation="h", y=-0.12))
    readout = (f"layers ≤ {l}: {psnrs[l - 1]:.2f} dB at {bytes_[l - 1]} B (header {enc.header_bytes} B + "
               f"{' + '.join(str(b) for b in enc.layer_bytes[:l])}); all {L} layers: {psnrs[-1]:.2f} dB at "
               f"{bytes_[-1]} B · τ_μ = {tau_mu:.3g} px gives {len(groups)} group(s) starting at frames {groups}")
    return fig, readout


def explorer_controls(data: ExplorerData, **initial):
    """The ipywidgets controls, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as w

    v = dict(l=data.L, lambda_psi=data.lambda_psi, psi_mode=data.psi_mode, frame=0, tau_mu=data.tau_mu)
    v.update(initial)
    style = {"description_width": "initial"}
    lo, hi = LAMBDA_RANGE
    return {
        "l": w.IntSlider(value=v["l"], min=1, max=data.L, description="layers ≤ l", style=style, continuous_update=False),
        "lambda_psi": w.FloatLogSlider(value=max(v["lambda_psi"], lo), base=10, min=math.log10(lo), max=math.log10(hi),
                                       step=0.25, description="λ_Ψ", style=style, continuous_update=False),
        "psi_mode": w.Dropdown(options=list(PSI_MODES), value=v["psi_mode"], description="Ψ mode", style=style),
        "frame": w.IntSlider(value=v["frame"], min=0, max=len(data.decoded) - 1, description="frame", style=style,
                             continuous_update=False),
        "tau_mu": w.FloatLogSlider(value=min(max(v["tau_mu"], TAU_RANGE[0]), TAU_RANGE[1]), base=10,
                                   min=math.log10(TAU_RANGE[0]), max=math.log10(TAU_RANGE[1]), step=0.05,
                                   description="τ_μ (px)", style=style, continuous_update=False),
    }


def explorer_data(frames, result) -> ExplorerData:
    """Build the explorer's data from a :class:`~companion.gaussian_video.pipeline.SequenceResult`."""
    c = result.cfg
    return ExplorerData(frames=frames, decoded=result.decoded, mean_dmu=result.mean_dmu, L=c.L,
                        lambda_psi=c.lambda_psi, psi_mode=c.psi_mode, tau_mu=c.tau_mu if math.isfinite(c.tau_mu) else TAU_RANGE[1])
