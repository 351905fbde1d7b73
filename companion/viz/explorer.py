"""A thin binding of ipywidgets controls to a pure update function.

The science of an explorer is its update function: ``update(**values)`` takes the controls' values
and returns a ``go.Figure`` (or a ``(figure, readout)`` pair, the readout a short text shown above
the figure). It is a pure function, unit-tested without a browser. :class:`Explorer` only wires it up:
each change of a control re-renders the figure into an ``ipywidgets.Output`` with the plotly
mimetype renderer, so no widget state is needed to show a plot and a figure never goes stale.

The figure is written into the Output widget's ``outputs`` state from the kernel side, never captured
with ``with output: display(...)``. Capturing makes a batch client (nbclient, under papermill) echo
every captured output back to the kernel on the shell channel while it waits there for the cell's
reply; under load that wait occasionally never wakes up and the notebook run stalls (seen in about
one run in ten with two or more notebooks executing at once). Writing the state has no echo.

The rendered widget carries CSS classes the real-browser tests look for: ``companion-explorer`` on
the whole, ``companion-readout`` on the readout and ``companion-figure`` on the figure's output.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping

import ipywidgets as widgets
import plotly.graph_objects as go
from IPython.display import display

from companion.core.validation import ParameterError


def split_view(view) -> tuple[go.Figure, str | None]:
    """Normalise what an update function returns to ``(figure, readout or None)``."""
    if isinstance(view, go.Figure):
        return view, None
    if isinstance(view, tuple) and len(view) == 2 and isinstance(view[0], go.Figure) and isinstance(view[1], str):
        return view
    raise TypeError(f"an explorer's update must return a go.Figure or (go.Figure, str), got {type(view).__name__}")


class Explorer:
    """Controls bound to ``update``; display it as the last expression of a cell."""

    def __init__(self, update: Callable[..., object], controls: Mapping[str, widgets.ValueWidget], title: str | None = None):
        if not callable(update):
            raise TypeError("update must be a function of the controls' values")
        if not controls:
            raise ValueError("an explorer needs at least one control")
        for name, control in controls.items():
            if not hasattr(control, "value"):
                raise TypeError(f"control {name!r} is a {type(control).__name__}, which has no value")
        self.update, self.controls = update, dict(controls)
        self.readout = widgets.HTML().add_class("companion-readout")
        self.output = widgets.Output().add_class("companion-figure")
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        self.widget = widgets.VBox(
            header + [widgets.HBox(list(self.controls.values()), layout=widgets.Layout(flex_flow="row wrap")), self.readout, self.output]
        ).add_class("companion-explorer")
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.refresh()

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def view(self) -> tuple[go.Figure, str | None]:
        """The current figure and readout, computed from the controls' values."""
        return split_view(self.update(**self.values()))

    def refresh(self) -> None:
        """Redraw from the controls; a combination the update refuses (a ParameterError) keeps the last
        figure and says why in the readout, instead of failing silently in the widget's callback."""
        try:
            figure, readout = self.view()
        except ParameterError as exc:
            self.readout.value = html.escape(f"Not drawn: {exc}")
            self.readout.layout.display = None
            return
        self.readout.value = html.escape(readout) if readout else ""
        self.readout.layout.display = None if readout else "none"
        bundle = {"text/plain": f"<plotly figure: {figure.layout.title.text or 'untitled'}>", **figure._repr_mimebundle_()}
        self.output.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)

    def _on_change(self, _change) -> None:
        self.refresh()

    def _ipython_display_(self) -> None:
        display(self.widget)
