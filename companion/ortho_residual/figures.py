"""Figures of paper 10's notebook (plotly): training curves, per-block statistics, the GPU run."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.ortho_residual.explorer import _MODEL_COLOR
from companion.ortho_residual.scale import when
from companion.ortho_residual.study import RULES


def _smooth(y, k):
    y = np.asarray(y, float)
    k = max(1, min(k, len(y)))
    return np.convolve(y, np.ones(k) / k, mode="valid")


def loss_figure(runs: dict, title: str, *, metric: str = "test_acc", metric_label: str = "test accuracy") -> go.Figure:
    """``runs = {mode: [result, one per seed]}``: training loss (mean over seeds, smoothed) and the final metric."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.65, 0.35], subplot_titles=("training loss", metric_label))
    for mode, rs in runs.items():
        curve = np.mean([r["loss"] for r in rs], axis=0)
        s = _smooth(curve, max(1, len(curve) // 20))
        fig.add_trace(go.Scatter(y=s, mode="lines", name=mode, line=dict(color=_MODEL_COLOR.get(mode))), row=1, col=1)
        vals = [r[metric] for r in rs]
        fig.add_trace(go.Box(y=vals, name=mode, boxpoints="all", marker_color=_MODEL_COLOR.get(mode), showlegend=False),
                      row=1, col=2)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_yaxes(title_text="cross-entropy", row=1, col=1)
    fig.update_layout(title=title, height=400)
    return fig


def gpu_figure(gpu: dict) -> go.Figure:
    """The recorded ``training`` stage: loss curves and per-layer ||x||, |cos(x, update)| for both rules."""
    tr = gpu["training"]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("training loss", "‖x_l‖ per add", "|cos(x_l, added update)|"))
    for mode in RULES:
        r, c = tr[mode], _MODEL_COLOR.get(mode)
        fig.add_trace(go.Scatter(x=r["curve_steps"], y=r["curve_loss"], name=mode, line=dict(color=c)), row=1, col=1)
        fig.add_trace(go.Scatter(y=[x["x_norm"] for x in r["layers"]], name=mode, line=dict(color=c), showlegend=False),
                      row=1, col=2)
        fig.add_trace(go.Scatter(y=[max(x["cos_x_update"], 1e-12) for x in r["layers"]], name=mode, line=dict(color=c),
                                 showlegend=False), row=1, col=3)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_yaxes(type="log", row=1, col=3)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_xaxes(title_text="residual add (2 per layer)", row=1, col=2)
    fig.update_xaxes(title_text="residual add (2 per layer)", row=1, col=3)
    m = tr["config"]
    fig.update_layout(title=f"Recorded: {tr['parameters'] / 1e6:.0f}M decoder ({m['n_layers']} layers, d={m['d']}, byte "
                            f"vocabulary) on {when(gpu, 'training')}", height=400)
    return fig
