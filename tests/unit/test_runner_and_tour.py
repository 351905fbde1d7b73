import json
import re
import tomllib

import nbformat
import pytest

from companion import report, runner, tour
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
    assert runner.first_error(tmp_path / "x.ipynb", with_source=True)[2] == "1/0"
    failed = runner.NotebookResult("01_x", "failed", 3.0, "ZeroDivisionError: division by zero", 2, failing_source="1/0")
    table = runner.format_table(runner.table_rows([failed]))
    assert "FAILED" in table and "cell 2: ZeroDivisionError" in table
    report = runner.failure_report([failed])
    assert "01_x: failed in cell 2" in report and "| 1/0" in report


def test_terminal_table_wraps_cells_and_never_cuts_them():
    long = "held-out KL 0.05 at the training length and 0.88 at four times it; the gate needs block positions"
    claims = [{"claim": "block RoPE generalises in length", "paper": "the gate trained at 8k works at 32k", "measured": long,
               "scale": "MiniLM, 512 tokens, one seed", "verdict": "inconclusive",
               "evidence": "n=1: 0.88 vs ≤ 0.1; fewer than 3 seeds"}]
    rows = runner.table_rows([runner.NotebookResult("01_seer_attention", "passed", 40.0, claims=claims)])
    for width in (None, 80, 200):
        table = runner.format_table(rows, width=width)
        flat = " ".join(" ".join(part.strip() for part in line.split("|")) for line in table.splitlines())
        for word in long.split():
            assert word in flat, (width, word)
        assert "…" not in table
        if width:
            assert max(len(line) for line in table.splitlines()) <= width
    assert "paper says" in table and "the gate trained at 8k" in flat and "evidence" in table
    assert all(word in flat for word in "n=1: 0.88 vs ≤ 0.1; fewer than 3 seeds".split())


def test_index_has_counts_cards_titles_and_the_full_table(tmp_path):
    claims = [{"claim": "c1", "paper": "the paper says this", "measured": "x" * 300, "scale": "s", "verdict": "reproduced",
               "evidence": "error 3e-16 vs ≤ 1e-10"},
              {"claim": "c2", "paper": "p2", "measured": "m2", "scale": "s2", "verdict": "not reproduced",
               "evidence": "n=3: 0.667 ± 0.0551 (0.61–0.72) vs ≤ 0.5"},
              {"claim": "c3", "paper": "p3", "measured": "m3", "scale": "H200, one seed", "verdict": "inconclusive",
               "evidence": "n=1: 0.5 vs ≤ 0.5; fewer than 3 seeds"}]
    results = [runner.NotebookResult("18_rtcfr", "passed", 12.0, claims=claims),
               runner.NotebookResult("02_hyperet", "failed", 5.0, "AssertionError: nan", 7, failing_source="assert ok")]
    report.write_index(tmp_path, results, {}, status="failed")
    page = (tmp_path / "index.html").read_text()
    assert "parameters" not in page  # shown only when some were passed
    assert "x" * 300 in page  # never cut
    assert "the paper says this" in page and "<th>paper says</th>" in page
    assert "notebooks passed" in page and "notebooks failed" in page and "not reproduced" in page
    assert report.paper_title("18_rtcfr") in page and "cell 7: AssertionError: nan" in page and "assert ok" in page
    assert "#cf222e" in page and "#1a7f37" in page  # verdicts coloured
    assert "<th>evidence</th>" in page and "n=3: 0.667 ± 0.0551 (0.61–0.72) vs ≤ 0.5" in page
    assert "<b style='color:#0969da'>1</b><span>inconclusive</span>" in page  # the counts include inconclusive
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and [n["notebook"] for n in summary["notebooks"]] == ["18_rtcfr", "02_hyperet"]
    report.write_index(tmp_path, results, {"PROFILE": "cpu"}, status="interrupted", planned=["18_rtcfr", "02_hyperet", "03_scalekv"],
                       stopping="SIGTERM")
    page = (tmp_path / "index.html").read_text()
    assert "parameters: PROFILE=cpu" in page and "Interrupted by SIGTERM" in page and "03_scalekv" in page
    assert json.loads((tmp_path / "summary.json").read_text())["unfinished"] == ["03_scalekv"]


def test_paper_title_comes_from_the_package_identity_or_falls_back():
    from companion.core.paper import Paper

    for init in repo_path("companion").glob("*/__init__.py"):
        text = init.read_text()
        if "PAPER = Paper(" in text:
            module = __import__(f"companion.{init.parent.name}", fromlist=["PAPER"])
            if isinstance(getattr(module, "PAPER", None), Paper):
                assert report.paper_title(module.PAPER.notebook) == module.PAPER.title
    assert report.paper_title("97_no_such_paper") == "no_such_paper"


def test_runner_end_to_end_on_a_tiny_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('PROFILE = "auto"\nSEED = 0')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "from companion.core import Claim, Claims, check_common, judge\n"
        "p = check_common(PROFILE, SEED)\n"
        "Claims('01_tiny').extend([Claim('c', 'p', p, 's', judge(0.0, 1e-9, kind='exact'))])")]
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


def test_golden_comparison_follows_nbval_and_the_sanitize_file():
    from companion.golden import compare

    sanitize = repo_path("tests", "notebooks", "sanitize.cfg")
    out = nbformat.v4.new_output
    ref = [out("stream", name="stdout", text="took 3.2 s, 7871 inside\n")]
    same_but_slower = [out("stream", name="stdout", text="took 41.0 s, 7871 inside\n")]
    different = [out("stream", name="stdout", text="took 3.2 s, 7870 inside\n")]
    assert compare(ref, same_but_slower, sanitize)[0]
    ok, report = compare(ref, different, sanitize)
    assert not ok and "7870" in report
    assert not compare(ref, same_but_slower)[0]  # without the sanitize file the times differ
    # streams of one name are merged before comparing; stdout and stderr are different keys
    split = [out("stream", name="stdout", text="took 3.2 s, "), out("stream", name="stdout", text="7871 inside\n")]
    assert compare(ref, split, sanitize)[0]
    assert not compare(ref, [out("stream", name="stderr", text="took 3.2 s, 7871 inside\n")], sanitize)[0]
    # what nbval skips: execution counts, metadata, widget views (random ids), PNG images
    a = [out("execute_result", execution_count=3, data={"text/plain": "42", "image/png": "AAA",
                                                        "application/vnd.jupyter.widget-view+json": {"model_id": "1"}}, metadata={})]
    b = [out("execute_result", execution_count=9, data={"text/plain": "42", "image/png": "BBB",
                                                        "application/vnd.jupyter.widget-view+json": {"model_id": "2"}}, metadata={"x": 1})]
    assert compare(a, b)[0]
    ok, report = compare(a, ref)
    assert not ok and "Missing output fields" in report
    ok, report = compare(ref, ref + a)
    assert not ok and "Unexpected output fields" in report
    two = [out("display_data", data={"text/plain": "y"}, metadata={})] * 2
    ok, report = compare(two, two[:1])
    assert not ok and "dissimilar number of outputs" in report


def test_golden_helpers_agree_with_nbval_itself():
    from nbval import plugin

    from companion import golden

    text = repo_path("tests", "notebooks", "sanitize.cfg").read_text()
    assert golden.sanitize_patterns(text) == plugin.get_sanitize_patterns(text) and len(golden.sanitize_patterns(text)) >= 4
    out = nbformat.v4.new_output
    cases = [[out("stream", name="stdout", text="a\rb\n"), out("stream", name="stderr", text="e"), out("stream", name="stdout", text="c\b d\n")],
             [out("stream", name="stdout", text="10%\r50%\r100%\n")], [out("display_data", data={"text/plain": "x"}, metadata={})]]
    for case in cases:
        mine = golden.coalesce_streams(case)
        theirs = plugin.coalesce_streams([nbformat.from_dict(dict(o)) for o in case])
        assert [dict(o) for o in mine] == [dict(o) for o in theirs]


def _golden_notebook(count=None):
    nb = nbformat.v4.new_notebook()
    golden_cell = nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(1)", execution_count=count)
    golden_cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    other = nbformat.v4.new_code_cell("x = 2", execution_count=5)
    other.outputs = [nbformat.v4.new_output("execute_result", execution_count=5, data={"text/plain": "2"}, metadata={})]
    nb.cells = [nbformat.v4.new_code_cell("a = 1"), other, golden_cell]
    nb.metadata["widgets"] = {"state": {}}
    return nb


def test_golden_update_and_counts_give_golden_cells_the_count_nbval_needs(tmp_path):
    import os

    from companion import golden

    committed, executed = tmp_path / "c.ipynb", tmp_path / "e.ipynb"
    nbformat.write(_golden_notebook(None), committed)
    assert golden.counts(committed) == 1
    nb = nbformat.read(committed, as_version=4)
    assert nb.cells[2].execution_count == 3 and golden.counts(committed) == 0
    nbformat.write(_golden_notebook(7), executed)
    assert golden.update(committed, executed) == 1
    nb = nbformat.read(committed, as_version=4)
    assert nb.cells[2].execution_count == 7 and nb.cells[2].outputs[0]["text"] == "1\n"
    assert nb.cells[1].execution_count is None and nb.cells[1].outputs == [] and "widgets" not in nb.metadata
    assert (committed.stat().st_mode & 0o777) == (0o666 & ~_umask()) and sorted(os.listdir(tmp_path)) == ["c.ipynb", "e.ipynb"]
    unrun = _golden_notebook(None)
    nbformat.write(unrun, executed)
    with pytest.raises(SystemExit, match="no execution count"):
        golden.update(committed, executed)


def _umask():
    import os

    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_committed_golden_cells_are_ready_for_plain_nbval():
    """What nbval needs from a golden cell: an execution count (else 'Unrun reference cell has outputs')."""
    from companion.golden import golden_cells

    missing = []
    for path in sorted(repo_path("notebooks").glob("*.ipynb")):
        for index, cell in golden_cells(nbformat.read(path, as_version=4)):
            if cell.execution_count is None:
                missing.append(f"{path.name} cell {index}")
    assert not missing, "golden cells without an execution count (run python -m companion.golden counts notebooks/*.ipynb): " + ", ".join(missing)


def _tiny_notebook(path, code):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell('PROFILE = "auto"\nSEED = 0')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(code)]
    nbformat.write(nb, path)


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_stopped_run_ends_every_child_and_marks_the_index_interrupted(tmp_path, signame):
    """Ctrl-C (SIGINT to the runner's process group, as a terminal sends it) or SIGTERM: no papermill or
    kernel is left, the finished notebook keeps its results, the index says which did not finish."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    books, out = tmp_path / "nb", tmp_path / "out"
    books.mkdir()
    _tiny_notebook(books / "01_quick.ipynb", "from companion.core import Claim, Claims, judge\n"
                   "Claims('01_quick').extend([Claim('c', 'p', 'm', 's', judge(0.0, 1e-9, kind='exact'))])")
    for name in ("02_slow", "03_slower"):
        _tiny_notebook(books / f"{name}.ipynb", f"import os, pathlib, time\npathlib.Path({str(tmp_path)!r}, '{name}.pid')"
                       ".write_text(str(os.getpid()))\ntime.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-m", "companion.runner", "--notebooks-dir", str(books), "--out", str(out),
                             "--jobs", "2", "--timeout", "300"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + 400  # a liveness bound: on a loaded 2-core machine the workers start slowly
        while not ((tmp_path / "02_slow.pid").exists() and (tmp_path / "03_slower.pid").exists()):
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read() if proc.poll() is not None else "timeout"
            time.sleep(0.5)
        tree = psutil.Process(proc.pid).children(recursive=True)
        kernels = [int((tmp_path / f"{n}.pid").read_text()) for n in ("02_slow", "03_slower")]
        assert all(k in {p.pid for p in tree} for k in kernels)
        if signame == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + getattr(signal, signame), output
    _, alive = psutil.wait_procs([p for p in tree if p.is_running()], timeout=10)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], f"left behind: {alive}"
    for pid in kernels:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == signame
    assert sorted(summary["unfinished"]) == ["02_slow", "03_slower"], (summary, output)
    status = {n["notebook"]: n["status"] for n in summary["notebooks"]}
    assert status == {"01_quick": "passed", "02_slow": "interrupted", "03_slower": "interrupted"}
    # The workers ignore SIGINT and report their stopped notebooks themselves (with the time they ran), rather
    # than dying with the terminal's Ctrl-C and leaving the driver to cancel their tasks after its grace period.
    assert all(n["seconds"] > 0 for n in summary["notebooks"] if n["status"] == "interrupted"), summary
    assert (out / "01_quick.html").exists() and json.loads((out / "01_quick.claims.json").read_text())["claims"]
    page = (out / "index.html").read_text()
    assert f"Interrupted by {signame}" in page and "02_slow, 03_slower" in page
    assert "INTERRUPTED" in output and "Aborted" not in output
