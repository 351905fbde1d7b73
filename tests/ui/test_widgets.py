"""Every notebook's explorers, used the way a person uses them: in JupyterLab, in Chromium.

For each notebook in ``notebooks/`` (discovered, never listed by hand): open it in the private
JupyterLab server, run every cell above its ``## Reproduce`` heading in a live kernel (CPU profile: the
claim, the idea, the implementation and the explorers; the Reproduce, Scale-up and Checks sections run in
the notebook stage, which executes each notebook top to bottom), then for every explorer it shows
(``.companion-explorer``, rendered by ``companion.viz.Explorer``): wait until it has rendered, change
one control (a dropdown, else a slider, else a checkbox, else a button), and require that the bound
output — a plotly trace's data or the readout's text — changes. Every explorer the notebook builds must
be above ``## Reproduce``, and every one of them must render. Error outputs in any cell and errors in the
browser console fail the test. A screenshot of each explorer after the interaction is saved under
``build/ui/``.

The response time of each explorer is measured in the page: from just before the control changes to the
figure's last redraw of the action (plotly's ``plotly_afterplot``, ``plotly_update``, ``plotly_restyle`` or
``plotly_relayout`` event; for a slider, three key presses: three changes; for a change that only touches
the readout, to when the change is seen). Each is written to ``build/ui/response_times.json``
(entries of other notebooks kept) and must be at most ``RESPONSE_LIMIT_S``. The figure must also fit the
notebook's width (the viewport is 1400 px with the file browser open).
"""

from __future__ import annotations

import json
import re

import pytest

from companion.core import repo_path
from companion.core.atomic import write_json_atomic

from .conftest import SCREENSHOTS

NOTEBOOKS = sorted(p.name for p in repo_path("notebooks").glob("[0-9][0-9]_*.ipynb"))
RUN_TIMEOUT_MS = 240_000
CHANGE_TIMEOUT_MS = 60_000
RESPONSE_LIMIT_S = 2.0
RESPONSE_TIMES = SCREENSHOTS / "response_times.json"
ERROR_OUTPUT = re.compile(r"Traceback \(most recent call last\)|Cell In\[\d+\], line \d+")

OUTPUT_STATE = """(el) => {
  const plots = [...el.querySelectorAll('.js-plotly-plot')].map(p => JSON.stringify(
      (p.data || []).map(t => [t.x, t.y, t.z, t.text, t.marker && t.marker.color])));
  const readout = el.querySelector('.companion-readout');
  return JSON.stringify([plots, readout ? readout.innerText : '']);
}"""


def wait_for_app(page) -> None:
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                           " && window.jupyterapp.shell.currentWidget.sessionContext", timeout=90_000)
    page.evaluate("""async () => {
        const panel = window.jupyterapp.shell.currentWidget;
        await panel.context.ready; await panel.sessionContext.ready;
    }""")
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.sessionContext.session"
                           " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel", timeout=90_000)


CURRENT_PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# Arm the clock: stamp every redraw of the figure from now on (plotly emits plotly_afterplot after a full
# redraw, plotly_update / plotly_restyle / plotly_relayout after an edit that restyles in place).
START_CLOCK = """(el) => {
  el.__companionRedraws = [];
  for (const p of el.querySelectorAll('.js-plotly-plot.companion-figure')) {
    if (typeof p.on !== 'function') continue;
    for (const event of ['plotly_afterplot', 'plotly_update', 'plotly_restyle', 'plotly_relayout'])
      p.on(event, () => el.__companionRedraws.push(performance.now()));
  }
  el.__companionStart = performance.now();
}"""

# Seconds from the armed clock to each redraw (none when only the readout changed).
REDRAWS_S = "(el) => el.__companionRedraws.map(t => (t - el.__companionStart) / 1000)"
SETTLE_MS = 1500  # no redraw for this long: the action's last redraw has happened

# How far the figure sticks out of the notebook's output area, in pixels (0 when it fits).
OVERFLOW_PX = """(el) => {
  const plot = el.querySelector('.js-plotly-plot.companion-figure .main-svg');
  const area = el.closest('.jp-OutputArea-output') || el;
  return plot ? Math.max(0, plot.getBoundingClientRect().right - area.getBoundingClientRect().right) : 0;
}"""


def settled_redraws(page, explorer) -> list[float]:
    """The redraw times (s) of the action, once no redraw has come for ``SETTLE_MS``."""
    redraws = explorer.evaluate(REDRAWS_S)
    while True:
        page.wait_for_timeout(SETTLE_MS)
        now = explorer.evaluate(REDRAWS_S)
        if now == redraws:
            return now
        redraws = now


def record_response_times(name: str, times: list[dict]) -> None:
    """Write this notebook's response times into ``RESPONSE_TIMES``, keeping the other notebooks' entries."""
    recorded = json.loads(RESPONSE_TIMES.read_text()) if RESPONSE_TIMES.exists() else {}
    recorded[name] = times
    write_json_atomic(RESPONSE_TIMES, dict(sorted(recorded.items())))


def explore_part(name: str) -> tuple[int, int]:
    """(index of the ``## Reproduce`` heading cell, number of cells that build an explorer) of a notebook.

    Every ``Explorer(`` must be above the heading: the browser runs only that part of the notebook."""
    cells = json.loads(repo_path("notebooks", name).read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    reproduce = next(i for i, (c, src) in enumerate(zip(cells, sources))
                     if c["cell_type"] == "markdown" and src.startswith("## Reproduce"))
    builds = [i for i, (c, src) in enumerate(zip(cells, sources)) if c["cell_type"] == "code" and "Explorer(" in src]
    late = [i for i in builds if i > reproduce]
    assert not late, f"{name}: cells {late} build an explorer below '## Reproduce' (cell {reproduce}); move it up"
    return reproduce, len(builds)


def run_cells_above(page, index: int) -> None:
    """Run every cell above cell ``index`` (JupyterLab's 'Run All Above Selected Cell')."""
    # Start the run without awaiting the command's promise in evaluate (a stalled kernel would block it
    # forever); the promise sets a flag, and the wait below, which has the time limit, waits for it too.
    page.evaluate("""(index) => {
        window.__companionRunDone = false;
        const panel = window.jupyterapp.shell.currentWidget;
        panel.content.activeCellIndex = index;
        window.jupyterapp.commands.execute('notebook:run-all-above').then(() => { window.__companionRunDone = true; });
    }""", index)
    page.wait_for_function(f"""() => {{
        const panel = window.jupyterapp.shell.currentWidget;
        const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
        const busy = [...document.querySelectorAll('{CURRENT_PANEL} .jp-InputArea-prompt')].some(p => p.innerText.includes('*'));
        return window.__companionRunDone && kernel && kernel.status === 'idle' && !busy;
    }}""", timeout=RUN_TIMEOUT_MS, polling=250)


def cell_errors(page) -> list[str]:
    texts = page.eval_on_selector_all(
        f"{CURRENT_PANEL} .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']", "els => els.map(e => e.innerText)")
    return [t[:600] for t in texts if ERROR_OUTPUT.search(t)]


def change_one_control(explorer) -> str:
    """Change the first control found in the explorer; return what was changed."""
    select = explorer.locator("select")
    if select.count():
        options = select.first.locator("option").all_inner_texts()
        current = select.first.evaluate("s => s.options[s.selectedIndex] ? s.options[s.selectedIndex].text : ''")
        other = next((o for o in options if o != current), None)
        if other is not None:
            select.first.select_option(label=other)
            return f"dropdown -> {other}"
    handle = explorer.locator(".noUi-handle")
    if handle.count():
        handle.first.focus()
        for _ in range(3):
            handle.first.press("ArrowRight")
        return "slider +3 steps"
    checkbox = explorer.locator("input[type=checkbox]")
    if checkbox.count():
        checkbox.first.click()
        return "checkbox toggled"
    button = explorer.locator("button")
    if button.count():
        button.first.click()
        return "button clicked"
    raise AssertionError("explorer has no control the test knows how to change")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_explorers_render_and_respond(name, lab, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console_errors = []
    page.on("console", lambda msg: console_errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: console_errors.append(f"page error: {exc}"))
    try:
        # A workspace of its own: the shared default one would reopen earlier tests' notebooks in hidden tabs.
        page.goto(f"{lab['base']}/lab/workspaces/{name[:-6]}/tree/{name}?reset&token={lab['token']}", timeout=90_000)
        reproduce, built = explore_part(name)
        assert built > 0, f"{name} builds no explorer"
        wait_for_app(page)
        run_cells_above(page, reproduce)
        assert not cell_errors(page), f"{name}: error output in a cell:\n" + "\n---\n".join(cell_errors(page))

        explorers = page.locator(f"{CURRENT_PANEL} .companion-explorer")
        try:  # widget views render after the kernel is idle
            page.wait_for_function(f"() => document.querySelectorAll('{CURRENT_PANEL} .companion-explorer').length >= {built}",
                                   timeout=CHANGE_TIMEOUT_MS, polling=200)
        except Exception as exc:  # playwright's TimeoutError
            raise AssertionError(f"{name} shows {explorers.count()} explorer(s); {built} cell(s) build one") from exc
        count = explorers.count()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        times = []
        for i in range(count):
            explorer = explorers.nth(i)
            explorer.scroll_into_view_if_needed()
            explorer.locator(".js-plotly-plot.companion-figure .main-svg").first.wait_for(timeout=CHANGE_TIMEOUT_MS)
            overflow = explorer.evaluate(OVERFLOW_PX)
            assert overflow <= 1, f"{name}, explorer {i}: the figure is {overflow:.0f} px wider than the notebook"
            before = explorer.evaluate(OUTPUT_STATE)
            explorer.evaluate(START_CLOCK)
            action = change_one_control(explorer)
            try:
                page.wait_for_function(f"([el, before]) => ({OUTPUT_STATE})(el) !== before", arg=[explorer.element_handle(), before],
                                       timeout=CHANGE_TIMEOUT_MS, polling=50)
            except Exception as exc:  # playwright's TimeoutError
                raise AssertionError(f"{name}, explorer {i}: output did not change after {action}") from exc
            seen_s = explorer.evaluate("(el) => (performance.now() - el.__companionStart) / 1000")
            redraws = settled_redraws(page, explorer)
            times.append({"explorer": i, "action": action, "first_redraw_s": round(redraws[0], 3) if redraws else None,
                          "response_s": round(redraws[-1] if redraws else seen_s, 3)})
            page.wait_for_timeout(300)  # let plotly finish the redraw before the screenshot
            explorer.screenshot(path=str(SCREENSHOTS / f"{name[:-6]}-explorer{i}.png"))
        record_response_times(name[:-6], times)
        slow = [t for t in times if t["response_s"] > RESPONSE_LIMIT_S]
        assert not slow, f"{name}: explorers slower than {RESPONSE_LIMIT_S} s from a control change to the redrawn figure: {slow}"
        assert not cell_errors(page), f"{name}: error output after interaction:\n" + "\n---\n".join(cell_errors(page))
        assert not console_errors, f"{name}: browser console errors: {console_errors[:5]}"
    finally:
        try:
            page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        except Exception:
            pass
        context.close()
