"""The claims table in a real browser: left-aligned where JupyterLab right-aligns output tables (in Lab, on a
saved, untrusted output that Lab sanitizes, and in nbconvert's lab-template HTML of the run's report), with a
folded details element and a link that reaches the cell that measured the row."""

from __future__ import annotations

import subprocess
import sys

import nbformat

from companion.core import Claim, Claims, judge

from .test_widgets import CURRENT_PANEL

PROBE = "99_claims_probe"
MEASURING = "measuring-cell"  # the id of the probe notebook's cell that "measured" the row
ALIGN = """(sel) => [...document.querySelectorAll(sel)].map(td => getComputedStyle(td).textAlign)"""
IN_VIEW = """(id) => {
  const notebook = window.jupyterapp.shell.currentWidget.content;
  const cell = notebook.widgets.find(w => w.model.id === id).node.getBoundingClientRect();
  const view = notebook.node.getBoundingClientRect();
  return cell.bottom > view.top && cell.top < view.bottom;
}"""
# scrolls the link into view until the measuring cell is off screen: on a loaded machine Lab renders the filler
# after the first scroll, which pushes the link down again and leaves the top of the notebook in view
SCROLLED_AWAY = f"""([link, id]) => {{ link.scrollIntoView({{block: "end"}}); return !({IN_VIEW})(id); }}"""


def probe_notebook(path) -> None:
    """A notebook whose saved output is a claims table (one row with details, linked to a cell) next to a plain
    HTML table, the control that JupyterLab's own rule right-aligns."""
    row = Claim("c", "p", "speed-up 28× at n = 55", "s", judge([30.0, 40.0], 20.0, kind="timing", direction="higher"),
                details="n = 13: 1328 vs 47.2 ms", cell=MEASURING)
    table = Claims(PROBE).extend([row]).table()
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    measuring = nbformat.v4.new_code_cell("x = 1")
    measuring.id = MEASURING
    filler = [nbformat.v4.new_markdown_cell("\n\n".join(f"filler paragraph {i}" for i in range(150)))]
    shown = nbformat.v4.new_code_cell("claims.table()", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/html": table._repr_html_() + "<table class='control'><tr><td>plain</td></tr></table>",
                              "text/plain": repr(table)})])
    nb.cells = [measuring, *filler, shown]
    nbformat.write(nb, path)


def test_claims_table_in_jupyterlab_is_left_aligned_and_links_its_cell(lab, browser):
    name = f"{PROBE}.ipynb"
    probe_notebook(lab["root"] / name)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{lab['base']}/lab/workspaces/claims-probe/tree/{name}?reset&token={lab['token']}", timeout=90_000)
        cells = f"{CURRENT_PANEL} table.companion-claims td"
        page.wait_for_selector(cells, timeout=90_000)
        assert set(page.evaluate(ALIGN, cells)) == {"left"}
        assert page.evaluate(ALIGN, f"{CURRENT_PANEL} table.control td") == ["right"]  # Lab's rule is in force
        details = page.locator(f"{CURRENT_PANEL} table.companion-claims details")
        assert details.count() == 1 and not details.evaluate("d => d.open")
        details.locator("summary").click()
        assert details.evaluate("d => d.open") and "1328 vs 47.2 ms" in details.inner_text()
        link = page.locator(f"{CURRENT_PANEL} table.companion-claims a[href*='#cell-id={MEASURING}']")
        page.wait_for_function(SCROLLED_AWAY, arg=[link.element_handle(), MEASURING], timeout=30_000)
        link.click()  # JupyterLab opens the notebook at the fragment: it scrolls the cell into view
        page.wait_for_function(IN_VIEW, arg=MEASURING, timeout=10_000)
    finally:
        context.close()


def test_claims_table_in_the_exported_html_is_left_aligned_and_anchored(tmp_path, browser):
    probe_notebook(tmp_path / f"{PROBE}.ipynb")
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(tmp_path / f"{PROBE}.ipynb")],
                   check=True, capture_output=True, timeout=120)
    context = browser.new_context(viewport={"width": 1400, "height": 900}, offline=True)
    page = context.new_page()
    try:
        page.goto((tmp_path / f"{PROBE}.html").as_uri())
        assert set(page.evaluate(ALIGN, "table.companion-claims td")) == {"left"}
        assert page.evaluate(ALIGN, "table.control td") == ["right"]
        assert page.locator("table.companion-claims details summary").inner_text() == "speed-up 28× at n = 55"
        # the anchor the run's report links to (f"{PROBE}.html#cell-id=...") is there, on the measuring cell
        assert page.evaluate("id => document.getElementById(id).innerText", f"cell-id={MEASURING}").strip().endswith("x = 1")
    finally:
        context.close()
