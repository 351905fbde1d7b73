"""A thin binding of ipywidgets controls to a pure update function.

The science of an explorer is its update function: ``update(**values)`` takes the controls' values
and returns a ``go.Figure`` (or a ``(figure, readout)`` pair, the readout a short text shown above
the figure). It is a pure function, unit-tested without a browser. :class:`Explorer` only wires it up:
the figure is a ``go.FigureWidget`` built once from the first view, and each change of a control
computes the new view and copies what differs into that widget inside ``batch_update()``
(:func:`redraw_in_place`): one ``Plotly.update`` in the browser instead of a new plot, so the page keeps
its WebGL contexts and a control answers in well under a second. Sliders and text boxes send their value
on release (``continuous_update=False``), so a drag computes one view, not one per step. The first view lives in the widget's
state, which the executed notebook saves for its offline report.

Every property is set from the kernel side; nothing is captured with ``with output: display(...)``
(a batch client such as nbclient under papermill echoes captured outputs back on the shell channel, which
under load occasionally stalls the run).

The rendered widget carries CSS classes the real-browser tests look for: ``companion-explorer`` on
the whole, ``companion-readout`` on the readout and ``companion-figure`` on the figure.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping

import ipywidgets as widgets
import plotly.graph_objects as go
from IPython.display import display
from plotly.utils import PlotlyJSONEncoder

from companion.core.validation import ParameterError
from companion.viz.theme import PLOTLY_CONFIG


def split_view(view) -> tuple[go.Figure, str | None]:
    """Normalise what an update function returns to ``(figure, readout or None)``."""
    if isinstance(view, go.Figure):
        return view, None
    if isinstance(view, tuple) and len(view) == 2 and isinstance(view[0], go.Figure) and isinstance(view[1], str):
        return view
    raise TypeError(f"an explorer's update must return a go.Figure or (go.Figure, str), got {type(view).__name__}")


def _json(value) -> str:
    return json.dumps(value, cls=PlotlyJSONEncoder, sort_keys=True)


def _changed(old: dict, new: dict, ignore: tuple[str, ...] = ()) -> dict:
    """The top-level properties whose JSON differs between ``old`` and ``new``; one ``new`` lacks maps to
    None, which unsets it."""
    return {k: new.get(k) for k in (old.keys() | new.keys()) - set(ignore) if _json(old.get(k)) != _json(new.get(k))}


def redraw_in_place(widget: go.FigureWidget, figure: go.Figure) -> None:
    """Make ``widget`` show ``figure`` by editing it: the leading traces of the same types are restyled
    and the layout relaid out in one ``batch_update`` (only the properties that changed travel); traces
    past the first change of type are deleted and ``figure``'s remaining ones added."""
    kept = 0
    for old, new in zip(widget.data, figure.data):
        if old.type != new.type:
            break
        kept += 1
    if kept < len(widget.data):
        widget.data = widget.data[:kept]
    with widget.batch_update():
        for old, new in zip(widget.data, figure.data[:kept]):
            old.update(_changed(old.to_plotly_json(), new.to_plotly_json(), ignore=("uid",)), overwrite=True)
        widget.layout.update(_changed(widget.layout.to_plotly_json(), figure.layout.to_plotly_json()), overwrite=True)
    if kept < len(figure.data):
        widget.add_traces(list(figure.data[kept:]))


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
        for control in self.controls.values():  # a drag computes once, on release
            if control.has_trait("continuous_update"):
                control.continuous_update = False
        self.readout = widgets.HTML().add_class("companion-readout")
        first, readout = self.view()
        self.figure = go.FigureWidget(first).add_class("companion-figure")
        self.figure._config = dict(PLOTLY_CONFIG)
        self.figure.observe(self._fit_width, names="_view_count")
        self._show_readout(readout)
        header = [widgets.HTML(f"<b>{html.escape(title)}</b>")] if title else []
        self.widget = widgets.VBox(
            header + [widgets.HBox(list(self.controls.values()), layout=widgets.Layout(flex_flow="row wrap")), self.readout, self.figure]
        ).add_class("companion-explorer")
        for control in self.controls.values():
            control.observe(self._on_change, names="value")

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
        self._show_readout(readout)
        redraw_in_place(self.figure, figure)

    def _show_readout(self, readout: str | None) -> None:
        self.readout.value = html.escape(readout) if readout else ""
        self.readout.layout.display = None if readout else "none"

    def _fit_width(self, change) -> None:
        """A new view draws before it is on the page, at plotly's default 700 px; once it is shown, a
        relayout with ``autosize`` sizes it to the notebook's width."""
        if (change.new or 0) > (change.old or 0):
            self.figure._send_relayout_msg({"autosize": True})

    def _on_change(self, _change) -> None:
        self.refresh()

    def _ipython_display_(self) -> None:
        display(self.widget)
