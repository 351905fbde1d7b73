"""The offline HTML reports (companion.report): figures, explorers' first views, nothing from a CDN."""

import re

import ipywidgets as widgets
import nbformat
import plotly.graph_objects as go

from companion import report, thumbnails

PLOTLY = report.PLOTLY_MIME
VIEW = report.WIDGET_VIEW_MIME


def _state(*ws):
    """The saved widget state of these widgets and everything they reference, as nbclient stores it."""
    state = {}
    for w in ws:
        for key, value in w.get_manager_state(drop_defaults=False)["state"].items():
            state[key] = value
    return {report.WIDGET_STATE_MIME: {"version_major": 2, "version_minor": 0, "state": state}}


def _executed_notebook():
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2], name="curve"))
    dropdown = widgets.Dropdown(options=["Kuhn", "Leduc"], value="Leduc", description="game")
    slider = widgets.FloatLogSlider(value=1e-3, base=10, min=-5, max=0, description="mu")
    check = widgets.Checkbox(value=True, description="show average")
    readout = widgets.HTML("NashConv 1.5e-03").add_class("companion-readout")
    output = widgets.Output().add_class("companion-figure")
    output.outputs = ({"output_type": "display_data", "data": {PLOTLY: fig.to_plotly_json(), "text/plain": "fig"}, "metadata": {}},)
    box = widgets.VBox([widgets.HBox([dropdown, slider, check]), readout, output]).add_class("companion-explorer")
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = _state(box)
    plot_cell = nbformat.v4.new_code_cell("fig", execution_count=1)
    plot_cell.outputs = [nbformat.v4.new_output("display_data", data={PLOTLY: fig.to_plotly_json()}, metadata={})]
    widget_cell = nbformat.v4.new_code_cell("explorer", execution_count=2)
    widget_cell.outputs = [nbformat.v4.new_output("display_data", data={VIEW: {"model_id": box.model_id, "version_major": 2},
                                                                        "text/plain": "VBox(...)"}, metadata={})]
    math = nbformat.v4.new_markdown_cell("The estimate $\\hat\\pi = 4 \\bar{x}$.")
    nb.cells = [math, plot_cell, widget_cell]
    return nb


def test_plotly_outputs_get_an_html_twin_and_widgets_a_static_first_view():
    nb = _executed_notebook()
    ready = report.prepare_for_html(nb)
    assert "widgets" not in ready.metadata and "widgets" in nb.metadata  # a copy; the original keeps its state
    plot_html = ready.cells[1].outputs[0]["data"]["text/html"]
    assert "Plotly.newPlot" in plot_html and '"curve"' in plot_html
    data = ready.cells[2].outputs[0]["data"]
    assert VIEW not in data and "text/plain" not in data
    view = data["text/html"]
    assert "companion-explorer" in view and "companion-readout" in view and "NashConv 1.5e-03" in view
    assert re.search(r"<option selected>Leduc</option>", view) and "<option>Kuhn</option>" in view
    assert "<span class='w-value'>0.001</span>" in view and "value='-2.99" in view  # log slider: value, and its exponent
    assert "checked" in view and "Plotly.newPlot" in view and "disabled" in view


def test_a_widget_without_saved_state_keeps_its_plain_text():
    nb = _executed_notebook()
    nb.metadata.pop("widgets")
    data = report.prepare_for_html(nb).cells[2].outputs[0]["data"]
    assert data == {"text/plain": "VBox(...)"}


def test_rendered_page_loads_nothing_from_the_network(tmp_path):
    path = tmp_path / "01_demo.ipynb"
    nbformat.write(_executed_notebook(), path)
    page = report.render_html(path).read_text()
    sources = re.findall(r"<(?:script|link|img)[^>]+(?:src|href)=['\"]([^'\"]+)", page)
    assert sources and all(not s.startswith(("http:", "https:", "//")) for s in sources), sources
    assert any(s.startswith(report.MATHJAX_DIR + "/MathJax.js") for s in sources)
    assert (tmp_path / report.MATHJAX_DIR / "MathJax.js").exists()
    assert page.count("Plotly.newPlot") == 2 and report.plotly_js()[:200] not in page
    assert "_static/plotly.min.js" in sources and (tmp_path / report.PLOTLY_FILE).exists()  # plotly.js once, in the run folder
    assert "embed-amd" not in page and "require.min.js" not in page and "mermaid" not in page.split("<body")[0]
    assert (path.with_suffix(".html").stat().st_mode & 0o044) == 0o044  # readable by others (umask 022)


def test_first_figure_skips_widgets_and_huge_figures(tmp_path):
    path = tmp_path / "x.ipynb"
    nbformat.write(_executed_notebook(), path)
    assert thumbnails.first_figure(path)["data"][0]["name"] == "curve"
    assert thumbnails.first_figure(path, max_bytes=10) is None
    assert thumbnails.first_figure(tmp_path / "missing.ipynb") is None


def test_figure_widget_json_puts_binary_buffers_back():
    import base64

    import numpy as np

    y = np.array([0.5, -1.25, 3.0])
    model = {"state": {"_widget_data": [{"type": "scatter", "x": [1, 2, 3], "y": {"dtype": "float64", "shape": [3]}}],
                       "_widget_layout": {"title": {"text": "t"}}, "_config": {"displaylogo": False}},
             "buffers": [{"path": ["_widget_data", 0, "y", "buffer"], "data": base64.b64encode(y.tobytes()).decode()}]}
    fig = report.figure_widget_json(model)
    assert fig["data"][0]["y"] == [0.5, -1.25, 3.0] and fig["data"][0]["x"] == [1, 2, 3]
    assert fig["layout"] == {"title": {"text": "t"}} and fig["config"] == {"displaylogo": False}
    assert model["state"]["_widget_data"][0]["y"] == {"dtype": "float64", "shape": [3]}  # the saved state untouched
