"""The notebook contract (CONVENTIONS.md), checked statically over every notebook in notebooks/."""

import ast
import re

import nbformat
import pytest

from companion.core import repo_path
from companion.core.validation import parameter_defaults
from companion.golden import MARKER, is_golden
from companion.runner import NOTEBOOK_NAME

SECTIONS = ["Claim", "Idea", "Implementation", "Explore", "Reproduce", "Scale up", "Checks"]
NOTEBOOKS = sorted(repo_path("notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert any(p.name == "00_tour.ipynb" for p in NOTEBOOKS)


@pytest.fixture(params=NOTEBOOKS, ids=lambda p: p.stem)
def nb(request):
    return request.param, nbformat.read(request.param, as_version=4)


def code_cells(notebook):
    return [c for c in notebook.cells if c.cell_type == "code"]


def test_name_and_kernel(nb):
    path, notebook = nb
    assert NOTEBOOK_NAME.match(path.name), f"{path.name} must be named NN_<slug>.ipynb"
    assert notebook.metadata.get("kernelspec", {}).get("name") == "python3"


def test_parameters_cell_is_first_and_literal(nb):
    path, notebook = nb
    tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    assert code_cells(notebook)[0] is tagged[0], "the parameters cell must be the first code cell"
    names = set()
    for stmt in ast.parse(tagged[0].source).body:
        assert isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name), (
            f"{path.name}: parameters cell may only assign literals to names, found: {ast.unparse(stmt)}")
        ast.literal_eval(stmt.value)  # raises on anything but a literal
        names.add(stmt.targets[0].id)
    assert {"PROFILE", "SEED"} <= names


def test_validation_cell_follows_and_checks_common_parameters(nb):
    _, notebook = nb
    validation = code_cells(notebook)[1].source
    assert "check_common(PROFILE, SEED)" in validation


def test_skeleton_sections_in_order(nb):
    path, notebook = nb
    headings = [m.group(1).strip() for c in notebook.cells if c.cell_type == "markdown"
                for m in re.finditer(r"^## (.+)$", c.source, re.M)]
    positions = []
    for section in SECTIONS:
        hits = [i for i, h in enumerate(headings) if h.lower().startswith(section.lower())]
        assert hits, f"{path.name} lacks the '## {section}' section"
        positions.append(hits[0])
    assert positions == sorted(positions), f"{path.name}: sections out of order: {headings}"


def test_committed_without_outputs_or_widget_state(nb):
    path, notebook = nb
    assert "widgets" not in notebook.metadata, f"{path.name} has widget state committed"
    for cell in code_cells(notebook):
        if is_golden(cell):
            assert cell.outputs, f"{path.name}: a golden cell ({MARKER}) must keep its output"
        else:
            assert not cell.outputs, f"{path.name}: outputs committed in a non-golden cell: {cell.source[:60]!r}"
            assert cell.execution_count is None


def test_science_is_imported_from_the_library(nb):
    path, notebook = nb
    source = "\n".join(c.source for c in code_cells(notebook))
    assert re.search(r"^\s*(from|import) companion", source, re.M), f"{path.name} does not import companion"


def test_papermill_lists_every_parameter_with_its_help(nb):
    """papermill's own parser (``papermill --help-notebook``, and its check of ``-p`` names) sees every
    parameter, with its comment as the help: it skips a line with a second ``=``, e.g. in a comment."""
    from papermill.inspection import inspect_notebook

    path, notebook = nb
    names = list(parameter_defaults(code_cells(notebook)[0].source))
    listed = inspect_notebook(str(path))
    assert list(listed) == names, f"{path.name}: papermill lists {list(listed)}, the parameters cell has {names}"
    undocumented = [name for name in names if not listed[name]["help"]]
    assert not undocumented, f"{path.name}: give {undocumented} a comment (papermill's help) on the same line"


def default_guards(source: str) -> list[dict]:
    """Every ``if (NAME, ...) == (literal, ...):`` of a cell's source, as ``{NAME: literal}``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.ops[0], ast.Eq):
            left, right = node.test.left, node.test.comparators[0]
            if isinstance(left, ast.Tuple) and isinstance(right, ast.Tuple):
                out.append(dict(zip([n.id for n in left.elts], ast.literal_eval(right))))
    return out


def test_outcome_checks_guarded_by_the_defaults_run_at_the_defaults(nb):
    """A Checks cell may assert an outcome only at the parameters it was written for, behind
    ``if (NAME, ...) == (default, ...):``. Each name must be a parameter and each value its default in the
    parameters cell, or the default run skips the checks unseen (08's guard once said STEPS == 80 against 50)."""
    path, notebook = nb
    defaults = parameter_defaults(code_cells(notebook)[0].source)
    for cell in code_cells(notebook)[1:]:
        for guard in default_guards(cell.source):
            assert guard == {k: defaults.get(k, "not a parameter") for k in guard}, (path.name, guard)


def test_the_outcome_guards_name_every_parameter_they_depend_on():
    """08's calibration outcome depends on every parameter but PROFILE, 02's training outcome on every one but
    PROFILE and SPREAD_SEEDS (the spread's extra seeds are not in the rows it checks), 04's expressivity outcome
    on the seed and the toy's sizes: their guards name those."""
    expected = {"08_dartquant": lambda d: {k: v for k, v in d.items() if k != "PROFILE"},
                "02_hyperet": lambda d: {k: v for k, v in d.items() if k not in ("PROFILE", "SPREAD_SEEDS")},
                "04_zeros_attention": lambda d: {k: d[k] for k in ("SEED", "TOY_STEPS", "TOY_SEQ_LEN", "TOY_DIM")}}
    for stem, names in expected.items():
        notebook = nbformat.read(repo_path("notebooks", f"{stem}.ipynb"), as_version=4)
        defaults = parameter_defaults(code_cells(notebook)[0].source)
        guards = [g for c in code_cells(notebook)[1:] for g in default_guards(c.source)]
        assert guards == [names(defaults)], (stem, guards)


def test_validation_cell_refuses_injected_names_first(nb):
    path, notebook = nb
    statements = [ast.unparse(s) for s in ast.parse(code_cells(notebook)[1].source).body
                  if not isinstance(s, (ast.Import, ast.ImportFrom))]
    assert statements[0] == "check_injected(globals())", (
        f"{path.name}: the validation cell must start with check_injected(globals()) after its imports")


# Markdown outside code spans, fenced code, math ($...$, $$...$$) and link targets.
_HIDDEN = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|(?<!\\)\$(?:[^$\n]|\n(?!\s*\n))+?(?<!\\)\$|\]\([^)\s]*\)|<https?://[^>]*>|https?://\S+",
                     re.S)
_RAW_TEX = re.compile(r"\\[A-Za-z]+|[\^_]\{")


def test_math_is_typeset_and_identifiers_are_code(nb):
    """Equations are written as $...$ / $$...$$ (MathJax, in Lab and in the HTML reports) and identifiers as
    `code`: TeX outside math shows raw (``\\frac``, ``^{``, ``_{``), and a bare underscore (``x_i``, ``lm_head``)
    is either pseudo-math or an identifier, which markdown may turn into italics (``α'_i ... α'_j``)."""
    path, notebook = nb
    for i, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue
        prose = _HIDDEN.sub(" ", cell.source)
        for line in prose.splitlines():
            raw = _RAW_TEX.findall(line) + re.findall(r"\S*_\S*", line)
            assert not raw, (f"{path.name}, markdown cell {i}: {raw} outside $...$ or `...` in {line.strip()!r}: "
                             "write math as $...$ and identifiers as `code`")
