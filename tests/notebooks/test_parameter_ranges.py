"""Every notebook's validation cell at the ends of its parameters' allowed ranges.

Data-driven, so it follows the notebooks as they change: for each notebook, its parameters cell and
validation cell are read; each number parameter is probed with values far outside any range
(+-10**9 and a wrong type), the bounds are read from the ParameterError message ("expected an integer
>= 10 and <= 100000"), and the validation cell is run with the parameter at each closed end (it must
accept it) and just outside (it must reject it with an error naming the parameter). A choice
parameter ("one of 'a', 'b'") is run with each allowed value. At an end, a rejection is accepted only
if its message states the dependence on another parameter by name, e.g. "BLOCK_SIZE ... at most
SEQ_LEN / 2" or "DELTA ... one of DELTAS = [...]": a user who sets a value inside the range a message
gave must learn from the next message what else to change. One Python process per notebook runs all
of its probes.

KNOWN lists the rejections at a range end whose message does not name the parameter it depends on,
found by this test in notebooks other sessions own; the test checks that each still happens, so the
list shrinks as they are fixed (remove the entry then).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import nbformat
import pytest

from companion.core import repo_path

NOTEBOOKS = sorted(repo_path("notebooks").glob("[0-9][0-9]_*.ipynb"))
KNOWN = {
    ("03_scalekv", "PLANTED_LAYERS"),   # PLANTED_DRAFTERS: "fewer than 2 distinct layer indices" (says not PLANTED_LAYERS)
    ("04_zeros_attention", "MQAR_SEQ_LEN"),  # MQAR_PAIRS: "<= 3" (the bound is (MQAR_SEQ_LEN - 1) // 2)
    ("14_cpmla", "BATCH"),               # N_DATA: ">= 2048" (the bound is BATCH)
    ("14_cpmla", "EPOCHS"),              # EARLY_EPOCH: "<= 1" (the bound is EPOCHS - 1)
}

DRIVER = textwrap.dedent(r'''
    import ast, json, math, re, sys
    from companion.core.validation import ParameterError
    params_src, validation_src = json.loads(sys.stdin.read())
    defaults = {}
    for stmt in ast.parse(params_src).body:
        defaults[stmt.targets[0].id] = ast.literal_eval(stmt.value)

    def attempt(overrides):
        ns = {}
        exec(params_src, ns)
        ns.update(overrides)
        try:
            exec(validation_src, ns)
            return None
        except ParameterError as exc:
            return {"name": exc.name, "message": str(exc), "allowed": exc.allowed}
        except Exception as exc:
            return {"name": None, "message": f"{type(exc).__name__}: {exc}", "allowed": ""}

    NUMBER = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
    report = []
    for name, value in defaults.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            lo = hi = None
            lo_open = hi_open = False
            for probe in (-10**9, 10**9):
                err = attempt({name: type(value)(probe)})
                if err and err["name"] == name:
                    m = re.search(r"(>=|>) " + NUMBER, err["allowed"])
                    if m and probe < 0:
                        lo, lo_open = float(m.group(2)), m.group(1) == ">"
                    m = re.search(r"(<=|<) " + NUMBER, err["allowed"])
                    if m and probe > 0:
                        hi, hi_open = float(m.group(2)), m.group(1) == "<"
            for end, is_open, outside in ((lo, lo_open, -1), (hi, hi_open, +1)):
                if end is None:
                    continue
                if isinstance(value, int):
                    at = int(end) + (outside * -1 if is_open else 0)
                    beyond = int(end) + (0 if is_open else outside)
                else:
                    at = end + (-outside * max(abs(end), 1.0) * 1e-6 if is_open else 0.0)
                    beyond = end + (outside * max(abs(end), 1.0) * 1e-3 if not is_open else 0.0)
                report.append({"parameter": name, "value": at, "kind": "end", "error": attempt({name: at})})
                report.append({"parameter": name, "value": beyond, "kind": "outside", "error": attempt({name: beyond})})
        elif isinstance(value, str):
            err = attempt({name: "__not_an_allowed_value__"})
            if err and err["name"] == name and err["allowed"].startswith("one of "):
                for choice in ast.literal_eval("[" + err["allowed"][len("one of "):] + "]"):
                    if name == "PROFILE" and choice == "gpu":
                        continue  # needs CUDA; check_common says so
                    report.append({"parameter": name, "value": choice, "kind": "end", "error": attempt({name: choice})})
    print(json.dumps(report))
''')


def probe(path):
    nb = nbformat.read(path, as_version=4)
    params, validation = [c.source for c in nb.cells if c.cell_type == "code"][:2]
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps([params, validation]), cwd=path.parent,
                          capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parameter_names(path) -> set[str]:
    nb = nbformat.read(path, as_version=4)
    return {stmt.targets[0].id for stmt in ast.parse([c.source for c in nb.cells if c.cell_type == "code"][0]).body}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_validation_accepts_its_range_ends_and_rejects_just_outside(path):
    report, names = probe(path), parameter_names(path)
    problems, known_seen = [], set()
    for item in report:
        name, value, err = item["parameter"], item["value"], item["error"]
        if item["kind"] == "end":
            if err is None:
                continue
            others = names - {err["name"] or ""}
            if err["name"] and any(re.search(rf"\b{re.escape(o)}\b", err["allowed"]) for o in others):
                continue  # the message names what it depends on
            if (path.stem, name) in KNOWN:
                known_seen.add((path.stem, name))
                continue
            problems.append(f"{name}={value!r} (an end of its allowed range) is rejected: {err['message']}")
        elif err is None:
            problems.append(f"{name}={value!r} (just outside its allowed range) is accepted")
        elif err["name"] is None or (not err["name"].startswith(name) and name not in err["message"]):
            problems.append(f"{name}={value!r} fails without a ParameterError naming it: {err['message']}")
    assert report, f"{path.name}: no parameter with a range was found"
    assert not problems, f"{path.name}:\n" + "\n".join(problems)
    stale = {k for k in KNOWN if k[0] == path.stem} - known_seen
    assert not stale, f"fixed, remove from KNOWN: {stale}"


def test_an_injected_name_that_is_not_a_parameter_is_refused_naming_the_valid_ones(tmp_path):
    """``papermill -p N_MAXX 1000`` (a typo) stops in the validation cell, naming the valid names; papermill
    itself only warns."""
    tour = str(repo_path("notebooks", "00_tour.ipynb"))
    run = [sys.executable, "-m", "papermill", tour, str(tmp_path / "out.ipynb"), "--cwd", str(tmp_path),
           "--kernel", "python3", "--no-progress-bar", "-p", "N_MAXX", "1000"]
    result = subprocess.run(run, capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode != 0
    assert ("this notebook has no parameter(s) N_MAXX; its parameters cell has: PROFILE, SEED, N_MAX, REPEATS"
            in result.stdout + result.stderr)


def test_check_injected_reads_the_cell_papermill_adds_after_the_parameters_cell():
    from companion.core.validation import UnknownParameterError, check_injected

    params = 'PROFILE = "auto"  # a comment\nSEED = 0\nN = 3'
    check_injected({})  # outside IPython: nothing to check
    check_injected({"In": ["", params, "check_injected(globals())"]})  # nothing injected
    check_injected({"In": ["", params, "# Parameters\nN = 5\nPAPERMILL_INPUT_PATH = 'x.ipynb'\n", "..."]})
    with pytest.raises(UnknownParameterError, match=r"no parameter\(s\) M, K; its parameters cell has: PROFILE, SEED, N"):
        check_injected({"In": ["", params, "# Parameters\nM = 5\nN = 1\nK = 2\n", "check_injected(globals())"]})
