"""Figures of paper 14's recorded GPU study (:mod:`companion.cpmla.scale`); needs plotly, so the GPU path never
imports it."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

import companion.viz  # noqa: F401  (the theme and the mode bar)
from companion.cpmla.claims import PEERS, finished_seeds
from companion.cpmla.scale import recipe_stale
from companion.viz import COLORS

SAMPLER_NAMES = {"cpmla": "CPMLA", **PEERS, "start": "common start x₀"}


def seed_quality_figure(gpu: dict | None) -> go.Figure:
    """Left: the energy distance to the data of CPMLA, Langevin, CP-Flow alone and their common start x₀ (the same
    starting points), one dot per seed, on an axis zoomed to the dots; the noise floor (two halves of the data,
    mean over seeds) is in the panel's title. Right: the EBM's mean f_θ on data and on the mirror samples per
    training epoch, per seed (a gap that keeps growing is a diverging EBM). A run without finished seed stages
    gives an empty figure that says so; one of an older recipe says that in its title."""
    seeds = finished_seeds(gpu) if gpu is not None else []
    floor = sum(s["floor"]["energy_distance"] for s in seeds) / len(seeds) if seeds else None
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "energy distance to the data, per seed" + (f" (noise floor {floor:.3f})" if seeds else ""),
        "f_θ per epoch: data (solid) vs samples (dotted)"))
    if not seeds:
        fig.add_annotation(text="per-seed results not recorded: python -m companion.bench cpmla on one GPU",
                           xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
        return fig.update_layout(height=360)
    palette = list(COLORS)
    for i, s in enumerate(seeds):
        fig.add_trace(go.Scatter(x=list(SAMPLER_NAMES.values()), y=[s[key]["energy_distance"] for key in SAMPLER_NAMES],
                                 mode="markers", marker=dict(size=10, color=palette[(i + 3) % len(palette)]),
                                 name=f"seed {s['seed']}", legendgroup=str(i)), row=1, col=1)
    for i, s in enumerate(seeds):
        epochs = list(range(1, len(s["f_data"]) + 1))
        color = palette[(i + 3) % len(palette)]
        fig.add_trace(go.Scatter(x=epochs, y=s["f_data"], mode="lines", line=dict(color=color),
                                 name=f"seed {s['seed']}: f on data", legendgroup=str(i)), row=1, col=2)
        fig.add_trace(go.Scatter(x=epochs, y=s["f_samples"], mode="lines", line=dict(color=color, dash="dot"),
                                 name=f"seed {s['seed']}: f on samples", legendgroup=str(i)), row=1, col=2)
    fig.update_xaxes(title_text="epoch", row=1, col=2)
    fig.update_yaxes(title_text="energy distance", row=1, col=1)
    fig.update_yaxes(title_text="mean f_θ", row=1, col=2)
    stale = "sampled with an older recipe (temperature 1): rerun the study" if recipe_stale(gpu) else None
    return fig.update_layout(height=380, title=stale)
