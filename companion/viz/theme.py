"""One plotly theme for every notebook."""

from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

# A colour-blind-safe qualitative palette (Okabe-Ito), in a fixed order.
COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")


def apply_theme() -> None:
    """Register the ``companion`` template as the default and use the ``plotly_mimetype`` renderer."""
    template = go.layout.Template(pio.templates["plotly_white"])
    template.layout.colorway = COLORS
    template.layout.font = dict(family="Helvetica, Arial, sans-serif", size=13)
    template.layout.title = dict(x=0.02, xanchor="left", font=dict(size=15))
    template.layout.margin = dict(l=60, r=20, t=60, b=50)
    template.layout.legend = dict(bgcolor="rgba(255,255,255,0.6)")
    pio.templates["companion"] = template
    pio.templates.default = "companion"
    pio.renderers.default = "plotly_mimetype"
