"""Sweeps: grid parsing and checks against the notebook's parameters cell, the folder per point, the
report's figure, and a 2x2 sweep of the tour on a 2-worker LocalCluster."""

from __future__ import annotations

import json
import shutil

import pytest

from companion import sweep
from companion.core import repo_path

from .conftest import tiny_notebook

TOUR = repo_path("notebooks", "00_tour.ipynb")


def test_grid_from_text_or_yaml_points_and_folder_names(tmp_path):
    grid, options = sweep.parse_grid("MU=[0.1, 0.01] T_U=[10,100]  GAME=[kuhn_poker,leduc_poker] FLAG=True")
    assert grid == {"MU": [0.1, 0.01], "T_U": [10, 100], "GAME": ["kuhn_poker", "leduc_poker"], "FLAG": [True]} and options == {}
    spec = tmp_path / "s.yaml"
    spec.write_text("grid:\n  N_MAX: [1000, 2000]\nseeds: [0, 1]\nvalue: slope\n")
    grid, options = sweep.parse_grid(str(spec))
    assert grid == {"N_MAX": [1000, 2000]} and options == {"seeds": [0, 1], "value": "slope"}
    assert sweep.parse_seeds("0,1,2") == [0, 1, 2] == sweep.parse_seeds("0 1 2") == sweep.parse_seeds([0, 1, 2])
    with pytest.raises(SystemExit, match="expected integers"):
        sweep.parse_seeds("a,b")
    with pytest.raises(SystemExit, match="cannot read the grid"):
        sweep.parse_grid("MU=[0.1 T_U")
    pts = sweep.points({"A": [1, 2], "B": ["x"]}, [0, 1])
    assert pts == [{"A": 1, "B": "x", "SEED": 0}, {"A": 1, "B": "x", "SEED": 1}, {"A": 2, "B": "x", "SEED": 0}, {"A": 2, "B": "x", "SEED": 1}]
    assert sweep.point_name({"MU": 0.01, "T_U": 10, "GAMES": ["kuhn", "leduc"]}) == 'MU=0.01__T_U=10__GAMES=kuhn-leduc'


def test_unknown_grid_names_and_wrong_types_are_refused_before_anything_runs(tmp_path):
    defaults = sweep.parameters_cell(TOUR)
    assert list(defaults) == ["PROFILE", "SEED", "N_MAX", "REPEATS"]
    with pytest.raises(SystemExit, match="00_tour has no parameter.*MU.*its parameters cell has: PROFILE, SEED, N_MAX, REPEATS"):
        sweep.main(["tour", "--grid", "N_MAX=[1000] MU=[0.1]", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match=r"N_MAX=1000.5 \(float\) does not fit 00_tour's parameter N_MAX = 100000 \(int\)"):
        sweep.main(["tour", "--grid", "N_MAX=[1000.5]", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="REPEATS='many'"):
        sweep.main(["tour", "--grid", "REPEATS=[many]", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="pass --yes"):
        sweep.main(["tour", "--grid", f"N_MAX={list(range(1000, 1000 + sweep.MAX_POINTS + 1))}", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    sweep.check_grid({"X": [[1, 2]], "F": [1, 2.5]}, {"X": [1], "F": 0.5}, "nb")  # a list for a list, an int for a float
    with pytest.raises(SystemExit, match="X=1"):
        sweep.check_grid({"X": [1]}, {"X": [1]}, "nb")


def test_the_figure_is_a_heat_map_for_two_axes_and_lines_with_seed_spread_for_one():
    rows = [{"point": {"A": a, "B": b}, "records": {"v": a * 10 + b}} for a in (1, 2) for b in (3, 4)]
    fig = sweep.sweep_figure({"A": [1, 2], "B": [3, 4]}, [], rows, "v")
    assert fig["data"][0]["type"] == "heatmap" and fig["data"][0]["z"] == [[13, 14], [23, 24]]
    rows = [{"point": {"A": a, "SEED": s}, "records": {"v": a + s}} for a in (1, 2) for s in (0, 1, 2)]
    fig = sweep.sweep_figure({"A": [1, 2]}, [0, 1, 2], rows, "v")
    line = fig["data"][0]
    assert line["y"] == [2.0, 3.0] and line["error_y"]["array"] == [1.0, 1.0] and line["error_y"]["arrayminus"] == [1.0, 1.0]
    assert len(fig["data"][1]["y"]) == 6  # every seed shown
    assert sweep.sweep_figure({"A": [1]}, [], [{"point": {"A": 1}, "records": {}}], "v") is None


def test_a_2x2_sweep_of_the_tour_gives_a_folder_per_point_and_the_report(tmp_path, client):
    from companion import runner

    out = tmp_path / "sweep"
    out.mkdir()
    grid = {"N_MAX": [2000, 10000], "REPEATS": [200, 300]}
    rows = sweep.sweep(TOUR, grid, [], out, parameters={"PROFILE": "cpu"}, timeout=300, client=client,
                       driver=runner.Driver(4, bar=False))
    names = sorted(r["name"] for r in rows)
    assert names == ["N_MAX=10000__REPEATS=200", "N_MAX=10000__REPEATS=300", "N_MAX=2000__REPEATS=200", "N_MAX=2000__REPEATS=300"]
    for row in rows:
        assert row["status"] == "passed", row
        folder = out / row["name"]
        for name in ("00_tour.ipynb", "00_tour.html", "00_tour.claims.json", "00_tour.records.json"):
            assert (folder / name).exists(), (folder, name)
        executed = json.loads((folder / "00_tour.ipynb").read_text())
        injected = "".join(next(c["source"] for c in executed["cells"] if "injected-parameters" in c["metadata"].get("tags", [])))
        assert f"N_MAX = {row['point']['N_MAX']}" in injected and f"REPEATS = {row['point']['REPEATS']}" in injected
        assert abs(row["records"]["slope"] + 0.5) < 0.1 and row["claims"]
    assert "../_static/mathjax/MathJax.js" in (out / rows[0]["name"] / "00_tour.html").read_text()
    assert (out / "_static" / "mathjax" / "MathJax.js").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "passed" and summary["value"] == "slope" and summary["kind"] == "sweep"
    assert summary["provenance"]["profile"] == "cpu" and summary["provenance"]["packages"]["plotly"]
    assert "../_static/plotly.min.js" in (out / rows[0]["name"] / "00_tour.html").read_text()
    assert (out / "_static" / "plotly.min.js").exists()
    page = (out / "index.html").read_text()
    assert '"heatmap"' in page and "Claims at each grid point" in page and page.count("<tr class='point'>") >= 4
    assert "N_MAX=2000__REPEATS=200/00_tour.html" in page
    assert "<th>evidence</th>" in page and all(c["evidence"] in page for row in rows for c in row["claims"])
    # Left for the browser stage (tests/ui/test_reports.py), which reads this sweep's report instead of making one.
    kept = repo_path("build", "test-sweep")
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(out, kept)


def test_a_failing_point_fails_the_sweep_and_is_reported(tmp_path, client):
    from companion import runner

    book = tiny_notebook(tmp_path / "01_pt.ipynb", "from companion.core import record\nassert X < 2, f'X={X} too big'\nrecord('y', X * 2)",
                         params="X = 1")
    out = tmp_path / "out"
    out.mkdir()
    rows = sweep.sweep(book, {"X": [1, 3]}, [], out, timeout=120, client=client, driver=runner.Driver(2, bar=False))
    by = {r["name"]: r for r in rows}
    assert by["X=1"]["status"] == "passed" and by["X=1"]["records"] == {"y": 2.0}
    assert by["X=3"]["status"] == "failed" and "X=3 too big" in by["X=3"]["error"] and by["X=3"]["failing_cell"] == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["value"] == "y"
    assert "cell 2: AssertionError: X=3 too big" in (out / "index.html").read_text()


def test_record_checks_its_input_and_writes_under_the_runner(tmp_path, monkeypatch):
    from companion.core import ParameterError, record
    from companion.core.claims import CLAIMS_DIR_ENV

    monkeypatch.delenv(CLAIMS_DIR_ENV, raising=False)
    assert record("a", 3) == 3.0 and not list(tmp_path.iterdir())  # interactively nothing is written
    monkeypatch.setenv(CLAIMS_DIR_ENV, str(tmp_path))
    record("slope", -0.49)
    assert json.loads((tmp_path / "records.json").read_text())["slope"] == -0.49
    for name, value in (("x", float("nan")), ("x", "0.5"), ("x", None), ("bad name", 1.0)):
        with pytest.raises(ParameterError):
            record(name, value)
