"""The batch runner behind ``make run`` and the notebook stage of ``make test``.

    python -m companion.runner [--papers "seer_attention rtcfr"] [--profile gpu] [--out runs/<stamp>]
                               [--jobs 2] [--timeout SECONDS]

Every notebook in ``notebooks/`` (or the chosen subset) is executed with papermill into a new folder
(``runs/<UTC timestamp>/`` unless ``--out`` names one; an existing folder is never reused), each in
its own process with a wall-clock limit, ``--jobs`` at a time. For each notebook the folder gets the
executed ``.ipynb``, an HTML rendering and the claims JSON the notebook recorded
(``companion.core.Claims``); then ``index.html``, ``summary.json`` and a terminal table
(paper | claim | measured here | scale | verdict | runtime). A failing notebook is reported with its
failing cell and error; the others still run; the exit status is then 1. Each notebook's results are
written as soon as it finishes, so an interrupted run keeps what was done.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from companion.core.atomic import write_json_atomic, write_text_atomic
from companion.core.claims import CLAIMS_DIR_ENV
from companion.core.paths import repo_path

NOTEBOOK_NAME = re.compile(r"^(\d\d)_([a-z0-9_]+)\.ipynb$")


@dataclass
class NotebookResult:
    notebook: str
    status: str  # "passed" | "failed" | "timed out"
    seconds: float
    error: str = ""
    failing_cell: int | None = None
    claims: list = field(default_factory=list)
    attempts: int = 1


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


def new_run_folder(root: Path) -> Path:
    """``root/<UTC timestamp>``, with a suffix if that already exists (never reuse a folder)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    for suffix in [""] + [f"-{i}" for i in range(1, 1000)]:
        folder = root / f"{stamp}{suffix}"
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a fresh run folder under {root}")


def first_error(executed: Path) -> tuple[int | None, str]:
    """The number (1-based, among the notebook's own code cells) of the first cell with an error, and the error."""
    try:
        nb = json.loads(executed.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, ""
    code_index = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code" or "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            continue
        code_index += 1
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return code_index, f"{out.get('ename')}: {out.get('evalue')}"
    return None, ""


def thread_env(jobs: int) -> dict:
    """Thread-pool sizes for one of ``jobs`` notebooks running at once: the cores shared out, at least 1.

    Without this, BLAS and torch pools in concurrent kernels each spin on every core, and small
    matrix products on a 2-core machine become tens of times slower.
    """
    threads = str(max(1, (os.cpu_count() or 1) // jobs))
    return {name: threads for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def execute(path: Path, out_dir: Path, parameters: dict, timeout: float | None, jobs: int = 1) -> NotebookResult:
    """Run one notebook with papermill in a child process, then render it to HTML."""
    out_dir = out_dir.resolve()  # the kernel runs in notebooks/, so it needs an absolute claims folder
    executed = out_dir / path.name
    claims_file = out_dir / f"{path.stem}.claims.json"
    claims_file.unlink(missing_ok=True)
    # TOKENIZERS_PARALLELISM=false: the tokenizers' thread pool after a fork can hang an ipykernel 7 kernel.
    env = {**os.environ, **thread_env(jobs), CLAIMS_DIR_ENV: str(out_dir), "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "papermill", str(path), str(executed), "--cwd", str(path.parent),
           "--kernel", "python3", "--no-progress-bar", "--log-level", "ERROR"]
    for key, value in parameters.items():
        cmd += ["-p", key, str(value)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        status = "passed" if proc.returncode == 0 else "failed"
        log = proc.stderr
    except subprocess.TimeoutExpired:
        status, log = "timed out", ""
    seconds = time.perf_counter() - start
    cell, error = first_error(executed)
    if status == "timed out":
        error = f"exceeded the {timeout:.0f} s limit"
    elif status == "failed" and not error:
        error = (log.strip().splitlines() or ["papermill failed"])[-1]
    (out_dir / f"{path.stem}.log").write_text(log or "", encoding="utf-8")
    if executed.exists():
        subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--log-level", "ERROR", str(executed)],
                       capture_output=True, text=True)
    claims = json.loads(claims_file.read_text(encoding="utf-8"))["claims"] if claims_file.exists() else []
    return NotebookResult(path.stem, status, round(seconds, 1), error, cell, claims)


def table_rows(results: list[NotebookResult]) -> list[list[str]]:
    rows = []
    for r in results:
        runtime = f"{r.seconds:.0f} s" + ("" if r.status == "passed" else f" ({r.status})") + (" (2nd try)" if r.attempts > 1 else "")
        if r.status != "passed":
            where = f"cell {r.failing_cell}: " if r.failing_cell else ""
            rows.append([r.notebook, "—", f"{where}{r.error}"[:90], "—", r.status.upper(), runtime])
        for c in r.claims or ([] if r.status != "passed" else [None]):
            if c is None:
                rows.append([r.notebook, "(no claims recorded)", "", "", "", runtime])
            else:
                rows.append([r.notebook, c["claim"], c["measured"], c["scale"], c["verdict"], runtime])
    return rows


HEADER = ["paper", "claim", "measured here", "scale", "verdict", "runtime"]


def format_table(rows: list[list[str]], width: int = 42) -> str:
    clip = [[(cell if len(cell) <= width else cell[: width - 1] + "…") for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in clip)) if clip else len(h) for i, h in enumerate(HEADER)]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(HEADER), "-+-".join("-" * w for w in widths)] + [line(r) for r in clip])


def write_index(out_dir: Path, results: list[NotebookResult], parameters: dict) -> None:
    rows = table_rows(results)
    body = "".join(
        "<tr>" + "".join(
            f"<td><a href='{html.escape(cell)}.html'>{html.escape(cell)}</a></td>" if i == 0 else f"<td>{html.escape(cell)}</td>"
            for i, cell in enumerate(row)) + "</tr>"
        for row in rows)
    page = (
        "<!doctype html><meta charset='utf-8'><title>Companion run</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}</style>"
        f"<h1>Companion run {html.escape(out_dir.name)}</h1><p>parameters: {html.escape(json.dumps(parameters))}</p>"
        "<table><tr>" + "".join(f"<th>{h}</th>" for h in HEADER) + "</tr>" + body + "</table>"
    )
    write_text_atomic(out_dir / "index.html", page)
    write_json_atomic(out_dir / "summary.json", {"parameters": parameters, "notebooks": [asdict(r) for r in results]})


def run(notebooks: dict[str, Path], out_dir: Path, parameters: dict, jobs: int, timeout: float | None) -> list[NotebookResult]:
    """Execute the notebooks, ``jobs`` at a time. A notebook that exceeds its time limit is run once more
    (and reported with ``attempts=2``): kernels started by concurrent papermill processes occasionally
    stall on a widget cell and never finish, which a second attempt does not repeat."""
    results: dict[str, NotebookResult] = {}
    order = [p.stem for p in notebooks.values()]

    def one(path: Path) -> None:
        result = execute(path, out_dir, parameters, timeout, jobs)
        if result.status == "timed out":
            print(f"  timed out {result.seconds:6.1f} s  {path.stem}: running it once more", flush=True)
            result = execute(path, out_dir, parameters, timeout, jobs)
            result.attempts = 2
        results[path.stem] = result
        print(f"  {result.status:>9}  {result.seconds:6.1f} s  {path.stem}" + (f"  ({result.error})" if result.error else ""), flush=True)
        write_index(out_dir, [results[s] for s in order if s in results], parameters)

    print(f"Executing {len(notebooks)} notebook(s) into {out_dir} ({jobs} at a time)", flush=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, notebooks.values()))
    return [results[s] for s in order]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--papers", default="", help="space- or comma-separated slugs, stems or numbers (default: all)")
    parser.add_argument("--profile", default="", help="PROFILE passed to every notebook (auto, cpu or gpu)")
    parser.add_argument("--out", default="", help="output folder (default: runs/<UTC timestamp>; must not exist)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks executed at once")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock limit per notebook, seconds")
    args = parser.parse_args(argv)

    notebooks = select(discover(), [n for n in re.split(r"[\s,]+", args.papers) if n])
    if not notebooks:
        raise SystemExit("no notebooks found in notebooks/")
    parameters = {}
    if args.profile:
        from companion.core.profiles import PROFILES

        if args.profile not in PROFILES:
            raise SystemExit(f"PROFILE={args.profile!r} is not allowed: expected one of {', '.join(PROFILES)}")
        parameters["PROFILE"] = args.profile
    if args.out:
        out_dir = Path(args.out).resolve()
        if out_dir.exists():
            raise SystemExit(f"output folder {out_dir} already exists; a run never overwrites an earlier one")
        out_dir.mkdir(parents=True)
    else:
        out_dir = new_run_folder(repo_path("runs"))
    if args.jobs < 1:
        raise SystemExit(f"--jobs={args.jobs} must be >= 1")

    results = run(notebooks, out_dir, parameters, args.jobs, args.timeout)
    print()
    print(format_table(table_rows(results)))
    failed = [r for r in results if r.status != "passed"]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed — report: {out_dir / 'index.html'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
