"""The notebook's figures besides the explorer (plotly, the project theme)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.gain_rl.angle import capture_inputs, grad_norm_sq
from companion.gain_rl.grpo import answer_nll
from companion.gain_rl.policy import Problems, decode
from companion.viz import COLORS

__all__ = ["comparison_figure", "identity_check", "identity_figure", "metric_figure", "schedule_figure"]

SAMPLER_COLORS = {"uniform": COLORS[0], "GAIN": COLORS[3], "filter": COLORS[2]}


def identity_check(model, problems: Problems, layer: int = -1) -> dict:
    """For each problem: ``‖∇_W L‖_F²`` of ``layers.<layer>.mlp.up_proj`` by autograd (the weight's ``.grad``
    after that problem's own backward pass) and by ``Σ_{i,j}(δ_i·δ_j)(x_i·x_j)``; the pair terms of the first."""
    name = f"layers.{layer % len(model.layers)}.mlp.up_proj"
    weight = dict(model.named_modules())[name].weight
    model.eval().requires_grad_(True)
    auto, ident, pairs = [], [], None
    for i in range(len(problems)):
        one = problems.subset([i])
        with capture_inputs(model, name, keep_grad=True) as store:
            loss = answer_nll(model, one).sum()
            model.zero_grad()
            loss.backward()
        x, d = store[name].detach()[0].double(), store[name + ":out"].grad[0].double()
        auto.append(float((weight.grad.double() ** 2).sum()))
        ident.append(float(grad_norm_sq(x, d)))
        if pairs is None:
            pairs = ((d @ d.T) * (x @ x.T)).numpy()
    model.zero_grad()
    auto, ident = np.array(auto), np.array(ident)
    return {"autograd": auto, "identity": ident, "rel_err": np.abs(auto - ident) / np.maximum(auto, 1e-30),
            "pairs": pairs, "ids": problems.prompts[0].tolist() + problems.targets[0].tolist(), "layer": name}


def identity_figure(check: dict) -> go.Figure:
    """Left: the pair terms (δ_i·δ_j)(x_i·x_j) of one problem (they sum to ‖∇_W L‖²). Right: identity vs autograd."""
    ids = check["ids"]
    labels = [f"{i}:{c if c != ' ' else '␣'}" for i, c in enumerate(decode(ids[:check["pairs"].shape[0]]))]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.55, 0.45], horizontal_spacing=0.14, subplot_titles=(
        f"(δ_i·δ_j)(x_i·x_j) at {check['layer']}, one problem (sum = {check['identity'][0]:.3g})",
        f"Σ_ij (δ_i·δ_j)(x_i·x_j) vs autograd, {len(check['autograd'])} problems "
        f"(max rel. error {check['rel_err'].max():.1e})"))
    z = check["pairs"]
    lim = float(np.abs(z).max()) or 1.0
    fig.add_heatmap(z=z, x=np.arange(len(labels)), y=np.arange(len(labels)), zmid=0, zmin=-lim, zmax=lim,
                    colorscale="RdBu", reversescale=True, colorbar=dict(x=0.5, len=0.9), row=1, col=1)
    ticks = dict(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels, tickfont=dict(size=8))
    fig.update_xaxes(**ticks, row=1, col=1)
    fig.update_yaxes(**ticks, autorange="reversed", row=1, col=1)
    a = check["autograd"]
    fig.add_scatter(x=a, y=check["identity"], mode="markers", name="problems", row=1, col=2)
    fig.add_scatter(x=[a.min(), a.max()], y=[a.min(), a.max()], mode="lines", line=dict(dash="dot", color="gray"),
                    name="y = x", row=1, col=2)
    fig.update_xaxes(title_text="‖∇_W L‖_F² (autograd)", type="log", row=1, col=2)
    fig.update_yaxes(title_text="identity", type="log", row=1, col=2)
    fig.update_layout(height=430, legend=dict(orientation="h", y=-0.15))
    return fig


def metric_figure(signals: dict, layer: int = -1) -> go.Figure:
    """Our C (2-D blocks) against the released formula's finite term, over the pool, at one layer."""
    L = signals["layers"][layer]
    first_nan = float(np.isnan(L["released_first"]).mean())
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12, subplot_titles=(
        "C_intra vs C_inter (2-D blocks)",
        f"C vs the released cos[p:-s][:p].mean() (first term NaN for {100 * first_nan:.0f}% of prompts)"))
    fig.add_scatter(x=L["C_inter"], y=L["C_intra"], mode="markers", marker=dict(size=5, opacity=0.6, color=L["C"],
                    colorscale="Viridis", showscale=False), name="prompts", row=1, col=1)
    fig.update_xaxes(title_text="C_inter (question × prefix)", row=1, col=1)
    fig.update_yaxes(title_text="C_intra (question × question)", row=1, col=1)
    fig.add_scatter(x=L["C"], y=L["released_second"], mode="markers", marker=dict(size=5, opacity=0.6),
                    name="released second term", row=1, col=2)
    fig.update_xaxes(title_text="C = C_intra + w·C_inter", row=1, col=2)
    fig.update_yaxes(title_text="released cos[p:-s][:p].mean()", row=1, col=2)
    fig.update_layout(height=400, showlegend=False, title=f"Angle metric at {L['name']}")
    return fig


def comparison_figure(summary: dict, target: float, title: str) -> go.Figure:
    """Held-out greedy accuracy per epoch for each sampler: seed mean, min-max band, the target."""
    fig = go.Figure()
    for kind, s in summary.items():
        c = s["curves"]
        x = np.arange(c.shape[1])
        color = SAMPLER_COLORS.get(kind, COLORS[4])
        if len(c) > 1:
            fig.add_scatter(x=np.r_[x, x[::-1]], y=np.r_[c.max(0), c.min(0)[::-1]], fill="toself", line=dict(width=0),
                            fillcolor=color, opacity=0.18, showlegend=False, hoverinfo="skip")
        fig.add_scatter(x=x, y=c.mean(0), mode="lines+markers", line=dict(color=color), name=f"{kind} (mean of {len(c)})")
    fig.add_hline(y=target, line_dash="dot", annotation_text=f"target {target:.2f}")
    fig.update_layout(title=title, xaxis_title="epoch (GRPO update round)", yaxis_title="held-out greedy accuracy",
                      height=400)
    return fig


def schedule_figure(gpu: dict | None) -> go.Figure:
    """The recorded GPU study's schedule, per seed. Left: GAIN's μ after each update and every run's trained
    prompts' mean angle rank, both as a share of the last rank (0 = most concentrated). Right: epochs to the
    target per seed and sampler (open marker: not reached, drawn at the run's epochs + 1). Without a recorded
    ``grpo`` stage holding them, a figure that says so."""
    g = (gpu or {}).get("grpo") or {}
    runs = g.get("runs", {})
    if not runs or not all("mean_rank" in r for rs in runs.values() for r in rs):
        fig = go.Figure()
        fig.add_annotation(text="μ per epoch and the trained prompts' angle rank are not recorded: run "
                                "python -m companion.bench gain_rl on one GPU", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        fig.update_layout(height=200, xaxis_visible=False, yaxis_visible=False)
        return fig
    last = gpu["profile"]["pool"] - 1
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.1, subplot_titles=(
        "μ (GAIN) and the trained prompts' mean angle rank, share of the last rank",
        f"epochs to held-out accuracy {g['target']:.3f}, per seed"))
    for kind, rs in runs.items():
        color = SAMPLER_COLORS.get(kind, COLORS[4])
        for k, r in enumerate(rs):
            x = np.arange(1, len(r["mean_rank"]) + 1)
            fig.add_scatter(x=x, y=np.asarray(r["mean_rank"]) / last, mode="lines", opacity=0.5,
                            line=dict(color=color, width=1), name=f"{kind} mean rank", legendgroup=kind,
                            showlegend=k == 0, row=1, col=1)
            if kind == "GAIN":
                fig.add_scatter(x=x, y=np.asarray(r["mu_after"]) / last, mode="lines", line=dict(color=color, width=3),
                                name="GAIN μ", legendgroup="mu", showlegend=k == 0, row=1, col=1)
        steps = g["summary"][kind]["epochs_to_target"]
        bound = [len(r["eval_acc"]) for r in rs]  # epochs + 1
        y = [b if s is None else s for s, b in zip(steps, bound)]
        fig.add_scatter(x=[kind] * len(y), y=y, mode="markers", showlegend=False, row=1, col=2,
                        marker=dict(color=color, size=11, symbol=["circle-open" if s is None else "circle" for s in steps]),
                        text=[f"seed {k}" for k in range(len(y))])
    fig.add_hline(y=1.0, line_dash="dot", row=1, col=1)
    fig.update_xaxes(title_text="epoch", row=1, col=1)
    fig.update_yaxes(title_text="share of the last rank", range=[0, 1.05], row=1, col=1)
    fig.update_yaxes(title_text="epochs", rangemode="tozero", row=1, col=2)
    fig.update_layout(height=420, legend=dict(orientation="h", y=-0.18))
    return fig
