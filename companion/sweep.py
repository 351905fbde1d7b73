"""Parameter sweeps: one notebook fanned out over a grid of its parameters, on Dask.

    python -m companion.sweep 18 --grid "ITERATIONS=[500,1000] HEATMAP_ITERATIONS=[200,1000]" [--seeds 0,1,2]
    python -m companion.sweep tour --grid sweeps/tour.yaml [--value slope] [--yes]
                              [--profile cpu] [--jobs 2] [--timeout S] [--scheduler tcp://HOST:8786] [--out DIR]

(``make sweep NOTEBOOK=18 GRID="..." SEEDS=0,1,2``.) The grid is ``NAME=[v1,v2,...]`` pairs, or a YAML
file: either a mapping ``NAME: [values]``, or ``grid:`` with that mapping beside optional ``seeds:``,
``value:`` and ``notebook:``. Every name must be in the notebook's ``parameters`` cell (else an error lists
the valid ones), and every value must have the type of that parameter's default (an ``int`` for
``N_MAX = 100_000``, a list for a list): nothing runs otherwise. ``--seeds`` adds a ``SEED`` axis.
A grid of more than :data:`MAX_POINTS` points asks for ``--yes``.

Each point is one task of the runner (``companion.runner``: the same time limit, retry, worker-loss
handling and stop) and gets its own folder, named by its parameters (``N_MAX=1000__REPEATS=50``), with
the executed notebook, its HTML report, claims and recorded values. ``index.html`` (in the run index's
style) shows a plotly figure of one recorded value (``companion.core.record(name, value)`` in the
notebook; ``--value`` picks it, else the first one recorded) against the grid: a heat map for two axes,
a line with the seeds' spread for one; and the claims table of every point, under the provenance line. ``summary.json`` holds
the same with the provenance (commit, profile, host, package versions), and the run's exit status is 1 if a point failed.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import html
import itertools
import json
import re
import sys
from pathlib import Path

from companion import runner
from companion.core.atomic import write_json_atomic, write_text_atomic
from companion.core.validation import UnknownParameterError, check_known, fits_type, parameter_defaults
from companion.report import provenance

MAX_POINTS = 16  # more grid points than this need --yes
_PAIR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(\[[^\]]*\]|[^\s\[\]]+)\s*")


def parameters_cell(path: Path) -> dict:
    """``{name: default}`` from the notebook's cell tagged ``parameters`` (literals only, by the contract)."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            return parameter_defaults("".join(cell.get("source", "")))
    raise SystemExit(f"{Path(path).name} has no cell tagged 'parameters': it cannot be swept")


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        import yaml

        return yaml.safe_load(text)


def parse_grid(spec: str) -> tuple[dict[str, list], dict]:
    """``(grid, options)`` from ``"A=[1,2] B=[x,y]"`` or a YAML file's path; options may hold seeds, value, notebook."""
    options: dict = {}
    if spec.strip().endswith((".yaml", ".yml")) or Path(spec).is_file():
        import yaml

        path = Path(spec)
        if not path.is_file():
            raise SystemExit(f"grid file {spec} does not exist")
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise SystemExit(f"{spec}: expected a mapping NAME: [values] (or grid:, seeds:, value:)")
        if "grid" in data:
            options = {k: v for k, v in data.items() if k != "grid"}
            data = data["grid"]
            if not isinstance(data, dict):
                raise SystemExit(f"{spec}: grid: must be a mapping NAME: [values]")
        grid = {str(k): v for k, v in data.items()}
    else:
        grid, pos = {}, 0
        while pos < len(spec.strip()):
            match = _PAIR.match(spec, pos)
            if not match:
                raise SystemExit(f"cannot read the grid at {spec[pos:]!r}: expected NAME=[v1,v2,...] pairs, e.g. "
                                 "\"MU=[0.1,0.01] T_U=[10,100]\"")
            grid[match.group(1)] = _value(match.group(2))
            pos = match.end()
    if not grid:
        raise SystemExit("the grid is empty: give NAME=[v1,v2,...] pairs")
    grid = {k: (v if isinstance(v, list) else [v]) for k, v in grid.items()}
    for k, v in grid.items():
        if not v:
            raise SystemExit(f"grid axis {k} has no values")
    return grid, options


def parse_seeds(text) -> list[int]:
    if text in (None, ""):
        return []
    values = text if isinstance(text, list) else _value(f"[{text.strip().strip('[]')}]".replace(" ", ",").replace(",,", ","))
    if not isinstance(values, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in values):
        raise SystemExit(f"SEEDS={text!r}: expected integers, e.g. SEEDS=0,1,2")
    return values


def check_grid(grid: dict[str, list], defaults: dict, notebook: str) -> None:
    """Every name a parameter of the notebook, every value of its default's type; else SystemExit before anything runs."""
    try:
        check_known(grid, defaults, notebook)
    except UnknownParameterError as exc:
        raise SystemExit(str(exc)) from None
    for name, values in grid.items():
        for value in values:
            if not fits_type(value, defaults[name]):
                raise SystemExit(f"{name}={value!r} ({type(value).__name__}) does not fit {notebook}'s parameter "
                                 f"{name} = {defaults[name]!r} ({type(defaults[name]).__name__}); nothing was run")


def points(grid: dict[str, list], seeds: list[int]) -> list[dict]:
    axes = dict(grid)
    if seeds:
        axes["SEED"] = seeds
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]


def point_name(point: dict) -> str:
    """The point's folder name: ``NAME=value`` pairs joined by ``__``, unsafe characters replaced by ``-``."""
    def text(v):
        return re.sub(r"[^A-Za-z0-9.+-]+", "-", json.dumps(v) if not isinstance(v, str) else v).strip("-") or "-"

    return "__".join(f"{k}={text(v)}" for k, v in point.items())


# ---------------------------------------------------------------------------------------------- report

def sweep_figure(grid: dict[str, list], seeds: list[int], rows: list[dict], value: str) -> dict | None:
    """The plotly figure (a dict) of ``value`` against the grid: a heat map for two axes (mean over seeds),
    lines with the seeds' spread for one, one bar per point otherwise; None when nothing recorded it."""
    import numpy as np

    got = [(r["point"], r["records"][value]) for r in rows if value in (r.get("records") or {})]
    if not got:
        return None
    axes = [k for k in grid if not (seeds and k == "SEED")]
    label = lambda v: json.dumps(v) if not isinstance(v, str) else v  # noqa: E731

    def values_at(**fixed):
        return [y for p, y in got if all(p.get(k) == v for k, v in fixed.items())]

    layout = {"template": None, "margin": {"l": 70, "r": 20, "t": 50, "b": 60}, "height": 420,
              "title": {"text": f"{value} across the sweep" + (f" (mean of {len(seeds)} seeds)" if seeds and len(axes) == 2 else "")}}
    if len(axes) == 2:
        a, b = axes
        z = [[(float(np.mean(v)) if (v := values_at(**{a: va, b: vb})) else None) for vb in grid[b]] for va in grid[a]]
        data = [{"type": "heatmap", "z": z, "x": [label(v) for v in grid[b]], "y": [label(v) for v in grid[a]],
                 "colorscale": "Viridis", "colorbar": {"title": {"text": value}}, "texttemplate": "%{z:.4g}",
                 "hovertemplate": f"{b}=%{{x}}<br>{a}=%{{y}}<br>{value}=%{{z:.4g}}<extra></extra>"}]
        layout.update(xaxis={"title": {"text": b}, "type": "category"}, yaxis={"title": {"text": a}, "type": "category"})
    elif len(axes) == 1:
        a = axes[0]
        xs = [label(v) for v in grid[a]]
        per = [values_at(**{a: v}) for v in grid[a]]
        mean = [float(np.mean(v)) if v else None for v in per]
        line = {"type": "scatter", "mode": "lines+markers", "x": xs, "y": mean, "name": "mean" if seeds else value}
        if seeds:
            line["error_y"] = {"type": "data", "symmetric": False,
                               "array": [float(np.max(v) - np.mean(v)) if v else 0 for v in per],
                               "arrayminus": [float(np.mean(v) - np.min(v)) if v else 0 for v in per]}
        data = [line]
        if seeds:
            data.append({"type": "scatter", "mode": "markers", "name": "each seed", "marker": {"size": 6, "opacity": 0.5},
                         "x": [label(p[a]) for p, _ in got], "y": [y for _, y in got],
                         "text": [f"SEED={p.get('SEED')}" for p, _ in got]})
        layout.update(xaxis={"title": {"text": a}, "type": "category"}, yaxis={"title": {"text": value}})
        layout["title"]["text"] += f" (min–max over {len(seeds)} seeds)" if seeds else ""
    else:
        data = [{"type": "bar", "x": [point_name(p) for p, _ in got], "y": [y for _, y in got], "name": value}]
        layout.update(yaxis={"title": {"text": value}}, xaxis={"type": "category"})
    return {"data": data, "layout": layout}


def write_report(out_dir: Path, notebook: str, grid: dict, seeds: list[int], planned: list[dict], done: dict,
                 value: str | None, *, status: str, stopping: str | None, started: str, parameters: dict, prov: dict) -> None:
    """``index.html`` and ``summary.json`` of the sweep so far (rewritten after every point); ``prov`` is the
    sweep's provenance (``companion.report.provenance``)."""
    from companion import report as C  # the run index's page style: its CSS, badges, colours and provenance line
    from companion.report import PLOTLY_FILE, install_static, plotly_html

    rows = []
    for point in planned:
        name = point_name(point)
        r = done.get(name)
        rows.append({"name": name, "point": point, "status": r.status if r else ("not run" if status == "interrupted" else "running"),
                     "seconds": r.seconds if r else None, "attempts": r.attempts if r else 0, "error": r.error if r else "",
                     "failing_cell": r.failing_cell if r else None, "records": r.records if r else {},
                     "claims": r.claims if r else []})
    if value is None:
        value = next((k for row in rows for k in row["records"]), None)
    figure = sweep_figure(grid, seeds, rows, value) if value else None
    passed = sum(row["status"] == "passed" for row in rows)
    failed = sum(row["status"] in runner.FAILED for row in rows)
    unfinished = [row["name"] for row in rows if row["status"] in ("interrupted", "not run", "running")]
    counts = [("passed", passed, "passed"), ("failed", failed, "failed")]
    if unfinished:
        counts.append(("did not finish" if status != "running" else "to go", len(unfinished),
                       "interrupted" if status != "running" else "running"))
    count_html = "".join(
        f"<div class='count' style='border-color:{C.STATUS_COLOURS[k][0]}'><b style='color:{C.STATUS_COLOURS[k][0]}'>{n}</b>"
        f"<span>points {label}</span></div>" for label, n, k in counts)
    banner = ""
    if status == "interrupted":
        banner = (f"<div class='banner' style='color:#9a6700;background:#fff8c5'>Interrupted by {html.escape(stopping or 'a signal')}: "
                  f"{len(unfinished)} point(s) did not finish: {html.escape(', '.join(unfinished))}.</div>")
    elif status == "running":
        banner = f"<div class='banner' style='color:#0969da;background:#ddf4ff'>Running: {len(unfinished)} point(s) still to finish.</div>"
    if figure:
        fig_html = f"<div class='sweep-figure'>{plotly_html(figure, height=420)}</div>"
    else:
        fig_html = ("<p class='sub sweep-figure empty'>No value recorded yet: the notebook publishes one with "
                    "<code>companion.core.record(name, value)</code>.</p>")
    body = []
    for row in rows:
        link = f"{row['name']}/{notebook}.html"
        params = "<br>".join(html.escape(f"{k}={v}") for k, v in row["point"].items())
        head = (f"<a href='{html.escape(link)}'>{params}</a>" if row["status"] not in ("not run", "running") else params)
        shown = html.escape(f"{row['records'][value]:.4g}") if value and value in row["records"] else "–"
        claims = row["claims"] or [None]
        for i, c in enumerate(claims):
            first = (f"<td class='paper' rowspan='{len(claims)}'>{head}</td><td rowspan='{len(claims)}'>"
                     f"{C.badge(row['status'], C.STATUS_COLOURS)}<br><small>{shown}</small></td>" if i == 0 else "")
            if c is None:
                where = f"cell {row['failing_cell']}: " if row["failing_cell"] else ""
                text = where + row["error"] if row["error"] else ("(no claims recorded)" if row["status"] == "passed" else "")
                body.append(f"<tr class='point'>{first}<td colspan='4'>{html.escape(text)}</td><td></td><td></td></tr>")
            else:
                body.append(f"<tr class='point'>{first}<td>{html.escape(c['claim'])}</td><td>{html.escape(c.get('paper', ''))}</td>"
                            f"<td>{html.escape(c['measured'])}</td><td>{html.escape(c['scale'])}</td>"
                            f"<td>{C.badge(c['verdict'], C.VERDICT_COLOURS)}</td>"
                            f"<td class='evidence'>{html.escape(c.get('evidence', ''))}</td></tr>")
    axes = " × ".join(f"{k} ({len(v)})" for k, v in grid.items()) + (f" × SEED ({len(seeds)})" if seeds else "")
    extra = (f"<p class='sub'>fixed: {html.escape(', '.join(f'{k}={v}' for k, v in parameters.items()))}</p>" if parameters else "")
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Companion sweep " + html.escape(out_dir.name) + "</title>"
        f"<style>{C.INDEX_CSS}</style><script src='{PLOTLY_FILE}'></script></head><body>"
        f"<h1>Sweep of {html.escape(notebook)} {C.badge(status, C.STATUS_COLOURS)}</h1>"
        f"<p class='sub'>{len(planned)} point(s): {html.escape(axes)} · started {html.escape(started)}</p>{extra}"
        f"<p class='provenance'>{C.provenance_text(prov)}</p>"
        f"<div class='counts'>{count_html}</div>{banner}"
        f"<h2>{html.escape(value or 'recorded value')} against the grid</h2>{fig_html}"
        "<h2>Claims at each grid point</h2>"
        "<table class='claims sweep'><colgroup><col style='width:12%'><col style='width:9%'><col style='width:15%'>"
        "<col style='width:17%'><col style='width:18%'><col style='width:9%'><col style='width:8%'><col style='width:12%'></colgroup>"
        f"<tr><th>point</th><th>status · {html.escape(value or 'value')}</th><th>claim</th><th>paper says</th>"
        "<th>measured here</th><th>scale</th><th>verdict</th><th>evidence</th></tr>" + "".join(body) + "</table></body></html>")
    install_static(out_dir)
    write_text_atomic(out_dir / "index.html", page)
    write_json_atomic(out_dir / "summary.json", {
        "kind": "sweep", "notebook": notebook, "status": status, "interrupted_by": stopping, "started": started, "provenance": prov,
        "grid": grid, "seeds": seeds, "value": value, "parameters": parameters, "unfinished": unfinished if status != "passed" else [],
        "points": rows})


# ---------------------------------------------------------------------------------------------- run

def sweep(path: Path, grid: dict, seeds: list[int], out_dir: Path, *, parameters: dict | None = None, value: str | None = None,
          jobs: int = 2, timeout: float | None = None, client=None, driver: runner.Driver | None = None,
          scheduler: str | None = None) -> list[dict]:
    """Run every point of the grid (on ``client``, else a new LocalCluster or the cluster at ``scheduler``);
    returns the report's rows."""
    parameters = dict(parameters or {})
    planned = points(grid, seeds)
    stem = path.stem
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    driver = driver or runner.Driver(len(planned))
    done: dict[str, runner.NotebookResult] = {}
    prov = provenance(parameters.get("PROFILE", "auto"))

    def report(final: bool = False) -> None:
        results = list(done.values())
        status = runner.run_status(results, final, driver.stopping)
        write_report(out_dir, stem, grid, seeds, planned, done, value, status=status, stopping=driver.stopping,
                     started=started, parameters=parameters, prov=prov)

    def make_jobs(has_gpu: bool) -> list[runner.Job]:
        jobs_list = []
        for point in planned:
            folder = out_dir / point_name(point)
            folder.mkdir(parents=True, exist_ok=False)
            point_params = {**parameters, **point}
            jobs_list.append(runner.Job(point_name(point), path, point_params, folder, root="../",
                                        gpu=runner.needs_gpu(path, point_params.get("PROFILE", ""), has_gpu)))
        return jobs_list

    def on_result(job, result):
        done[job.key] = result

    runner.execute_jobs(make_jobs, on_result, report, heading=f"Sweeping {stem} over {len(planned)} point(s) into {out_dir}",
                        driver=driver, parameters=parameters, jobs=jobs, timeout=timeout, client=client,
                        scheduler=scheduler)
    return json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))["points"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", nargs="?", default="", help="the notebook: slug, stem or number (rtcfr, 18_rtcfr, 18); "
                                                                  "else the grid file's notebook:")
    parser.add_argument("--grid", required=True, help='"NAME=[v1,v2] NAME2=[...]" or a YAML file (sweeps/<name>.yaml)')
    parser.add_argument("--seeds", default="", help="seeds, e.g. 0,1,2: adds a SEED axis")
    parser.add_argument("--value", default=None, help="the recorded value to plot (default: the first one recorded)")
    parser.add_argument("--profile", default="", help="PROFILE for every point (auto, cpu or gpu)")
    parser.add_argument("--jobs", type=int, default=2, help="points executed at once (the local cluster's workers)")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock limit per point, seconds")
    parser.add_argument("--scheduler", default="", help="address of an existing Dask scheduler, tcp://HOST:PORT")
    parser.add_argument("--out", default="", help="output folder (default: runs/<UTC timestamp>-sweep-<notebook>; must not exist)")
    parser.add_argument("--yes", action="store_true", help=f"run a grid of more than {MAX_POINTS} points without asking")
    parser.add_argument("--notebooks-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    grid, options = parse_grid(args.grid)
    name = args.notebook or options.get("notebook", "")
    if name in ("", None):
        raise SystemExit("name the notebook to sweep (NOTEBOOK=18), or give notebook: in the grid file")
    notebooks = runner.select(runner.discover(Path(args.notebooks_dir) if args.notebooks_dir else None), [str(name)])
    if len(notebooks) != 1:
        raise SystemExit(f"{name!r} names {len(notebooks)} notebooks; a sweep runs one")
    path = next(iter(notebooks.values()))
    seeds = parse_seeds(args.seeds or options.get("seeds"))
    value = args.value or options.get("value")
    defaults = parameters_cell(path)
    check_grid(grid, defaults, path.stem)
    if seeds and "SEED" in grid:
        raise SystemExit("SEED is both a grid axis and --seeds: give it once")
    if seeds and "SEED" not in defaults:
        raise SystemExit(f"{path.stem} has no SEED parameter to take --seeds")
    parameters = {}
    if args.profile:
        from companion.core.profiles import PROFILES

        if args.profile not in PROFILES:
            raise SystemExit(f"PROFILE={args.profile!r} is not allowed: expected one of {', '.join(PROFILES)}")
        if "PROFILE" not in grid:
            parameters["PROFILE"] = args.profile
    n = len(points(grid, seeds))
    if n > MAX_POINTS and not args.yes:
        question = f"{n} grid points (more than {MAX_POINTS}) of {path.stem}: run them all? [y/N] "
        if not sys.stdin.isatty() or input(question).strip().lower() not in ("y", "yes"):
            raise SystemExit(f"{n} grid points is more than {MAX_POINTS}: pass --yes (make sweep ... YES=1) to run them")
    client, cluster, out_dir = runner.start(args, "sweep", f"-sweep-{path.stem}")
    driver = runner.Driver(n)
    runner.install_signal_handlers(driver)
    try:
        rows = sweep(path, grid, seeds, out_dir, parameters=parameters, value=value, jobs=args.jobs, timeout=args.timeout,
                     client=client, driver=driver, scheduler=args.scheduler or None)
    finally:
        client.close()
        if cluster is not None:
            cluster.close(timeout=20)
    if driver.stopping:
        runner.kill_leftovers()
    results = [runner.NotebookResult(r["name"], r["status"], r["seconds"] or 0.0, r["error"], r["failing_cell"], r["claims"],
                                     max(1, r["attempts"]), "", r["records"]) for r in rows]
    return runner.print_summary(results, out_dir, driver.stopping, what="sweep report")


if __name__ == "__main__":
    # Run through the module's import name, so that Dask pickles the task functions by reference.
    from companion.sweep import main as _main

    sys.exit(_main())
