import re
import tomllib

import nbformat
import pytest

from companion import runner, tour
from companion.core import repo_path


def test_select_by_slug_stem_or_number_and_unknown_names_list_valid_ones(tmp_path):
    for name in ("00_tour", "18_rtcfr", "01_seer_attention"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    (tmp_path / "scratch.ipynb").write_text("{}")
    available = runner.discover(tmp_path)
    assert list(available) == ["tour", "seer_attention", "rtcfr"]
    assert list(runner.select(available, ["rtcfr", "00"])) == ["tour", "rtcfr"]
    assert list(runner.select(available, [])) == list(available)
    with pytest.raises(SystemExit, match="unknown paper.*chess.*valid names: tour, seer_attention, rtcfr"):
        runner.select(available, ["chess"])


def test_run_folders_are_never_reused(tmp_path):
    a, b = runner.new_run_folder(tmp_path), runner.new_run_folder(tmp_path)
    assert a != b and a.exists() and b.exists()


def test_failing_cell_is_found_and_reported(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("x"), nbformat.v4.new_code_cell("1"), nbformat.v4.new_code_cell("1/0")]
    nb.cells[2].outputs = [nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[])]
    nbformat.write(nb, tmp_path / "x.ipynb")
    assert runner.first_error(tmp_path / "x.ipynb") == (2, "ZeroDivisionError: division by zero")
    failed = runner.NotebookResult("01_x", "failed", 3.0, "ZeroDivisionError: division by zero", 2)
    table = runner.format_table(runner.table_rows([failed]))
    assert "FAILED" in table and "cell 2: ZeroDivisionError" in table


def test_runner_end_to_end_on_a_tiny_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('PROFILE = "auto"\nSEED = 0')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "from companion.core import Claims, check_common\n"
        "p = check_common(PROFILE, SEED)\n"
        "Claims('01_tiny').add(claim='c', paper='p', measured=p, scale='s', verdict='reproduced')")]
    src = tmp_path / "01_tiny.ipynb"
    nbformat.write(nb, src)
    out = tmp_path / "out"
    out.mkdir()
    result = runner.execute(src, out, {"PROFILE": "cpu"}, timeout=120)
    assert result.status == "passed", result.error
    assert result.claims[0]["measured"] == "cpu"
    assert (out / "01_tiny.html").exists()
    bad = runner.execute(src, out, {"PROFILE": "warp-speed"}, timeout=120)
    assert bad.status == "failed" and "PROFILE='warp-speed'" in bad.error and bad.failing_cell == 2


def test_environment_yml_names_existing_extras():
    text = repo_path("environment.yml").read_text()
    extras = set(tomllib.loads(repo_path("pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = re.findall(r"-e \.\[([a-z,]+)\]", text)
    assert named, "environment.yml must install the project with its extras"
    assert set(named[0].split(",")) <= extras


def test_tour_error_law():
    sizes = [100, 1000, 10000]
    errors = tour.rms_error_curve(sizes, repeats=400, seed=0)
    assert abs(tour.fit_slope(sizes, errors) + 0.5) < 0.1
    assert tour.estimate_pi(tour.sample_points(1, 0)) in (0.0, 4.0)
    with pytest.raises(ValueError, match="n=0"):
        tour.sample_points(0, 0)


def test_golden_comparison_uses_nbval_and_the_sanitize_file():
    from companion.golden import compare

    sanitize = repo_path("tests", "notebooks", "sanitize.cfg")
    ref = [nbformat.v4.new_output("stream", name="stdout", text="took 3.2 s, 7871 inside\n")]
    same_but_slower = [nbformat.v4.new_output("stream", name="stdout", text="took 41.0 s, 7871 inside\n")]
    different = [nbformat.v4.new_output("stream", name="stdout", text="took 3.2 s, 7870 inside\n")]
    assert compare(ref, same_but_slower, sanitize)[0]
    ok, report = compare(ref, different, sanitize)
    assert not ok and "7870" in report
