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

import ast
import copy
import html
import itertools
import json
import re
import shutil
from dataclasses import asdict
from pathlib import Path

from companion.core.atomic import write_json_atomic, write_text_atomic
from companion.core.paths import repo_path
from companion.core.verdicts import VERDICTS

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


VERDICT_COLOURS = {"reproduced": ("#1a7f37", "#dafbe1"), "partly reproduced": ("#9a6700", "#fff8c5"),
                   "not reproduced": ("#cf222e", "#ffebe9"), "inconclusive": ("#0969da", "#ddf4ff"),
                   "not run here": ("#57606a", "#eaeef2")}
STATUS_COLOURS = {"passed": ("#1a7f37", "#dafbe1"), "failed": ("#cf222e", "#ffebe9"), "timed out": ("#cf222e", "#ffebe9"), "lost": ("#cf222e", "#ffebe9"),
                  "interrupted": ("#9a6700", "#fff8c5"), "not run": ("#57606a", "#eaeef2"), "running": ("#0969da", "#ddf4ff")}

INDEX_CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;padding:0 16px;color:#1f2328}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 10px}.sub{color:#57606a;margin:0 0 16px}
.badge{display:inline-block;border-radius:12px;padding:1px 9px;font-size:12px;font-weight:600;margin:2px 4px 2px 0;white-space:nowrap}
.counts{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}.count{border:1px solid #d0d7de;border-radius:8px;padding:8px 14px;min-width:90px}
.count b{display:block;font-size:22px}.count span{font-size:12px;color:#57606a}
.banner{border-radius:8px;padding:10px 14px;margin:12px 0;font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:14px}
.card{border:1px solid #d0d7de;border-radius:8px;padding:12px;display:flex;flex-direction:column;gap:6px}
.card h3{font-size:14px;margin:0;line-height:1.35}.card h3 a{color:#0969da;text-decoration:none}.card .meta{font-size:12px;color:#57606a}
.thumb{height:170px;border:1px solid #eaeef2;border-radius:4px;overflow:hidden}.thumb.empty{display:flex;align-items:center;justify-content:center;color:#8c959f;font-size:12px}
table.claims{border-collapse:collapse;width:100%;table-layout:fixed}
table.claims th,table.claims td{border-bottom:1px solid #d0d7de;padding:6px 8px;text-align:left;vertical-align:top;white-space:normal;overflow-wrap:anywhere;font-size:13px}
table.claims th{background:#f6f8fa}table.claims td.paper{font-weight:600}table.claims td.evidence{font-size:12px;color:#57606a;font-variant-numeric:tabular-nums}
.error{color:#cf222e;font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap}
pre.cell{background:#f6f8fa;border-radius:4px;padding:6px;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere;max-height:220px;overflow:auto}
"""


def badge(text: str, colours: dict) -> str:
    fg, bg = colours.get(text, ("#57606a", "#eaeef2"))
    return f"<span class='badge' style='color:{fg};background:{bg}'>{html.escape(text)}</span>"


def write_index(out_dir: Path, results: list[NotebookResult], parameters: dict, *, status: str = "passed",
                planned: list[str] | None = None, stopping: str | None = None, started: str | None = None) -> None:
    """``index.html`` and ``summary.json`` for the results so far (written again after every notebook)."""
    from companion.runner import FAILED, runtime_text

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

    cards = []
    for stem in planned:
        r = done.get(stem)
        title = paper_title(stem)
        shown_status = r.status if r else ("not run" if status == "interrupted" else "running")
        badges = badge(shown_status, STATUS_COLOURS)
        if r:
            tally: dict[str, int] = {}
            for c in r.claims:
                tally[c["verdict"]] = tally.get(c["verdict"], 0) + 1
            badges += "".join(badge(f"{n} {v}" if n > 1 else v, {f"{n} {v}" if n > 1 else v: VERDICT_COLOURS.get(v, ("#57606a", "#eaeef2"))})
                              for v, n in tally.items())
        figure = None
        if r and r.status == "passed":
            figure = first_figure(out_dir / f"{stem}.ipynb")
        if figure:
            layout = dict(figure.get("layout", {}))
            layout.update(height=170, margin=dict(l=30, r=10, t=28, b=24), showlegend=False, font=dict(size=9))
            layout.pop("width", None)
            title_text = (layout.get("title") or {}).get("text") if isinstance(layout.get("title"), dict) else layout.get("title")
            layout["title"] = dict(text=title_text or "", font=dict(size=11), x=0.02)
            thumb = f"<div class='thumb'>{plotly_html({'data': figure.get('data', []), 'layout': layout}, height=170, static=True)}</div>"
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
        cards.append(f"<div class='card'><h3><a href='{html.escape(link)}'>{html.escape(title)}</a></h3>"
                     f"<div class='meta'>{meta}</div><div>{badges}</div>{thumb}{error}</div>")

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
    needs_plotly = any("companion-plot" in c for c in cards)
    plotly = ""
    if needs_plotly:
        plotly = f"<script>{plotly_js()}</script>"
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Companion run " + html.escape(out_dir.name) + "</title>"
        f"<style>{INDEX_CSS}</style>{plotly}</head><body>"
        f"<h1>Companion run {html.escape(out_dir.name)} {badge(status, STATUS_COLOURS)}</h1>"
        f"<p class='sub'>{len(planned)} notebook(s){' · started ' + html.escape(started) if started else ''}</p>{params}"
        f"<div class='counts'>{count_html}</div>{banner}"
        f"<h2>Papers</h2><div class='cards'>{''.join(cards)}</div>"
        "<h2>Claims: what the paper says, what this run measured</h2>"
        "<table class='claims'><colgroup><col style='width:12%'><col style='width:15%'><col style='width:18%'>"
        "<col style='width:20%'><col style='width:12%'><col style='width:10%'><col style='width:13%'></colgroup>"
        "<tr><th>paper</th><th>claim</th><th>paper says</th><th>measured here</th><th>scale</th><th>verdict</th>"
        "<th>evidence</th></tr>"
        + "".join(body_rows) + "</table></body></html>"
    )
    write_text_atomic(out_dir / "index.html", page)
    write_json_atomic(out_dir / "summary.json", {
        "status": status, "interrupted_by": stopping, "unfinished": unfinished if status != "passed" else [],
        "started": started, "parameters": parameters, "notebooks": [asdict(r) for r in results]})
