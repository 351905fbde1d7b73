"""The HTML reports of a run: each executed notebook as a page that shows every figure offline.

nbconvert's HTML exporter drops plotly's mimetype output (``application/vnd.plotly.v1+json``) and
renders widgets with a widget manager and MathJax fetched from CDNs, so a report read offline has no
figures, blank explorers and raw ``$$…$$``. Here, before the export (on a copy; the executed
``.ipynb`` stays as papermill wrote it):

- every plotly output gets a ``text/html`` twin (a ``<div>`` and a ``Plotly.newPlot`` call), and the
  page embeds plotly.js once, from the ``plotly`` package;
- every widget view is replaced by a static HTML rendering of its saved state (nbclient stores the
  widget state in the executed notebook): the explorer's title, its controls at their first values
  (shown, disabled), its readout and its figure — the explorer's first view. No pip package ships
  the ``@jupyter-widgets/html-manager`` embed bundle (ipywidgets, jupyterlab_widgets and
  widgetsnbextension ship only the JupyterLab and classic-notebook extensions), and the explorers
  are built from a small set of core widgets, so the rendering is done here;
- MathJax comes from the ``jupyter-server-mathjax`` package, copied once into the run folder
  (``_static/mathjax``) and referenced relatively, so a copied run folder keeps working;
- the template loads nothing from the network (no require.js, no widget manager, no mermaid).
"""

from __future__ import annotations

import copy
import html
import itertools
import json
import shutil
from pathlib import Path

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
MATHJAX_DIR = "_static/mathjax"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"

_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>
<script>{{ resources.companion_plotly_js }}</script>
<style>{{ resources.companion_css }}</style>
{%- endblock html_head_js_requirejs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block html_head_js_mathjax -%}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({
  TeX: {equationNumbers: {autoNumber: "AMS", useLabelIds: true}},
  tex2jax: {inlineMath: [['$', '$'], ["\\\\(", "\\\\)"]], displayMath: [['$$', '$$'], ["\\\\[", "\\\\]"]],
            processEscapes: true, processEnvironments: true},
  displayAlign: 'center', messageStyle: 'none',
  "HTML-CSS": {availableFonts: ["STIX-Web"], preferredFont: "STIX-Web", webFont: "STIX-Web", imageFont: null,
               linebreaks: {automatic: true}},
  SVG: {font: "STIX-Web"}
});
</script>
<script src="{{ resources.mathjax_url }}"></script>
{%- endblock html_head_js_mathjax -%}
"""

CSS = """
.companion-static { border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 10px; margin: 4px 0; }
.companion-static-note { color: #57606a; font-size: 12px; margin-bottom: 6px; }
.companion-static .w-row { display: flex; flex-flow: row wrap; gap: 6px 18px; align-items: center; }
.companion-static .w-col { display: flex; flex-direction: column; gap: 6px; }
.companion-static .w-control { display: inline-flex; align-items: center; gap: 6px; font-size: 13px; }
.companion-static .w-control select, .companion-static .w-control input { font-size: 13px; }
.companion-static .w-value { font-variant-numeric: tabular-nums; color: #24292f; }
.companion-static .companion-readout { font-size: 13px; }
"""


def plotly_js() -> str:
    """The plotly.js bundle shipped in the ``plotly`` package."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def mathjax_source() -> Path:
    """The MathJax 2 tree shipped in the ``jupyter-server-mathjax`` package."""
    import jupyter_server_mathjax

    return Path(jupyter_server_mathjax.__file__).parent / "static"


def install_mathjax(out_dir: Path) -> Path:
    """Copy MathJax into ``out_dir/_static/mathjax`` once per run folder; return that folder."""
    target = Path(out_dir) / MATHJAX_DIR
    if not (target / "MathJax.js").exists():
        tmp = target.with_name(target.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(mathjax_source(), tmp, ignore=shutil.ignore_patterns("*.map", "__pycache__"))
        try:
            tmp.rename(target)
        except OSError:  # another thread won the race
            shutil.rmtree(tmp, ignore_errors=True)
    return target


_plot_ids = itertools.count(1)  # next() on a count is atomic in CPython: unique ids across the runner's threads


def plotly_html(figure: dict, height: int | None = None, static: bool = False) -> str:
    """A ``<div>`` and the script that draws ``figure`` (a plotly JSON dict) into it; plotly.js must be on the page."""
    div_id = f"companion-plot-{next(_plot_ids)}"
    layout = dict(figure.get("layout", {}))
    if height:
        layout["height"] = height
    config = {"responsive": True, "displaylogo": False}
    if static:
        config.update(staticPlot=True)
    payload = json.dumps([figure.get("data", []), layout, config]).replace("</", "<\\/")
    style = f"height:{height}px" if height else ""
    return (f"<div id='{div_id}' class='plotly-graph-div companion-plot' style='{style}'></div>"
            f"<script>(function(){{var a={payload};if(window.Plotly){{Plotly.newPlot('{div_id}',a[0],a[1],a[2]);}}"
            f"else{{document.getElementById('{div_id}').innerText='plotly.js is missing from this page';}}}})();</script>")


# ---------------------------------------------------------------------------------------------- widgets


def _model_id(ref) -> str:
    return ref[len("IPY_MODEL_"):] if isinstance(ref, str) and ref.startswith("IPY_MODEL_") else ref


def _render_output(out: dict) -> str:
    data = out.get("data", {})
    kind = out.get("output_type")
    if kind == "stream":
        return f"<pre>{html.escape(out.get('text', ''))}</pre>"
    if kind == "error":
        return f"<pre>{html.escape(str(out.get('ename')))}: {html.escape(str(out.get('evalue')))}</pre>"
    if PLOTLY_MIME in data:
        return plotly_html(data[PLOTLY_MIME])
    if "text/html" in data:
        return "".join(data["text/html"]) if isinstance(data["text/html"], list) else data["text/html"]
    if "image/png" in data:
        return f"<img src='data:image/png;base64,{data['image/png']}'>"
    if "image/svg+xml" in data:
        return data["image/svg+xml"]
    if "text/plain" in data:
        text = "".join(data["text/plain"]) if isinstance(data["text/plain"], list) else data["text/plain"]
        return f"<pre>{html.escape(text)}</pre>"
    return ""


def _label(state: dict) -> str:
    text = state.get("description") or ""
    return f"<span class='w-label'>{html.escape(text)}</span>" if text else ""


def render_widget(model_id: str, models: dict, depth: int = 0) -> str:
    """Static HTML for one widget model of a saved widget state (its first view)."""
    model = models.get(_model_id(model_id))
    if model is None or depth > 30:
        return ""
    name, state = model.get("model_name", ""), model.get("state", {})
    layout = models.get(_model_id(state.get("layout")), {}).get("state", {})
    if layout.get("display") == "none" or layout.get("visibility") == "hidden":
        return ""
    classes = " ".join(html.escape(c) for c in state.get("_dom_classes", []))
    children = lambda: "".join(render_widget(c, models, depth + 1) for c in state.get("children", []))  # noqa: E731
    disabled = "disabled"
    if name in ("VBoxModel", "BoxModel", "GridBoxModel", "AccordionModel", "TabModel", "StackModel"):
        inner = f"<div class='w-col {classes}'>{children()}</div>"
    elif name == "HBoxModel":
        inner = f"<div class='w-row {classes}'>{children()}</div>"
    elif name in ("HTMLModel", "HTMLMathModel"):
        inner = f"<div class='{classes}'>{_label(state)}{state.get('value', '')}</div>"
    elif name == "LabelModel":
        inner = f"<div class='{classes}'>{html.escape(str(state.get('value', '')))}</div>"
    elif name in ("DropdownModel", "SelectModel", "RadioButtonsModel", "ToggleButtonsModel"):
        labels, index = state.get("_options_labels", []), state.get("index")
        options = "".join(f"<option{' selected' if i == index else ''}>{html.escape(str(t))}</option>" for i, t in enumerate(labels))
        inner = f"<label class='w-control {classes}'>{_label(state)}<select {disabled}>{options}</select></label>"
    elif name in ("SelectionSliderModel",):
        labels, index = state.get("_options_labels", []), state.get("index") or 0
        shown = labels[index] if 0 <= index < len(labels) else ""
        inner = (f"<label class='w-control {classes}'>{_label(state)}<input type='range' min='0' max='{max(len(labels) - 1, 0)}' "
                 f"value='{index}' {disabled}><span class='w-value'>{html.escape(str(shown))}</span></label>")
    elif name in ("IntSliderModel", "FloatSliderModel", "FloatLogSliderModel"):
        shown = value = state.get("value")
        if name == "FloatLogSliderModel" and isinstance(value, (int, float)) and value > 0:  # min/max are exponents
            import math

            value = math.log(value, state.get("base", 10))
        inner = (f"<label class='w-control {classes}'>{_label(state)}<input type='range' min='{state.get('min')}' max='{state.get('max')}' "
                 f"step='{state.get('step')}' value='{value}' {disabled}><span class='w-value'>{html.escape(_number(shown))}</span></label>")
    elif name in ("IntRangeSliderModel", "FloatRangeSliderModel"):
        lo, hi = (state.get("value") or [None, None])[:2]
        inner = f"<label class='w-control {classes}'>{_label(state)}<span class='w-value'>{_number(lo)} – {_number(hi)}</span></label>"
    elif name in ("CheckboxModel", "ToggleButtonModel"):
        checked = " checked" if state.get("value") else ""
        inner = f"<label class='w-control {classes}'><input type='checkbox'{checked} {disabled}>{_label(state)}</label>"
    elif name == "ButtonModel":
        inner = f"<button class='{classes}' {disabled}>{html.escape(state.get('description', ''))}</button>"
    elif name in ("TextModel", "IntTextModel", "FloatTextModel", "BoundedIntTextModel", "BoundedFloatTextModel", "TextareaModel"):
        inner = f"<label class='w-control {classes}'>{_label(state)}<input value='{html.escape(str(state.get('value', '')))}' {disabled}></label>"
    elif name == "OutputModel":
        inner = f"<div class='{classes}'>{''.join(_render_output(o) for o in state.get('outputs', []))}</div>"
    else:
        inner = f"<div class='companion-static-note'>({html.escape(name or 'a widget')}: interactive only in a running notebook)</div>"
    return inner


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def static_widget(view: dict, models: dict) -> str:
    body = render_widget(view.get("model_id", ""), models)
    if not body:
        return ""
    return ("<div class='companion-static'><div class='companion-static-note'>First view, saved with this run; "
            "open the notebook in JupyterLab to move the controls.</div>" + body + "</div>")


# ---------------------------------------------------------------------------------------------- notebook


def prepare_for_html(nb):
    """A copy of an executed notebook in which every figure and explorer has an offline HTML form."""
    nb = copy.deepcopy(nb)
    models = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE_MIME, {}).get("state", {})
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            data = out.get("data")
            if not data:
                continue
            if PLOTLY_MIME in data and "text/html" not in data:
                data["text/html"] = plotly_html(data[PLOTLY_MIME])
            if WIDGET_VIEW_MIME in data:
                view = data.pop(WIDGET_VIEW_MIME)
                rendered = static_widget(view, models)
                if rendered:
                    data["text/html"] = rendered
                    data.pop("text/plain", None)
    nb.get("metadata", {}).pop("widgets", None)
    return nb


def render_html(executed: Path, target: Path | None = None, mathjax_url: str | None = None) -> Path:
    """Write the offline HTML report of an executed notebook (beside it unless ``target`` is given)."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    from companion.core.atomic import write_text_atomic

    executed = Path(executed)
    target = Path(target) if target else executed.with_suffix(".html")
    if mathjax_url is None:
        install_mathjax(target.parent)
        mathjax_url = f"{MATHJAX_DIR}/MathJax.js?config={MATHJAX_CONFIG}"
    nb = prepare_for_html(nbformat.read(executed, as_version=4))
    exporter = HTMLExporter(template_name="lab", extra_loaders=[jinja2.DictLoader({"companion_report.html.j2": _TEMPLATE})],
                            template_file="companion_report.html.j2")
    exporter.mathjax_url = mathjax_url
    body, _ = exporter.from_notebook_node(nb, resources={"companion_plotly_js": plotly_js(), "companion_css": CSS,
                                                         "metadata": {"name": executed.stem}})
    write_text_atomic(target, body)
    return target


def first_figure(executed: Path, max_bytes: int = 400_000) -> dict | None:
    """The first plotly figure an executed notebook shows (outside explorers first), or None; large ones are skipped."""
    try:
        nb = json.loads(Path(executed).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            figure = out.get("data", {}).get(PLOTLY_MIME)
            if figure and len(json.dumps(figure)) <= max_bytes:
                return figure
    return None
