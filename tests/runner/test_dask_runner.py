"""The runner on a 2-worker Dask LocalCluster: pass, fail, timeout and retry, killed workers (rerun once,
then lost), an unreachable scheduler. Tiny throwaway notebooks; the tests never assert on time."""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import socket
import sys
import threading
import time
from importlib import metadata

import psutil
import pytest

from companion import runner

from .conftest import tiny_notebook


def test_pass_fail_a_timeout_retried_once_and_a_notebook_over_its_limit_twice(tmp_path, client):
    """One run of four notebooks: one passes, one fails, one times out once and passes on its retry, and one
    is over its limit at both attempts. The run still ends with its report; the last is "timed out" after two
    attempts with what it recorded before the limit (the payload survives Dask's exception transport)."""
    books, out = tmp_path / "nb", tmp_path / "out"
    books.mkdir()
    out.mkdir()
    tiny_notebook(books / "01_ok.ipynb", "from companion.core import Claim, Claims, judge, record\n"
                  "Claims('01_ok').extend([Claim('c', 'p', PROFILE, 's', judge(0.0, 1e-9, kind='exact'))])\n"
                  "record('answer', 42)")
    tiny_notebook(books / "02_bad.ipynb", "x = 1\nraise ValueError('bad luck')")
    marker = tmp_path / "03.first"
    # The first attempt sleeps past the limit; the retry finds the marker and passes at once.
    tiny_notebook(books / "03_slow_once.ipynb", f"import pathlib, time\nm = pathlib.Path({str(marker)!r})\n"
                  "if not m.exists():\n    m.write_text('1')\n    time.sleep(600)")
    tiny_notebook(books / "04_stuck.ipynb", "from companion.core import Claim, Claims, judge\n"
                  "Claims('04_stuck').extend([Claim('c', 'p', 'm', 's', judge(0.0, 1e-9, kind='exact'))])\n"
                  "import time\ntime.sleep(600)")
    notebooks = runner.discover(books)
    results = {r.notebook: r for r in runner.run(notebooks, out, {"PROFILE": "cpu"}, 2, timeout=20, client=client,
                                                  driver=runner.Driver(4, bar=False))}
    ok, bad, slow, stuck = results["01_ok"], results["02_bad"], results["03_slow_once"], results["04_stuck"]
    assert ok.status == "passed", ok
    assert ok.claims[0]["measured"] == "cpu" and ok.records == {"answer": 42.0}
    for name in ("01_ok.ipynb", "01_ok.html", "01_ok.claims.json", "01_ok.records.json", "_static/mathjax/MathJax.js"):
        assert (out / name).exists(), name
    assert bad.status == "failed" and bad.failing_cell == 2 and "ValueError: bad luck" in bad.error
    assert "raise ValueError" in bad.failing_source and (out / "02_bad.html").exists()
    assert slow.status == "passed" and slow.attempts == 2, slow
    assert stuck.status == "timed out" and stuck.attempts == 2 and "exceeded the 20 s limit" in stuck.error, stuck
    assert stuck.claims and stuck.claims[0]["measured"] == "m"
    assert (out / "04_stuck.ipynb").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert {n["notebook"]: n["status"] for n in summary["notebooks"]} == {
        "01_ok": "passed", "02_bad": "failed", "03_slow_once": "passed", "04_stuck": "timed out"}
    page = (out / "index.html").read_text()
    assert "cell 2: ValueError: bad luck" in page and "(2nd try)" in page
    # The run's provenance, in summary.json and at the top of the index.
    prov = summary["provenance"]
    assert prov["profile"] == "cpu" and prov["host"] == platform.node() and prov["python"] == platform.python_version()
    assert prov["packages"]["numpy"] == metadata.version("numpy") and prov["packages"]["plotly"] == metadata.version("plotly")
    assert prov["commit"] is None or re.fullmatch(r"[0-9a-f]{40}( \+uncommitted changes)?", prov["commit"]), prov["commit"]
    assert f"numpy {prov['packages']['numpy']}" in page and f"host {prov['host']}" in page


def test_a_worker_killed_mid_notebook_has_it_rerun_once_then_reported_lost_and_loses_nothing_else(tmp_path, own_client):
    """02_victim's worker is killed once: it is run again and passes. 03_doomed's worker is killed at every
    attempt: after its one rerun it is reported lost with the reason. 01_quick is untouched; the run ends
    with its report, and no papermill or kernel of a killed attempt is left running."""
    books, out, pids = tmp_path / "nb", tmp_path / "out", tmp_path / "pids"
    for folder in (books, out, pids):
        folder.mkdir()
    tiny_notebook(books / "01_quick.ipynb", "x = 1")
    tiny_notebook(books / "02_victim.ipynb", f"import os, pathlib, time\nm = pathlib.Path({str(tmp_path / 'victim.once')!r})\n"
                  f"if not m.exists():\n    m.write_text('1')\n    pathlib.Path({str(pids)!r}, f'victim-{{os.getpid()}}').write_text('')\n"
                  "    time.sleep(600)")
    tiny_notebook(books / "03_doomed.ipynb", f"import os, pathlib, time\npathlib.Path({str(pids)!r}, f'doomed-{{os.getpid()}}').write_text('')\n"
                  "time.sleep(600)")
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("results", runner.run(
        runner.discover(books), out, {}, 2, timeout=300, client=own_client, driver=runner.Driver(3, bar=False))))
    thread.start()
    killed, left = {}, []
    deadline = time.time() + 600
    while thread.is_alive() and time.time() < deadline:
        for marker in sorted(pids.iterdir()):
            if marker.name in killed:
                continue
            time.sleep(0.5)
            kernel = psutil.Process(int(marker.name.split("-")[1]))
            papermill = kernel.parent()
            worker = papermill.parent()  # the Dask worker process whose task runs papermill
            assert worker.pid in {p.pid for p in psutil.Process().children(recursive=True)}
            os.kill(worker.pid, signal.SIGKILL)
            killed[marker.name] = worker.pid
            left += [kernel, papermill]
        time.sleep(0.3)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert sorted(k.split("-")[0] for k in killed) == ["doomed", "doomed", "victim"], killed
    results = {r.notebook: r for r in box["results"]}
    assert results["01_quick"].status == "passed"
    assert results["02_victim"].status == "passed" and results["02_victim"].attempts == 2, results["02_victim"]
    doomed = results["03_doomed"]
    assert doomed.status == "lost" and "KilledWorker" in doomed.error and "died" in doomed.error, doomed
    assert (out / "01_quick.html").exists() and (out / "02_victim.html").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert {n["notebook"]: n["status"] for n in summary["notebooks"]} == {"01_quick": "passed", "02_victim": "passed", "03_doomed": "lost"}
    assert "every worker that ran it died" in (out / "index.html").read_text()
    _, alive = psutil.wait_procs(left, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def test_an_unreachable_scheduler_is_a_clear_error_naming_it(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    with pytest.raises(SystemExit, match=f"cannot reach the Dask scheduler at {address}"):
        runner.main(["--scheduler", address, "--papers", "tour", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_gpu_notebooks_ask_for_the_gpu_resource(tmp_path):
    path = tiny_notebook(tmp_path / "01_x.ipynb", "x = 1")
    assert runner.needs_gpu(path, "gpu", False) and runner.needs_gpu(path, "auto", True)
    assert not runner.needs_gpu(path, "cpu", True) and not runner.needs_gpu(path, "auto", False)
    nb = json.loads(path.read_text())
    nb["metadata"]["companion"] = {"gpu": False}
    path.write_text(json.dumps(nb))
    assert not runner.needs_gpu(path, "gpu", True)


def test_notebooks_do_not_inherit_the_workers_malloc_trim_setting(client):
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_ in its workers, which turns off glibc's dynamic mmap
    threshold: the notebooks' kernels must not inherit it (their tensors would be mmap-ed each time)."""
    on_workers = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert set(on_workers.values()) == {"65536"}  # what the workers themselves run with
    passed_on = client.run(lambda: runner.notebook_environ().get("MALLOC_TRIM_THRESHOLD_", "unset"))
    assert set(passed_on.values()) == {"unset"}


def test_the_timeout_exception_keeps_its_payload_through_pickling_and_stays_short():
    import pickle

    payload = {"notebook": "02_stuck", "status": "timed out", "files": {"x.ipynb": b"0" * 100_000}}
    exc = pickle.loads(pickle.dumps(runner.NotebookTimedOut(payload)))
    assert exc.payload == payload and str(exc) == "02_stuck exceeded its time limit"


@pytest.mark.parametrize("deaths, status", [(1, "passed"), (2, "failed")])
def test_a_kernel_that_dies_while_starting_is_started_once_more(tmp_path, deaths, status):
    """papermill's "Kernel died before replying to kernel_info" (no cell ran) gets one more start; a second
    death fails the notebook with that error."""
    book = tiny_notebook(tmp_path / "01_k.ipynb", "from companion.core import record\nrecord('y', 3)")

    class DyingKernels(runner.Children):
        starts = 0

        def start(self, cmd, **kwargs):
            self.starts += 1
            if self.starts <= deaths:  # what papermill prints when its kernel dies at start-up
                cmd = [sys.executable, "-c", f"import sys; print('RuntimeError: {runner.KERNEL_START_FAILED}'); sys.exit(1)"]
            return super().start(cmd, **kwargs)

    children = DyingKernels()
    payload = runner.execute_task("k", book.name, book.read_bytes(), str(book), {}, 120, children=children)
    assert children.starts == min(deaths, 1 + runner.KERNEL_START_RETRIES) + (status == "passed")
    assert payload["status"] == status
    if status == "passed":
        assert payload["records"] == {"y": 3}
    else:
        assert runner.KERNEL_START_FAILED in payload["error"]
