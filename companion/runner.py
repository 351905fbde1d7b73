"""The batch runner behind ``make run`` and the notebook stage of ``make test``, on ``dask.distributed``.

    python -m companion.runner [--papers "seer_attention rtcfr"] [--profile gpu] [--out runs/<stamp>]
                               [--jobs 2] [--timeout SECONDS] [--scheduler tcp://HOST:8786]

Every notebook in ``notebooks/`` (or the chosen subset) is one Dask task: papermill executes it on a
worker in a scratch folder, with a wall-clock limit, and the task returns the executed ``.ipynb`` (with
its widget state), its HTML report (``companion.report``), the claims JSON (``companion.core.Claims``)
and the values it recorded (``companion.core.record``). The driver writes them atomically into a new
folder (``runs/<UTC timestamp>/`` unless ``--out`` names one; an existing folder is never reused) as
each task finishes, then ``index.html`` (the run's provenance, counts, the papers' cards by theme with
their thumbnails, the claims table), ``summary.json`` (with the provenance: commit, profile, host, package
versions) and a terminal table (paper | claim | paper says | measured here | scale | verdict),
cells wrapped, never cut. A failing notebook is reported with its failing cell and error; the others
still run; the exit status is then 1.

Where: by default a ``LocalCluster`` of ``--jobs`` worker processes with one thread each; with
``--scheduler`` an existing cluster whose workers have the project installed (``dask scheduler``,
``dask worker tcp://HOST:8786 --nthreads 1 [--resources GPU=1]``). An unreachable scheduler is an error
within seconds that names the address. The Dask dashboard's address is printed, and a progress bar
(done/total, running, failed) is drawn on a terminal.

Faults, handled by Dask: a notebook over its limit raises in its task and ``retries=1`` runs it once more
(``attempts=2``); a worker that dies mid-notebook has its task run once more on another worker
(``allowed-failures=1`` on the local cluster), else it is reported "lost" with the reason. GPU: under
``PROFILE=gpu`` (or ``auto`` on a cluster with GPU workers) each task asks for the worker resource
``GPU=1``, unless the notebook's metadata says ``"companion": {"gpu": false}``.

Process trees: each papermill process starts in a session of its own and dies with its worker
(``PR_SET_PDEATHSIG``; its kernel then exits by itself); a timed-out notebook is ended with all its
descendants. On SIGINT (Ctrl-C) or SIGTERM the driver asks every worker to end its papermill trees
(``Client.run``), cancels what has not started, and writes the index with the status "interrupted",
naming the notebooks that did not finish (exit status 130 or 143). Each notebook's results are
written as soon as it finishes, so an interrupted run keeps what was done.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from companion.core.claims import CLAIMS_DIR_ENV
from companion.core.paths import repo_path

NOTEBOOK_NAME = re.compile(r"^(\d\d)_([a-z0-9_]+)\.ipynb$")
# A notebook's status; a run's status is "running", "passed", "failed" or "interrupted".
STATUSES = ("passed", "failed", "timed out", "lost", "interrupted", "not run")
FAILED = ("failed", "timed out", "lost")  # the statuses that fail a run
# A kernel that dies before its first reply ran no cell (two kernels started at once can race for the same
# ports): papermill is started again, within the same time limit, this many times.
KERNEL_START_FAILED = "Kernel died before replying to kernel_info"
KERNEL_START_RETRIES = 1


@dataclass
class NotebookResult:
    notebook: str
    status: str  # one of STATUSES
    seconds: float
    error: str = ""
    failing_cell: int | None = None
    claims: list = field(default_factory=list)
    attempts: int = 1
    failing_source: str = ""
    records: dict = field(default_factory=dict)  # companion.core.record(name, value) calls


class Children:
    """The runner's child processes. Each starts in a new session (so a terminal's Ctrl-C reaches only
    the runner, which decides); :meth:`stop` ends them all with their descendants."""

    def __init__(self):
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self.stopping: str | None = None  # the signal's name once the run is being stopped
        self.stopped: set[int] = set()  # pids of the children that were still running when the stop came

    def start(self, cmd, **kwargs) -> subprocess.Popen | None:
        with self._lock:
            if self.stopping:
                return None
            proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
            self._procs.add(proc)
            return proc

    def release(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def stop(self, reason: str, grace: float = 5.0) -> None:
        """Mark the run as stopping and end every running child with its descendants."""
        with self._lock:
            self.stopping = self.stopping or reason
            procs = [p for p in self._procs if p.poll() is None]
            self.stopped.update(p.pid for p in procs)
        threads = [threading.Thread(target=kill_tree, args=(p, grace)) for p in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def kill_tree(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM ``proc``, its process group and every descendant (a kernel runs in a session of its own),
    then SIGKILL whatever is left after ``grace`` seconds."""
    import psutil

    try:
        tree = [psutil.Process(proc.pid)]
        tree += tree[0].children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for p in tree:
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        _, tree = psutil.wait_procs(tree, timeout=grace if sig == signal.SIGTERM else 2.0)
        if not tree:
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def become_subreaper() -> None:
    """On Linux, orphaned descendants (a kernel whose papermill died) are re-parented to the runner,
    so a stop still finds them. Elsewhere nothing happens."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


CHILDREN = Children()


def discover(folder: Path | None = None) -> dict[str, Path]:
    """``{slug: path}`` for every ``NN_<slug>.ipynb`` in the notebooks folder, in number order."""
    folder = folder or repo_path("notebooks")
    found = {}
    for path in sorted(folder.glob("*.ipynb")):
        match = NOTEBOOK_NAME.match(path.name)
        if match:
            found[match.group(2)] = path
    return found


def select(available: dict[str, Path], names: list[str]) -> dict[str, Path]:
    """The subset named by slug (``rtcfr``), file stem (``18_rtcfr``) or number (``18``)."""
    if not names:
        return available
    chosen, unknown = {}, []
    for name in names:
        hits = [s for s, p in available.items() if name in (s, p.stem, p.stem[:2])]
        if hits:
            chosen.update({s: available[s] for s in hits})
        else:
            unknown.append(name)
    if unknown:
        raise SystemExit(f"unknown paper(s): {', '.join(unknown)}; valid names: {', '.join(available)}")
    return dict(sorted(chosen.items(), key=lambda kv: kv[1].name))


def new_run_folder(root: Path, suffix_name: str = "") -> Path:
    """``root/<UTC timestamp><suffix_name>``, with a suffix if that already exists (never reuse a folder)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S") + suffix_name
    for suffix in [""] + [f"-{i}" for i in range(1, 1000)]:
        folder = root / f"{stamp}{suffix}"
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a fresh run folder under {root}")


def first_error(executed: Path, with_source: bool = False):
    """The number (1-based, among the notebook's own code cells) of the first cell with an error, and the
    error; with ``with_source`` also the cell's source."""
    try:
        nb = json.loads(executed.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return (None, "", "") if with_source else (None, "")
    code_index = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code" or "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            continue
        code_index += 1
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found = code_index, f"{out.get('ename')}: {out.get('evalue')}"
                source = cell.get("source", "")
                return (*found, "".join(source) if isinstance(source, list) else source) if with_source else found
    return (None, "", "") if with_source else (None, "")


def thread_env(jobs: int) -> dict:
    """Thread-pool sizes for one of ``jobs`` notebooks running at once: the cores shared out, at least 1.

    Without this, BLAS and torch pools in concurrent kernels each spin on every core, and small
    matrix products on a 2-core machine become tens of times slower.
    """
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    return {name: threads for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


class NotebookTimedOut(Exception):
    """Raised by a task whose notebook exceeded its time limit, so that Dask's ``retries`` runs it once more.

    ``payload`` is what a finished task returns (files included). The message stays short: Dask replaces
    an exception whose text is long by a "Long error message" string, which would lose the payload and
    flood the worker's log."""

    def __init__(self, payload: dict):
        super().__init__(f"{payload.get('notebook', 'a notebook')} exceeded its time limit")
        self.payload = payload

    def __reduce__(self):
        return (NotebookTimedOut, (self.payload,))


def _parent_death_signal() -> None:
    """In the papermill child: SIGKILL it if the thread that started it dies (a killed Dask worker). Its
    kernel then exits by itself (ipykernel polls its parent), so nothing outlives a lost worker."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _event(topic_msg: dict) -> None:
    """Tell the driver something about a task (``Worker.log_event``); nothing happens outside a worker."""
    try:
        from distributed import get_worker

        get_worker().log_event("companion", topic_msg)
    except (ImportError, ValueError):
        pass


def notebook_cwd(path: Path) -> Path:
    """The folder a notebook runs in: its own folder where it exists on this machine, else this
    installation's ``notebooks/`` (a worker of an existing cluster with the project installed)."""
    return path.parent if path.parent.is_dir() else repo_path("notebooks")


def notebook_environ() -> dict:
    """This process's environment for a notebook's papermill and kernel, less what a Dask worker adds for
    itself: ``MALLOC_TRIM_THRESHOLD_`` (set by Dask's nanny) also turns off glibc's dynamic mmap threshold,
    so every tensor over 128 KiB would be mmap-ed and unmapped again (a small CPU training loop ran 1.2-1.4x
    slower with it)."""
    return {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}


def execute_task(key: str, name: str, source: bytes, origin: str, parameters: dict, timeout: float | None,
                 jobs: int = 1, root: str = "", neighbours: tuple = (None, None), children: Children | None = None) -> dict:
    """One notebook, run with papermill on this machine (a Dask worker or the driver) in a scratch folder.

    Returns the payload the driver writes into the run folder: the status, time, error and failing cell,
    the claims and recorded values, and ``files`` (name -> bytes: the executed notebook, its HTML report and
    index thumbnail, the claims JSON, the log). ``root`` and ``neighbours`` place the report in its run
    (``companion.report.render_html``). A notebook over its time limit raises :class:`NotebookTimedOut`, which Dask's
    ``retries=1`` turns into one more attempt (the payload of the last attempt is in the exception). A kernel that
    dies before its first reply (:data:`KERNEL_START_FAILED`: no cell ran) is started again, up to
    :data:`KERNEL_START_RETRIES` times, within the same time limit.
    """
    import shutil
    import tempfile

    from companion.core.records import RECORDS_FILE

    children = children or CHILDREN
    stem = Path(name).stem
    _event({"event": "start", "key": key})
    scratch = Path(tempfile.mkdtemp(prefix=f"companion-{stem}-"))
    try:
        path = scratch / "in" / name
        path.parent.mkdir()
        path.write_bytes(source)
        executed = scratch / name
        claims_file = scratch / f"{stem}.claims.json"
        # TOKENIZERS_PARALLELISM=false: the tokenizers' thread pool after a fork can hang an ipykernel 7 kernel.
        env = {**notebook_environ(), **thread_env(jobs), CLAIMS_DIR_ENV: str(scratch), "PYTHONUNBUFFERED": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        cmd = [sys.executable, "-m", "papermill", str(path), str(executed), "--cwd", str(notebook_cwd(Path(origin))),
               "--kernel", "python3", "--no-progress-bar", "--log-level", "ERROR"]
        for k, value in parameters.items():
            cmd += ["-y", f"{k}: {json.dumps(value)}"]  # JSON is YAML: strings stay strings, lists stay lists
        log_path = scratch / f"{stem}.log"
        start = time.perf_counter()
        for attempt in range(1 + KERNEL_START_RETRIES):
            with open(log_path, "w", encoding="utf-8") as log:
                proc = children.start(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      text=True, preexec_fn=_parent_death_signal)
                if proc is None:
                    return {"key": key, "notebook": stem, "status": "not run", "seconds": 0.0,
                            "error": "the run was interrupted before it started", "files": {}}
                try:
                    proc.wait(timeout=timeout and max(timeout - (time.perf_counter() - start), 1.0))
                    status = "passed" if proc.returncode == 0 else "failed"
                except subprocess.TimeoutExpired:
                    kill_tree(proc)  # papermill, its kernel and everything they started
                    status = "timed out"
                finally:
                    children.release(proc)
            if status != "failed" or KERNEL_START_FAILED not in log_path.read_text(encoding="utf-8", errors="replace"):
                break
            print(f"  {stem}: its kernel died while starting (attempt {attempt + 1}); starting it again", flush=True)
        seconds = time.perf_counter() - start
        if proc.pid in children.stopped:  # ended by the stop, whatever its exit status says
            status = "interrupted"
        cell, error, source_text = first_error(executed, with_source=True)
        if status == "timed out":
            error = f"exceeded the {timeout:.0f} s limit"
        elif status == "interrupted":
            error = f"stopped by {children.stopping}" + (f" ({error})" if error else "")
        elif status == "failed" and not error:
            lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            error = (lines or ["papermill failed"])[-1]
        if executed.exists() and status != "interrupted":
            try:
                from companion.report import render_html
                from companion.thumbnails import write_thumbnail

                render_html(executed, root=root, neighbours=neighbours, install=False)
                write_thumbnail(executed)
            except Exception as exc:  # a report that cannot be rendered must not hide the run's result
                print(f"  could not render {executed.name} to HTML: {type(exc).__name__}: {exc}", flush=True)
        claims = json.loads(claims_file.read_text(encoding="utf-8"))["claims"] if claims_file.exists() else []
        records_file = scratch / RECORDS_FILE
        records = json.loads(records_file.read_text(encoding="utf-8")) if records_file.exists() else {}
        thumbnail = executed.with_name(f"{stem}.thumb.svg")
        files = {p.name: p.read_bytes() for p in (executed, executed.with_suffix(".html"), thumbnail, claims_file, log_path)
                 if p.exists()}
        if records:
            files[f"{stem}.records.json"] = records_file.read_bytes()
        payload = {"key": key, "notebook": stem, "status": status, "seconds": round(seconds, 1), "error": error,
                   "failing_cell": cell, "failing_source": source_text if status == "failed" else "", "claims": claims,
                   "records": records, "files": files}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _event({"event": "end", "key": key, "status": status})
    if status == "timed out" and not children.stopping:
        raise NotebookTimedOut(payload)
    return payload


def write_files(out_dir: Path, files: dict[str, bytes]) -> None:
    """The task's files, each written atomically into ``out_dir``."""
    from companion.core.atomic import write_atomic

    for fname, data in files.items():
        write_atomic(out_dir / fname, lambda tmp, data=data: Path(tmp).write_bytes(data))


def result_from(payload: dict, attempts: int = 1) -> NotebookResult:
    return NotebookResult(payload["notebook"], payload["status"], payload["seconds"], payload.get("error", ""),
                          payload.get("failing_cell"), payload.get("claims", []), attempts, payload.get("failing_source", ""),
                          payload.get("records", {}))


def execute(path: Path, out_dir: Path, parameters: dict, timeout: float | None, jobs: int = 1,
            children: Children | None = None) -> NotebookResult:
    """Run one notebook here, without Dask (what a task does), and write its files into ``out_dir``."""
    out_dir = Path(out_dir).resolve()
    try:
        payload = execute_task(path.stem, path.name, path.read_bytes(), str(path.resolve()), parameters, timeout, jobs,
                               children=children)
    except NotebookTimedOut as exc:
        payload = exc.payload
    from companion.report import install_static

    install_static(out_dir)
    write_files(out_dir, payload.pop("files"))
    return result_from(payload)


# ---------------------------------------------------------------------------------------------- tables

HEADER = ["paper", "claim", "paper says", "measured here", "scale", "verdict", "evidence"]
WIDTHS = [14, 24, 24, 28, 18, 16, 22]


def runtime_text(r: NotebookResult) -> str:
    return f"{r.seconds:.0f} s" + (" (2nd try)" if r.attempts > 1 else "")


def table_rows(results: list[NotebookResult]) -> list[list[str]]:
    """One row per claim; a notebook that did not pass gets a row with its status, failing cell and error."""
    rows = []
    for r in results:
        if r.status != "passed":
            where = f"cell {r.failing_cell}: " if r.failing_cell else ""
            rows.append([r.notebook, f"{r.status.upper()} after {runtime_text(r)}", "", f"{where}{r.error}", "", r.status.upper(), ""])
        for c in r.claims or ([] if r.status != "passed" else [None]):
            if c is None:
                rows.append([r.notebook, "(no claims recorded)", "", "", "", "", ""])
            else:
                rows.append([r.notebook, c["claim"], c.get("paper", ""), c["measured"], c["scale"], c["verdict"],
                             c.get("evidence", "")])
    return rows


def format_table(rows: list[list[str]], width: int | None = None, widths: list[int] | None = None) -> str:
    """A plain-text table whose cells wrap within their column (never cut); rows are separated by a rule.

    ``width`` (the terminal's) shares out the columns; by default the widths in :data:`WIDTHS`.
    """
    widths = list(widths or WIDTHS)
    if width:
        room = width - 3 * (len(widths) - 1)
        widths = [max(6, w * room // sum(widths)) for w in widths]
    # A column no wider than its longest cell.
    widths = [min(w, max([len(HEADER[i])] + [len(str(r[i])) for r in rows])) for i, w in enumerate(widths)]

    def wrapped(cells):
        cols = [textwrap.wrap(str(c), w, break_long_words=True, break_on_hyphens=False) or [""] for c, w in zip(cells, widths)]
        height = max(len(c) for c in cols)
        return [" | ".join((col[k] if k < len(col) else "").ljust(w) for col, w in zip(cols, widths)).rstrip() for k in range(height)]

    rule = "-+-".join("-" * w for w in widths)
    lines = wrapped(HEADER) + [rule]
    previous = None
    for row in rows:
        if previous is not None and row[0] != previous:
            lines.append(rule)
        lines += wrapped(row)
        previous = row[0]
    return "\n".join(lines)


def failure_report(results: list[NotebookResult]) -> str:
    """Each failed notebook with its failing cell's source and error."""
    parts = []
    for r in results:
        if r.status in FAILED:
            head = f"{r.notebook}: {r.status}" + (f" in cell {r.failing_cell}" if r.failing_cell else "") + f": {r.error}"
            body = textwrap.indent(r.failing_source.rstrip(), "    | ") if r.failing_source else ""
            parts.append(head + ("\n" + body if body else ""))
    return "\n\n".join(parts)


def run_status(results: list[NotebookResult], finished: bool, stopping: str | None) -> str:
    if stopping:
        return "interrupted"
    if not finished:
        return "running"
    return "passed" if all(r.status == "passed" for r in results) else "failed"



# ---------------------------------------------------------------------------------------------- run

@dataclass
class Job:
    """One notebook execution: ``key`` names it (a notebook's stem, or a sweep point's folder name),
    its files go to ``folder``."""

    key: str
    path: Path
    parameters: dict
    folder: Path
    root: str = ""  # the run folder (its _static/ and index.html) relative to ``folder``
    neighbours: tuple = (None, None)  # the stems of the previous and next notebooks of the run, for the report's links
    gpu: bool = False  # ask for the worker resource GPU=1


class Driver:
    """The driver's view of a run: which tasks started and ended (from the workers' events), the progress
    bar, and the signal that stops it."""

    def __init__(self, total: int, bar: bool | None = None):
        self.lock = threading.Lock()
        self.stopping: str | None = None
        self.starts: dict[str, int] = {}
        self.ended: set[str] = set()
        self.done = 0
        self.failed = 0
        from tqdm import tqdm

        bar = sys.stderr.isatty() if bar is None else bar
        self.bar = tqdm(total=total, unit="nb", file=sys.stderr, disable=not bar, dynamic_ncols=True, leave=True)
        self._update()

    def say(self, line: str) -> None:
        from tqdm import tqdm

        tqdm.write(line, file=sys.stdout)
        sys.stdout.flush()

    def running(self) -> int:
        return sum(1 for k in self.starts if k not in self.ended)

    def _update(self) -> None:
        self.bar.set_postfix_str(f"running {self.running()}, failed {self.failed}", refresh=True)

    def event(self, event) -> None:
        """A worker's ``log_event("companion", msg)``: a task started or ended."""
        msg = event[1] if isinstance(event, tuple) else event
        key = msg.get("key")
        with self.lock:
            if msg.get("event") == "start":
                if key in self.starts and key not in self.ended and not self.stopping:
                    self.say(f"  rerunning {key}: the worker running it was lost")
                self.starts[key] = self.starts.get(key, 0) + 1
                self.ended.discard(key)
            elif msg.get("event") == "end":
                self.ended.add(key)
                if msg.get("status") == "timed out" and not self.stopping and self.starts.get(key, 0) < 2:
                    self.say(f"  timed out  {key}: running it once more")
            self._update()

    def finished(self, result: NotebookResult, key: str) -> None:
        with self.lock:
            self.ended.add(key)
            self.done += 1
            self.failed += result.status in FAILED
            self.bar.update(1)
            self._update()
        if result.status != "not run":
            self.say(f"  {result.status:>11}  {result.seconds:6.1f} s  {key}" + (f"  ({result.error})" if result.error else ""))

    def close(self) -> None:
        self.bar.close()


def _stop_children(reason: str) -> int:
    """On a worker (``Client.run``): end every papermill process tree this worker started; later tasks do not start."""
    running = len(CHILDREN._procs)
    CHILDREN.stop(reason)
    return running


def connect(scheduler: str | None, jobs: int, gpu: bool = False, connect_timeout: float = 5.0):
    """``(client, cluster)``: a client of the Dask scheduler at ``scheduler`` (``cluster`` is None), or of a
    new ``LocalCluster`` of ``jobs`` worker processes with one thread each (with ``gpu``, each worker
    offers the resource GPU=1: they share this machine's GPUs, as ``jobs`` notebooks at once always did).

    On the local cluster a task whose worker dies is run once more, then reported lost
    (``distributed.scheduler.allowed-failures = 1``); an existing cluster keeps its own setting.
    """
    import logging

    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout=f"{connect_timeout}s")
        except (OSError, TimeoutError) as exc:
            raise SystemExit(f"cannot reach the Dask scheduler at {scheduler} within {connect_timeout:.0f} s "
                             f"({type(exc).__name__}: {exc}). Start one with `dask scheduler` and workers with "
                             f"`dask worker {scheduler}`, or leave SCHEDULER unset to run on this machine.") from None
        return client, None
    # The workers start with SIGINT ignored (they inherit it, and so do their papermill children): Ctrl-C in a
    # terminal reaches the whole process group, and the driver, not each worker dying on its own, stops the run.
    main_thread = threading.current_thread() is threading.main_thread()  # only there can signals be set
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread else None
    try:
        # worker-saturation 1.0: a worker holds only the notebook it runs, so a task never waits behind a busy worker
        # and a worker's death counts against that notebook alone, never against one queued behind it.
        with dask.config.set({"distributed.scheduler.allowed-failures": 1,
                              "distributed.scheduler.worker-saturation": 1.0}):
            cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0",
                                   memory_limit=0, resources={"GPU": 1} if gpu else None, silence_logs=logging.ERROR)
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, previous)
    return Client(cluster), cluster


def dashboard_line(client) -> str:
    import importlib.util

    link = client.dashboard_link
    if importlib.util.find_spec("bokeh") is None and getattr(client.cluster, "scheduler", None) is not None:
        return f"Dask dashboard: not served (install bokeh>=3.1 to get it at {link})"
    return f"Dask dashboard: {link}"


def gpu_workers(client) -> int:
    """How many of the cluster's workers offer the resource GPU."""
    workers = client.scheduler_info().get("workers", {})
    return sum(1 for w in workers.values() if (w.get("resources") or {}).get("GPU", 0) > 0)


def workers_per_host(client) -> int:
    """The most workers on one host: each notebook gets that host's cores shared out among them (``thread_env``)."""
    hosts: dict[str, int] = {}
    for address in client.scheduler_info().get("workers", {}):
        host = address.rsplit(":", 1)[0]
        hosts[host] = hosts.get(host, 0) + 1
    return max(hosts.values(), default=1)


def needs_gpu(path: Path, profile: str, cluster_has_gpu: bool) -> bool:
    """Whether the notebook's task asks for GPU=1: under ``PROFILE=gpu`` (or ``auto`` on a cluster with GPU
    workers), unless the notebook's metadata says ``"companion": {"gpu": false}`` (its GPU profile needs none)."""
    if profile != "gpu" and not (profile in ("", "auto") and cluster_has_gpu):
        return False
    try:
        meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("companion", {})
    except (OSError, ValueError):
        meta = {}
    return bool(meta.get("gpu", True))


def run_jobs(client, jobs: list[Job], timeout: float | None, driver: Driver, on_result, threads_jobs: int) -> dict[str, NotebookResult]:
    """Submit every job to the cluster (``retries=1``: a timed-out notebook runs once more), write each one's
    files into its folder as it finishes (``on_result(job, result)`` after), and stop cleanly when
    ``driver.stopping`` is set: the running notebooks' process trees are ended on their workers and
    reported "interrupted", the others "not run"."""
    from distributed import KilledWorker

    from companion.report import install_static

    results: dict[str, NotebookResult] = {}
    futures = {}
    for job in jobs:
        fut = client.submit(execute_task, job.key, job.path.name, job.path.read_bytes(), str(job.path.resolve()),
                            job.parameters, timeout, threads_jobs, job.root, job.neighbours,
                            key=f"companion-{job.key}-{os.urandom(4).hex()}", retries=1, pure=False,
                            resources={"GPU": 1} if job.gpu else None)
        futures[fut] = job
    pending = set(futures)

    def collect(fut) -> None:
        job = futures[fut]
        if fut.status == "finished":
            payload, attempts = fut.result(), max(1, driver.starts.get(job.key, 1))
        elif fut.status == "error":
            exc = fut.exception()
            if isinstance(exc, NotebookTimedOut):
                payload, attempts = exc.payload, 2
            elif isinstance(exc, KilledWorker):
                payload, attempts = {"notebook": job.path.stem, "status": "lost", "seconds": 0.0,
                                     "error": f"every worker that ran it died ({type(exc).__name__}: {exc})"}, 2
            else:
                payload, attempts = {"notebook": job.path.stem, "status": "failed", "seconds": 0.0,
                                     "error": f"the task failed on its worker: {type(exc).__name__}: {exc}"}, 1
        else:  # cancelled by a stop
            started = job.key in driver.starts
            payload, attempts = {"notebook": job.path.stem, "status": "interrupted" if started else "not run", "seconds": 0.0,
                                 "error": f"stopped by {driver.stopping}" if started else "the run was interrupted before it started"}, 1
        files = payload.pop("files", {}) or {}
        if files:
            if any(f.endswith(".html") for f in files):
                install_static((job.folder / job.root).resolve())
            write_files(job.folder, files)
        result = result_from(payload, attempts)
        results[job.key] = result
        driver.finished(result, job.key)
        on_result(job, result)

    stop_sent = None
    while pending:
        if driver.stopping and stop_sent is None:
            stop_sent = time.monotonic()
            client.cancel([f for f in pending if futures[f].key not in driver.starts])
            try:
                client.run(_stop_children, driver.stopping)
            except Exception:  # a worker that is gone has nothing to stop
                pass
        if stop_sent is not None and time.monotonic() - stop_sent > 30:
            client.cancel(list(pending))
        for fut in [f for f in pending if f.done() or f.status == "cancelled"]:
            pending.discard(fut)
            collect(fut)
        time.sleep(0.2)
    return results


def execute_jobs(make_jobs, on_result, report, *, heading: str, driver: Driver, parameters: dict, jobs: int,
                 timeout: float | None, client=None, scheduler: str | None = None) -> None:
    """The Dask session of a run and of a sweep: connect (``client``, else a new ``LocalCluster`` of ``jobs``
    workers, or the cluster at ``scheduler``), build the jobs (``make_jobs(cluster_has_gpu)``), say where they
    run, then call ``report()`` before any result, ``on_result(job, result)`` then ``report()`` as each one
    finishes, and ``report(final=True)`` at the end; the workers' events reach ``driver``. Closes what it opened."""
    own = client is None
    cluster = None
    if own:
        client, cluster = connect(scheduler, jobs, gpu=parameters.get("PROFILE") == "gpu")
    try:
        has_gpu = gpu_workers(client) > 0
        job_list = make_jobs(has_gpu)
        if any(j.gpu for j in job_list) and not has_gpu:
            raise SystemExit(f"PROFILE={parameters.get('PROFILE')} asks for workers with the resource GPU, and none of "
                             f"the cluster's {len(client.scheduler_info().get('workers', {}))} worker(s) has one: start "
                             "them with `dask worker <scheduler> --resources GPU=1`")
        where = scheduler or f"a local Dask cluster of {len(client.scheduler_info().get('workers', {}))} worker(s)"
        driver.say(f"{heading} on {where}")
        driver.say(dashboard_line(client))
        report()

        def finished(job: Job, result: NotebookResult) -> None:
            on_result(job, result)
            report()

        client.subscribe_topic("companion", driver.event)
        try:
            run_jobs(client, job_list, timeout, driver, finished, workers_per_host(client))
        finally:
            client.unsubscribe_topic("companion")
        report(final=True)
    finally:
        driver.close()
        if own:
            client.close()
            if cluster is not None:
                cluster.close(timeout=20)


def run(notebooks: dict[str, Path], out_dir: Path, parameters: dict, jobs: int, timeout: float | None,
        client=None, driver: Driver | None = None, scheduler: str | None = None) -> list[NotebookResult]:
    """Execute the notebooks on Dask (``client``, else a new ``LocalCluster`` of ``jobs`` workers, or the
    cluster at ``scheduler``), writing each one's files and the index as it finishes. A notebook that
    exceeds its time limit is run once more (``attempts=2``): kernels started by concurrent papermill
    processes occasionally stall on a widget cell and never finish, which a second attempt does not repeat."""
    out_dir = Path(out_dir)
    order = [p.stem for p in notebooks.values()]
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    driver = driver or Driver(len(order))
    profile = parameters.get("PROFILE", "")
    results: dict[str, NotebookResult] = {}

    from companion.report import provenance, write_index

    prov = provenance(profile or "auto")

    def index(final: bool = False) -> None:
        if final:
            for stem in order:
                results.setdefault(stem, NotebookResult(stem, "not run", 0.0, "the run was interrupted before it started"))
        done = [results[s] for s in order if s in results]
        write_index(out_dir, done, parameters, status=run_status(done, final, driver.stopping),
                    planned=order, stopping=driver.stopping, started=started, prov=prov)

    def on_result(job: Job, result: NotebookResult) -> None:
        results[job.key] = result

    execute_jobs(lambda has_gpu: [Job(p.stem, p, parameters, out_dir, gpu=needs_gpu(p, profile, has_gpu),
                                      neighbours=(order[i - 1] if i else None, order[i + 1] if i + 1 < len(order) else None))
                                  for i, p in enumerate(notebooks.values())],
                 on_result, index, heading=f"Executing {len(notebooks)} notebook(s) into {out_dir}", driver=driver,
                 parameters=parameters, jobs=jobs, timeout=timeout, client=client, scheduler=scheduler)
    return [results[s] for s in order]


def install_signal_handlers(driver: Driver) -> None:
    """SIGINT and SIGTERM stop the run: every running notebook's process tree is ended, the index says "interrupted"."""

    def handler(signum, _frame):
        name = signal.Signals(signum).name
        if driver.stopping:
            return
        driver.say(f"\n==> {name}: stopping the running notebooks")
        driver.stopping = name

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def kill_leftovers() -> None:
    """The last sweep after a stop: anything still below the driver (re-parented to it, a subreaper)."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


def print_summary(results: list[NotebookResult], out_dir: Path, stopping: str | None, what: str = "report") -> int:
    """The terminal table, the failures and the last line; returns the exit status."""
    print()
    columns = None if not sys.stdout.isatty() else os.get_terminal_size().columns
    print(format_table(table_rows(results), width=columns))
    report = failure_report(results)
    if report:
        print("\nFailures:\n" + report)
    failed = [r for r in results if r.status in FAILED]
    passed = sum(r.status == "passed" for r in results)
    if stopping:
        unfinished = [r.notebook for r in results if r.status in ("interrupted", "not run")]
        print(f"\nINTERRUPTED by {stopping}: {passed} passed, {len(failed)} failed, did not finish: "
              f"{', '.join(unfinished) or 'none'} — {what}: {out_dir / 'index.html'}")
        return 128 + getattr(signal, stopping)
    print(f"\n{passed} passed, {len(failed)} failed — {what}: {out_dir / 'index.html'}")
    return 1 if failed else 0


def start(args, what: str, suffix: str):
    """``(client, cluster, out_dir)`` of a run or a sweep (``what``) from its command line: connect first (it fails
    fast, before a folder exists), then make ``--out`` (refused if it exists: a run never overwrites an earlier
    one) or a new ``runs/<timestamp><suffix>``; this process becomes the subreaper of the notebooks' processes."""
    if args.jobs < 1:
        raise SystemExit(f"--jobs={args.jobs} must be >= 1")
    client, cluster = connect(args.scheduler or None, args.jobs, gpu=args.profile == "gpu")
    if args.out:
        out_dir = Path(args.out).resolve()
        if out_dir.exists():
            client.close()
            raise SystemExit(f"output folder {out_dir} already exists; a {what} never overwrites an earlier one")
        out_dir.mkdir(parents=True)
    else:
        out_dir = new_run_folder(repo_path("runs"), suffix)
    become_subreaper()
    return client, cluster, out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--papers", default="", help="space- or comma-separated slugs, stems or numbers (default: all)")
    parser.add_argument("--profile", default="", help="PROFILE passed to every notebook (auto, cpu or gpu)")
    parser.add_argument("--out", default="", help="output folder (default: runs/<UTC timestamp>; must not exist)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks executed at once (the local cluster's workers)")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock limit per notebook, seconds")
    parser.add_argument("--scheduler", default="", help="address of an existing Dask scheduler, tcp://HOST:PORT "
                                                         "(default: a local cluster of --jobs workers)")
    parser.add_argument("--notebooks-dir", default="", help=argparse.SUPPRESS)  # tests: a folder of throwaway notebooks
    args = parser.parse_args(argv)

    notebooks = select(discover(Path(args.notebooks_dir) if args.notebooks_dir else None),
                       [n for n in re.split(r"[\s,]+", args.papers) if n])
    if not notebooks:
        raise SystemExit("no notebooks found in notebooks/")
    parameters = {}
    if args.profile:
        from companion.core.profiles import PROFILES

        if args.profile not in PROFILES:
            raise SystemExit(f"PROFILE={args.profile!r} is not allowed: expected one of {', '.join(PROFILES)}")
        parameters["PROFILE"] = args.profile
    client, cluster, out_dir = start(args, "run", "")
    driver = Driver(len(notebooks))
    install_signal_handlers(driver)
    try:
        results = run(notebooks, out_dir, parameters, args.jobs, args.timeout, client=client, driver=driver,
                      scheduler=args.scheduler or None)
    finally:
        client.close()
        if cluster is not None:
            cluster.close(timeout=20)
    if driver.stopping:
        kill_leftovers()
    return print_summary(results, out_dir, driver.stopping)


if __name__ == "__main__":
    # Run through the module's import name, so that Dask pickles the task functions by reference.
    from companion.runner import main as _main

    sys.exit(_main())
