"""Figures of paper 12's notebook (plotly). Each ``add_*`` draws into a subplot so the explorer reuses them."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.lorasuite.claims import best_arm
from companion.lorasuite.scale import missing, seeds_done
from companion.viz import COLORS

_PALETTE = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)


def _c(i: int) -> str:
    return _PALETTE[i % len(_PALETTE)]


def pipeline_figure() -> go.Figure:
    """The idea: the old adapter reaches the new model through maps computed from known weights, then LFT."""
    steps = [("old LoRA ΔW = BA", "trained on the old model"), ("W_h = E_o⁺ E_n", "shared-token embeddings"),
             ("layer map", "CKA + DP (Alg. 1)"), ("head map", "cos(W_QK ‖ W_VO) + Hungarian"),
             ("ΔW_new per head", "→ SVD → rank r"), ("LFT", "100 samples, no warm-up, high lr")]
    fig = go.Figure()
    for i, (title, sub) in enumerate(steps):
        x0 = i * 1.25
        fig.add_shape(type="rect", x0=x0, x1=x0 + 1.0, y0=0, y1=1, line=dict(color=_c(i)), fillcolor=_c(i), opacity=0.18)
        fig.add_annotation(x=x0 + 0.5, y=0.64, text=f"<b>{title}</b>", showarrow=False, font=dict(size=12))
        fig.add_annotation(x=x0 + 0.5, y=0.33, text=sub, showarrow=False, font=dict(size=10))
        if i:
            fig.add_annotation(x=x0, y=0.5, ax=x0 - 0.25, ay=0.5, xref="x", yref="y", axref="x", ayref="y",
                               showarrow=True, arrowhead=2, text="")
    fig.add_annotation(x=3.1, y=-0.25, showarrow=False, font=dict(size=11),
                       text="known parameters only (embeddings, W_Q, W_K, W_V, W_O, layer outputs on a few texts) "
                            "· then a short fine-tune on the new model")
    fig.update_xaxes(visible=False, range=[-0.1, 7.4])
    fig.update_yaxes(visible=False, range=[-0.45, 1.1])
    fig.update_layout(title="LoRASuite: carry the old adapter across the upgrade, then fine-tune briefly", height=260)
    return fig


def wh_figure(fx: dict, wh: dict, max_points: int = 3000) -> go.Figure:
    """E_o[c] W_h against E_n[c], entry by entry, over the shared tokens."""
    io = [fx["vocab_old"].stoi[t] for t in wh["shared"]]
    inn = [fx["vocab_new"].stoi[t] for t in wh["shared"]]
    pred = (fx["old_model"].model.embed_tokens.weight.detach()[io] @ wh["W_h"]).flatten().numpy()
    true = fx["new_model"].model.embed_tokens.weight.detach()[inn].flatten().numpy()
    idx = np.random.default_rng(0).permutation(len(pred))[:max_points]
    lim = float(np.abs(true).max())
    fig = go.Figure()
    fig.add_scatter(x=true[idx], y=pred[idx], mode="markers", marker=dict(size=3, opacity=0.4, color=_c(0)),
                    name="embedding entries")
    fig.add_scatter(x=[-lim, lim], y=[-lim, lim], mode="lines", line=dict(dash="dot", color="#555"), name="y = x")
    fig.update_layout(title=f"W_h fit over {wh['n_common']} shared tokens (d {wh['W_h'].shape[0]} → "
                            f"{wh['W_h'].shape[1]}): R² = {wh['r2']:.3f}",
                      xaxis_title="new embedding E_n[c] entry", yaxis_title="E_o[c] W_h entry", height=380)
    return fig


def add_cka(fig, S, lm: dict, truth=None, row=None, col=None, showscale=True):
    """Heat map of S (old × new) with the map's path, the allowed offset band and the known truth."""
    rc = dict(row=row, col=col) if row else {}
    lo, ln = S.shape
    fig.add_heatmap(z=S, x=list(range(ln)), y=list(range(lo)), colorscale="Viridis", zmin=0, zmax=1,
                    colorbar=dict(title="CKA", len=0.8, x=0.3 if row else None) if showscale else None,
                    showscale=showscale, hovertemplate="old %{y} · new %{x}: CKA %{z:.3f}<extra></extra>", **rc)
    off = lm["offset"]
    if not lm["transposed"]:
        xs = np.arange(lo)
        fig.add_scatter(x=np.r_[xs - 0.5, xs[::-1] + off + 0.5], y=np.r_[xs, xs[::-1]], fill="toself", mode="lines",
                        line=dict(color="white", width=1, dash="dot"), fillcolor="rgba(255,255,255,0.08)",
                        name=f"allowed: 0 ≤ m(i) − i ≤ {off}", hoverinfo="skip", **rc)
    a, b = zip(*lm["pairs"])
    fig.add_scatter(x=list(b), y=list(a), mode="lines+markers", line=dict(color="#ff4d4d", width=3),
                    marker=dict(size=11, symbol="x"), name=f"{lm['rule']} map (Σ = {lm['total']:.3f})", **rc)
    if truth:
        ta, tb = zip(*truth)
        fig.add_scatter(x=list(tb), y=list(ta), mode="markers", marker=dict(size=17, symbol="circle-open", color="white",
                                                                             line=dict(width=2)),
                        name="upgrade's construction", **rc)
    return fig


def cka_figure(S, lm: dict, truth=None) -> go.Figure:
    fig = add_cka(go.Figure(), S, lm, truth)
    fig.update_layout(title="Minibatch CKA between old and new layers, with Alg. 1's map", xaxis_title="new layer j",
                      yaxis_title="old layer i", height=420, legend=dict(orientation="h", y=-0.2))
    return fig


def add_heads(fig, sim, pairs, truth_slots=None, row=None, col=None, showscale=True):
    rc = dict(row=row, col=col) if row else {}
    sim = np.asarray(sim)
    fig.add_heatmap(z=sim, colorscale="RdBu", zmid=0, showscale=showscale,
                    colorbar=dict(title="cos", len=0.8, x=0.64 if row else None) if showscale else None,
                    hovertemplate="old head %{y} · new head %{x}: cos %{z:.3f}<extra></extra>", **rc)
    a, b = zip(*pairs)
    fig.add_scatter(x=list(b), y=list(a), mode="markers", marker=dict(size=12, symbol="x", color="black"),
                    name="Hungarian assignment", **rc)
    if truth_slots is not None:
        fig.add_scatter(x=list(truth_slots), y=list(range(len(truth_slots))), mode="markers",
                        marker=dict(size=18, symbol="square-open", color="#2ca02c", line=dict(width=2)),
                        name="upgrade's head slots", **rc)
    return fig


def heads_figure(sim, pairs, layer_pair, truth_slots=None) -> go.Figure:
    fig = add_heads(go.Figure(), sim, pairs, truth_slots)
    fig.update_layout(title=f"Head similarity, old layer {layer_pair[0]} → new layer {layer_pair[1]}",
                      xaxis_title="new head b", yaxis_title="old head a", height=380)
    return fig


def transfer_figure(suite: dict) -> go.Figure:
    """Per transferred module: how much the per-head formulas rescale ΔW (‖ΔW_new‖ / ‖ΔW_old‖), and Alg. 2's
    distance from the code's form; the title gives the largest rank-r SVD error."""
    keys = sorted(suite["norm_ratio"])
    labels = [f"{layer}:{m.split('_')[0]}" for layer, m in keys]
    tail = max(suite["tail"].values()) if suite["tail"] else float("nan")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("‖ΔW_new‖ / ‖ΔW_old‖ (1 = size kept)",
                                                        "‖ΔW_alg2 − ΔW_code‖ / ‖ΔW_code‖"))
    fig.add_bar(x=labels, y=[suite["norm_ratio"][k] for k in keys], marker_color=_c(0), name="norm ratio", row=1, col=1)
    fig.add_hline(y=1.0, line_dash="dot", row=1, col=1)
    diffs = [(f"{b}:{m}", v) for (_, b), d in sorted(suite["alg2_vs_code"].items()) for m, v in d.items()]
    if diffs:
        fig.add_bar(x=[d[0] for d in diffs], y=[d[1] for d in diffs], marker_color=_c(1), name="Alg. 2 vs code", row=1, col=2)
    fig.update_layout(title=f"The transferred deltas (largest relative rank-r SVD error: {tail:.1e})", height=360,
                      showlegend=False)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_xaxes(title_text="new layer : module", row=1, col=1)
    fig.update_xaxes(title_text="new layer : module", row=1, col=2)
    return fig


def add_curves(fig, res: dict, row=None, col=None):
    rc = dict(row=row, col=col) if row else {}
    v = res["val"]
    for i, (lr, hs) in enumerate(sorted(res["lft"].items())):
        h = hs[0]
        fig.add_scatter(x=h["steps"], y=h["val"], mode="lines+markers", line=dict(color=_c(i)),
                        name=f"LoRASuite + LFT, lr {lr:g}", **rc)
    lft_lrs = sorted(res["lft"])
    for lr, hs in sorted(res["scratch"].items()):
        h = hs[0]
        i = lft_lrs.index(lr) if lr in lft_lrs else len(lft_lrs)
        fig.add_scatter(x=h["steps"], y=h["val"], mode="lines", line=dict(color=_c(i), dash="dash"),
                        name=f"LoRA({res['sizes']['n_samples']}) from scratch, lr {lr:g}", **rc)
    steps = res["sizes"]["steps"]
    fig.add_scatter(x=[0, steps], y=[v["full_lora"]] * 2, mode="lines", line=dict(color="black", width=2),
                    name=f"LoRA(full), {res['sizes']['full_steps']} steps", **rc)
    fig.add_scatter(x=[0, steps], y=[v["new_base"]] * 2, mode="lines", line=dict(color="#888", dash="dot"),
                    name="new model, no adapter", **rc)
    return fig


def lft_figure(res: dict) -> go.Figure:
    fig = add_curves(go.Figure(), res)
    fig.update_layout(title="Validation loss during LFT (from the transferred adapter) and LoRA from scratch",
                      xaxis_title="training step", yaxis_title="val loss (nats/char)", height=420)
    return fig


def gpu_figure(gpu) -> go.Figure:
    """The recorded GPU study of the grown upgrade, one trace per finished seed stage: validation loss of each arm
    (the old model alone and with its LoRA, in the old vocabulary; the new model alone, the transferred adapter
    without and with LFT, LoRA(n) from scratch, LoRA(full)), and the seconds and peak memory of transfer + LFT,
    LoRA(n) and LoRA(full). Without such a record: a figure that says so, and why."""
    seeds = seeds_done(gpu)
    if not seeds:
        fig = go.Figure()
        fig.add_annotation(text=f"GPU study of the grown upgrade not recorded:<br>{missing(gpu, 'seed0') or 'no seed finished'}",
                           x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.update_layout(title="Recorded GPU run: none of the grown upgrade", height=260)
        return fig
    n = seeds[0]["n_samples"]
    arms = ["old alone", "old + its LoRA", "new alone", "transferred", f"+ LFT({n})", f"LoRA({n})", "LoRA(full)"]
    costs = [f"transfer + LFT({n})", f"LoRA({n})", "LoRA(full)"]
    fig = make_subplots(rows=1, cols=3, column_widths=[0.56, 0.22, 0.22],
                        subplot_titles=("val loss per arm (old: old vocabulary)", "seconds", "peak memory (GB)"))
    for i, e in enumerate(seeds):
        lft, scr, full = best_arm(e["lft"]), best_arm(e["scratch"]), e.get("full")
        loss = [e["old_base"], e["old_lora"]["val"], e["new_base"], e["transferred"], lft["val"], scr["val"],
                full["val"] if full else None]
        kw = dict(legendgroup=f"s{i}", marker_color=_c(i))
        fig.add_scatter(x=arms, y=loss, mode="markers+lines", line=dict(color=_c(i), width=1),
                        name=f"seed {e['seed']}", row=1, col=1, **kw)
        for col, key in ((2, "seconds"), (3, "peak_gb")):
            fig.add_bar(x=costs, y=[lft[key], scr[key], full[key] if full else None], showlegend=False, row=1, col=col, **kw)
    fig.update_yaxes(title_text="val loss (nats/token)", row=1, col=1)
    fig.update_layout(title=f"Recorded GPU run: {gpu.get('device', '?')}, {gpu.get('date', '?')}, "
                            f"{len(seeds)} seed(s) of the adapters", height=440, barmode="group")
    return fig

