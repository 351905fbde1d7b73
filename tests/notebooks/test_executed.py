"""Checks over the notebooks executed once by ``make test-notebooks`` (papermill, CPU profile).

The runner leaves the executed copies and ``summary.json`` in ``$COMPANION_EXECUTED``. Here each
notebook must have passed within its time limit and recorded claims, and its golden cells
(``# NBVAL_CHECK_OUTPUT``) must match the committed ones under nbval's comparison with
``sanitize.cfg`` — the same execution serves both, so no notebook runs twice.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from companion.core import repo_path
from companion.golden import compare, golden_cells

EXECUTED = os.environ.get("COMPANION_EXECUTED")
NOTEBOOKS = sorted(repo_path("notebooks").glob("[0-9][0-9]_*.ipynb"))
SANITIZE = Path(__file__).with_name("sanitize.cfg")
LIMIT_S = 120

needs_run = pytest.mark.skipif(not EXECUTED, reason="set COMPANION_EXECUTED to a runner output folder (make test-notebooks does)")


@pytest.fixture(scope="module")
def summary():
    return {r["notebook"]: r for r in json.loads((Path(EXECUTED) / "summary.json").read_text())["notebooks"]}


@needs_run
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_ran_within_budget_and_recorded_claims(path, summary):
    result = summary.get(path.stem)
    assert result is not None, f"{path.stem} was not executed"
    assert result["status"] == "passed", f"{path.stem}: {result['status']} at cell {result['failing_cell']}: {result['error']}"
    assert result["seconds"] <= LIMIT_S
    assert result["claims"], f"{path.stem} recorded no claims"


@needs_run
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_golden_cells_match(path):
    committed = golden_cells(nbformat.read(path, as_version=4))
    executed = golden_cells(nbformat.read(Path(EXECUTED) / path.name, as_version=4))
    assert len(committed) == len(executed)
    for (index, ref), (_, run) in zip(committed, executed):
        ok, report = compare(ref.outputs, run.outputs, SANITIZE)
        assert ok, f"{path.name}, cell {index}:\n{report}"


def run_first_cells(path: Path, overrides: dict) -> subprocess.CompletedProcess:
    """Execute the parameters cell with ``overrides`` appended (as papermill injects them) and the validation cell."""
    nb = nbformat.read(path, as_version=4)
    params, validation = [c.source for c in nb.cells if c.cell_type == "code"][:2]
    injected = "\n".join(f"{k} = {v!r}" for k, v in overrides.items())
    code = f"{params}\n{injected}\n{validation}"
    return subprocess.run([sys.executable, "-c", code], cwd=path.parent, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_validation_cell_rejects_bad_parameters(path):
    for overrides, fragment in (({"PROFILE": "turbo"}, "PROFILE='turbo'"), ({"SEED": "zero"}, "SEED='zero'")):
        proc = run_first_cells(path, overrides)
        assert proc.returncode != 0 and "ParameterError" in proc.stderr and fragment in proc.stderr, proc.stderr[-800:]
