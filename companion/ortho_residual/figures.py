"""Figures of paper 10's notebook (plotly): training curves, the recorded per-seed GPU results."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.ortho_residual.explorer import _MODEL_COLOR
from companion.ortho_residual.scale import BF16_SEEDS, LM_SEEDS, seed_results, when
from companion.ortho_residual.study import COEF_ARMS, RULES
import companion.viz  # noqa: F401  (the theme and the mode bar)


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


def gpu_figure(gpu: dict | None) -> go.Figure:
    """The recorded per-seed GPU results (:mod:`companion.ortho_residual.scale`): the decoder's validation curves
    (linear solid, Orthogonal-F dashed, one line per seed, the pilot's step count marked), the final validation loss
    and the ViT test accuracy per seed, and the bf16 study's validation loss per seed and coefficient. Without a
    record of these stages the figure says so."""
    lm = seed_results(gpu or {}, "lm_seed", LM_SEEDS)
    bf16 = seed_results(gpu or {}, "bf16_seed", BF16_SEEDS)
    vit = (gpu or {}).get("vit_digits")
    if not (lm or bf16 or vit):
        fig = go.Figure()
        fig.add_annotation(text="No per-seed GPU results recorded yet: run `python -m companion.bench ortho_residual "
                                "--out-dir benchmarks/results` on one GPU", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return fig.update_layout(title="GPU study: not recorded", height=250)
    fig = make_subplots(rows=1, cols=4, column_widths=[0.4, 0.2, 0.2, 0.2],
                        subplot_titles=("decoder validation loss", "final validation loss", "ViT test accuracy (%)",
                                        "bf16 stream: validation loss"))
    dash = {"linear": "solid", "feature": "dash"}
    for r in lm:
        for mode in RULES:
            fig.add_trace(go.Scatter(x=r[mode]["val_steps"], y=r[mode]["val_curve"], mode="lines",
                                     name=f"{mode}, seed {r['seed']}", legendgroup=mode,
                                     line=dict(color=_MODEL_COLOR[mode], dash=dash[mode])), row=1, col=1)
    if lm:
        fig.add_vline(x=lm[0]["steps"], line=dict(color="grey", dash="dot"), row=1, col=1)
    for mode in RULES:
        if lm:
            fig.add_trace(go.Scatter(x=[f"seed {r['seed']}" for r in lm], y=[r[mode]["val_loss"] for r in lm],
                                     mode="markers", name=mode, marker=dict(color=_MODEL_COLOR[mode], size=9),
                                     showlegend=False), row=1, col=2)
        if vit:
            runs = vit["runs"][mode]
            fig.add_trace(go.Scatter(x=[f"seed {r['seed']}" for r in runs], y=[100 * r["test_acc"] for r in runs],
                                     mode="markers", name=mode, marker=dict(color=_MODEL_COLOR[mode], size=9),
                                     showlegend=False), row=1, col=3)
    for coef, symbol in zip(COEF_ARMS, ("circle", "x")):
        if bf16:
            fig.add_trace(go.Scatter(x=[f"seed {r['seed']}" for r in bf16], y=[r[coef]["val_loss"] for r in bf16],
                                     mode="markers", name=f"{coef} coefficient",
                                     marker=dict(color=_MODEL_COLOR["feature"], symbol=symbol, size=9)), row=1, col=4)
    fig.update_xaxes(title_text="step (dotted: the pilot's step count)", row=1, col=1)
    fig.update_yaxes(title_text="nats / byte", row=1, col=1)
    stage = "lm_seed0" if lm else "vit_digits" if vit else "bf16_seed0"
    return fig.update_layout(title=f"Recorded per seed on {when(gpu, stage)}", height=420)
