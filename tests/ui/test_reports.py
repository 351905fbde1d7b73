"""The run's HTML reports, read offline in Chromium: every figure drawn, every explorer's first view
shown, equations typeset, code folded, the contents and the links between papers working, and no request
leaving the machine; the index loads in under 2 s with a legible thumbnail per paper and working filters.

The sweep report comes from ``$COMPANION_SWEEP``, else ``build/test-sweep`` (left by the runner tests), else a
2-point sweep of the tour made here.
The reports come from ``$COMPANION_REPORTS`` (a runner output folder), else from
``build/test-notebooks`` when ``make test-notebooks`` left one, else the tour is executed here with
the runner.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from companion.core import repo_path

from .conftest import SCREENSHOTS

PLOTLY_MIME = "application/vnd.plotly.v1+json"


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    for candidate in (os.environ.get("COMPANION_REPORTS"), repo_path("build", "test-notebooks")):
        if candidate and (Path(candidate) / "index.html").exists():
            return Path(candidate).resolve()
    out = tmp_path_factory.mktemp("reports") / "run"
    proc = subprocess.run([sys.executable, "-m", "companion.runner", "--papers", "tour", "--profile", "cpu", "--timeout", "300",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def offline_page(browser):
    context = browser.new_context(viewport={"width": 1300, "height": 900}, offline=True)
    page = context.new_page()
    outside, errors = [], []
    page.route("**/*", lambda route: (route.continue_() if route.request.url.startswith(("file:", "data:", "about:"))
                                      else (outside.append(route.request.url), route.abort())))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, page, outside, errors


def markdown_sections(executed: Path) -> int:
    """The ``##`` headings of an executed notebook's markdown cells."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    return sum(len(re.findall(r"^## ", "".join(c["source"]), re.M)) for c in nb["cells"] if c["cell_type"] == "markdown")


def expected_figures(executed: Path) -> tuple[int, int]:
    """(top-level plotly outputs, widget views) in an executed notebook."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    figures = views = 0
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            figures += PLOTLY_MIME in data
            views += "application/vnd.jupyter.widget-view+json" in data
    return figures, views


NOTEBOOKS = sorted(p.stem for p in repo_path("notebooks").glob("[0-9][0-9]_*.ipynb"))


def claims_of(html_page) -> list:
    """The claims the run recorded for the notebook of ``html_page`` (empty when it recorded none)."""
    path = html_page.with_name(f"{html_page.stem}.claims.json")
    return json.loads(path.read_text())["claims"] if path.exists() else []


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_report_page_shows_figures_explorers_and_equations_offline(name, reports, browser):
    html_page = reports / f"{name}.html"
    run = [n["notebook"] for n in json.loads((reports / "summary.json").read_text())["notebooks"]]
    if name not in run:
        pytest.skip(f"the run in {reports} did not include {name} (make test-notebooks runs every notebook)")
    assert html_page.exists(), f"the run in {reports} wrote no report for {name}"
    executed = html_page.with_suffix(".ipynb")
    figures, views = expected_figures(executed)
    code_cells = sum(c["cell_type"] == "code" for c in json.loads(executed.read_text(encoding="utf-8"))["cells"])
    context, page, outside, errors = offline_page(browser)
    try:
        page.goto(html_page.as_uri())
        page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot').length >= {figures + views}", timeout=60_000)
        explorers = page.locator(".companion-static .companion-explorer")
        assert explorers.count() >= views, f"{html_page.name}: {explorers.count()} explorer views for {views} widget outputs"
        for i in range(explorers.count()):
            assert explorers.nth(i).locator(".js-plotly-plot .main-svg").count() > 0, f"{html_page.name}: explorer {i} has no figure"
        page.wait_for_function("() => !window.MathJax || !MathJax.Hub || MathJax.Hub.queue.pending === 0", timeout=60_000)
        raw_math = page.evaluate("() => [...document.querySelectorAll('.jp-MarkdownOutput')].some(e => /\\$\\$|\\\\frac|\\\\sum/.test(e.innerText))")
        assert not raw_math, f"{html_page.name}: raw TeX left in the page (MathJax did not typeset it)"
        # Claims tables left-aligned with verdict pills; every figure's mode bar without Plotly Cloud or the logo,
        # with the SVG download beside the camera.
        cells = page.locator("table.companion-claims td")
        assert cells.count() > 0 or not claims_of(html_page), f"{html_page.name}: no claims table"
        assert page.evaluate("() => [...document.querySelectorAll('table.companion-claims td')]"
                             ".every(td => getComputedStyle(td).textAlign === 'left')"), f"{html_page.name}: claims not left-aligned"
        assert page.locator("table.companion-claims .companion-pill").count() >= min(1, cells.count())
        bar = page.evaluate("() => ({cloud: document.querySelectorAll('.modebar-btn[data-title*=\"Chart Studio\"],"
                            " .modebar-btn[data-title*=\"Share\"]').length, logo: document.querySelectorAll("
                            "'.modebar-btn--logo').length, svg: document.querySelectorAll("
                            "'.modebar-btn[data-title=\"Download plot as SVG\"]').length,"
                            " plots: document.querySelectorAll('.js-plotly-plot').length})")
        assert bar["cloud"] == 0 and bar["logo"] == 0, f"{html_page.name}: a Plotly Cloud control or logo: {bar}"
        assert bar["svg"] == bar["plots"], f"{html_page.name}: not every figure offers SVG: {bar}"
        # Every code cell folded; one click on its summary shows it.
        folded = page.locator("details.companion-code")
        assert folded.count() == code_cells, f"{html_page.name}: {folded.count()} folded inputs for {code_cells} code cells"
        assert page.evaluate("() => [...document.querySelectorAll('details.companion-code')].every(d => !d.open)")
        first_code = folded.first.locator(".jp-InputArea")
        assert not first_code.is_visible()
        folded.first.locator("summary").click()
        assert first_code.is_visible()
        # The contents: one entry per ## section, each pointing at its heading.
        toc = page.locator("ol.companion-toc a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
        assert len(toc) == markdown_sections(executed) > 0, (html_page.name, toc)
        assert all(page.evaluate("h => !!document.getElementById(decodeURIComponent(h.slice(1)))", h) for h in toc), toc
        # "What this run shows": the verdict counts add up to this run's claims; at most three headline rows.
        claims = claims_of(html_page)
        pills = page.locator(".companion-head .companion-counts .companion-pill").all_inner_texts()
        assert sum(int(t.split()[0]) for t in pills) == len(claims), (pills, len(claims))
        assert page.locator(".companion-head table.companion-claims tbody tr").count() == min(3, len(claims))
        # Previous / index / next follow the run's order and lead to pages of this run.
        order = [n["notebook"] for n in json.loads((reports / "summary.json").read_text())["notebooks"]]
        links = {cls: page.locator(f"nav.companion-nav a.{cls}").evaluate_all("a => a.map(e => e.getAttribute('href'))")
                 for cls in ("prev", "index", "next")}
        i = order.index(name)
        assert links["index"] == ["index.html"] and (reports / "index.html").exists()
        assert links["prev"] == ([f"{order[i - 1]}.html"] if i else []), links
        assert links["next"] == ([f"{order[i + 1]}.html"] if i + 1 < len(order) else []), links
        assert all((reports / h).exists() for h in links["prev"] + links["next"]), links
        assert not outside, f"{html_page.name} asked the network for {outside[:5]}"
        assert not errors, f"{html_page.name}: page errors {errors[:3]}"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"report-{html_page.stem}.png"))
    finally:
        context.close()


def test_index_loads_fast_with_themes_filters_and_a_legible_thumbnail_per_paper_offline(reports, browser):
    context, page, outside, errors = offline_page(browser)
    try:
        page.goto((reports / "index.html").as_uri())
        load_ms = page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")
        assert load_ms < 2000, f"index.html took {load_ms:.0f} ms to load"
        summary = json.loads((reports / "summary.json").read_text())
        assert page.locator(".count").count() >= 2
        assert page.locator(".card").count() == len(summary["notebooks"])
        assert page.locator("script[src]").count() == 0 and page.locator(".js-plotly-plot").count() == 0  # no plotly.js here
        passed = [n for n in summary["notebooks"] if n["status"] == "passed"]
        # A thumbnail for every paper that drew a figure: an image of the figure, not a blank box.
        for n in passed:
            card = page.locator(f".card:has(a[href='{n['notebook']}.html'])")
            if not expected_figures(reports / f"{n['notebook']}.ipynb")[0]:
                continue
            img = card.locator("img.thumb")
            assert img.count() == 1, f"{n['notebook']}: no thumbnail"
            assert img.evaluate("i => i.complete && i.naturalWidth > 0"), f"{n['notebook']}: thumbnail not decoded"
            shot = Image.open(io.BytesIO(img.screenshot())).convert("L")
            inked = sum(shot.histogram()[:200])  # pixels clearly darker than the white background
            assert inked > 100, f"{n['notebook']}: thumbnail nearly blank ({inked} dark pixels)"
        if any(n["notebook"].endswith("_tour") for n in summary["notebooks"]):
            start = page.locator(".tour a.start")
            assert start.count() == 1 and (reports / start.get_attribute("href")).exists()
        # The filters: a theme shows only its cards, a verdict only the cards with a claim so judged.
        for kind, attribute in (("theme", "theme"), ("verdict", "verdicts")):
            buttons = page.locator(f".filters button[data-filter='{kind}']")
            assert buttons.count() >= 2
            choice = buttons.nth(1).get_attribute("data-value")
            buttons.nth(1).click()
            shown = page.locator(".card:visible").evaluate_all(f"cs => cs.map(c => c.dataset.{attribute})")
            assert shown and all(choice in value.split("|") for value in shown), (kind, choice, shown)
            buttons.nth(0).click()
            assert page.locator(".card:visible").count() == len(summary["notebooks"])
        assert page.locator("table.claims tr").count() >= 1 + sum(len(n["claims"]) for n in passed)
        assert not outside and not errors, (outside[:5], errors[:3])
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "report-index.png"), full_page=True)
    finally:
        context.close()


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory) -> Path:
    """A sweep folder: ``$COMPANION_SWEEP``, else ``build/test-sweep`` when the runner tests left one (their 2x2
    sweep of the tour), else a 2-point sweep of the tour made here."""
    for candidate in (os.environ.get("COMPANION_SWEEP"), repo_path("build", "test-sweep")):
        if candidate and (Path(candidate) / "index.html").exists():
            return Path(candidate).resolve()
    out = tmp_path_factory.mktemp("sweep") / "run"
    proc = subprocess.run([sys.executable, "-m", "companion.sweep", "tour", "--grid", "N_MAX=[2000,10000]", "--profile", "cpu",
                           "--timeout", "300", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_sweep_report_draws_the_value_against_the_grid_and_the_claims_per_point_offline(sweep_report, browser):
    summary = json.loads((sweep_report / "summary.json").read_text())
    context, page, outside, errors = offline_page(browser)
    try:
        page.goto((sweep_report / "index.html").as_uri())
        page.wait_for_function("() => document.querySelectorAll('.sweep-figure .js-plotly-plot .main-svg').length >= 1", timeout=30_000)
        traces = page.evaluate("() => document.querySelector('.sweep-figure .js-plotly-plot').data.length")
        assert traces >= 1
        assert page.locator(".count").count() >= 2
        assert page.locator("tr.point").count() >= len(summary["points"])
        for link in page.locator("tr.point a").evaluate_all("links => links.map(a => a.getAttribute('href'))"):
            assert (sweep_report / link).exists(), link
        assert not outside and not errors, (outside[:5], errors[:3])
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "report-sweep.png"), full_page=True)
    finally:
        context.close()
