"""Figures of paper 11's notebook (plotly): Lemma 1, the causal study, the recorded GPU run."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch
import torch.nn.functional as F
from plotly.subplots import make_subplots

from companion.low_rank_clone.scale import SEED_STAGES
from companion.viz import COLORS

_PALETTE = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)


def lemma_data(d_t=24, d_s=8, d_ff=40, n=64, noise=0.3, seed=0) -> dict:
    """Student FFN outputs against the projected teacher ones, with an exact clone of h_gate, h_up
    (student input z, teacher input z P_inᵀ) and with a perturbed clone (z + noise)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    w_gate, w_up, w_down, p_in, p_down, z = r(d_ff, d_t), r(d_ff, d_t), r(d_t, d_ff), r(d_t, d_s), r(d_t, d_s), r(n, d_s)
    ffn = lambda x, wg, wu, wd: (F.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()  # noqa: E731
    target = ffn(z @ p_in.t(), w_gate, w_up, w_down) @ p_down
    exact = ffn(z, w_gate @ p_in, w_up @ p_in, p_down.t() @ w_down)
    off = ffn(z + noise * r(n, d_s), w_gate @ p_in, w_up @ p_in, p_down.t() @ w_down)
    return {"target": target.numpy().ravel(), "exact": exact.numpy().ravel(), "perturbed": off.numpy().ravel(), "noise": noise}


def lemma_figure(d: dict | None = None) -> go.Figure:
    d = d or lemma_data()
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=d["target"], y=d["perturbed"], mode="markers", name=f"h_up, h_gate cloned with error (input noise {d['noise']})",
                             marker=dict(size=4, color=_PALETTE[3 % len(_PALETTE)], opacity=0.5)))
    fig.add_trace(go.Scatter(x=d["target"], y=d["exact"], mode="markers", name="h_up, h_gate cloned exactly",
                             marker=dict(size=5, color=_PALETTE[0])))
    lo, hi = float(np.min(d["target"])), float(np.max(d["target"]))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="y = x", line=dict(dash="dot", color="#888")))
    gap = float(np.abs(d["exact"] - d["target"]).max())
    fig.update_layout(title=f"Lemma 1: student FFN output vs o^T_ffn W^p_down (exact clone: max gap {gap:.1e})",
                      xaxis_title="o^T_ffn W^p_down (teacher output, projected)", yaxis_title="o^S_ffn (student output)",
                      height=420)
    return fig


def causal_figure(causal: dict, title: str) -> go.Figure:
    fig = go.Figure()
    for k, (m, r) in enumerate(causal["runs"].items()):
        fig.add_trace(go.Scatter(x=r["curve"]["tokens"], y=r["curve"]["val_loss"], mode="lines+markers", name=m,
                                 line=dict(color=_PALETTE[k % len(_PALETTE)])))
    fig.add_hline(y=causal["teacher_val_loss"], line_dash="dot", annotation_text=f"teacher {causal['teacher_val_loss']:.3f}")
    rnd = causal["runs"].get("random init + KD")
    if rnd:
        fig.add_hline(y=rnd["final_val_loss"], line_dash="dash", line_color="#999",
                      annotation_text="random init + KD, final", annotation_position="bottom right")
    fig.update_layout(title=title, xaxis_title="training tokens (bytes)", yaxis_title="validation loss (nats/byte)", height=420)
    return fig


def gpu_figure(gpu: dict | None) -> go.Figure:
    """The recorded GPU study: the teacher's validation loss against its training tokens; every seed's students
    (validation loss against tokens, one colour per method, the fixed target and the teacher's final loss dotted);
    the tokens each seed needed to reach the target. Without per-seed stages, a figure that says so."""
    seeds = [(n, gpu[n]) for n in SEED_STAGES if n in gpu] if gpu else []
    if not seeds:
        fig = go.Figure()
        why = ("no GPU results recorded" if not gpu else "no per-seed student stages in the recorded run (its stages: "
               + ", ".join(gpu.get("stages") or {}) + ")")
        fig.add_annotation(text=f"Not recorded: {why}.<br>Run `python -m companion.bench low_rank_clone` on one GPU.",
                           showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(height=200, xaxis_visible=False, yaxis_visible=False)
        return fig
    target = seeds[0][1]["target_loss"]
    fig = make_subplots(rows=1, cols=3, column_widths=[0.3, 0.45, 0.25],
                        subplot_titles=("teacher (training)", f"students, {len(seeds)} seeds", f"tokens to loss {target:g}"))
    teacher = gpu.get("teacher") or {}
    if "curve" in teacher:
        fig.add_trace(go.Scatter(x=teacher["curve"]["tokens"], y=teacher["curve"]["val_loss"], mode="lines+markers",
                                 name=f"teacher ({teacher['seconds']:.0f} s)", line=dict(color="#444")), row=1, col=1)
    dashes = ("solid", "dash", "dot", "dashdot")
    for k, (name, s) in enumerate(seeds):
        for j, (m, r) in enumerate(s["runs"].items()):
            fig.add_trace(go.Scatter(x=r["curve"]["tokens"], y=r["curve"]["val_loss"], mode="lines", legendgroup=m,
                                     name=m, showlegend=k == 0, line=dict(color=_PALETTE[j % len(_PALETTE)], dash=dashes[k % 4]),
                                     hovertext=f"seed {s['seed']}"), row=1, col=2)
            t = s["tokens_to_target"][m]
            fig.add_trace(go.Scatter(x=[m], y=[r["curve"]["tokens"][-1] if t is None else t], mode="markers", legendgroup=m,
                                     showlegend=False, hovertext=f"seed {s['seed']}" + (" (not reached)" if t is None else ""),
                                     marker=dict(color=_PALETTE[j % len(_PALETTE)], size=9,
                                                 symbol="x-open" if t is None else "circle")), row=1, col=3)
    fig.add_hline(y=target, line_dash="dash", line_color="#999", annotation_text=f"target {target:g}", row=1, col=2)
    fig.add_hline(y=seeds[0][1]["teacher_val_loss"], line_dash="dot", line_color="#444", annotation_text="teacher",
                  row=1, col=2)
    fig.update_xaxes(title_text="tokens", row=1, col=1)
    fig.update_xaxes(title_text="tokens (line style: seed)", row=1, col=2)
    fig.update_yaxes(title_text="validation loss (nats/byte)", row=1, col=1)
    fig.update_yaxes(title_text="tokens (×: not reached, drawn at the budget)", row=1, col=3)
    fig.update_layout(height=420, title=f"Recorded on {gpu.get('device')} ({gpu.get('date')})")
    return fig
