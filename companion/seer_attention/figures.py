"""Static figures of the SeerAttention notebook (paper 01): the idea, the loss, recall, GPU timings, the kernel study."""

from __future__ import annotations

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from companion.seer_attention.explorer import _log_heat
import companion.viz  # noqa: F401  (the theme and the mode bar)

def idea_figure(probs: torch.Tensor, gt: torch.Tensor, block_size: int, title: str) -> go.Figure:
    """One head: token-level attention, and the block map the gate learns to predict (its target)."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("token attention softmax(QKᵀ/√d), log10",
                                        f"target: max-pool over {block_size}×{block_size} blocks, rows normalised, log10"))
    fig.add_trace(go.Heatmap(z=_log_heat(probs, 1e-5), zmin=-5, zmax=0, colorscale="Viridis", showscale=False,
                             hovertemplate="query %{y}, key %{x}: %{z:.2f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Heatmap(z=_log_heat(gt), zmin=-4, zmax=0, colorscale="Viridis", colorbar=dict(title="log10"),
                             hovertemplate="query block %{y}, key block %{x}: %{z:.2f}<extra></extra>"), 1, 2)
    for c, lab in ((1, "token"), (2, "block")):
        fig.update_yaxes(autorange="reversed", title_text=f"query {lab}", row=1, col=c)
        fig.update_xaxes(title_text=f"key {lab}", row=1, col=c)
    fig.update_layout(height=420, title=title)
    return fig


def loss_figure(hist: dict) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=hist["step"], y=hist["loss"], name="training loss (10·Σ_layers KL, 'mean')", mode="lines"))
    if hist.get("eval_step"):
        fig.add_trace(go.Scatter(x=hist["eval_step"], y=hist["eval_kl"], name="held-out KL(gt‖gate), nats per block row", mode="lines+markers", yaxis="y2"))
    fig.update_layout(title="Self-distillation of the gates (the model is frozen)", xaxis_title="Adam step",
                      yaxis=dict(title="training loss", type="log"),
                      yaxis2=dict(title="held-out KL (nats/row)", overlaying="y", side="right", type="log"), height=360)
    return fig


METHOD_LABELS = {"gate": "SeerAttention gate (trained)", "untrained": "untrained gate", "oracle": "oracle top-k on the truth",
                 "random": "random blocks", "a-shape": "A-shape (sink + local band)"}


def recall_figure(block_rows: list, output_rows: list | None = None) -> go.Figure:
    """Recall of the attention mass vs sparsity for every method (and, if given, the embedding cosine)."""
    cols = 2 if output_rows else 1
    fig = make_subplots(rows=1, cols=cols, subplot_titles=("attention mass kept by the selected blocks", "final embedding cosine to dense")[:cols],
                        horizontal_spacing=0.12)
    methods = list(dict.fromkeys(r.method for r in block_rows))
    for i, m in enumerate(methods):
        rs = sorted((r for r in block_rows if r.method == m), key=lambda r: r.sparsity)
        fig.add_trace(go.Scatter(x=[r.sparsity for r in rs], y=[r.mass_recall for r in rs], name=METHOD_LABELS.get(m, m),
                                 mode="lines+markers", legendgroup=m, line=dict(dash="dot" if m in ("oracle",) else None)), 1, 1)
        if output_rows:
            os_ = sorted((r for r in output_rows if r["method"] == m), key=lambda r: r["sparsity"])
            fig.add_trace(go.Scatter(x=[r["sparsity"] for r in os_], y=[r["embedding_cosine"] for r in os_], name=METHOD_LABELS.get(m, m),
                                     mode="lines+markers", legendgroup=m, showlegend=False,
                                     line=dict(dash="dot" if m in ("oracle",) else None)), 1, 2)
    fig.update_xaxes(title_text="sparsity (share of blocks skipped)", tickformat=".0%")
    fig.update_yaxes(title_text="recall", tickformat=".0%", row=1, col=1)
    if output_rows:
        fig.update_yaxes(title_text="cosine", row=1, col=2)
    fig.update_layout(title="Matched-sparsity comparison on held-out text (all layers and heads)", height=400)
    return fig


def gpu_figure(rows: list) -> go.Figure:
    """Recorded GPU timings: speed-up of the block-sparse kernel over dense SDPA vs sequence length."""
    fig = go.Figure()
    for label in dict.fromkeys(r["mask"] for r in rows):
        rs = [r for r in rows if r["mask"] == label]
        fig.add_trace(go.Scatter(x=[r["seq_len"] for r in rs], y=[r["speedup_vs_dense"] for r in rs], mode="lines+markers",
                                 name=f"{label}", text=[f"density {r['density']:.2f}" for r in rs]))
    fig.update_xaxes(type="log", title_text="sequence length (tokens)")
    fig.update_yaxes(title_text="speed-up over the fastest dense SDPA")
    fig.update_layout(title="Block-sparse kernel with the gate's masks vs dense attention (GPU run)", height=380)
    return fig


def kernel_study_figure(run: dict) -> go.Figure:
    """The block-sparse kernel study (``companion.seer_attention.scale_kernel``): the kernel's speed-up over compiled
    FlexAttention on the same random masks against the kept share of causal blocks, one line per length; forward
    (its ``main`` stage) solid, forward + backward (its ``backward`` stage, when recorded) dashed."""
    fig = go.Figure()
    stages = (("forward", [r for r in (run.get("main") or {}).get("rows", []) if r.get("speedup_vs_flex")], "solid"),
              ("forward + backward", [r for r in run.get("backward") or [] if r.get("speedup_vs_flex")], "dash"))
    for what, rows, dash in stages:
        for n in sorted({r["n"] for r in rows}):
            rs = sorted((r for r in rows if r["n"] == n), key=lambda r: r["density"])
            fig.add_trace(go.Scatter(x=[r["density_actual"] for r in rs], y=[r["speedup_vs_flex"] for r in rs],
                                     mode="lines+markers", line=dict(dash=dash), name=f"{what}, N = {n // 1024}k"))
    fig.add_hline(y=1.0, line=dict(color="grey", dash="dot"), annotation_text="as fast as FlexAttention")
    fig.update_xaxes(type="log", title_text="kept share of the causal blocks")
    fig.update_yaxes(title_text="speed-up over compiled FlexAttention")
    fig.update_layout(title=f"Block-sparse kernel vs FlexAttention on the same masks ({run.get('device', 'GPU')})",
                      height=380)  # the stages' dates differ: the line above the figure gives each
    return fig
