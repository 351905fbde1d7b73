"""The explorer of notebook 09 (Δ Attention). Imports plotly; figures: ``figures.py``.

`explorer_data(model, input_ids)` precomputes the dense run; `explorer_view(data, window=, sink=, gamma=)`
is the pure update (it runs the model under the chosen methods) and `explorer_controls(data)` the sliders.

`make_explorer_update(model, input_ids)` returns the explorer's pure update function
`update(window, sink, gamma) -> (figure, readout)`: per-layer, per-position error (1 − cosine of the
attention output against the dense run) of the sparse prefill and of sparse + Δ side by side, and the
compute fractions. Results are memoised per control setting, so moving a slider back is instant.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from companion.delta_attention.attention import Method, compute_fraction
from companion.delta_attention.minilm import MiniLMRuns, position_error, run_minilm
import companion.viz  # noqa: F401  (the theme and the mode bar)



def make_explorer_update(model, input_ids, *, tail: int = 32, causal: bool = False, dense=None,
                         max_columns: int = 128, runs: MiniLMRuns | None = None):
    """The explorer's update function over MiniLM (see the module docstring). The heatmaps average
    the positions into at most `max_columns` bins (a small figure keeps the widget round trip fast).
    With `runs` (a `MiniLMRuns` of the same model and input) its memoised traces are used."""
    if runs is not None:
        dense, run = runs.dense, runs.get
    else:
        dense = dense or run_minilm(model, input_ids, Method("dense", causal=causal))

        def run(m):
            return run_minilm(model, input_ids, m)
    n = input_ids.shape[1]

    @lru_cache(maxsize=64)
    def _errors(window: int, sink: int, gamma: int):
        sp = Method("sparse", sink=sink, window=window, causal=causal)
        de = Method("delta", sink=sink, window=window, gamma=gamma, tail=tail, causal=causal)
        e_sp = position_error(run(sp), dense)
        e_de = position_error(run(de), dense)
        return e_sp, e_de, compute_fraction(n, sp), compute_fraction(n, de)

    def update(window: int, sink: int, gamma: int):
        e_sp, e_de, f_sp, f_de = _errors(int(window), int(sink), int(gamma))
        fig = error_heatmaps(e_sp, e_de, titles=(f"sparse (sink {sink}, window {window})",
                                                  f"sparse + Δ (γ = {gamma}, dense tail {tail})"),
                             max_columns=max_columns)
        readout = (f"compute: sparse {f_sp:.1%} of dense, sparse + Δ {f_de:.1%}  |  "
                   f"mean 1 − cos over layers and positions: sparse {e_sp.mean():.4f}, "
                   f"sparse + Δ {e_de.mean():.4f}  |  last layer: {e_sp[-1].mean():.4f} vs {e_de[-1].mean():.4f}")
        return fig, readout

    return update


def bin_positions(e: np.ndarray, max_columns: int) -> tuple[np.ndarray, np.ndarray]:
    """Average [L, N] into [L, ⌈N/b⌉] bins of b = ⌈N/max_columns⌉ positions; returns (x = first
    position of each bin, binned values as float32)."""
    n = e.shape[1]
    b = max(1, -(-n // max_columns))
    starts = np.arange(0, n, b)
    binned = np.stack([e[:, s:s + b].mean(axis=1) for s in starts], axis=1)
    return starts, binned.astype(np.float32)


def error_heatmaps(e_sparse: np.ndarray, e_delta: np.ndarray, titles=("sparse", "sparse + Δ"),
                   max_columns: int = 128) -> go.Figure:
    """Two heatmaps [layer × position] of 1 − cos(method, dense), one shared colour scale."""
    x, e_sparse = bin_positions(e_sparse, max_columns)
    _, e_delta = bin_positions(e_delta, max_columns)
    zmax = float(max(np.quantile(e_sparse, 0.99), np.quantile(e_delta, 0.99), 1e-6))
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles, shared_yaxes=True, horizontal_spacing=0.04)
    layers = np.arange(1, e_sparse.shape[0] + 1)
    for col, e in ((1, e_sparse), (2, e_delta)):
        fig.add_trace(go.Heatmap(z=e, y=layers, x=x, zmin=0, zmax=zmax, colorscale="Viridis",
                                 showscale=col == 2, colorbar=dict(title="1 − cos"),
                                 hovertemplate="layer %{y}, position %{x}: %{z:.4f}<extra></extra>"), row=1, col=col)
        fig.update_xaxes(title_text="token position" + (f" (bins of {x[1] - x[0]})" if len(x) > 1 and x[1] - x[0] > 1 else ""),
                         row=1, col=col)
    fig.update_yaxes(title_text="layer", autorange="reversed", row=1, col=1)
    fig.update_layout(title="Per-position error of the attention output against the dense run", height=360)
    return fig


class ExplorerData:
    """What the explorer needs: MiniLM, its input windows and the dense run, with a memoised update."""

    def __init__(self, model, input_ids, *, tail: int = 32, causal: bool = False, dense=None, max_columns: int = 128,
                 runs: MiniLMRuns | None = None):
        self.tail, self.n = tail, input_ids.shape[1]
        self.update = make_explorer_update(model, input_ids, tail=tail, causal=causal, dense=dense,
                                           max_columns=max_columns, runs=runs)


def explorer_data(model, input_ids, *, tail: int = 32, causal: bool = False, dense=None,
                  runs: MiniLMRuns | None = None) -> ExplorerData:
    """The explorer's precomputed data (the dense trace, or a `MiniLMRuns` memo, is reused when given)."""
    return ExplorerData(model, input_ids, tail=tail, causal=causal, dense=dense, runs=runs)


def explorer_view(data: ExplorerData, *, window: int, sink: int, gamma: int):
    """Per-layer, per-position error of sparse and sparse + Δ against dense: ``(figure, readout)``."""
    return data.update(window, sink, gamma)


WINDOW_CHOICES = (8, 16, 32, 64, 128, 256)
SINK_CHOICES = (0, 1, 4, 16, 64)
GAMMA_CHOICES = (1, 2, 4, 8, 16, 32, 64)


def explorer_controls(data: ExplorerData, *, window: int = 32, sink: int = 4, gamma: int = 16) -> dict:
    """The three sliders (window, sinks, γ); a start value outside the choices is added to them."""
    import ipywidgets as widgets

    def options(choices, value):
        return sorted(set(choices) | {int(value)})

    return {
        "window": widgets.SelectionSlider(options=options(WINDOW_CHOICES, window), value=int(window), description="window"),
        "sink": widgets.SelectionSlider(options=options(SINK_CHOICES, sink), value=int(sink), description="sinks"),
        "gamma": widgets.SelectionSlider(options=options(GAMMA_CHOICES, gamma), value=int(gamma), description="γ"),
    }
