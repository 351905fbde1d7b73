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
from the figure's JSON (:mod:`companion.thumbnails`) when the notebook ran: no plotly.js on the index, no
browser or image-export package needed at run time.
"""

from __future__ import annotations

import ast
import base64
import copy
import html
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
from companion.core.paths import repo_commit, repo_path
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


# A mode-bar button beside the camera (PNG): the figure as SVG. A button with a click handler is JavaScript, so
# it lives here, in the reports' own script; in Lab the camera saves a PNG.
SVG_BUTTON = ("{name:'Download plot as SVG',icon:Plotly.Icons.camera,"
              "click:function(gd){Plotly.downloadImage(gd,{format:'svg',filename:'figure'});}}")


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
            f"<script>(function(){{var a={payload};if(window.Plotly){{a[2].modeBarButtonsToAdd=[{SVG_BUTTON}];"
            f"Plotly.newPlot('{div_id}',a[0],a[1],a[2]);}}"
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
    shows = f"<div class='companion-counts'>{verdict_counts(claims)}</div>{claims_html(headline_rows(claims), executed.stem + '.html')}" if claims else \
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


# ---------------------------------------------------------------------------------------------- provenance

KEY_PACKAGES = ("torch", "triton", "numpy", "scipy", "plotly", "transformers", "papermill", "nbconvert", "dask")


def provenance(profile: str) -> dict:
    """Where and with what a run ran: the commit (``+uncommitted changes`` when the tree differs), the profile,
    the host, the platform, python and the installed versions of :data:`KEY_PACKAGES` (absent ones left out)."""
    packages = {}
    for name in KEY_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"commit": repo_commit(), "profile": profile, "host": platform.node(), "platform": platform.platform(terse=True),
            "python": platform.python_version(), "packages": packages}


def provenance_text(prov: dict) -> str:
    """The provenance as one line of HTML."""
    commit = prov.get("commit") or "no git checkout"
    short = commit[:10] + commit[40:] if len(commit) >= 40 else commit
    versions = " · ".join(f"{k} {v}" for k, v in {"python": prov.get("python"), **prov.get("packages", {})}.items())
    return (f"commit <code title='{html.escape(commit)}'>{html.escape(short)}</code> · profile {html.escape(str(prov.get('profile')))}"
            f" · host {html.escape(str(prov.get('host')))} ({html.escape(str(prov.get('platform')))})<br>{html.escape(versions)}")


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
