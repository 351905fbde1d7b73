"""The paper-package shape (CONTRIBUTING.md, "The shape of a paper package"), checked for every
notebook ``notebooks/NN_<slug>.ipynb`` that has a package ``companion/<slug>/``."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from companion.bench import BY_NAME, study
from companion.core import VERDICTS, Claim, Paper, repo_path
from companion.core.stages import check_stages, not_finished

NOTEBOOKS = sorted(p for p in repo_path("notebooks").glob("[0-9][0-9]_*.ipynb") if not p.name.startswith("00_"))
ROLE_FILES = ("__init__.py", "explorer.py", "claims.py", "scale.py")
RETIRED_NAMES = ("explore.py", "scaleup.py")
RETIRED_VERDICT = "recorded " + "on GPU"  # a label with no judgement, replaced by the one rule


def _slug(path):
    return path.stem[3:]


@pytest.fixture(params=NOTEBOOKS, ids=lambda p: p.stem)
def paper(request):
    return request.param


def _constants(path):
    """UPPER_CASE module-level names bound to int/float literals (verdict thresholds) in claims.py."""
    names = []
    for stmt in ast.parse(path.read_text()).body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and t.id.isupper() and stmt.value is not None:
                try:
                    value = ast.literal_eval(stmt.value)
                except ValueError:
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    names.append(t.id)
    return names


def test_role_files(paper):
    folder = repo_path("companion", _slug(paper))
    missing = [f for f in ROLE_FILES if not (folder / f).exists()]
    assert not missing, f"companion/{_slug(paper)} lacks {missing}"
    retired = [f for f in RETIRED_NAMES if (folder / f).exists()]
    assert not retired, f"companion/{_slug(paper)} still has {retired}: use explorer.py / scale.py"


def test_identity(paper):
    module = importlib.import_module(f"companion.{_slug(paper)}")
    info = getattr(module, "PAPER", None)
    assert isinstance(info, Paper), "__init__.py must define PAPER = companion.core.Paper(...)"
    assert info.notebook == paper.stem
    doc = module.__doc__ or ""
    assert info.title.split(":")[0] in doc, "the package docstring names the paper's title"
    if info.arxiv:
        assert info.arxiv in doc, "the package docstring cites the arXiv id"
    assert isinstance(getattr(module, "__all__", None), (list, tuple)) and module.__all__, "__init__ declares its public API"


def test_explorer_module(paper):
    module = importlib.import_module(f"companion.{_slug(paper)}.explorer")
    for name in ("explorer_view", "explorer_controls"):
        assert callable(getattr(module, name, None)), f"explorer.py must define {name}()"


def test_figure_modules_use_the_project_theme(paper):
    """A module that builds plotly figures imports ``companion.viz``: its template, and the renderer's mode bar
    without the Plotly Cloud button, apply from the first figure a notebook shows, not from the first explorer."""
    folder = repo_path("companion", _slug(paper))
    for path in (folder / "figures.py", folder / "explorer.py"):
        if not path.exists():
            continue
        imported = {n.name for stmt in ast.parse(path.read_text()).body if isinstance(stmt, ast.Import) for n in stmt.names}
        imported |= {stmt.module for stmt in ast.parse(path.read_text()).body if isinstance(stmt, ast.ImportFrom)}
        if any(name and name.startswith("plotly") for name in imported):
            assert any(name and name.startswith("companion.viz") for name in imported), (
                f"{path.relative_to(repo_path())} draws with plotly: add `import companion.viz  # noqa: F401` (the theme)")


def test_claims_module_and_tested_thresholds(paper):
    slug = _slug(paper)
    module = importlib.import_module(f"companion.{slug}.claims")
    assert callable(getattr(module, "claim_rows", None)), "claims.py must define claim_rows(...) -> list[Claim]"
    assert getattr(module, "Claim", Claim) is Claim
    thresholds = _constants(repo_path("companion", slug, "claims.py"))
    tests = repo_path("tests", "unit", f"test_{slug}_claims.py")
    assert tests.exists(), f"tests/unit/test_{slug}_claims.py must test the claim builders"
    text = tests.read_text()
    untested = [t for t in thresholds if not re.search(rf"\b{t}\b", text)]
    assert not untested, f"thresholds in claims.py not exercised by {tests.name}: {untested}"


def _check_one_rule(path):
    """Every verdict comes from ``companion.core.judge`` or ``not_run``: a claims.py spells no verdict string and
    builds no Judgement itself (a Claim refuses anything but a Judgement, so every row goes through the rule)."""
    where = path.relative_to(repo_path()) if path.is_relative_to(repo_path()) else path
    source = path.read_text()
    tree = ast.parse(source)
    spelled = sorted({node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
                      and (node.value in VERDICTS or RETIRED_VERDICT in node.value)})
    assert not spelled, f"{where} spells verdicts {spelled}: judge(...) or not_run(...) decides"
    built = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Judgement"]
    assert not built, f"{where} builds a Judgement itself (lines {built}): call judge or not_run"
    assert re.search(r"\b(judge|not_run|inconclusive)\(", source), f"{where} never calls judge, not_run or inconclusive"


def test_claims_judged_by_the_one_rule(paper):
    _check_one_rule(repo_path("companion", _slug(paper), "claims.py"))


def test_tour_claims_judged_by_the_one_rule():
    _check_one_rule(repo_path("companion", "tour", "claims.py"))


STUDY_SIGNATURE = [("profile", inspect.Parameter.POSITIONAL_OR_KEYWORD), ("device", inspect.Parameter.KEYWORD_ONLY),
                   ("deadline_s", inspect.Parameter.KEYWORD_ONLY), ("log", inspect.Parameter.KEYWORD_ONLY),
                   ("save", inspect.Parameter.KEYWORD_ONLY)]


def _check_study(module):
    """A study module's shape (companion/bench.py): profiles, stages, the one run_scale_up signature, recorded()."""
    name = module.__name__
    for attr, kind in (("GPU_PROFILE", dict), ("SMOKE_PROFILE", dict), ("RESULTS_NAME", str), ("DEADLINE_S", (int, float)),
                       ("STAGES", tuple)):
        assert isinstance(getattr(module, attr, None), kind), f"{name} must define {attr} ({kind})"
    assert check_stages(module.STAGES)
    assert callable(getattr(module, "recorded", None)), f"{name} must define recorded() (the committed GPU results)"
    params = [(p.name, p.kind) for p in inspect.signature(module.run_scale_up).parameters.values()]
    assert params == STUDY_SIGNATURE, f"{name}.run_scale_up{inspect.signature(module.run_scale_up)}: expected " \
                                      "run_scale_up(profile, *, device, deadline_s, log, save)"


def test_scale_module(paper):
    _check_study(importlib.import_module(f"companion.{_slug(paper)}.scale"))  # registered: tests/unit/test_registry.py


@pytest.mark.parametrize("name", list(BY_NAME))
def test_every_study_runs_its_smoke_profile_through_the_benchmark_entry(name, tmp_path):
    """``python -m companion.bench NAME --smoke`` (SMOKE_PROFILE on the CPU, kernels in the Triton interpreter) ends
    with every stage done and writes the JSON with its provenance."""
    module = study(name)
    _check_study(module)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo_path())}
    proc = subprocess.run([sys.executable, "-m", "companion.bench", name, "--smoke", "--out-dir", str(tmp_path)],
                          cwd=repo_path(), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    payload = json.loads((tmp_path / f"{module.RESULTS_NAME}.json").read_text())
    assert payload["complete"] and not not_finished(payload), not_finished(payload)
    assert payload["smoke"] is True and payload["exit"] == 0 and payload["command"].startswith("python -m companion.bench")
    assert payload["profile"] == json.loads(json.dumps(module.SMOKE_PROFILE)) and list(payload["stages"]) == [
        s.name for s in module.STAGES]


def test_no_verdict_in_notebook_cells(paper):
    """Verdicts come from claims.py: no notebook code cell spells a verdict or calls Claims.add."""
    notebook = nbformat.read(paper, as_version=4)
    pattern = re.compile("|".join(re.escape(repr(v)) + "|" + re.escape(f'"{v}"') for v in VERDICTS))
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        assert not pattern.search(cell.source), f"{paper.name}: a code cell spells a verdict: {cell.source[:80]!r}"
        assert ".add(claim=" not in cell.source, f"{paper.name}: build rows in claims.py, then claims.extend(claim_rows(...))"


def test_no_retired_verdict_anywhere():
    """No row, text or test says the retired label: GPU rows are judged by the same rule as CPU rows."""
    roots = ["companion", "notebooks", "benchmarks", "tests", "companion_kernels", "README.md", "CONTRIBUTING.md"]
    files = [f for r in roots for f in ([repo_path(r)] if repo_path(r).is_file() else repo_path(r).rglob("*"))
             if f.is_file() and f.suffix in (".py", ".ipynb", ".md", ".json", ".yaml")]
    found = [str(f.relative_to(repo_path())) for f in files if RETIRED_VERDICT in f.read_text(errors="replace")]
    assert not found, f"the retired verdict label is still in {found}"
