"""One plotly theme and one mode-bar configuration for every figure.

:data:`PLOTLY_CONFIG` is plotly.js's ``config`` for every figure the project shows: no plotly logo, no
"Share chart" (Plotly Cloud upload) button, and the camera button saving a PNG at twice the screen
resolution. It goes into the default renderer, so a figure shown as a cell's last expression, with
``fig.show()``, or in the executed notebook's mime bundle (which the HTML report draws from) carries it;
:class:`companion.viz.Explorer` gives it to its figure widget. plotly.js's config is JSON, so a second
(SVG) button, which needs a JavaScript click handler, cannot be added here; an SVG of a figure shown in
the notebook comes from ``Plotly.downloadImage(el, {format: "svg"})`` on its ``.js-plotly-plot`` element.
"""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

# A colour-blind-safe qualitative palette (Okabe-Ito), in a fixed order.
COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")

PLOTLY_CONFIG = {
    "displaylogo": False,
    "showSendToCloud": False,
    "modeBarButtonsToRemove": ["sendChartToCloud", "sendDataToCloud"],
    "toImageButtonOptions": {"format": "png", "scale": 2},
    "responsive": True,
}


def apply_theme() -> None:
    """Register the ``companion`` template as the default and use the ``plotly_mimetype`` renderer with
    :data:`PLOTLY_CONFIG`. Figures size to their container (no width in the template): a figure sets a
    width only when it must be narrow."""
    template = go.layout.Template(pio.templates["plotly_white"])
    template.layout.colorway = COLORS
    template.layout.font = dict(family="Helvetica, Arial, sans-serif", size=13)
    template.layout.title = dict(x=0.02, xanchor="left", font=dict(size=15))
    template.layout.margin = dict(l=60, r=20, t=60, b=50)
    template.layout.legend = dict(bgcolor="rgba(255,255,255,0.6)")
    pio.templates["companion"] = template
    pio.templates.default = "companion"
    pio.renderers.default = "plotly_mimetype"
    pio.renderers["plotly_mimetype"].config = dict(PLOTLY_CONFIG)
