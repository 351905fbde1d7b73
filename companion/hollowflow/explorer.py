"""The hollow-graph explorer of paper 13 (plotly; ipywidgets only in :func:`explorer_controls`).

Left: the particles and the symmetrised kNN graph in 3-D. Every directed edge (i, l) is drawn from x_i
towards x_l and coloured by whether its line state h^t_il depends on x_j for the chosen particle j
(B(t)[(i, l), j]); the edges (i, j) into j are drawn thick -- with pruning none of them is ever orange.
The line edges removed before step t are drawn as dotted red links between the sender's and the
receiver's edge midpoints. Right: the n·d × n·d Jacobian ∂b/∂x with the d×d diagonal blocks outlined; the
title puts the brute-force trace next to the d-VJP (hollow) divergence. Pruning off: the blocks leak and
the two numbers part.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from companion.core import check_bool, check_int
from companion.hollowflow.divergence import divergence_hollow, jacobian
from companion.hollowflow.experiments import paper_config
from companion.hollowflow.nobgnn import NoBGNN
import companion.viz  # noqa: F401  (the theme and the mode bar)

N_RANGE = (4, 16)
STEPS_RANGE = (1, 4)


@dataclass(frozen=True)
class ExplorerData:
    """Seed of the coordinates (``default_rng(seed).normal``) and of the model weights; hidden width."""

    seed: int = 0
    hidden: int = 16


@lru_cache(maxsize=32)
def _state(seed, hidden, n, k, steps, prune):
    x = paper_config(n, 3, seed)
    torch.manual_seed(seed)
    m = NoBGNN(d=3, hidden=hidden, steps=steps, k=k, prune=prune).double()
    g = m.graph(x, keep_B=True)
    J = jacobian(m, x, 0.5, graph=g).numpy()
    _, div = divergence_hollow(m, x, 0.5, graph=g)
    return x.numpy(), g, J, float(np.trace(J)), float(div[0])


def explorer_view(data: ExplorerData, n: int = 9, k: int = 3, steps: int = 3, step: int = 3, particle: int = 0,
                  prune: bool = True):
    """Figure and readout for one setting (pure: everything is seeded by ``data.seed``).

    ``step`` t ∈ [0, steps] shows B(t) (the state after t message-passing steps) and, for t ≥ 1, the line
    edges removed before step t."""
    check_int("n", n, lo=N_RANGE[0], hi=N_RANGE[1])
    check_int("k", k, lo=1, hi=n - 1)
    check_int("steps", steps, lo=STEPS_RANGE[0], hi=STEPS_RANGE[1])
    check_int("step", step, lo=0, hi=steps)
    check_int("particle", particle, lo=0, hi=n - 1)
    check_bool("prune", prune)
    x, g, J, trace, div = _state(data.seed, data.hidden, n, k, steps, prune)
    src, dst = g.src.numpy(), g.dst.numpy()
    B = g.B[step].numpy()
    dep = B[:, particle]
    fig = make_subplots(rows=1, cols=2, specs=[[{"type": "scene"}, {"type": "heatmap"}]], column_widths=[0.5, 0.5],
                        subplot_titles=(f"h^{step}_il depends on x_{particle}? (orange = yes)",
                                        f"∂b/∂x: trace {trace:.6f} vs d-VJP {div:.6f}"))
    fig.add_trace(go.Scatter3d(x=x[:, 0], y=x[:, 1], z=x[:, 2], mode="markers+text", text=[str(i) for i in range(n)],
                               marker=dict(size=[9 if i == particle else 5 for i in range(n)],
                                           color=["#d62728" if i == particle else "#333333" for i in range(n)]),
                               name="particles"), row=1, col=1)
    for flag, colour, label in ((False, "#1f77b4", "h_il without x_j"), (True, "#ff7f0e", "h_il depends on x_j")):
        for into in (False, True):
            sel = (dep == flag) & ((dst == particle) == into)
            if not sel.any():
                continue
            xs, ys, zs = [], [], []
            for i, l in zip(src[sel], dst[sel]):
                a, b = x[i], x[i] + 0.8 * (x[l] - x[i])
                off = 0.03 * np.cross(x[l] - x[i], [0.0, 0.0, 1.0])
                xs += [a[0] + off[0], b[0] + off[0], None]
                ys += [a[1] + off[1], b[1] + off[1], None]
                zs += [a[2] + off[2], b[2] + off[2], None]
            fig.add_trace(go.Scatter3d(x=xs, y=ys, z=zs, mode="lines", line=dict(color=colour, width=8 if into else 3),
                                       name=label + (f" (into {particle})" if into else "")), row=1, col=1)
    if step >= 1 and g.removed[step - 1].shape[0]:
        rem = g.removed[step - 1].numpy()
        mid = (x[src] + x[dst]) / 2
        xs, ys, zs = [], [], []
        for s_, r_ in rem:
            for arr, out in ((0, xs), (1, ys), (2, zs)):
                out += [mid[s_, arr], mid[r_, arr], None]
        fig.add_trace(go.Scatter3d(x=xs, y=ys, z=zs, mode="lines", line=dict(color="#d62728", width=2, dash="dot"),
                                   name=f"line edges removed before step {step}"), row=1, col=1)
    nd = 3 * n
    lim = float(np.abs(J).max()) or 1.0
    fig.add_trace(go.Heatmap(z=J, colorscale="RdBu", zmid=0, zmin=-lim, zmax=lim, colorbar=dict(x=1.02, len=0.8),
                             name="∂b/∂x"), row=1, col=2)
    for i in range(n):
        fig.add_shape(type="rect", x0=3 * i - 0.5, x1=3 * i + 2.5, y0=3 * i - 0.5, y1=3 * i + 2.5,
                      line=dict(color="black", width=1.5), row=1, col=2)
    fig.update_yaxes(autorange="reversed", title_text="output b_j,c", row=1, col=2)
    fig.update_xaxes(title_text="input x_l,c'", range=[-0.5, nd - 0.5], row=1, col=2)
    fig.update_layout(height=540, legend=dict(orientation="h", y=-0.16),
                      title=f"n = {n}, {k}-NN, {steps} line-graph steps, pruning {'on' if prune else 'off'}",
                      scene=dict(aspectmode="data"))
    counts = " → ".join(map(str, g.counts()))
    own = int(B[np.arange(len(dst)), dst % n].sum())
    readout = (f"line edges per step: {counts} (of {g.line_edges.shape[0]}) · line states h^{step}_ij that depend on "
               f"their own x_j: {own} · trace {trace:.8f} vs d-VJP {div:.8f} (|Δ| = {abs(trace - div):.1e})")
    return fig, readout


def explorer_controls(data: ExplorerData, **initial):
    """The ipywidgets controls, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as w

    v = dict(n=9, k=3, steps=3, step=3, particle=0, prune=True)
    v.update(initial)
    style = {"description_width": "initial"}
    cu = dict(continuous_update=False, style=style)
    return {
        "n": w.IntSlider(value=v["n"], min=N_RANGE[0], max=N_RANGE[1], description="particles n", **cu),
        "k": w.IntSlider(value=v["k"], min=1, max=N_RANGE[1] - 1, description="k (kNN)", **cu),
        "steps": w.IntSlider(value=v["steps"], min=STEPS_RANGE[0], max=STEPS_RANGE[1], description="line-graph steps T", **cu),
        "step": w.IntSlider(value=v["step"], min=0, max=STEPS_RANGE[1], description="show step t", **cu),
        "particle": w.IntSlider(value=v["particle"], min=0, max=N_RANGE[1] - 1, description="particle j", **cu),
        "prune": w.Checkbox(value=v["prune"], description="backtracking removal (pruning)"),
    }


def clamped_view(data: ExplorerData, n: int = 9, k: int = 3, steps: int = 3, step: int = 3, particle: int = 0,
                 prune: bool = True):
    """:func:`explorer_view` with k, step and particle clamped to what n and steps allow (for the sliders)."""
    return explorer_view(data, n=n, k=min(k, n - 1), steps=steps, step=min(step, steps), particle=min(particle, n - 1),
                         prune=prune)
