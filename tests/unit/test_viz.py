import ipywidgets as widgets
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from companion.viz import Explorer
from companion.viz.explorer import redraw_in_place, split_view
from companion.viz.theme import PLOTLY_CONFIG


def test_theme_and_renderer_are_the_projects():
    assert pio.templates.default == "companion"
    assert pio.renderers.default == "plotly_mimetype"


def test_every_shown_figure_carries_the_mode_bar_config():
    bundle = go.Figure(go.Scatter(y=[1, 2]))._repr_mimebundle_()["application/vnd.plotly.v1+json"]
    assert bundle["config"] == PLOTLY_CONFIG
    assert bundle["config"]["displaylogo"] is False and "sendChartToCloud" in bundle["config"]["modeBarButtonsToRemove"]
    assert bundle["config"]["toImageButtonOptions"]["format"] == "png"
    assert "width" not in bundle["layout"] and "width" not in pio.templates["companion"].layout.to_plotly_json()


def test_explorer_calls_the_pure_update_on_every_change():
    calls = []

    def update(a, b):
        calls.append((a, b))
        return go.Figure(go.Scatter(y=[a, b])), f"sum {a + b}"

    ex = Explorer(update, {"a": widgets.IntSlider(value=1), "b": widgets.Dropdown(options=[2, 3], value=2)})
    assert calls == [(1, 2)]
    assert ex.readout.value == "sum 3"
    ex.controls["a"].value = 5
    ex.controls["b"].value = 3
    assert calls[-1] == (5, 3) and ex.readout.value == "sum 8"
    assert tuple(ex.view()[0].data[0].y) == (5, 3)
    assert "companion-explorer" in ex.widget._dom_classes


def test_sliders_compute_on_release():
    ex = Explorer(lambda a, b: go.Figure(go.Scatter(y=[a, b])),
                  {"a": widgets.IntSlider(value=1), "b": widgets.Dropdown(options=[2, 3], value=2)})
    assert ex.controls["a"].continuous_update is False and not ex.controls["b"].has_trait("continuous_update")


def test_explorer_updates_one_figure_widget_in_place():
    ex = Explorer(lambda a: go.Figure(go.Scatter(y=[a, 2 * a]), layout=dict(title=f"double {a}")),
                  {"a": widgets.IntSlider(value=1)})
    shown, uid = ex.figure, ex.figure.data[0].uid
    assert isinstance(shown, go.FigureWidget) and "companion-figure" in shown._dom_classes and shown._config == PLOTLY_CONFIG
    assert list(shown.data[0].y) == [1, 2] and shown._widget_data[0]["y"] == [1, 2]  # the first view, in the saved state
    ex.controls["a"].value = 4
    assert ex.figure is shown and shown.data[0].uid == uid  # the same widget and trace, restyled
    assert list(shown.data[0].y) == [4, 8] and shown.layout.title.text == "double 4"


def test_a_new_view_of_the_figure_is_sized_to_the_notebook():
    ex = Explorer(lambda a: go.Figure(go.Scatter(y=[a])), {"a": widgets.IntSlider(value=1)})
    sent = []
    ex.figure.observe(lambda change: sent.append(change.new) if change.new else None, names="_py2js_relayout")
    ex.figure._view_count = 1  # what the front end reports once it has drawn a view
    assert [m["relayout_data"] for m in sent] == [{"autosize": True}]
    ex.figure._view_count = 0  # a view closed: nothing to size
    assert len(sent) == 1


def test_redraw_in_place_matches_the_new_figure_when_traces_come_and_go():
    def figure(kinds, title, **bar):
        traces = [go.Scatter(y=[i, 1], name=f"line {i}") if k == "s" else go.Bar(y=[i], **bar) for i, k in enumerate(kinds)]
        return go.Figure(traces, layout=dict(title=title))

    def plain(fig):
        return [{k: v for k, v in t.to_plotly_json().items() if k != "uid"} for t in fig.data], fig.layout.title.text

    widget = go.FigureWidget(figure("ssb", "first", marker_color="red"))
    for kinds, title, bar in (("ss", "fewer", {}), ("sbbs", "more", {"opacity": 0.5}), ("bs", "new types", {}), ("ssb", "first", {})):
        target = figure(kinds, title, **bar)
        redraw_in_place(widget, target)
        assert plain(widget) == plain(target), kinds


def test_explorer_shows_a_refused_combination_in_the_readout_and_keeps_the_figure():
    from companion.core import ParameterError

    def update(a, b):
        if a == b:
            raise ParameterError("b", b, "a value other than a")
        if a < 0:
            raise RuntimeError("a bug, not a refused value")
        return go.Figure(go.Scatter(y=[a, b])), f"sum {a + b}"

    ex = Explorer(update, {"a": widgets.IntSlider(value=1, min=-5), "b": widgets.IntSlider(value=2)})
    ex.controls["a"].value = 2
    assert ex.readout.value.startswith("Not drawn: parameter b=2 is not allowed") and list(ex.figure.data[0].y) == [1, 2]
    ex.controls["a"].value = 3
    assert ex.readout.value == "sum 5"
    with pytest.raises(RuntimeError, match="a bug"):
        ex.controls["a"].value = -1


def test_explorer_rejects_what_it_cannot_bind():
    with pytest.raises(ValueError, match="at least one control"):
        Explorer(lambda: go.Figure(), {})
    with pytest.raises(TypeError, match="no value"):
        Explorer(lambda a: go.Figure(), {"a": widgets.Button()})
    with pytest.raises(TypeError, match="must return a go.Figure"):
        split_view("not a figure")
