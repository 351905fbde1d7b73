import ipywidgets as widgets
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from companion.viz import Explorer
from companion.viz.explorer import split_view


def test_theme_and_renderer_are_the_projects():
    assert pio.templates.default == "companion"
    assert pio.renderers.default == "plotly_mimetype"


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


def test_explorer_writes_the_figure_into_the_output_state():
    # The shown figure lives in the Output widget's state (no output capture, see companion.viz.explorer).
    ex = Explorer(lambda a: go.Figure(go.Scatter(y=[a, 2 * a]), layout=dict(title="double")),
                  {"a": widgets.IntSlider(value=1)})

    def shown():
        (out,) = ex.output.outputs
        assert out["output_type"] == "display_data" and "double" in out["data"]["text/plain"]
        return out["data"]["application/vnd.plotly.v1+json"]["data"][0]["y"]

    assert list(shown()) == [1, 2]
    ex.controls["a"].value = 4
    assert list(shown()) == [4, 8]


def test_explorer_shows_a_refused_combination_in_the_readout_and_keeps_the_figure():
    from companion.core import ParameterError

    def update(a, b):
        if a == b:
            raise ParameterError("b", b, "a value other than a")
        if a < 0:
            raise RuntimeError("a bug, not a refused value")
        return go.Figure(go.Scatter(y=[a, b])), f"sum {a + b}"

    ex = Explorer(update, {"a": widgets.IntSlider(value=1, min=-5), "b": widgets.IntSlider(value=2)})
    figure_before = ex.output.outputs
    ex.controls["a"].value = 2
    assert ex.readout.value.startswith("Not drawn: parameter b=2 is not allowed") and ex.output.outputs == figure_before
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
