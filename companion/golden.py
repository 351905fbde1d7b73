"""Golden cells: committed outputs that the test run must reproduce.

A code cell whose source starts with ``# NBVAL_CHECK_OUTPUT`` keeps its output in the committed
notebook, with its ``execution_count`` set (nbval skips, and with outputs rejects, a reference cell
whose count is None). Two ways check them:

- ``make test`` executes each notebook once (papermill, via ``companion.runner``) and then compares
  the golden cells of the committed notebook with the executed copy (:func:`compare`: nbval's
  comparison rules, written here, with the sanitize file ``tests/notebooks/sanitize.cfg``), so the
  check costs no second execution;
- plain nbval: ``pytest --nbval-lax --nbval-sanitize-with tests/notebooks/sanitize.cfg notebooks/``.

Commands::

    python -m companion.golden update notebooks/00_tour.ipynb runs/<stamp>/00_tour.ipynb
    python -m companion.golden counts notebooks/*.ipynb

``update`` copies the executed golden outputs (and execution counts) into the committed notebook and
strips every other output; ``counts`` gives golden cells that lack one an execution count (their
position among the code cells) without running anything.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import nbformat

from companion.core.atomic import write_atomic

MARKER = "# NBVAL_CHECK_OUTPUT"

# nbval's defaults (IPyNbFile.skip_compare, with image/png and image/jpeg as without --nbdime).
SKIP_COMPARE = ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
                "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")


def is_golden(cell) -> bool:
    return cell.get("cell_type") == "code" and cell.get("source", "").lstrip().startswith(MARKER)


def golden_cells(nb) -> list[tuple[int, object]]:
    return [(i, c) for i, c in enumerate(nb.cells) if is_golden(c)]


def sanitize_patterns(text: str) -> list[tuple[str, str]]:
    """The ``(regex, replace)`` pairs of a sanitize file, read as nbval reads them."""
    return re.findall(r"^regex: (.*)$\n^replace: (.*)$", text, flags=re.MULTILINE)


_CARRIAGE_RETURN = re.compile(r"^.*\r(?=[^\n])", re.MULTILINE)


def coalesce_streams(outputs) -> list[dict]:
    """Merge stream outputs of the same name into one (at the first's place) and apply carriage returns.

    As nbval 0.11 does: its backspace rule never fires (its loop condition is false from the start),
    so backspaces are kept here too, and both comparisons agree.
    """
    merged, streams = [], {}
    for out in outputs:
        out = dict(out)
        if out.get("output_type") == "stream":
            name = out.get("name")
            if name in streams:
                streams[name]["text"] += out.get("text", "")
                continue
            out["text"] = out.get("text", "")
            streams[name] = out
        merged.append(out)
    for out in streams.values():
        out["text"] = _CARRIAGE_RETURN.sub("", out["text"])
    return merged


def _flatten(outputs, patterns, skip) -> dict[str, list]:
    """nbval's comparison form: ``{key: [sanitized values in order]}``, keys of ``data`` flattened,
    a stream keyed by its name."""
    flat = defaultdict(list)

    def clean(value):
        if isinstance(value, str):
            for regex, replace in patterns:
                value = re.sub(regex, replace, value)
        return value

    for out in coalesce_streams(outputs):
        if out.get("output_type") == "stream":
            out = {"output_type": "stream", out.get("name"): out["text"]}
        for key, value in out.items():
            if key in skip:
                continue
            if key == "data":
                for mime, data in value.items():
                    if mime not in skip:
                        flat[mime].append(clean(data))
            else:
                flat[key].append(clean(value))
    return flat


def compare(reference_outputs, test_outputs, sanitize_file: Path | None = None) -> tuple[bool, str]:
    """Compare one cell's outputs as nbval does (``IPyNbCell.compare_outputs`` after ``coalesce_streams``).

    Returns ``(equal, report)``; the report names the first difference, as nbval's would.
    """
    patterns = sanitize_patterns(Path(sanitize_file).read_text(encoding="utf-8")) if sanitize_file else []
    ref, test = _flatten(reference_outputs, patterns, SKIP_COMPARE), _flatten(test_outputs, patterns, SKIP_COMPARE)
    if set(ref) - set(test):
        return False, f"Missing output fields from running code: {set(ref) - set(test)}"
    if set(test) - set(ref):
        return False, f"Unexpected output fields from running code: {set(test) - set(ref)}"
    for key, ref_values in ref.items():
        test_values = test[key]
        if len(ref_values) != len(test_values):
            return False, f'dissimilar number of outputs for key "{key}": {len(ref_values)} expected, {len(test_values)} found'
        for expected, got in zip(ref_values, test_values):
            if expected != got:
                return False, f'mismatch "{key}"\n<<<<<<<<<<<< Reference output from ipynb file:\n{expected}\n' \
                              f'============ disagrees with newly computed (test) output:\n{got}\n>>>>>>>>>>>>'
    return True, ""


def _set_count(cell, count: int) -> None:
    cell.execution_count = count
    for out in cell.get("outputs", []):
        if out.get("output_type") == "execute_result":
            out["execution_count"] = count


def strip(nb) -> None:
    """Remove outputs, execution counts and widget state, except golden cells' outputs and counts.

    A golden cell without a count gets its position among the code cells, so nbval compares it.
    """
    nb.metadata.pop("widgets", None)
    number = 0
    for cell in nb.cells:
        if cell.get("cell_type") == "code":
            number += 1
            if is_golden(cell):
                _set_count(cell, cell.execution_count or number)
            else:
                cell.execution_count = None
                cell.outputs = []
        for key in ("execution", "papermill"):
            cell.get("metadata", {}).pop(key, None)
    nb.metadata.pop("papermill", None)


def _write(nb, path: Path) -> None:
    write_atomic(Path(path), lambda tmp: nbformat.write(nb, tmp))


def update(source: Path, executed: Path) -> int:
    """Copy golden outputs and counts from an executed notebook into the committed one; return how many."""
    src = nbformat.read(source, as_version=4)
    run = nbformat.read(executed, as_version=4)
    run_golden = [c for _, c in golden_cells(run)]
    src_golden = golden_cells(src)
    if len(run_golden) != len(src_golden):
        raise SystemExit(f"{executed} has {len(run_golden)} golden cells, {source} has {len(src_golden)}")
    for (_, cell), done in zip(src_golden, run_golden):
        if any(o.get("output_type") == "error" for o in done.outputs):
            raise SystemExit(f"a golden cell of {executed} failed; not updating")
        if done.execution_count is None:
            raise SystemExit(f"a golden cell of {executed} has no execution count; was it executed?")
        cell.outputs = done.outputs
        _set_count(cell, done.execution_count)
    strip(src)
    _write(src, source)
    return len(src_golden)


def counts(path: Path) -> int:
    """Give the golden cells of a committed notebook that lack one an execution count; return how many changed."""
    nb = nbformat.read(path, as_version=4)
    missing = sum(1 for _, c in golden_cells(nb) if c.execution_count is None)
    if missing:
        number = 0
        for cell in nb.cells:
            if cell.get("cell_type") == "code":
                number += 1
                if is_golden(cell) and cell.execution_count is None:
                    _set_count(cell, number)
        _write(nb, path)
    return missing


USAGE = ("usage: python -m companion.golden update <committed.ipynb> <executed.ipynb>\n"
         "       python -m companion.golden counts <committed.ipynb>...")


def main(argv: list[str]) -> None:
    if len(argv) == 3 and argv[0] == "update":
        print(f"updated {update(Path(argv[1]), Path(argv[2]))} golden cell(s) in {argv[1]}")
    elif len(argv) >= 2 and argv[0] == "counts":
        for name in argv[1:]:
            print(f"{name}: {counts(Path(name))} golden cell(s) given an execution count")
    else:
        raise SystemExit(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
