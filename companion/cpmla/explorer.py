"""The mirror-Langevin explorer: three linked 2-D panels.

Left, the primal space: the target's log-density contours, exact samples (grey) and the chains' paths;
middle, the dual space: the same chains mapped by ∇G (for ULA and MALA, G = ½‖x‖² and the dual is the
primal); right, the mirror map itself: a regular primal grid deformed by ∇G. Controls: target, sampler,
Hessian of the noise (full or diagonal), η (ULA and MALA use δ = 2η), T, chains and α (the learned ICNN's
strong convexity; the quadratic and Newton maps have none). Readout: energy distance and sliced W2 to
exact samples, the largest inverse residual max‖∇G(x) − y‖ and MALA's acceptance rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from companion.core import check_choice, check_float, check_int
from companion.cpmla.metrics import energy_distance, sliced_w2
from companion.cpmla.mirror_map import InverseNotConverged, QuadraticPotential
from companion.cpmla.samplers import NonFiniteChain, mala, mirror_langevin, ula
import companion.viz  # noqa: F401  (the theme and the mode bar)

EXPLORER_SAMPLERS = ("ULA", "MALA", "mirror: quadratic G", "mirror: Newton map", "mirror: learned ICNN")
TARGET_LABELS = {"gaussian": "Gaussian, κ = 100", "8gaussians": "8 Gaussians"}
N_PATHS = 12  # chains drawn as paths (all chains are used for the metrics)


@dataclass
class ExplorerData:
    """Targets ({key: target}), their learned CP-Flow potentials, exact reference samples and a seed."""

    targets: dict
    learned: dict
    reference: dict
    seed: int = 0


def _box(ref):
    lo, hi = ref.min(0).values.numpy(), ref.max(0).values.numpy()
    c, half = (lo + hi) / 2, (hi - lo).max() / 2 * 1.3 + 0.3
    return c - half, c + half


def _potential(data, target_key, sampler, alpha):
    target = data.targets[target_key]
    if sampler in ("ULA", "MALA", "mirror: quadratic G"):
        return QuadraticPotential.identity(target.dim)
    if sampler == "mirror: Newton map":
        return QuadraticPotential(torch.linalg.inv(target.covariance))
    return data.learned[target_key].with_alpha(alpha)


def explorer_view(data: ExplorerData, target="gaussian", sampler="mirror: learned ICNN", hessian="full", eta=1e-2,
                  T=30, chains=200, alpha=1e-4):
    """The three panels and a readout for one setting of the controls (pure: seeded by ``data.seed``)."""
    check_choice("target", target, tuple(data.targets))
    check_choice("sampler", sampler, EXPLORER_SAMPLERS)
    check_choice("hessian", hessian, ("full", "diagonal"))
    check_float("eta", eta, lo=0, lo_open=True)
    check_int("T", T, lo=1)
    check_int("chains", chains, lo=2)
    check_float("alpha", alpha, lo=0, lo_open=True)
    tgt, ref = data.targets[target], data.reference[target]
    G = _potential(data, target, sampler, alpha)
    gen = torch.Generator().manual_seed(data.seed)
    start = torch.randn(chains, tgt.dim, generator=gen, dtype=torch.float64)
    problem, chain = None, None
    try:
        if sampler == "ULA":
            chain = ula(tgt, start, T, 2 * eta, generator=gen, record=True)
        elif sampler == "MALA":
            chain = mala(tgt, start, T, 2 * eta, generator=gen, record=True)
        else:
            chain = mirror_langevin(tgt, G, start, T, eta, hessian=hessian, generator=gen, record=True,
                                    inverse_max_iter=100)
    except (NonFiniteChain, InverseNotConverged) as err:
        problem = str(err)
    if chain is not None and not (bool(torch.isfinite(chain.x).all()) and float(chain.x.abs().max()) < 1e6):
        problem = f"{sampler}: the chain left the floating-point range (step size {eta:g}); lower η"

    lo, hi = _box(ref)
    fig = make_subplots(rows=1, cols=3, subplot_titles=("primal space x: target and chains",
                                                        "dual space y = ∇G(x)", "the mirror map: a grid deformed by ∇G"),
                        horizontal_spacing=0.07)
    gx, gy = np.linspace(lo[0], hi[0], 70), np.linspace(lo[1], hi[1], 70)
    mesh = torch.tensor(np.stack(np.meshgrid(gx, gy), -1).reshape(-1, 2))
    lp = tgt.log_prob(mesh).reshape(70, 70).numpy()
    fig.add_contour(x=gx, y=gy, z=np.maximum(lp, lp.max() - 12), colorscale="Blues", showscale=False, ncontours=12,
                    contours=dict(coloring="lines"), name="log p", hoverinfo="skip", row=1, col=1)
    r = ref[:400].numpy()
    fig.add_scatter(x=r[:, 0], y=r[:, 1], mode="markers", marker=dict(size=3, color="#bbbbbb"), name="exact samples",
                    row=1, col=1)
    colors = ("#0072B2", "#D55E00")
    if problem is None:
        xs = chain.xs.numpy()
        ys = chain.ys.numpy() if chain.ys is not None else xs
        for i in range(min(N_PATHS, chains)):
            fig.add_scatter(x=xs[:, i, 0], y=xs[:, i, 1], mode="lines", line=dict(width=1, color=colors[0]),
                            showlegend=i == 0, name="chain paths", legendgroup="paths", row=1, col=1)
            fig.add_scatter(x=ys[:, i, 0], y=ys[:, i, 1], mode="lines", line=dict(width=1, color=colors[0]),
                            showlegend=False, legendgroup="paths", row=1, col=2)
        fig.add_scatter(x=xs[-1, :, 0], y=xs[-1, :, 1], mode="markers", marker=dict(size=4, color=colors[1]),
                        name=f"x_T (T = {T})", row=1, col=1)
        fig.add_scatter(x=ys[-1, :, 0], y=ys[-1, :, 1], mode="markers", marker=dict(size=4, color=colors[1]),
                        showlegend=False, row=1, col=2)
    # the deformed grid ∇G(grid lines)
    with torch.no_grad():
        for k, line in enumerate(np.linspace(0, 1, 11)):
            for axis in (0, 1):
                t = torch.linspace(0, 1, 60, dtype=torch.float64)
                pts = torch.empty(60, 2, dtype=torch.float64)
                pts[:, axis] = float(lo[axis] + line * (hi[axis] - lo[axis]))
                pts[:, 1 - axis] = lo[1 - axis] + t * float(hi[1 - axis] - lo[1 - axis])
                img = G.grad(pts).numpy()
                fig.add_scatter(x=img[:, 0], y=img[:, 1], mode="lines", line=dict(width=1, color="#009E73"),
                                showlegend=k == 0 and axis == 0, name="∇G(grid)", legendgroup="grid", row=1, col=3)
    fig.update_xaxes(range=[lo[0], hi[0]], row=1, col=1)
    fig.update_yaxes(range=[lo[1], hi[1]], scaleanchor="x", row=1, col=1)
    fig.update_layout(height=420, title=f"{TARGET_LABELS.get(target, target)} · {sampler}"
                      + (f" ({hessian} Hessian)" if sampler.startswith("mirror") else "")
                      + f" · η = {eta:g}, T = {T}, {chains} chains",
                      legend=dict(orientation="h", y=-0.12))
    if problem is not None:
        return fig, f"diverged: {problem}"
    ed, sw = energy_distance(chain.x, ref), sliced_w2(chain.x, ref)
    parts = [f"energy distance to exact samples {ed:.4f}", f"sliced W2 {sw:.3f}"]
    if sampler.startswith("mirror"):
        parts.append(f"max inverse residual {chain.max_residual:.1e}")
    if chain.acceptance is not None:
        parts.append(f"MALA acceptance {chain.acceptance:.2f}")
    return fig, " · ".join(parts)


def explorer_controls(data: ExplorerData, **initial):
    """The ipywidgets controls, keyed by :func:`explorer_view`'s argument names."""
    import ipywidgets as w

    v = dict(target="gaussian", sampler="mirror: learned ICNN", hessian="full", eta=1e-2, T=30, chains=200, alpha=1e-4)
    v.update(initial)
    style = {"description_width": "initial"}
    return {
        "target": w.Dropdown(options=[(TARGET_LABELS.get(k, k), k) for k in data.targets], value=v["target"],
                             description="target", style=style),
        "sampler": w.Dropdown(options=list(EXPLORER_SAMPLERS), value=v["sampler"], description="sampler", style=style),
        "hessian": w.ToggleButtons(options=["full", "diagonal"], value=v["hessian"], description="Hessian", style=style),
        "eta": w.FloatLogSlider(value=v["eta"], base=10, min=-4, max=0, step=0.25, description="η", style=style,
                                continuous_update=False),
        "T": w.IntSlider(value=v["T"], min=1, max=100, description="T", style=style, continuous_update=False),
        "chains": w.IntSlider(value=v["chains"], min=20, max=500, step=20, description="chains", style=style,
                              continuous_update=False),
        "alpha": w.FloatLogSlider(value=v["alpha"], base=10, min=-6, max=0, step=0.5, description="α (ICNN)",
                                  style=style, continuous_update=False),
    }
