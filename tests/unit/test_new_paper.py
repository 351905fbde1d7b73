"""``python -m companion.new``: a generated paper passes the shape and contract rules, its tests and its
notebook run, and bad or clashing requests are refused without writing anything.

The paper is generated into a temporary root laid out like the repository (``companion/``,
``notebooks/``, ``tests/unit/``), never into the real tree. The package-shape and notebook-contract
checks are the project's own test functions (tests/unit/test_package_shape.py,
tests/notebooks/test_contract.py, tests/notebooks/test_parameter_ranges.py), imported and called on the
generated files; the shape module's ``repo_path`` is pointed at the temporary root for the call. The
generated package is made importable as ``companion.<slug>`` by adding the root's ``companion/`` to the
package's search path: here in-process, in the pytest and papermill children through a startup file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

import companion
from companion import new
from companion.core import VERDICTS, ParameterError, repo_path

SLUG, NUMBER = "zz_probe", "42"
TITLE = "Probe: A Paper for Testing the Generator"
ARXIV, CODE = "2410.13276", "https://github.com/example/probe"


def _load(relative: str, name: str):
    """A project test module, loaded under a private name (so pytest does not collect it twice)."""
    spec = importlib.util.spec_from_file_location(name, repo_path(*relative.split("/")))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_root(path: Path) -> Path:
    for folder in ("companion", "notebooks", "tests/unit"):
        (path / folder).mkdir(parents=True)
    return path


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _path_startup(root: Path) -> str:
    return f"import companion; companion.__path__.append({str(root / 'companion')!r})\n"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = _fake_root(tmp_path_factory.mktemp("repo"))
    made = new.new_paper(NUMBER, SLUG, TITLE, arxiv=ARXIV, code=CODE, root=root)
    companion.__path__.append(str(root / "companion"))
    try:
        yield root, made
    finally:
        companion.__path__.remove(str(root / "companion"))
        for name in [m for m in sys.modules if m == f"companion.{SLUG}" or m.startswith(f"companion.{SLUG}.")]:
            del sys.modules[name]


def test_creates_the_role_files_tests_and_notebook(generated):
    root, made = generated
    assert made == new.planned_paths(root, NUMBER, SLUG)
    assert sorted(p.name for p in made["package"].iterdir()) == ["__init__.py", "claims.py", "explorer.py",
                                                                  "method.py", "scale.py"]
    assert all(path.exists() for path in made.values())
    assert not [p for p in root.iterdir() if p.name.startswith(".new-")], "the staging folder is removed"
    init = (made["package"] / "__init__.py").read_text()
    assert TITLE in init and ARXIV in init and CODE in init and "NeurIPS 2025" in init
    assert "@@" not in "".join(p.read_text() for p in made["package"].iterdir())


def test_shape_rules_hold(generated, monkeypatch):
    root, made = generated
    shape = _load("tests/unit/test_package_shape.py", "_shape_rules")
    monkeypatch.setattr(shape, "repo_path", lambda *parts: root.joinpath(*parts))
    for name in ("test_role_files", "test_identity", "test_explorer_module", "test_claims_module_and_tested_thresholds",
                 "test_scale_module", "test_no_verdict_in_notebook_cells", "test_claims_judged_by_the_one_rule"):
        getattr(shape, name)(made["notebook"])
    assert shape._constants(made["package"] / "claims.py") == ["SLOPE_TOLERANCE"]


@pytest.mark.parametrize("edit, message", [
    (lambda src: src.replace("judgement=judge(abs(slope + 0.5), SLOPE_TOLERANCE, kind=\"exact\"),\n    )",
                             "judgement=pick(\"reproduced\"),\n    )"), "spells verdicts \\['reproduced'\\]"),
    (lambda src: src.replace("from companion.core import Claim, judge, not_run",
                             "from companion.core import Claim, judge, not_run\nfrom companion.core.verdicts import Judgement")
                    .replace("judgement=judge(abs(slope + 0.5), SLOPE_TOLERANCE, kind=\"exact\"),\n    )",
                             "judgement=Judgement(VERDICT, \"trust me\"),\n    )"), "builds a Judgement itself"),
])
def test_shape_rule_catches_a_claims_file_that_writes_its_own_verdict(generated, tmp_path, monkeypatch, edit, message):
    """A generated tree whose claims.py decides a verdict itself fails the shape test."""
    import shutil

    root, made = generated
    copy = tmp_path / "repo"
    shutil.copytree(root, copy)
    claims = copy / "companion" / SLUG / "claims.py"
    edited = edit(claims.read_text())
    assert edited != claims.read_text()
    claims.write_text(edited)
    shape = _load("tests/unit/test_package_shape.py", "_shape_rules_edited")
    monkeypatch.setattr(shape, "repo_path", lambda *parts: copy.joinpath(*parts))
    with pytest.raises(AssertionError, match=message):
        shape.test_claims_judged_by_the_one_rule(copy / "notebooks" / made["notebook"].name)


def test_notebook_contract_holds(generated):
    _, made = generated
    contract = _load("tests/notebooks/test_contract.py", "_contract_rules")
    nb = (made["notebook"], nbformat.read(made["notebook"], as_version=4))
    nbformat.validate(nb[1])
    for name in ("test_name_and_kernel", "test_parameters_cell_is_first_and_literal",
                 "test_validation_cell_follows_and_checks_common_parameters", "test_skeleton_sections_in_order",
                 "test_committed_without_outputs_or_widget_state", "test_science_is_imported_from_the_library",
                 "test_papermill_lists_every_parameter_with_its_help",
                 "test_validation_cell_refuses_injected_names_first", "test_math_is_typeset_and_identifiers_are_code"):
        getattr(contract, name)(nb)
    source = "\n".join(c.source for c in nb[1].cells if c.cell_type == "code")
    assert "claims.extend(claim_rows(" in source and "Explorer(functools.partial(explorer_view" in source


@pytest.mark.slow
def test_validation_cell_accepts_its_range_ends_and_rejects_just_outside(generated):
    _, made = generated
    ranges = _load("tests/notebooks/test_parameter_ranges.py", "_range_rules")
    ranges.test_validation_accepts_its_range_ends_and_rejects_just_outside(made["notebook"])


def _child_env(root: Path, tmp: Path) -> dict:
    """Environment of a child that imports companion.<slug> from the temporary root."""
    ipython = tmp / "ipython" / "profile_default" / "startup"
    ipython.mkdir(parents=True, exist_ok=True)
    (ipython / "00-companion-path.py").write_text(_path_startup(root))
    return {**os.environ, "IPYTHONDIR": str(tmp / "ipython"), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.mark.slow
def test_generated_unit_tests_pass(generated, tmp_path):
    root, made = generated
    driver = _path_startup(root) + textwrap.dedent(f"""
        import sys, pytest
        sys.exit(pytest.main(["-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist",
                              {str(made['claims_test'])!r}, {str(made['unit_test'])!r}]))
    """)
    proc = subprocess.run([sys.executable, "-c", driver], cwd=root, env=_child_env(root, tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


@pytest.mark.slow
def test_generated_notebook_executes_on_the_cpu(generated, tmp_path):
    root, made = generated
    out = tmp_path / "run"
    out.mkdir()
    env = {**_child_env(root, tmp_path), "COMPANION_CLAIMS_DIR": str(out)}
    cmd = [sys.executable, "-m", "papermill", str(made["notebook"]), str(out / made["notebook"].name),
           "--cwd", str(made["notebook"].parent), "--kernel", "python3", "--no-progress-bar", "--log-level", "ERROR",
           "-p", "PROFILE", "cpu"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    executed = nbformat.read(out / made["notebook"].name, as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert "checks passed" in text
    recorded = json.loads((out / f"{NUMBER}_{SLUG}.claims.json").read_text())
    assert recorded["notebook"] == f"{NUMBER}_{SLUG}" and len(recorded["claims"]) == 2
    assert all(c["verdict"] in VERDICTS for c in recorded["claims"])
    assert recorded["claims"][-1]["verdict"] == "not run here"  # no GPU result is recorded for the probe
    assert not nbformat.read(made["notebook"], as_version=4).cells[2].outputs, "the committed notebook is untouched"


@pytest.mark.parametrize("field,value", [
    ("number", "7"), ("number", "00"), ("number", "123"), ("number", "a1"), ("number", 7.0), ("number", 100),
    ("slug", "Bad"), ("slug", "1abc"), ("slug", "with-dash"), ("slug", "a"), ("slug", "x__y"), ("slug", "trail_"),
    ("slug", "class"), ("slug", "core"), ("slug", "viz"), ("slug", "new"), ("slug", "../escape"), ("slug", ""),
    ("title", ""), ("title", " padded"), ("title", "two\nlines"), ("title", 'has """ quotes'), ("title", "back\\slash"),
    ("arxiv", "2410.13276v2"), ("arxiv", "arXiv:2410.13276"), ("code", "github.com/x/y"), ("code", "https://x y"),
    ("module", "claims"), ("module", "explorer"), ("module", "Bad"), ("module", "import"),
])
def test_bad_input_is_refused_and_nothing_written(tmp_path, field, value):
    root = _fake_root(tmp_path / "repo")
    before = _listing(root)
    args = dict(number="07", slug="fresh", title="Fresh: A Title", arxiv=None, code=None, module="method")
    args[field] = value
    with pytest.raises(ParameterError) as err:
        new.new_paper(args.pop("number"), args.pop("slug"), args.pop("title"), root=root, **args)
    assert err.value.name == field and repr(value) in str(err.value)
    assert _listing(root) == before


def test_number_as_int_is_accepted(tmp_path):
    root = _fake_root(tmp_path / "repo")
    made = new.new_paper(7, "fresh", "Fresh: A Title", root=root)
    assert made["notebook"].name == "07_fresh.ipynb"
    init = (made["package"] / "__init__.py").read_text()
    assert "arxiv=None" in init and "no arXiv id" in init and "not released" in init


@pytest.mark.parametrize("number,slug,clash", [
    (NUMBER, SLUG, "already exists"),      # the same paper twice
    (NUMBER, "other_slug", "is taken"),    # the number of an existing notebook
    ("43", SLUG, "already exists"),        # the slug of an existing package
])
def test_existing_paper_is_refused(tmp_path, number, slug, clash):
    root = _fake_root(tmp_path / "repo")
    new.new_paper(NUMBER, SLUG, TITLE, root=root)
    before = _listing(root)
    with pytest.raises(SystemExit, match=clash):
        new.new_paper(number, slug, TITLE, root=root)
    assert _listing(root) == before


def test_existing_notebook_or_test_alone_is_refused(tmp_path):
    root = _fake_root(tmp_path / "repo")
    (root / "notebooks" / "50_lonely.ipynb").write_text("{}")
    with pytest.raises(SystemExit, match="lonely"):
        new.new_paper("51", "lonely", TITLE, root=root)
    (root / "tests" / "unit" / "test_solo_claims.py").write_text("")
    with pytest.raises(SystemExit, match="test_solo_claims.py already exists"):
        new.new_paper("52", "solo", TITLE, root=root)
    assert not (root / "companion" / "solo").exists() and not (root / "companion" / "lonely").exists()


def test_root_must_look_like_the_repository(tmp_path):
    with pytest.raises(SystemExit, match="no companion/ folder"):
        new.new_paper("07", "fresh", TITLE, root=tmp_path)
    with pytest.raises(SystemExit, match="not a folder"):
        new.new_paper("07", "fresh", TITLE, root=tmp_path / "missing")


def test_a_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    root = _fake_root(tmp_path / "repo")
    before = _listing(root)

    def broken(values):
        raise RuntimeError("disk full")

    monkeypatch.setattr(new, "_notebook", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        new.new_paper("07", "fresh", TITLE, root=root)
    assert _listing(root) == before


def test_a_failure_while_moving_undoes_the_moved_parts(tmp_path, monkeypatch):
    root = _fake_root(tmp_path / "repo")
    before = _listing(root)
    real_move = new._move

    def move(src, dst):
        if dst.suffix == ".ipynb":
            raise OSError("interrupted")
        real_move(src, dst)

    monkeypatch.setattr(new, "_move", move)
    with pytest.raises(OSError, match="interrupted"):
        new.new_paper("07", "fresh", TITLE, root=root)
    assert _listing(root) == before


def test_command_line(tmp_path, capsys):
    root = _fake_root(tmp_path / "repo")
    assert new.main(["08", "cli_paper", "CLI: A Title", "--arxiv", ARXIV, "--module", "gate", "--root", str(root)]) == 0
    assert "companion/cli_paper" in capsys.readouterr().out
    assert (root / "companion" / "cli_paper" / "gate.py").exists()
    assert "from companion.cli_paper.gate import" in (root / "companion" / "cli_paper" / "__init__.py").read_text()
    assert new.main(["8", "other", "Other: A Title", "--root", str(root)]) == 2
    assert "parameter number='8'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="already exists"):
        new.main(["09", "cli_paper", "CLI: A Title", "--root", str(root)])
