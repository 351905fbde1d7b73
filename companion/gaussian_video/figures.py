"""Figures of paper 05's Scale-up section, from the recorded GPU studies (progressive decode, 3-D training and the
quality it reaches)."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.gaussian_video.claims import TRAIN3D_TARGET_DB
from companion.viz import COLORS  # the theme and the mode bar


def decode_figure(gpu: dict) -> go.Figure:
    """Decode + render per frame against the layers received (zlib chunks, and the H.264 path when the run
    has it), and PSNR against the bytes of layers ≤ l, from the decode study's ``per_layer`` stage."""
    per = gpu["per_layer"]
    ls = [p["l"] for p in per]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("decode + render per frame (ms)",
                                                        "PSNR vs the unquantised render"))
    fig.add_bar(x=ls, y=[p["decode_ms"] for p in per], name="zlib decode (inter-frame)", row=1, col=1)
    fig.add_bar(x=ls, y=[p["render_ms"] for p in per], name="render (Triton)", row=1, col=1)
    fig.add_scatter(x=[p["keyframe_mb"] + p["inter_mb"] for p in per], y=[p["psnr_vs_unquantised"] for p in per],
                    mode="lines+markers", text=[f"l = {l}" for l in ls], name="zlib: keyframe + one inter-frame",
                    row=1, col=2)
    if all("h264_total_ms" in p for p in per):
        fig.add_scatter(x=ls, y=[p["h264_total_ms"] for p in per], mode="lines+markers",
                        name="H.264 decode + dequantise + render", row=1, col=1)
        fig.add_scatter(x=[p["h264_mb_per_frame"] for p in per], y=[p["h264_psnr_vs_unquantised"] for p in per],
                        mode="lines+markers", text=[f"l = {l}" for l in ls], name="H.264 (qp 20): MB per frame",
                        row=1, col=2)
    fig.update_xaxes(title_text="layers l", row=1, col=1)
    fig.update_xaxes(title_text="MB, layers ≤ l", row=1, col=2)
    fig.update_yaxes(title_text="PSNR (dB)", row=1, col=2)
    pr = gpu["profile"]
    fig.update_layout(barmode="stack", height=380, title=f"Progressive decode of {pr['n_gaussians']} Gaussians "
                      f"at {pr['width']}² ({gpu.get('device', '?')}, {gpu.get('date', '?')})")
    return fig


def train3d_figure(payload: dict) -> go.Figure:
    """The trained 3-D model (the 3-D study's ``sequence`` stage): held-out PSNR against MB per frame for each
    number of layers received, and the bytes of every frame (keyframes marked) with the group boundaries."""
    seq = payload["sequence"]
    per, frames = seq["per_layer"], seq["frames"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.45, 0.55],
                        subplot_titles=("held-out PSNR vs MB per frame (layers ≤ l)", "MB per frame (all layers)"))
    fig.add_scatter(x=[p["mb_per_frame"] for p in per], y=[p["psnr_test"] for p in per], mode="lines+markers+text",
                    text=[f"l = {p['l']}" for p in per], textposition="top left", name="layers ≤ l", row=1, col=1)
    kinds = [f["kind"] for f in frames]
    fig.add_bar(x=[f["t"] for f in frames], y=[f["bytes"][-1] / 1e6 for f in frames], name="frame bytes",
                marker_color=["#D55E00" if k == "key" else "#0072B2" for k in kinds],
                hovertext=[f"{k}, mean‖Δμ‖ {f['mean_dmu']}" for k, f in zip(kinds, frames)], row=1, col=2)
    for t in seq["groups"]:
        fig.add_vline(x=t - 0.5, line_dash="dot", line_color="#777777", row=1, col=2)
    fig.update_xaxes(title_text="MB per frame", row=1, col=1)
    fig.update_yaxes(title_text="PSNR (dB)", row=1, col=1)
    fig.update_xaxes(title_text="frame t (orange: keyframe; dotted: group start)", row=1, col=2)
    sc = payload["profile"]["scene"]
    fig.update_layout(height=380, showlegend=False,
                      title=f"3-D training: {sc['n_cameras']} cameras at {sc['width']}², {seq['n_frames_done']} "
                            f"frames ({payload.get('device', '?')}, {payload.get('date', '?')})")
    return fig


def train3d_quality_figure(payload: dict, longer: dict | None = None) -> go.Figure:
    """Quality of the trained 3-D model (the 3-D study's ``sequence`` stage). Left: each keyframe's training curve
    (top-layer PSNR on its training views per ``curve_every`` steps) with its held-out PSNR after coding (layers
    1..L, dashed, same colour) and the run's target; right: held-out PSNR per frame with all layers and with layer 1
    (keyframes marked), which shows what the inter-frames (rigid motion + residuals) keep of their keyframe.
    ``longer`` (a run of the same study with more keyframe steps) adds its keyframe curves and its held-out PSNR per
    frame with all layers, dotted."""
    seq = payload["sequence"]
    frames = seq["frames"]
    keys = [f for f in frames if f["kind"] == "key"]
    L = len(frames[0]["psnr_test"])
    steps = payload["profile"]["train"]["key_steps"]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.5, 0.5],
                        subplot_titles=("keyframe training curves (training views, top layer)",
                                        "held-out PSNR per frame"))
    for i, f in enumerate(keys):
        color = COLORS[i % len(COLORS)]
        if "curve" in f:
            fig.add_scatter(x=f["curve"]["step"], y=f["curve"]["train_psnr"], mode="lines+markers",
                            line_color=color, name=f"keyframe t = {f['t']}: training views", row=1, col=1)
        fig.add_hline(y=f["psnr_test"][-1], line_dash="dash", line_color=color, row=1, col=1,
                      exclude_empty_subplots=False,
                      annotation_text=f"t = {f['t']} held-out {f['psnr_test'][-1]:.2f} dB",
                      annotation_position="top right" if i % 2 else "bottom right")
    if not all("curve" in f for f in keys):
        fig.add_annotation(text="training curve not recorded in this run", x=0.22, y=0.5, xref="paper", yref="paper",
                           showarrow=False)
    fig.add_hline(y=TRAIN3D_TARGET_DB, line_dash="dot", line_color="#777777", row=1, col=1,
                  exclude_empty_subplots=False,
                  annotation_text=f"target {TRAIN3D_TARGET_DB:g} dB", annotation_position="top left")
    t = [f["t"] for f in frames]
    fig.add_scatter(x=t, y=[f["psnr_test"][-1] for f in frames], mode="lines+markers", line_color=COLORS[0],
                    marker=dict(size=[12 if f["kind"] == "key" else 6 for f in frames],
                                symbol=["diamond" if f["kind"] == "key" else "circle" for f in frames]),
                    name=f"layers 1..{L}, {steps} keyframe steps", row=1, col=2)
    fig.add_scatter(x=t, y=[f["psnr_test"][0] for f in frames], mode="lines+markers", line_color=COLORS[2],
                    name=f"layer 1, {steps} keyframe steps", row=1, col=2)
    if longer is not None:
        more = longer["profile"]["train"]["key_steps"]
        frames_l = longer["sequence"]["frames"]
        for i, f in enumerate(k for k in frames_l if k["kind"] == "key"):
            fig.add_scatter(x=f["curve"]["step"], y=f["curve"]["train_psnr"], mode="lines",
                            line=dict(color=COLORS[i % len(COLORS)], dash="dot"),
                            name=f"keyframe t = {f['t']}, {more} steps: training views "
                                 f"(held-out {f['psnr_test'][-1]:.2f} dB)", row=1, col=1)
        fig.add_scatter(x=[f["t"] for f in frames_l], y=[f["psnr_test"][-1] for f in frames_l], mode="lines+markers",
                        line=dict(color=COLORS[0], dash="dot"), marker_symbol="circle-open",
                        name=f"layers 1..{L}, {more} keyframe steps ({len(frames_l)} frames)", row=1, col=2)
    fig.add_hline(y=TRAIN3D_TARGET_DB, line_dash="dot", line_color="#777777", row=1, col=2,
                  annotation_text=f"target {TRAIN3D_TARGET_DB:g} dB", annotation_position="top right")
    fig.update_xaxes(title_text="keyframe step", row=1, col=1)
    fig.update_xaxes(title_text="frame t (diamonds: keyframes)", row=1, col=2)
    fig.update_yaxes(title_text="PSNR (dB)", row=1, col=1)
    fig.update_yaxes(title_text="held-out PSNR (dB)", row=1, col=2)
    fig.update_layout(height=540, legend=dict(orientation="h", yanchor="top", y=-0.18, x=0),
                      title=f"3-D training, quality per keyframe and per frame ({payload.get('device', '?')}, "
                                        f"{payload.get('date', '?')})")
    return fig


def rd3d_figure(payload: dict) -> go.Figure:
    """The 3-D RD study, every seed recorded: left, the keyframe of frame 0 trained with the full loss and with no
    rate term (held-out PSNR against kB of layers ≤ l, l = 1..L); right, the 6-frame sequence coded with
    motion-aware grouping and with fixed groups of 5 and of 1 (mean held-out PSNR against mean kB per frame).
    One colour per variant, one dash per seed."""
    dashes = ("solid", "dash", "dot", "dashdot")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("keyframe: full loss vs no rate term",
                                                        "sequence: grouping"))
    for col, stage in ((1, "rate_term"), (2, "grouping")):
        for s in payload.get(stage, {}).get("seeds", []):
            for i, (name, c) in enumerate(s["curves"].items()):
                fig.add_scatter(x=[b / 1e3 for b in c["bytes"]], y=c["psnr"], mode="lines+markers",
                                line=dict(color=COLORS[i % len(COLORS)], dash=dashes[s["seed"] % len(dashes)]),
                                name=f"{name}, seed {s['seed']}", legendgroup=name, row=1, col=col,
                                hovertext=[f"l = {l + 1}" for l in range(len(c["bytes"]))])
        fig.update_xaxes(title_text="kB per frame, layers ≤ l", row=1, col=col)
    fig.update_yaxes(title_text="held-out PSNR (dB)", row=1, col=1)
    seeds = {st: len(payload.get(st, {}).get("seeds", [])) for st in ("rate_term", "grouping")}
    fig.update_layout(height=420, title=f"3-D RD study: {seeds['rate_term']} seeds (keyframe), {seeds['grouping']} "
                                        f"(sequence) ({payload.get('device', '?')}, {payload.get('date', '?')})")
    return fig
