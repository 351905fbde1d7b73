"""The angle-concentration explorer (pure update function, and its controls).

Four panels for one pool prompt, one layer and one checkpoint (the SFT start, or the GAIN run's policy
mid-training):

1. the cosine matrix ``cos θ_ij`` of the prompt's hidden states at that layer's ``mlp.up_proj`` input, the
   prefix and question blocks outlined (C_inter = mean of the question × prefix block, C_intra = mean of
   the question × question block off the diagonal) and the rows the released ``cos[p:-s][p:-s]`` /
   ``cos[p:-s][:p]`` slices select drawn over it (all columns, masked zeros included);
2. angle concentration ``C`` against ``‖∇_W L‖_F`` (that ``up_proj`` weight, the answer NLL) over the
   pool, with Spearman's ρ;
3. the sampler's ``p_t(r)`` over ranks at epoch ``t``;
4. μ_t / N and the GAIN run's held-out accuracy per epoch.

μ_t is *replayed*: the GAIN run's recorded per-epoch signals (mean reward, mean angle) pushed through
the update with the σ, n, α, β and adjustment range chosen here (:func:`~companion.gain_rl.sampler.replay_mu`);
the recorded run used the notebook's values, and a different schedule would have seen other signals.
"""

from __future__ import annotations

import numpy as np
import torch
from plotly.subplots import make_subplots

from companion.core import ParameterError, check_choice, check_float, check_int
from companion.gain_rl.angle import cosine_matrix, released_slices
from companion.gain_rl.policy import decode
from companion.gain_rl.sampler import gaussian_probs, replay_mu
from companion.viz import COLORS

__all__ = ["explorer_controls", "explorer_view"]

N_PROMPTS = 32  # prompts offered by the prompt control


def _color(i: int) -> str:
    palette = list(COLORS.values()) if isinstance(COLORS, dict) else list(COLORS)
    return palette[i % len(palette)]


def explorer_view(data: dict, prompt: int = 0, layer: int = -1, checkpoint: str = "initial",
                  sigma: float | None = None, n: float | None = None, alpha: float = 2.0, beta: float = 0.5,
                  adj_min: float | None = None, adj_max: float | None = None, epoch: int = 0):
    """``(figure, readout)``. ``data``: ``{"signals": {checkpoint: pool_signals(...)}, "prompts": [T] ids per
    prompt, "n_pool", "schedule" (the run's σ, n, adj_min, adj_max), "gain": {"signals": [(reward, ang)],
    "eval_acc": [...], "mu_used": [...]}}``."""
    signals = data["signals"]
    check_choice("checkpoint", checkpoint, list(signals))
    sig = signals[checkpoint]
    n_layers = len(sig["layers"])
    check_int("layer", layer, lo=-n_layers, hi=n_layers - 1)
    N = int(data["n_pool"])
    check_int("prompt", prompt, lo=0, hi=N - 1)
    sched = dict(data["schedule"])
    sigma = sched["sigma"] if sigma is None else sigma
    n = sched["n"] if n is None else n
    adj_max = sched["adj_max"] if adj_max is None else adj_max
    adj_min = sched["adj_min"] if adj_min is None else adj_min
    check_float("sigma", sigma, lo=0.0, lo_open=True)
    check_float("n", n, lo=0.0)
    check_float("alpha", alpha, lo=0.0)
    check_float("beta", beta, lo=0.0, hi=1.0)
    check_float("adj_min", adj_min)
    check_float("adj_max", adj_max)
    if adj_max < adj_min:
        raise ParameterError("adj_max", adj_max, f"a number >= adj_min = {adj_min}")
    recorded = data["gain"]["signals"]
    check_int("epoch", epoch, lo=0, hi=len(recorded))

    L = sig["layers"][layer]
    spans = sig["spans"]
    states = L["states"][prompt]
    T = states.shape[0]
    cos = cosine_matrix(torch.as_tensor(states)).numpy()
    chars = list(decode(data["prompts"][prompt]))
    labels = [f"{i}:{c if c != ' ' else '␣'}" for i, c in enumerate(chars)]

    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.12, vertical_spacing=0.16, subplot_titles=(
        f"cos θ_ij at {L['name']} ({checkpoint})",
        f"C vs ‖∇W L‖ over {N} prompts, Spearman ρ = {L['spearman']:+.2f}",
        f"p_t(r) at epoch {epoch}", "μ_t / N (replayed) and held-out accuracy"))
    fig.add_heatmap(z=cos, x=np.arange(T), y=np.arange(T), zmin=-1, zmax=1, colorscale="RdBu", reversescale=True,
                    colorbar=dict(len=0.42, y=0.79, title="cos"), row=1, col=1, name="cos θ")
    (p0, p1), (q0, q1) = spans["prefix"], spans["question"]

    def box(x0, x1, y0, y1, color, dash, name):
        xs = [x0 - .5, x1 - .5, x1 - .5, x0 - .5, x0 - .5]
        ys = [y0 - .5, y0 - .5, y1 - .5, y1 - .5, y0 - .5]
        fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(color=color, dash=dash, width=2), name=name,
                        row=1, col=1)

    ticks = dict(tickmode="array", tickvals=list(range(T)), ticktext=labels, tickfont=dict(size=9))
    fig.update_xaxes(**ticks, row=1, col=1)
    fig.update_yaxes(**ticks, autorange="reversed", row=1, col=1)
    box(q0, q1, q0, q1, "black", "solid", "C_intra block (Q×Q)")
    box(p0, p1, q0, q1, "#2ca02c", "solid", "C_inter block (Q×P)")
    rs = released_slices(T, p1, T - q1)
    if rs["intra"][0] < rs["intra"][1]:
        box(0, T, *rs["intra"], "#d62728", "dash", "released cos[p:-s][p:-s]")
    if rs["inter"][0] < rs["inter"][1]:
        box(0, T, *rs["inter"], "#ff7f0e", "dash", "released cos[p:-s][:p]")

    fig.add_scatter(x=L["C"], y=L["grad_norm"], mode="markers", marker=dict(size=5, color=_color(0), opacity=0.5),
                    name="pool prompts", row=1, col=2)
    fig.add_scatter(x=[L["C"][prompt]], y=[L["grad_norm"][prompt]], mode="markers",
                    marker=dict(size=13, color="#d62728", symbol="star"), name="this prompt", row=1, col=2)
    fig.update_xaxes(title_text="C = C_intra + w·C_inter", row=1, col=2)
    fig.update_yaxes(title_text="‖∇_W L‖_F (up_proj)", type="log", row=1, col=2)

    sch = dict(n=n, alpha=alpha, beta=beta, gamma=None, adj_min=adj_min, adj_max=adj_max,
               reward_scale=sched.get("reward_scale", 1.0))
    mus = replay_mu(recorded, N, **sch)
    p = gaussian_probs(N, float(mus[epoch]), sigma)
    fig.add_scatter(x=np.arange(N), y=p, mode="lines", line=dict(color=_color(1)), name="p_t(r)", row=2, col=1)
    fig.add_vline(x=float(mus[epoch]), line_dash="dot", row=2, col=1)
    fig.update_xaxes(title_text="rank r (0 = most concentrated)", row=2, col=1)
    fig.update_yaxes(title_text="probability", row=2, col=1)

    ep = np.arange(len(mus))
    fig.add_scatter(x=ep, y=mus / N, mode="lines+markers", name="μ_t / N (these settings)", row=2, col=2,
                    line=dict(color=_color(1)))
    rec_mu = data["gain"].get("mu_used", [])
    if rec_mu:
        fig.add_scatter(x=np.arange(len(rec_mu)), y=np.asarray(rec_mu) / N, mode="lines", name="μ_t / N (recorded run)",
                        line=dict(color=_color(1), dash="dash"), row=2, col=2)
    acc = data["gain"]["eval_acc"]
    fig.add_scatter(x=np.arange(len(acc)), y=acc, mode="lines+markers", name="held-out accuracy (GAIN run)",
                    line=dict(color=_color(2)), row=2, col=2)
    fig.add_vline(x=epoch, line_dash="dot", row=2, col=2)
    fig.update_xaxes(title_text="epoch t", row=2, col=2)
    fig.update_layout(height=760, legend=dict(orientation="h", y=-0.08), margin=dict(t=60))

    first, second = L["released_first"][prompt], L["released_second"][prompt]
    readout = (f"prompt {prompt} «{''.join(chars)}»: C_intra = {L['C_intra'][prompt]:+.3f}, "
               f"C_inter = {L['C_inter'][prompt]:+.3f}, C = {L['C'][prompt]:+.3f}, ‖∇W L‖ = {L['grad_norm'][prompt]:.3g}; "
               f"released terms: cos[p:-s][p:-s].mean() = {first:.3f}"
               + (" (empty slice → NaN)" if np.isnan(first) else "") + f", cos[p:-s][:p].mean() = {second:.3f}; "
               f"epoch {epoch}: μ_t = {mus[epoch]:.1f} of {N} (recorded signals replayed)")
    return fig, readout


def explorer_controls(data: dict) -> dict:
    import ipywidgets as w

    sched = data["schedule"]
    N = int(data["n_pool"])
    n_layers = len(next(iter(data["signals"].values()))["layers"])
    E = len(data["gain"]["signals"])
    opts = [(f"{i}: {decode(data['prompts'][i])}", i) for i in range(min(N, N_PROMPTS))]
    return {
        "prompt": w.Dropdown(options=opts, value=0, description="prompt"),
        "layer": w.Dropdown(options=[(f"layer {i}", i) for i in range(n_layers)], value=n_layers - 1, description="layer"),
        "checkpoint": w.Dropdown(options=list(data["signals"]), value=list(data["signals"])[0], description="checkpoint"),
        "sigma": w.FloatLogSlider(value=sched["sigma"], base=10, min=0, max=np.log10(max(10 * N, 10)), step=0.05,
                                  description="σ"),
        "n": w.FloatSlider(value=sched["n"], min=0.0, max=float(N / 4), step=1.0, description="n"),
        "alpha": w.FloatSlider(value=2.0, min=0.0, max=10.0, step=0.25, description="α (= γ)"),
        "beta": w.FloatSlider(value=0.5, min=0.0, max=1.0, step=0.05, description="β"),
        "adj_min": w.FloatSlider(value=float(sched["adj_min"]), min=-float(N / 4), max=0.0, step=1.0,
                                 description="adj_min"),
        "adj_max": w.FloatSlider(value=float(sched["adj_max"]), min=0.0, max=float(N / 2), step=1.0,
                                 description="adj_max"),
        "epoch": w.IntSlider(value=0, min=0, max=E, description="epoch t"),
    }
