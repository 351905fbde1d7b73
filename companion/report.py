"""The HTML reports of a run: each executed notebook as an article that shows every figure offline,
and the run's landing page (``index.html``).

nbconvert's HTML exporter drops plotly's mimetype output (``application/vnd.plotly.v1+json``) and
renders widgets with a widget manager and MathJax fetched from CDNs, so a report read offline has no
figures, blank explorers and raw ``$$…$$``. Here, before the export (on a copy; the executed
``.ipynb`` stays as papermill wrote it):

- every plotly output gets a ``text/html`` twin (a ``<div>`` and a ``Plotly.newPlot`` call);
- every widget view is replaced by a static HTML rendering of its saved state (nbclient stores the
  widget state in the executed notebook): the explorer's title, its controls at their first values
  (shown, disabled), its readout and its figure — the explorer's first view. No pip package ships
  the ``@jupyter-widgets/html-manager`` embed bundle (ipywidgets, jupyterlab_widgets and
  widgetsnbextension ship only the JupyterLab and classic-notebook extensions), and the explorers
  are built from a small set of core widgets, so the rendering is done here;
- plotly.js (from the ``plotly`` package) and MathJax (from ``jupyter-server-mathjax``) are copied once
  into the run folder (``_static/``) and referenced relatively, so a copied run folder keeps working;
- the template loads nothing from the network (no require.js, no widget manager, no mermaid).

The page reads as an article: previous / index / next links, the run's provenance, "What this run
shows" (the verdict counts and the headline rows of the claims table), a table of contents of the
notebook's sections, and every code cell folded (one click shows it).

The index groups the papers by theme (:data:`THEMES`), starts with the tour, filters by theme and verdict
with a few lines of plain JavaScript, and shows each notebook's first figure as a small SVG drawn here
from the figure's JSON (:func:`thumbnail_svg`) when the notebook ran: no plotly.js on the index, no
browser or image-export package needed at run time.
"""

from __future__ import annotations

import ast
import base64
import copy
import html
import io
import itertools
import json
import platform
import re
import shutil
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from companion.core.atomic import write_json_atomic, write_text_atomic
from companion.core.claims import VERDICT_COLOURS, claims_html
from companion.core.paths import repo_path
from companion.core.verdicts import VERDICTS

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE_MIME = "application/vnd.jupyter.widget-state+json"
STATIC_DIR = "_static"  # plotly.js and MathJax, copied once into a run folder
MATHJAX_DIR = f"{STATIC_DIR}/mathjax"
PLOTLY_FILE = f"{STATIC_DIR}/plotly.min.js"
MATHJAX_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"

_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>
<script src="{{ resources.companion_root }}{{ resources.companion_plotly_file }}"></script>
<style>{{ resources.companion_css }}</style>
{%- endblock html_head_js_requirejs -%}
{%- block body_header -%}
{{ super() }}
{{ resources.companion_header }}
{%- endblock body_header -%}
{% block input_group -%}
<details class="companion-code"><summary>code</summary>
{{ super() }}
</details>
{%- endblock input_group %}
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
main { max-width: 1100px; margin: 0 auto; }
details.companion-code > summary { cursor: pointer; color: #57606a; font-size: 12px; padding: 2px 0 2px 8px;
  list-style-position: inside; user-select: none; }
details.companion-code > summary:hover { color: #0969da; }
.companion-head, .companion-nav { font-family: var(--jp-ui-font-family, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif); }
.companion-head { border: 1px solid #d0d7de; border-radius: 8px; padding: 12px 16px; margin: 12px 8px 18px;
  font-size: 14px; line-height: 1.45; }
.companion-nav { display: flex; justify-content: space-between; gap: 12px; font-size: 13px; margin: 8px 8px 0; }
.companion-nav a { color: #0969da; text-decoration: none; } .companion-nav .index { white-space: nowrap; } .companion-nav .next { text-align: right; }
.companion-head h2 { font-size: 16px; margin: 0 0 6px; } .companion-head .sub { color: #57606a; font-size: 12px; }
.companion-head .error { color: #cf222e; font-family: ui-monospace, monospace; font-size: 12px; }
.companion-head ol.companion-toc { margin: 4px 0 0; padding-left: 22px; columns: 2; }
.companion-head button { font-size: 12px; margin-top: 8px; cursor: pointer; }
.companion-pill { display: inline-block; border-radius: 999px; padding: 1px 9px; font-weight: 600; font-size: 12px; margin: 0 4px 4px 0; }
"""


def plotly_js() -> str:
    """The plotly.js bundle shipped in the ``plotly`` package."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def mathjax_source() -> Path:
    """The MathJax 2 tree shipped in the ``jupyter-server-mathjax`` package."""
    import jupyter_server_mathjax

    return Path(jupyter_server_mathjax.__file__).parent / "static"


def install_static(out_dir: Path) -> Path:
    """Copy MathJax and plotly.js into ``out_dir/_static`` once per run folder; return that folder."""
    target = Path(out_dir) / MATHJAX_DIR
    if not (target / "MathJax.js").exists():
        tmp = target.with_name(target.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(mathjax_source(), tmp, ignore=shutil.ignore_patterns("*.map", "__pycache__"))
        try:
            tmp.rename(target)
        except OSError:  # another thread won the race
            shutil.rmtree(tmp, ignore_errors=True)
    plotly_file = Path(out_dir) / PLOTLY_FILE
    if not plotly_file.exists():
        write_text_atomic(plotly_file, plotly_js())
    return Path(out_dir) / STATIC_DIR


_plot_ids = itertools.count(1)  # next() on a count is atomic in CPython: unique ids across the runner's threads


def plotly_html(figure: dict, height: int | None = None) -> str:
    """A ``<div>`` and the script that draws ``figure`` (a plotly JSON dict) into it; plotly.js must be on the page."""
    div_id = f"companion-plot-{next(_plot_ids)}"
    layout = dict(figure.get("layout", {}))
    if height:
        layout["height"] = height
    config = {**figure.get("config", {}), "responsive": True, "displaylogo": False}  # companion.viz's mode bar kept
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


def figure_widget_json(model: dict) -> dict:
    """The plotly JSON (``data``, ``layout``, ``config``) of a saved plotly ``FigureWidget`` model: its state's
    ``_widget_data`` / ``_widget_layout`` / ``_config``, with the numpy arrays it sent as binary buffers (base64
    in the saved state, each at a ``path`` ending in ``buffer``) put back as lists."""
    import numpy as np

    state = {k: copy.deepcopy(model["state"].get(k)) for k in ("_widget_data", "_widget_layout", "_config")}
    for buf in model.get("buffers", []):
        *where, _ = buf["path"]
        node = state
        for key in where[:-1]:
            node = node[key]
        spec = node[where[-1]]
        node[where[-1]] = np.frombuffer(base64.b64decode(buf["data"]), dtype=spec["dtype"]).reshape(spec["shape"]).tolist()
    return {"data": state["_widget_data"] or [], "layout": state["_widget_layout"] or {}, "config": state["_config"] or {}}


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
    elif name == "AnyModel" and "_widget_data" in state:  # a plotly FigureWidget: its figure as last set
        inner = f"<div class='{classes}'>{plotly_html(figure_widget_json(model))}</div>"
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


def render_html(executed: Path, target: Path | None = None, *, root: str = "", neighbours: tuple = (None, None),
                install: bool = True) -> Path:
    """Write the offline HTML report of an executed notebook (beside it unless ``target`` is given).

    ``root`` is the run folder relative to the page ("" or "../" for a sweep point), where ``_static/`` and
    ``index.html`` are; ``neighbours`` the stems of the previous and next notebooks of the run (or None);
    ``install`` copies ``_static/`` there (the runner's driver does it once instead)."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    executed = Path(executed)
    target = Path(target) if target else executed.with_suffix(".html")
    if install:
        install_static(target.parent / root)
    nb = nbformat.read(executed, as_version=4)
    profile = nb.get("metadata", {}).get("papermill", {}).get("parameters", {}).get("PROFILE", "auto")
    claims_file = executed.with_name(f"{executed.stem}.claims.json")
    claims = json.loads(claims_file.read_text(encoding="utf-8"))["claims"] if claims_file.exists() else []
    exporter = HTMLExporter(template_name="lab", extra_loaders=[jinja2.DictLoader({"companion_report.html.j2": _TEMPLATE})],
                            template_file="companion_report.html.j2")
    exporter.mathjax_url = f"{root}{MATHJAX_DIR}/MathJax.js?config={MATHJAX_CONFIG}"
    header = article_header(executed, claims, provenance(profile), root, neighbours)
    body, _ = exporter.from_notebook_node(prepare_for_html(nb), resources={
        "companion_root": root, "companion_plotly_file": PLOTLY_FILE, "companion_css": CSS, "companion_header": header,
        "metadata": {"name": executed.stem}})
    write_text_atomic(target, body.replace(TOC_MARK, table_of_contents(body), 1))
    return target


TOC_MARK = "<!--companion-toc-->"
HEADLINE_ROWS = 3  # rows of the claims table shown under "What this run shows"
_SECTION = re.compile(r'<h2 id="([^"]+)">(.*?)<a class="anchor-link"', re.S)


def table_of_contents(body: str) -> str:
    """An ordered list of links to the page's ``##`` sections (the anchors nbconvert gave them)."""
    items = "".join(f"<li><a href='#{html.escape(anchor, quote=True)}'>{text.strip()}</a></li>"
                    for anchor, text in _SECTION.findall(body))
    return f"<ol class='companion-toc'>{items}</ol>" if items else ""


def headline_rows(claims: list[dict]) -> list[dict]:
    """The rows "What this run shows" quotes: the first :data:`HEADLINE_ROWS` in the table's order, those this run
    settled (reproduced, partly or not) before the inconclusive ones, and those before the rows not run here."""
    rank = {"inconclusive": 1, "not run here": 2}
    return sorted(claims, key=lambda c: rank.get(c["verdict"], 0))[:HEADLINE_ROWS]


def verdict_counts(claims: list[dict]) -> str:
    """One coloured pill per verdict present, with its count, in the order of ``VERDICTS``."""
    tally = {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}
    return "".join(f"<span class='companion-pill' style='color:{VERDICT_COLOURS[v][0]};background:{VERDICT_COLOURS[v][1]}'>"
                   f"{n} {html.escape(v)}</span>" for v, n in tally.items() if n)


def article_header(executed: Path, claims: list[dict], prov: dict, root: str, neighbours: tuple) -> str:
    """The top of a report: previous / index / next links, the title and provenance, "What this run shows"
    (verdict counts and headline rows, from the claims this run recorded), the failing cell if any, the table
    of contents (:data:`TOC_MARK`, filled after the export) and a button that unfolds every code cell."""
    from companion.runner import first_error

    def link(stem, cls, arrow):
        if not stem:
            return f"<span class='{cls}'></span>"
        text = f"{arrow} {stem[:2]} · {paper_title(stem)}" if arrow == "←" else f"{stem[:2]} · {paper_title(stem)} {arrow}"
        return f"<a class='{cls}' rel='{cls}' href='{html.escape(stem)}.html'>{html.escape(text)}</a>"

    previous, following = neighbours
    nav = (f"<nav class='companion-nav'>{link(previous, 'prev', '←')}"
           f"<a class='index' href='{root}index.html'>run index</a>{link(following, 'next', '→')}</nav>")
    shows = f"<div>{verdict_counts(claims)}</div>{claims_html(headline_rows(claims), executed.stem + '.html')}" if claims else \
        "<p>This run recorded no claims.</p>"
    cell, error = first_error(executed)
    failed = f"<p class='error'>Stopped at code cell {cell}: {html.escape(error)}</p>" if cell else ""
    more = f"<p class='sub'>{len(claims) - len(headline_rows(claims))} more row(s) in the Reproduce section.</p>" \
        if len(claims) > HEADLINE_ROWS else ""
    return (f"{nav}<section class='companion-head'><h2>{html.escape(paper_title(executed.stem))}</h2>"
            f"<p class='sub'>{provenance_text(prov)}</p>"
            f"<h2>What this run shows</h2>{failed}{shows}{more}<h2>Contents</h2>{TOC_MARK}"
            "<button type='button' onclick=\"var d=document.querySelectorAll('details.companion-code'),o=![...d].every(e=>e.open);"
            "d.forEach(e=>e.open=o);this.textContent=o?'fold all code':'show all code'\">show all code</button></section>")


def first_figure(executed: Path, max_bytes: int | None = 400_000, accept=None) -> dict | None:
    """The first plotly figure an executed notebook shows outside explorers (for which ``accept(figure)``
    holds, when given), or None; figures whose JSON is longer than ``max_bytes`` are skipped."""
    try:
        nb = json.loads(Path(executed).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            figure = out.get("data", {}).get(PLOTLY_MIME)
            if (figure and (max_bytes is None or len(json.dumps(figure)) <= max_bytes)
                    and (accept is None or accept(figure))):
                return figure
    return None


# ---------------------------------------------------------------------------------------------- provenance

KEY_PACKAGES = ("torch", "triton", "numpy", "scipy", "plotly", "transformers", "papermill", "nbconvert", "dask")


def provenance(profile: str) -> dict:
    """Where and with what a run ran: the commit (``+uncommitted changes`` when the tree differs), the profile,
    the host, the platform, python and the installed versions of :data:`KEY_PACKAGES` (absent ones left out)."""
    from companion.bench import _commit

    packages = {}
    for name in KEY_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"commit": _commit(), "profile": profile, "host": platform.node(), "platform": platform.platform(terse=True),
            "python": platform.python_version(), "packages": packages}


def provenance_text(prov: dict) -> str:
    """The provenance as one line of HTML."""
    commit = prov.get("commit") or "no git checkout"
    short = commit[:10] + commit[40:] if len(commit) >= 40 else commit
    versions = " · ".join(f"{k} {v}" for k, v in {"python": prov.get("python"), **prov.get("packages", {})}.items())
    return (f"commit <code title='{html.escape(commit)}'>{html.escape(short)}</code> · profile {html.escape(str(prov.get('profile')))}"
            f" · host {html.escape(str(prov.get('host')))} ({html.escape(str(prov.get('platform')))})<br>{html.escape(versions)}")


# ---------------------------------------------------------------------------------------------- thumbnails

THUMB_SIZE = (320, 180)  # px: drawn at the size the index shows it
THUMB_PAD = 6  # px around the plot areas
MAX_LINE_POINTS = 800  # a longer line is thinned to this many vertices
MAX_MARKERS = 1500
DRAWN = ("scatter", "scattergl", "bar", "heatmap", "image")


def _array(value):
    """A plotly JSON array: a list, or plotly's typed array ``{"dtype", "bdata", "shape"}`` as numpy."""
    import numpy as np

    if isinstance(value, dict) and "bdata" in value:
        a = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            a = a.reshape([int(n) for n in (shape.split(",") if isinstance(shape, str) else shape)])
        return a
    return value


def _rgb(colour) -> tuple[int, int, int]:
    """``#rgb``, ``#rrggbb``, ``rgb()``/``rgba()`` or a CSS name as an RGB triple (grey when unknown)."""
    from PIL import ImageColor

    text = str(colour).strip()
    match = re.fullmatch(r"rgba?\(([^)]*)\)", text.replace(" ", ""))
    if match:
        return tuple(int(float(v)) for v in match.group(1).split(",")[:3])
    try:
        return ImageColor.getrgb(text)[:3]
    except ValueError:
        return (128, 128, 128)


def _colour_map(values, colorscale, lo=None, hi=None):
    """``values`` (any shape) through a plotly colorscale (a name or ``[[pos, colour], ...]``): uint8 RGBA, NaN transparent."""
    import numpy as np
    import plotly.colors

    scale = plotly.colors.get_colorscale(colorscale) if isinstance(colorscale, str) else colorscale
    pos = np.array([float(p) for p, _ in scale])
    rgb = np.array([_rgb(c) for _, c in scale], dtype=float)
    v = np.asarray(values, dtype=float)
    lo = np.nanmin(v) if lo is None else lo
    hi = np.nanmax(v) if hi is None else hi
    t = np.clip((v - lo) / (hi - lo), 0, 1) if hi > lo else np.zeros_like(v)
    out = np.zeros(v.shape + (4,), dtype=np.uint8)
    for k in range(3):
        out[..., k] = np.interp(np.nan_to_num(t), pos, rgb[:, k]).round()
    out[..., 3] = np.where(np.isnan(v), 0, 255)
    return out


class _Axis:
    """One axis of a figure: its type, categories, range and the slice of the canvas it spans."""

    def __init__(self, layout: dict, name: str):
        letter, suffix = name[0], name[1:]
        spec = layout.get(f"{letter}axis{suffix}") or {}
        over = spec.get("overlaying")
        base = (layout.get(f"{letter}axis{over[1:]}") or {}) if over and over != "free" else spec
        self.domain = base.get("domain", [0.0, 1.0])
        self.log = spec.get("type") == "log"
        self.categories: dict[str, int] = {}
        autorange = spec.get("autorange")
        self.range = spec.get("range") if spec.get("range") and autorange in (None, False) else None
        self.reversed = autorange == "reversed"
        self.name, self.anchor = name, spec.get("scaleanchor")  # an axis drawn at its anchor's units per pixel
        self.seen: list[float] = []

    def coords(self, values):
        """Data values as floats on this axis (categories numbered as they appear, log10 on a log axis, NaN gaps)."""
        import numpy as np

        values = _array(values)
        if values is None:
            return np.array([], dtype=float)
        if isinstance(values, np.ndarray) and values.dtype.kind in "iuf":
            out = values.astype(float)
        else:
            values = list(values)
            if any(isinstance(v, str) for v in values):
                out = np.array([self.categories.setdefault(v, len(self.categories)) if isinstance(v, str) else np.nan
                                for v in values], dtype=float)
            else:
                out = np.array([np.nan if v is None else v for v in values], dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.where(out > 0, np.log10(np.where(out > 0, out, 1)), np.nan)
        return out

    def span(self, *values) -> None:
        import numpy as np

        for v in values:
            v = np.asarray(v, dtype=float).ravel()
            v = v[np.isfinite(v)]
            if v.size:
                self.seen += [float(v.min()), float(v.max())]

    def limits(self) -> tuple[float, float]:
        """The axis range: given, else the data's with 4% room."""
        if self.range:
            return tuple(float(r) for r in self.range)
        if not self.seen:
            return 0.0, 1.0
        lo, hi = min(self.seen), max(self.seen)
        room = (hi - lo) * 0.04 or 0.5
        return lo - room, hi + room

    def scale(self, limits: tuple[float, float], lo_px: float, hi_px: float):
        """The map from data to pixels: ``limits`` onto [lo_px, hi_px] (the other way round on a reversed axis)."""
        lo, hi = limits[::-1] if self.reversed else limits
        return lambda v: lo_px + (v - lo) / (hi - lo) * (hi_px - lo_px) if hi != lo else (lo_px + hi_px) / 2


def _equal_units(xlim, ylim, width: float, height: float):
    """Both ranges widened about their centres to the same data units per pixel (plotly's ``scaleanchor``)."""
    unit = max((xlim[1] - xlim[0]) / width, (ylim[1] - ylim[0]) / height)
    widen = lambda lim, px: ((lim[0] + lim[1] - unit * px) / 2, (lim[0] + lim[1] + unit * px) / 2)  # noqa: E731
    return widen(xlim, width), widen(ylim, height)


def _visible(trace: dict) -> bool:
    return trace.get("type", "scatter") in DRAWN and trace.get("visible", True) is True


def drawable(figure: dict) -> bool:
    """Whether :func:`thumbnail_svg` draws something of ``figure``: a visible trace of a kind it draws, with data."""
    import numpy as np

    for t in figure.get("data", []):
        if not _visible(t):
            continue
        if t.get("type") in ("heatmap", "image"):
            if t.get("source") or np.asarray(_array(t.get("z")) if t.get("z") is not None else [], dtype=object).size:
                return True
            continue
        for key in ("y", "x"):
            values = _array(t.get(key))
            if values is not None and any(v is not None for v in np.asarray(values, dtype=object).ravel()):
                return True
    return False


def _png(rgba, size: tuple[int, int], smooth: bool) -> str:
    from PIL import Image

    image = Image.fromarray(rgba).resize((max(1, size[0]), max(1, size[1])),
                                         Image.Resampling.LANCZOS if smooth else Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def thumbnail_svg(figure: dict) -> str | None:
    """A small static SVG of a plotly figure (JSON dict), drawn at :data:`THUMB_SIZE` for the run index: the
    traces of the kinds in :data:`DRAWN` (lines, markers, fills, bars, heat maps and images, on linear, log
    or category axes, in their subplots' domains), without text. None when nothing can be drawn.

    Drawn here rather than exported by plotly (kaleido, not installed, needs a browser) so that ``make run``
    needs nothing beyond the project's own dependencies on any worker."""
    import numpy as np

    width, height = THUMB_SIZE
    layout = figure.get("layout", {}) or {}
    template = (layout.get("template") or {}) if isinstance(layout.get("template"), dict) else {}
    colorway = layout.get("colorway") or template.get("layout", {}).get("colorway") or \
        ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880", "#FF97FF", "#FECB52"]
    sequential = (template.get("layout", {}).get("colorscale", {}) or {}).get("sequential") or "Plasma"
    heatmap_scale = ((template.get("data", {}).get("heatmap") or [{}])[0]).get("colorscale") or sequential
    traces = [(i, t) for i, t in enumerate(figure.get("data", [])) if _visible(t)]
    axes: dict[str, _Axis] = {}

    def axis(name):
        return axes.setdefault(name, _Axis(layout, name))

    # First pass: every trace's coordinates, so that each axis knows its data's extent.
    prepared = []
    for i, t in traces:
        kind = t.get("type", "scatter")
        xa, ya = axis(t.get("xaxis", "x")), axis(t.get("yaxis", "y"))
        colour = (t.get("line") or {}).get("color") or (t.get("marker") or {}).get("color")
        colour = colour if isinstance(colour, str) else colorway[i % len(colorway)]
        if kind in ("heatmap", "image"):
            if kind == "image":
                if t.get("source"):
                    from PIL import Image

                    raw = np.asarray(Image.open(io.BytesIO(base64.b64decode(t["source"].split(",", 1)[1]))).convert("RGBA"))
                else:
                    z = np.asarray(_array(t.get("z")), dtype=float)
                    raw = np.concatenate([z[..., :3], z[..., 3:4] * 255 if z.shape[-1] == 4 else np.full(z.shape[:2] + (1,), 255.0)], -1)
                    raw = np.clip(raw, 0, 255).astype(np.uint8)
                rows, cols = raw.shape[:2]
                x0, dx, y0, dy = t.get("x0", 0), t.get("dx", 1), t.get("y0", 0), t.get("dy", 1)
                xs = (x0 - dx / 2, x0 + (cols - 0.5) * dx)
                ys = (y0 - dy / 2, y0 + (rows - 0.5) * dy)
                if not ya.range and "autorange" not in (layout.get(f"yaxis{t.get('yaxis', 'y')[1:]}") or {}):
                    ya.reversed = True  # plotly draws an image's first row at the top
                ya.anchor = ya.anchor or xa.name  # and its pixels square
                smooth = True
            else:
                z = _array(t.get("z"))
                z = z.astype(float) if isinstance(z, np.ndarray) else \
                    np.array([[np.nan if v is None else v for v in row] for row in z or []], dtype=float)
                if z.ndim != 2 or not np.isfinite(z).any():
                    continue
                if t.get("transpose"):
                    z = z.T
                raw = _colour_map(z, t.get("colorscale") or heatmap_scale, t.get("zmin"), t.get("zmax"))
                rows, cols = z.shape

                def edges(values, n, ax):
                    c = ax.coords(values) if values is not None else np.arange(n, dtype=float)
                    if c.size != n or not np.isfinite(c).all():
                        c = np.arange(n, dtype=float)
                    step = (c[-1] - c[0]) / (n - 1) if n > 1 else 1.0
                    return c[0] - step / 2, c[-1] + step / 2

                xs, ys = edges(t.get("x"), cols, xa), edges(t.get("y"), rows, ya)
                smooth = False
            xa.span(xs)
            ya.span(ys)
            prepared.append((0, i, kind, t, xa, ya, (raw, xs, ys, smooth), colour))
            continue
        x, y = t.get("x"), t.get("y")
        if kind == "bar" and t.get("orientation") == "h":
            xv, yv = xa.coords(x), ya.coords(y) if y is not None else None
            if yv is None:
                yv = np.arange(len(xv), dtype=float)
        else:
            yv = ya.coords(y)
            xv = xa.coords(x) if x is not None else np.arange(len(yv), dtype=float)
        n = min(len(xv), len(yv))
        xv, yv = xv[:n], yv[:n]
        if not n:
            continue
        prepared.append((1 if kind == "bar" else 2, i, kind, t, xa, ya, (xv, yv), colour))

    # Bars: group (default), stack or overlay, as the layout's barmode says.
    bar_mode = layout.get("barmode", "group")
    bars = [p for p in prepared if p[2] == "bar"]
    groups: dict[tuple, list] = {}
    for p in bars:
        groups.setdefault((id(p[4]), id(p[5])), []).append(p)
    bar_geometry = {}
    for members in groups.values():
        horizontal = members[0][3].get("orientation") == "h"
        positions = np.concatenate([p[6][1] if horizontal else p[6][0] for p in members])
        distinct = np.unique(positions[np.isfinite(positions)])
        spacing = float(np.min(np.diff(distinct))) if distinct.size > 1 else 1.0
        slot = 0.8 * spacing / (len(members) if bar_mode == "group" else 1)
        base: dict[float, float] = {}
        for k, p in enumerate(members):
            pos, val = (p[6][1], p[6][0]) if horizontal else p[6]
            offset = (k - (len(members) - 1) / 2) * slot if bar_mode == "group" else 0.0
            starts = np.array([base.get(q, 0.0) for q in pos]) if bar_mode in ("stack", "relative") else np.zeros_like(val)
            ends = starts + np.nan_to_num(val)
            if bar_mode in ("stack", "relative"):
                for q, e in zip(pos, ends):
                    base[q] = e
            bar_geometry[p[1]] = (pos + offset, slot, starts, ends, horizontal)
            value_axis, position_axis = (p[4], p[5]) if horizontal else (p[5], p[4])
            value_axis.span(starts, ends)
            position_axis.span(pos - spacing / 2, pos + spacing / 2)
    for p in prepared:
        if p[2] not in ("bar", "heatmap", "image"):
            p[4].span(p[6][0])
            p[5].span(p[6][1])

    inner_w, inner_h = width - 2 * THUMB_PAD, height - 2 * THUMB_PAD
    parts, clips, frames = [], [], {}
    previous_line: dict[tuple, tuple] = {}
    for order, i, kind, t, xa, ya, data, colour in sorted(prepared, key=lambda p: (p[0], p[1])):
        left, right = THUMB_PAD + xa.domain[0] * inner_w, THUMB_PAD + xa.domain[1] * inner_w
        top, bottom = THUMB_PAD + (1 - ya.domain[1]) * inner_h, THUMB_PAD + (1 - ya.domain[0]) * inner_h
        xlim, ylim = xa.limits(), ya.limits()
        if ya.anchor == xa.name or xa.anchor == ya.name:
            xlim, ylim = _equal_units(xlim, ylim, right - left, bottom - top)
        fx, fy = xa.scale(xlim, left, right), ya.scale(ylim, bottom, top)
        key = (round(left), round(top), round(right), round(bottom))
        if key not in frames:
            frames[key] = f"c{len(frames)}"
            clips.append(f"<clipPath id='{frames[key]}'><rect x='{left:.1f}' y='{top:.1f}' width='{right - left:.1f}' "
                         f"height='{bottom - top:.1f}'/></clipPath>")
        clip = f" clip-path='url(#{frames[key]})'"
        opacity = _scalar(t.get("opacity"), 1.0)
        if kind in ("heatmap", "image"):
            raw, xs, ys, smooth = data
            px = sorted((fx(xs[0]), fx(xs[1])))
            py = sorted((fy(ys[0]), fy(ys[1])))
            if fx(xs[0]) > fx(xs[1]):
                raw = raw[:, ::-1]
            if fy(ys[0]) > fy(ys[1]):  # row 0 lies at ys[0]: below the last row on the page, unless the axis is reversed
                raw = raw[::-1]
            size = (int(round(px[1] - px[0])), int(round(py[1] - py[0])))
            parts.append(f"<image x='{px[0]:.1f}' y='{py[0]:.1f}' width='{size[0]}' height='{size[1]}' preserveAspectRatio='none'"
                         f" opacity='{opacity}' href='{_png(np.ascontiguousarray(raw), size, smooth)}'{clip}/>")
        elif kind == "bar":
            pos, slot, starts, ends, horizontal = bar_geometry[i]
            fill = (t.get("marker") or {}).get("color")
            fills = list(fill) if isinstance(fill, (list, tuple)) and all(isinstance(c, str) for c in fill) else None
            rects = []
            for k, (q, s0, s1) in enumerate(zip(pos, starts, ends)):
                if not (np.isfinite(q) and np.isfinite(s1)):
                    continue
                if horizontal:
                    xs_, ys_ = sorted((fx(s0), fx(s1))), sorted((fy(q - slot / 2), fy(q + slot / 2)))
                else:
                    xs_, ys_ = sorted((fx(q - slot / 2), fx(q + slot / 2))), sorted((fy(s0), fy(s1)))
                colour_k = fills[k % len(fills)] if fills else colour
                rects.append(f"<rect x='{xs_[0]:.1f}' y='{ys_[0]:.1f}' width='{max(xs_[1] - xs_[0], 0.5):.1f}' "
                             f"height='{max(ys_[1] - ys_[0], 0.5):.1f}' fill='{html.escape(colour_k)}'/>")
            parts.append(f"<g opacity='{opacity}'{clip}>{''.join(rects)}</g>")
        else:
            xv, yv = data
            mode = t.get("mode") or ("lines+markers" if len(xv) < 20 else "lines")
            points = np.stack([fx(xv), fy(yv)], axis=1)
            finite = np.isfinite(points).all(axis=1)
            fill = t.get("fill", "none")
            if fill in ("toself", "tozeroy", "tonexty") and finite.any():
                poly = points[finite]
                if fill == "tozeroy":
                    zero = bottom if ya.log else fy(0.0)
                    poly = np.concatenate([poly, [[poly[-1, 0], zero], [poly[0, 0], zero]]])
                elif fill == "tonexty" and (xa, ya) in previous_line:
                    poly = np.concatenate([poly, previous_line[(xa, ya)][::-1]])
                fill_colour = t.get("fillcolor") or colour
                parts.append(f"<polygon points='{_svg_points(poly)}' fill='{html.escape(fill_colour)}' "
                             f"fill-opacity='{1.0 if t.get('fillcolor') else 0.3}' stroke='none'{clip}/>")
            previous_line[(xa, ya)] = points[finite]
            if "lines" in mode:
                line = t.get("line") or {}
                stroke = min(max(_scalar(line.get("width"), 2) * 0.75, 1.0), 3.0)
                for run in _runs(points, finite):
                    parts.append(f"<polyline points='{_svg_points(run)}' fill='none' stroke='{html.escape(colour)}' "
                                 f"stroke-width='{stroke:.2f}' stroke-linejoin='round' opacity='{opacity}'{clip}/>")
            if "markers" in mode:
                marker = t.get("marker") or {}
                radius = min(max(_scalar(marker.get("size"), 6) * 0.3, 1.0), 3.5)
                colours = marker.get("color")
                colours = _array(colours)
                if isinstance(colours, (list, np.ndarray)) and len(colours) == len(points):
                    if all(isinstance(c, str) for c in colours):
                        fills = list(colours)
                    else:
                        rgba = _colour_map(np.asarray(colours, dtype=float), marker.get("colorscale") or sequential,
                                           marker.get("cmin"), marker.get("cmax"))
                        fills = [f"rgb({r},{g},{b})" for r, g, b, _ in rgba]
                else:
                    fills = [colour] * len(points)
                keep = np.flatnonzero(finite)[:: max(1, int(finite.sum()) // MAX_MARKERS + 1) if finite.sum() > MAX_MARKERS else 1]
                dots = "".join(f"<circle cx='{points[k, 0]:.1f}' cy='{points[k, 1]:.1f}' r='{radius:.1f}' "
                               f"fill='{html.escape(str(fills[k]))}'/>" for k in keep)
                parts.append(f"<g opacity='{_scalar(marker.get('opacity'), 1.0) * opacity}'{clip}>{dots}</g>")
    if not parts:
        return None
    frame = "".join(f"<rect x='{l}' y='{t}' width='{r - l}' height='{b - t}' fill='none' stroke='#d0d7de' stroke-width='0.6'/>"
                    for (l, t, r, b) in frames)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' viewBox='0 0 {width} {height}'>"
            f"<defs>{''.join(clips)}</defs><rect width='{width}' height='{height}' fill='#ffffff'/>{frame}{''.join(parts)}</svg>")


def _runs(points, finite):
    """The unbroken stretches of a line (NaN values break it), each thinned to at most MAX_LINE_POINTS vertices."""
    import numpy as np

    breaks = np.flatnonzero(np.diff(finite.astype(int)) != 0) + 1
    for chunk, ok in zip(np.split(points, breaks), np.split(finite, breaks)):
        if ok[0] and len(chunk) > 1:
            step = max(1, len(chunk) // MAX_LINE_POINTS)
            yield np.concatenate([chunk[::step], chunk[-1:]]) if step > 1 else chunk


def _scalar(value, default: float) -> float:
    """A style value that may be given per point (a size, an opacity): its median; ``default`` when absent."""
    import numpy as np

    if value is None:
        return default
    values = np.asarray(_array(value), dtype=float).ravel()
    return float(np.nanmedian(values)) if values.size else default


def _svg_points(points) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def write_thumbnail(executed: Path, target: Path | None = None) -> Path | None:
    """The index thumbnail of an executed notebook, ``<stem>.thumb.svg`` beside it (or ``target``): its first
    figure outside explorers that :func:`thumbnail_svg` can draw. None (nothing written) when there is none."""
    executed = Path(executed)
    figure = first_figure(executed, max_bytes=None, accept=drawable)
    svg = thumbnail_svg(figure) if figure else None
    if svg is None:
        return None
    target = Path(target) if target else executed.with_name(f"{executed.stem}.thumb.svg")
    write_text_atomic(target, svg)
    return target


# ---------------------------------------------------------------------------------------------- the run index

def paper_title(stem: str) -> str:
    """The title of ``companion.<slug>.PAPER``, read from its ``__init__.py`` without importing it; else the
    notebook's first heading; else the slug."""
    slug = stem[3:]
    init = repo_path("companion", slug, "__init__.py")
    try:
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PAPER" for t in node.targets)
                    and isinstance(node.value, ast.Call)):
                for kw in node.value.keywords:
                    if kw.arg == "title" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                        return kw.value.value
    except (OSError, SyntaxError):
        pass
    try:
        nb = json.loads(repo_path("notebooks", f"{stem}.ipynb").read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "markdown":
                text = "".join(cell.get("source", ""))
                match = re.search(r"^# (.+)$", text, re.M)
                if match:
                    return re.sub(r"[*_`]", "", match.group(1)).strip()
    except (OSError, ValueError):
        pass
    return slug


STATUS_COLOURS = {"passed": ("#1a7f37", "#dafbe1"), "failed": ("#cf222e", "#ffebe9"), "timed out": ("#cf222e", "#ffebe9"), "lost": ("#cf222e", "#ffebe9"),
                  "interrupted": ("#9a6700", "#fff8c5"), "not run": ("#57606a", "#eaeef2"), "running": ("#0969da", "#ddf4ff")}

TOUR = "tour"  # the notebook the index starts with, in a section of its own
TOUR_THEME = "start here"
THEMES = {  # the index's sections, in order, and the papers (by slug) in each
    "attention and KV cache": ("seer_attention", "scalekv", "zeros_attention", "delta_attention", "nemotron_flash"),
    "quantisation and distillation": ("dartquant", "low_rank_clone", "lorasuite"),
    "sampling and uncertainty": ("cpmla", "kernelshap", "diverse_sampling"),
    "games and search": ("sudoku_dfs", "rtcfr", "gain_rl"),
    "geometry and graphs": ("hyperet", "graph_multiview", "ortho_residual", "hollowflow"),
    "video": ("gaussian_video",),
}
OTHER_THEME = "other notebooks"  # a notebook no theme names (a new paper, a test's notebook)


def theme_of(stem: str) -> str:
    """The index section of a notebook (``NN_<slug>``)."""
    slug = stem[3:]
    return TOUR_THEME if slug == TOUR else next((theme for theme, slugs in THEMES.items() if slug in slugs), OTHER_THEME)


INDEX_CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;padding:0 16px;color:#1f2328}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 10px}.sub{color:#57606a;margin:0 0 16px}
.badge{display:inline-block;border-radius:12px;padding:1px 9px;font-size:12px;font-weight:600;margin:2px 4px 2px 0;white-space:nowrap}
.counts{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}.count{border:1px solid #d0d7de;border-radius:8px;padding:8px 14px;min-width:90px}
.count b{display:block;font-size:22px}.count span{font-size:12px;color:#57606a}
.banner{border-radius:8px;padding:10px 14px;margin:12px 0;font-weight:600}
.provenance{font-size:12px;color:#57606a;margin:0 0 12px;line-height:1.5}
.tour{display:flex;gap:18px;align-items:center;border:2px solid #0969da;border-radius:10px;padding:14px 18px;margin:16px 0;background:#f6f8fa}
.tour .go{font-size:18px;font-weight:600}.tour .go a{color:#0969da;text-decoration:none}.tour p{margin:6px 0 0;color:#57606a}
.filters{display:flex;flex-wrap:wrap;gap:6px 16px;margin:16px 0 4px;font-size:13px;align-items:center}
.filters button{border:1px solid #d0d7de;background:#fff;border-radius:14px;padding:3px 11px;font-size:12px;cursor:pointer}
.filters button.on{background:#0969da;color:#fff;border-color:#0969da}
[hidden]{display:none!important}.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:14px}
.card{border:1px solid #d0d7de;border-radius:8px;padding:12px;display:flex;flex-direction:column;gap:6px}
.card h3{font-size:14px;margin:0;line-height:1.35}.card h3 a{color:#0969da;text-decoration:none}.card .meta{font-size:12px;color:#57606a}
.thumb{width:100%;max-width:320px;aspect-ratio:16/9;border:1px solid #eaeef2;border-radius:4px;display:block}
.thumb.empty{display:flex;align-items:center;justify-content:center;color:#8c959f;font-size:12px}
table.claims{border-collapse:collapse;width:100%;table-layout:fixed}
table.claims th,table.claims td{border-bottom:1px solid #d0d7de;padding:6px 8px;text-align:left;vertical-align:top;white-space:normal;overflow-wrap:anywhere;font-size:13px}
table.claims th{background:#f6f8fa}table.claims td.paper{font-weight:600}table.claims td.evidence{font-size:12px;color:#57606a;font-variant-numeric:tabular-nums}
.error{color:#cf222e;font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap}
pre.cell{background:#f6f8fa;border-radius:4px;padding:6px;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere;max-height:220px;overflow:auto}
"""

# The filters: a card shows when its theme and one of its verdicts are chosen; a theme's section hides when empty.
FILTER_JS = """
(function(){var chosen={theme:'all',verdict:'all'};
function apply(){document.querySelectorAll('.card').forEach(function(c){
  var t=chosen.theme==='all'||c.dataset.theme===chosen.theme;
  var v=chosen.verdict==='all'||c.dataset.verdicts.split('|').indexOf(chosen.verdict)>=0;
  c.hidden=!(t&&v);});
 document.querySelectorAll('section.theme').forEach(function(s){s.hidden=!s.querySelector('.card:not([hidden])');});}
document.querySelectorAll('.filters button').forEach(function(b){b.addEventListener('click',function(){
  chosen[b.dataset.filter]=b.dataset.value;
  document.querySelectorAll('.filters button[data-filter='+b.dataset.filter+']').forEach(function(o){o.classList.toggle('on',o===b);});
  apply();});});})();
"""


def badge(text: str, colours: dict) -> str:
    fg, bg = colours.get(text, ("#57606a", "#eaeef2"))
    return f"<span class='badge' style='color:{fg};background:{bg}'>{html.escape(text)}</span>"


def _card(out_dir: Path, stem: str, r, status: str) -> str:
    """One paper's card: title, notebook and time, status and verdict badges, its thumbnail, its error."""
    from companion.runner import runtime_text

    shown_status = r.status if r else ("not run" if status == "interrupted" else "running")
    badges = badge(shown_status, STATUS_COLOURS)
    tally: dict[str, int] = {}
    for c in (r.claims if r else []):
        tally[c["verdict"]] = tally.get(c["verdict"], 0) + 1
    badges += "".join(badge(f"{n} {v}" if n > 1 else v, {f"{n} {v}" if n > 1 else v: VERDICT_COLOURS.get(v, ("#57606a", "#eaeef2"))})
                      for v, n in tally.items())
    title = paper_title(stem)
    thumb_file = f"{stem}.thumb.svg"
    if r and (out_dir / thumb_file).exists():
        thumb = f"<img class='thumb' src='{html.escape(thumb_file)}' width='320' height='180' alt='first figure of {html.escape(stem)}'>"
    else:
        thumb = "<div class='thumb empty'>no figure</div>"
    link = f"{stem}.html" if (out_dir / f"{stem}.html").exists() else f"{stem}.ipynb"
    meta = f"{html.escape(stem)} · {runtime_text(r)}" if r else html.escape(stem)
    error = ""
    if r and r.status != "passed":
        where = f"cell {r.failing_cell}: " if r.failing_cell else ""
        error = f"<div class='error'>{html.escape(where + r.error)}</div>"
        if r.failing_source:
            error += f"<pre class='cell'>{html.escape(r.failing_source)}</pre>"
    filters = "|".join(tally) if tally else "none"
    return (f"<div class='card' data-theme='{html.escape(theme_of(stem))}' data-verdicts='{html.escape(filters)}'>"
            f"<h3><a href='{html.escape(link)}'>{html.escape(title)}</a></h3>"
            f"<div class='meta'>{meta}</div><div>{badges}</div><a href='{html.escape(link)}'>{thumb}</a>{error}</div>")


def write_index(out_dir: Path, results: list[NotebookResult], parameters: dict, *, status: str = "passed",
                planned: list[str] | None = None, stopping: str | None = None, started: str | None = None,
                prov: dict | None = None) -> None:
    """``index.html`` and ``summary.json`` for the results so far (written again after every notebook).

    The page: the run's provenance (``prov``, else :func:`provenance` now), the counts, "start with the tour",
    filters by theme and verdict, one section of cards per theme (:data:`THEMES`) and the full claims table."""
    from companion.runner import FAILED

    prov = prov or provenance(parameters.get("PROFILE", "auto"))
    planned = planned or [r.notebook for r in results]
    done = {r.notebook: r for r in results}
    unfinished = [s for s in planned if s not in done or done[s].status in ("interrupted", "not run")]
    verdicts = {v: 0 for v in VERDICTS}
    for r in results:
        for c in r.claims:
            verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
    passed = sum(r.status == "passed" for r in results)
    failed = sum(r.status in FAILED for r in results)

    counts = [("passed", passed, "passed"), ("failed", failed, "failed")]
    if unfinished:
        counts.append(("did not finish" if status != "running" else "to go", len(unfinished), "interrupted" if status != "running" else "running"))
    count_html = "".join(
        f"<div class='count' style='border-color:{STATUS_COLOURS[k][0]}'><b style='color:{STATUS_COLOURS[k][0]}'>{n}</b><span>notebooks {label}</span></div>"
        for label, n, k in counts)
    count_html += "".join(
        f"<div class='count'><b style='color:{VERDICT_COLOURS[v][0]}'>{n}</b><span>{html.escape(v)}</span></div>"
        for v, n in verdicts.items() if n)
    banner = ""
    if status == "interrupted":
        banner = (f"<div class='banner' style='color:#9a6700;background:#fff8c5'>Interrupted by {html.escape(stopping or 'a signal')}: "
                  f"{len(unfinished)} notebook(s) did not finish: {html.escape(', '.join(unfinished))}. "
                  "The notebooks that finished before the stop have their results below.</div>")
    elif status == "running":
        banner = f"<div class='banner' style='color:#0969da;background:#ddf4ff'>Running: {html.escape(', '.join(unfinished))} still to finish.</div>"

    tour = next((s for s in planned if s[3:] == TOUR), None)
    start = ""
    if tour:
        link = f"{tour}.html" if (out_dir / f"{tour}.html").exists() else f"{tour}.ipynb"
        start = (f"<div class='tour'><div><div class='go'><a class='start' href='{html.escape(link)}'>Start with the tour →</a></div>"
                 f"<p>{html.escape(paper_title(tour))}: on a toy with a known answer, how every paper notebook works (parameters "
                 "and profiles, the explorer, the claims table, the GPU section, the checks).</p></div></div>")
    themes_present = [t for t in [TOUR_THEME, *THEMES, OTHER_THEME] if any(theme_of(s) == t for s in planned)]
    sections = [f"<section class='theme'><h2>{html.escape(theme[0].upper() + theme[1:])}</h2><div class='cards'>"
                + "".join(_card(out_dir, s, done.get(s), status) for s in planned if theme_of(s) == theme) + "</div></section>"
                for theme in themes_present]
    filter_buttons = (
        "<div class='filters'><span>theme:</span><button class='on' data-filter='theme' data-value='all'>all</button>"
        + "".join(f"<button data-filter='theme' data-value='{html.escape(t)}'>{html.escape(t)}</button>" for t in themes_present)
        + "</div><div class='filters'><span>verdict:</span><button class='on' data-filter='verdict' data-value='all'>all</button>"
        + "".join(f"<button data-filter='verdict' data-value='{html.escape(v)}'>{html.escape(v)}</button>" for v, n in verdicts.items() if n)
        + "</div>")

    body_rows = []
    for r in results:
        title = html.escape(paper_title(r.notebook))
        link = f"<a href='{html.escape(r.notebook)}.html'>{html.escape(r.notebook)}</a>"
        claims = r.claims or []
        if not claims:
            where = f"cell {r.failing_cell}: " if r.failing_cell else ""
            text = where + r.error if r.status != "passed" else "(no claims recorded)"
            body_rows.append(f"<tr><td class='paper'>{link}<br><small>{title}</small></td><td colspan='4'>{html.escape(text)}</td>"
                             f"<td>{badge(r.status, STATUS_COLOURS)}</td><td></td></tr>")
            continue
        for i, c in enumerate(claims):
            first = (f"<td class='paper' rowspan='{len(claims)}'>{link}<br><small>{title}</small></td>" if i == 0 else "")
            body_rows.append(f"<tr>{first}<td>{html.escape(c['claim'])}</td><td>{html.escape(c.get('paper', ''))}</td>"
                             f"<td>{html.escape(c['measured'])}</td><td>{html.escape(c['scale'])}</td>"
                             f"<td>{badge(c['verdict'], VERDICT_COLOURS)}</td>"
                             f"<td class='evidence'>{html.escape(c.get('evidence', ''))}</td></tr>")
    params = (f"<p class='sub'>parameters: {html.escape(', '.join(f'{k}={v}' for k, v in parameters.items()))}</p>" if parameters else "")
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Companion run " + html.escape(out_dir.name) + "</title>"
        f"<style>{INDEX_CSS}</style></head><body>"
        f"<h1>Companion run {html.escape(out_dir.name)} {badge(status, STATUS_COLOURS)}</h1>"
        f"<p class='sub'>{len(planned)} notebook(s){' · started ' + html.escape(started) if started else ''}</p>{params}"
        f"<p class='provenance'>{provenance_text(prov)}</p>"
        f"<div class='counts'>{count_html}</div>{banner}{start}{filter_buttons}{''.join(sections)}"
        "<h2>Claims: what the paper says, what this run measured</h2>"
        "<table class='claims'><colgroup><col style='width:12%'><col style='width:15%'><col style='width:18%'>"
        "<col style='width:20%'><col style='width:12%'><col style='width:10%'><col style='width:13%'></colgroup>"
        "<tr><th>paper</th><th>claim</th><th>paper says</th><th>measured here</th><th>scale</th><th>verdict</th>"
        "<th>evidence</th></tr>"
        + "".join(body_rows) + f"</table><script>{FILTER_JS}</script></body></html>"
    )
    write_text_atomic(out_dir / "index.html", page)
    write_json_atomic(out_dir / "summary.json", {
        "status": status, "interrupted_by": stopping, "unfinished": unfinished if status != "passed" else [],
        "started": started, "parameters": parameters, "provenance": prov, "notebooks": [asdict(r) for r in results]})
