"""Plotly theme, renderer and the widget binding every explorer uses.

Importing this package registers the ``companion`` plotly template as the default and selects the
small, deterministic ``plotly_mimetype`` renderer (JupyterLab renders it natively; nbval and
papermill store it as plain JSON) with the project's mode-bar configuration, :data:`PLOTLY_CONFIG`
(no logo, no cloud upload, PNG download).
"""

from companion.viz.explorer import Explorer
from companion.viz.theme import COLORS, PLOTLY_CONFIG, apply_theme

apply_theme()

__all__ = ["COLORS", "Explorer", "PLOTLY_CONFIG", "apply_theme"]
