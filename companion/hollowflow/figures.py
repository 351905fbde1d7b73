"""The notebook's figures for paper 13 (plotly): the idea, HollowNet on an MLP, line-graph pruning, the
cost scaling, the toy flow's log-weights and the recorded GPU results."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

import companion.viz  # noqa: F401  (theme)
from companion.hollowflow.divergence import jacobian
from companion.hollowflow.experiments import block_mask, paper_config
from companion.hollowflow.graph import build_graph
from companion.hollowflow.hollownet import HollowMLP
from companion.hollowflow.nobgnn import NoBGNN


def _heat(fig, z, col, lim, show=False):
    fig.add_trace(go.Heatmap(z=z, colorscale="RdBu", zmid=0, zmin=-lim, zmax=lim, showscale=show), row=1, col=col)
    fig.update_yaxes(autorange="reversed", row=1, col=col)


def idea_figure(n: int = 9, k: int = 3, steps: int = 3, seed: int = 0) -> go.Figure:
    """J_b = J_c + J_τ for a NoBGNN: the full Jacobian, the block-hollow part and the block-diagonal part."""
    x = paper_config(n, 3, seed)
    torch.manual_seed(seed)
    m = NoBGNN(hidden=16, steps=steps, k=k).double()
    g = m.graph(x)
    J = jacobian(m, x, 0.5, graph=g).numpy()
    Jt = jacobian(m, x, 0.5, graph=g, detach_h=True).numpy()
    lim = float(np.abs(J).max())
    fig = make_subplots(1, 3, subplot_titles=("J_b = ∂b/∂x", "J_c = J_b − J_τ (block-hollow)", "J_τ (h detached: block-diagonal)"))
    for c, z in enumerate((J, J - Jt, Jt), 1):
        _heat(fig, z, c, lim, show=c == 3)
    mask = block_mask(n, 3).numpy()
    fig.update_layout(height=380, title=f"n = {n}, d = 3, {k}-NN, {steps} line-graph steps: J_c vanishes on the diagonal "
                      f"blocks (max {np.abs((J - Jt)[mask]).max():.0e}), so tr J_b = tr J_τ = Σ_c v_cᵀ J_τ v_c")
    return fig


def hollownet_figure(D: int = 6, seed: int = 0) -> go.Figure:
    """HollowNet on an MLP: J = J_diag + J_hollow; with h detached one VJP gives the diagonal."""
    torch.manual_seed(seed)
    m = HollowMLP(D=D).double()
    x = torch.randn(1, D, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(lambda y: m(y[None])[0], x[0]).numpy()
    Jd = torch.autograd.functional.jacobian(lambda y: m(y[None], detach_h=True)[0], x[0]).numpy()
    div1 = float(m.divergence(x)[0])
    lim = float(np.abs(J).max())
    fig = make_subplots(1, 2, subplot_titles=("∂b/∂x (dense)", "∂τ/∂x with h_i = c(x_¬i) detached (diagonal)"))
    _heat(fig, J, 1, lim)
    _heat(fig, Jd, 2, lim, show=True)
    fig.update_layout(height=340, title=f"HollowNet, D = {D}: tr J = {np.trace(J):.6f}, one VJP with h detached = {div1:.6f}")
    return fig


def pruning_figure(n: int = 55, ks=(2, 4, 7, 12), steps: int = 4, seed: int = 0) -> go.Figure:
    """Remaining line edges per step for several k (Gaussian coordinates; the paper's Fig. 5 analogue)."""
    x = torch.tensor(np.random.default_rng(seed).normal(size=(n, 3)))
    fig = go.Figure()
    for k in ks:
        g = build_graph(x, k, steps)
        fig.add_scatter(x=list(range(1, steps + 1)), y=g.counts(), mode="lines+markers", name=f"k = {k}")
    fig.update_layout(title=f"Line edges used at each message-passing step after the backtracking removal (n = {n})",
                      xaxis_title="step t", yaxis_title="line edges |E^lg_t|", yaxis_type="log", height=360)
    return fig


def cost_figure(cost: dict) -> go.Figure:
    n = np.asarray(cost["n"], float)
    fig = go.Figure()
    for key, name, slope in (("brute_s", "fully connected, n·d VJPs", cost["slope_brute"]),
                             ("hollow_s", f"HollowFlow k = {cost['k']}, d VJPs", cost["slope_hollow"])):
        fig.add_scatter(x=n, y=cost[key], mode="lines+markers", name=f"{name} (slope {slope:.2f})")
    ref = cost["brute_s"][-1] * (n / n[-1]) ** 3
    fig.add_scatter(x=n, y=ref, mode="lines", line=dict(dash="dot", color="#999999"), name="∝ n³ (theory, brute force)")
    fig.update_layout(title="CPU seconds per velocity + exact divergence evaluation (one sample)",
                      xaxis_title="particles n", yaxis_title="CPU seconds (process time)", xaxis_type="log",
                      yaxis_type="log", height=380)
    return fig


def toy_figure(toy: dict) -> go.Figure:
    fig = go.Figure()
    for name in ("hollow", "baseline"):
        if name not in toy:
            continue
        lw = np.asarray(toy[name]["log_w"])
        fig.add_histogram(x=lw - lw.max(), name=f"{name}: ESS {100 * toy[name]['ess']:.2f}%, ESS_rem {100 * toy[name]['ess_rem']:.2f}%",
                          opacity=0.6, nbinsx=40)
    fig.update_layout(barmode="overlay", height=340, xaxis_title="log w − max log w", yaxis_title="samples",
                      title=f"{toy['system']} toy: importance log-weights of {toy['n_samples']} flow samples "
                            f"(RK4, {toy['ode_steps']} steps)")
    return fig


def gpu_figure(gpu: dict) -> go.Figure:
    """ms per RK4 step with likelihood against n, from the recorded run's ``likelihood_step`` stage."""
    rows = gpu["likelihood_step"]["rows"]
    fig = go.Figure()
    ks = sorted({r["k_label"] for r in rows})
    base = {r["n"]: r["baseline_ms"] for r in rows}
    fig.add_scatter(x=sorted(base), y=[base[n] for n in sorted(base)], mode="lines+markers", name="fully connected, exact")
    for kl in ks:
        sel = [r for r in rows if r["k_label"] == kl]
        fig.add_scatter(x=[r["n"] for r in sel], y=[r["hollow_ms"] for r in sel], mode="lines+markers", name=f"HollowFlow {kl}")
    fig.update_layout(title=f"ms per RK4 step with likelihood, batch {gpu['likelihood_step']['batch']} "
                            f"({gpu.get('device')}, {gpu.get('date')})",
                      xaxis_title="particles n", yaxis_title="ms", xaxis_type="log", yaxis_type="log", height=380)
    return fig


def gpu_toy_figure(gpu: dict | None) -> go.Figure:
    """Effective samples (ESS·N) of the recorded toy flows with their 68 % bootstrap intervals, per system and model,
    against the floor of ``claims.ESS_FLOOR`` below which no EffSU is compared; a system not recorded with the
    current recipe is named in the title as not recorded."""
    from companion.hollowflow.claims import ESS_FLOOR, toy_missing

    fig = go.Figure()
    missing = []
    for name, label in (("hollow", "hollow NoBGNN"), ("baseline", "fully connected")):
        xs, ys, lo, hi, text = [], [], [], [], []
        for system in ("LJ13", "LJ55"):
            why = "no GPU run recorded" if not gpu else toy_missing(gpu, system)
            if why:
                if name == "hollow":
                    missing.append(f"{system}: {why}")
                continue
            t = gpu[f"toy_{system}"]
            r = t[name]
            N = r["samples"]
            xs.append(system)
            ys.append(r["ess"] * N)
            lo.append(r["ess"] * N - r["ess_ci"][0] * N)
            hi.append(r["ess_ci"][1] * N - r["ess"] * N)
            text.append(f"{r['ess'] * N:.1f} of {N}, {r['train_seconds']:.0f} s training")
        fig.add_bar(x=xs, y=ys, name=label, text=text, textposition="outside",
                    error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo))
    fig.add_hline(y=ESS_FLOOR, line_dash="dot", line_color="#999999",
                  annotation_text=f"floor: {ESS_FLOOR:g} effective samples (no EffSU below it)")
    title = "Trained toy flows: effective samples with 68% bootstrap intervals"
    if missing:
        title += "<br><sup>not recorded: " + "; ".join(missing) + "</sup>"
    fig.update_layout(title=title, barmode="group", yaxis_title="effective samples (ESS·N)", yaxis_type="log",
                      height=400)
    return fig
