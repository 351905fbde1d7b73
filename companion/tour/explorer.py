"""The tour's explorer: the pure update function and its controls (bound by ``companion.viz.Explorer``)."""

from __future__ import annotations

import plotly.graph_objects as go

from companion.tour.montecarlo import estimate_pi, sample_points, standard_error

__all__ = ["explorer_controls", "explorer_view"]


def explorer_view(n: int, seed: int) -> tuple[go.Figure, str]:
    """``n`` points coloured by inside/outside the quarter circle, and the estimate with its expected error."""
    xy = sample_points(n, seed)
    inside = (xy**2).sum(axis=1) <= 1
    fig = go.Figure()
    fig.add_scatter(x=xy[inside, 0], y=xy[inside, 1], mode="markers", name="inside", marker=dict(size=4))
    fig.add_scatter(x=xy[~inside, 0], y=xy[~inside, 1], mode="markers", name="outside", marker=dict(size=4))
    fig.update_layout(title=f"{n} random points in the unit square", xaxis_title="x", yaxis_title="y",
                      width=520, height=480, yaxis_scaleanchor="x")
    estimate = estimate_pi(xy)
    return fig, f"π̂ = {estimate:.4f}   (error {estimate - 3.14159265:+.4f}, expected size ±{standard_error(n):.4f})"


def explorer_controls(seed: int = 0) -> dict:
    """The sliders: number of points and seed (starting at the notebook's ``SEED``)."""
    import ipywidgets as widgets

    return {"n": widgets.IntSlider(value=500, min=50, max=5000, step=50, description="n points"),
            "seed": widgets.IntSlider(value=seed, min=0, max=20, description="seed")}
