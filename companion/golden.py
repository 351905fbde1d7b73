"""Golden cells: committed outputs that the test run must reproduce.

A code cell whose source starts with ``# NBVAL_CHECK_OUTPUT`` keeps its output in the committed
notebook. ``make test`` executes each notebook once (papermill, via ``companion.runner``) and then
compares the golden cells of the committed notebook with the executed copy using nbval's own output
comparison and the sanitize file ``tests/notebooks/sanitize.cfg`` (times, addresses) — so the nbval
check costs no second execution.

    python -m companion.golden update notebooks/00_tour.ipynb runs/<stamp>/00_tour.ipynb

copies the executed golden outputs into the committed notebook (and strips every other output).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat

MARKER = "# NBVAL_CHECK_OUTPUT"


def is_golden(cell) -> bool:
    return cell.get("cell_type") == "code" and cell.get("source", "").lstrip().startswith(MARKER)


def golden_cells(nb) -> list[tuple[int, object]]:
    return [(i, c) for i, c in enumerate(nb.cells) if is_golden(c)]


def compare(reference_outputs, test_outputs, sanitize_file: Path | None = None) -> tuple[bool, str]:
    """nbval's comparison of one cell's outputs (``IPyNbCell.compare_outputs``), without a kernel."""
    from nbval import plugin

    patterns = dict(plugin.get_sanitize_patterns(Path(sanitize_file).read_text())) if sanitize_file else {}
    comparer = SimpleNamespace(
        parent=SimpleNamespace(sanitize_patterns=patterns, skip_compare=(
            "metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
            "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")),
        colors=plugin.nocolors,
        config=None,
        ihook=SimpleNamespace(pytest_assertrepr_compare=lambda **_: []),
    )
    comparer.sanitize = lambda s: plugin.IPyNbCell.sanitize(comparer, s)
    comparer.format_output_compare = lambda key, left, right: plugin.IPyNbCell.format_output_compare(comparer, key, left, right)
    ok = plugin.IPyNbCell.compare_outputs(comparer, test_outputs, reference_outputs)
    return ok, "\n".join(str(line) for line in getattr(comparer, "comparison_traceback", []))


def strip(nb) -> None:
    """Remove outputs, execution counts and widget state, except golden outputs."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.get("cell_type") == "code":
            cell.execution_count = None
            if not is_golden(cell):
                cell.outputs = []
            for out in cell.get("outputs", []):
                if out.get("output_type") == "execute_result":
                    out["execution_count"] = None
        for key in ("execution", "papermill"):
            cell.get("metadata", {}).pop(key, None)
    for key in ("papermill",):
        nb.metadata.pop(key, None)


def update(source: Path, executed: Path) -> int:
    """Copy golden outputs from an executed notebook into the committed one; return how many."""
    src = nbformat.read(source, as_version=4)
    run = nbformat.read(executed, as_version=4)
    run_golden = [c for _, c in golden_cells(run)]
    src_golden = golden_cells(src)
    if len(run_golden) != len(src_golden):
        raise SystemExit(f"{executed} has {len(run_golden)} golden cells, {source} has {len(src_golden)}")
    for (_, cell), done in zip(src_golden, run_golden):
        if any(o.get("output_type") == "error" for o in done.outputs):
            raise SystemExit(f"a golden cell of {executed} failed; not updating")
        cell.outputs = done.outputs
    strip(src)
    nbformat.write(src, source)
    return len(src_golden)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "update":
        raise SystemExit("usage: python -m companion.golden update <committed.ipynb> <executed.ipynb>")
    print(f"updated {update(Path(sys.argv[2]), Path(sys.argv[3]))} golden cell(s) in {sys.argv[2]}")
