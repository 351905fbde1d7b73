"""The stage runner (companion.core.stages): every stage ends done, skipped, failed or unfinished, the payload is
saved after every change, --stages and --resume keep what they should, and a killed run leaves its mark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from companion.core import ParameterError
from companion.core.stages import Stage, not_finished, run_stages, stage_states

QUIET = {"log": lambda *a: None}


def _ok(value):
    return lambda ctx: value


def _boom(ctx):
    raise RuntimeError("out of memory at n = 200")


def test_states_results_and_saves_in_order():
    saves = []
    stages = [Stage("a", _ok({"x": 1})), Stage("b", _boom), Stage("c", lambda ctx: ctx.results["a"]["x"] + ctx.seed)]
    payload = run_stages(stages, {"n": (1, 2), "seed": 5}, deadline_s=None, save=lambda p: saves.append(json.dumps(p)), **QUIET)
    assert payload["profile"] == {"n": [1, 2], "seed": 5}  # as JSON records it, so a resume compares equal
    assert stage_states(payload) == {"a": "done", "b": "failed", "c": "done"}
    assert payload["c"] == 6 and "b" not in payload
    assert payload["stages"]["b"]["error"] == "RuntimeError: out of memory at n = 200"
    assert not payload["complete"] and not_finished(payload) == ["b (failed: RuntimeError: out of memory at n = 200)"]
    # written before and after each stage: a (unfinished, done), b (unfinished, failed), c (...), then the end
    states = [json.loads(s)["stages"] for s in saves]
    assert [s.get("a", {}).get("state") for s in states[:2]] == ["unfinished", "done"]
    assert states[2]["b"]["state"] == "unfinished" and len(saves) == 7
    assert payload["runs"][0]["stages"] == ["a", "b", "c"]


def test_deadline_skips_a_stage_that_needs_more_time_and_left_keeps_the_later_needs():
    seen = {}

    def first(ctx):
        seen["left"] = ctx.left()
        return 1

    stages = [Stage("first", first, needs_s=1), Stage("later", _ok(2), needs_s=30), Stage("huge", _ok(3), needs_s=500)]
    payload = run_stages(stages, {"seed": 0}, deadline_s=100, **QUIET)
    assert 69 < seen["left"] <= 70  # 100 s less the 30 s of "later"; "huge" cannot fit, so nothing is kept for it
    assert stage_states(payload) == {"first": "done", "later": "done", "huge": "skipped"}
    assert payload["stages"]["huge"]["reason"].startswith("deadline:") and "needs 500 s" in payload["stages"]["huge"]["reason"]
    assert run_stages(stages, {"seed": 0}, deadline_s=0, **QUIET)["stages"]["first"]["state"] == "skipped"
    assert not_finished(payload) == [f"huge (skipped: {payload['stages']['huge']['reason']})"]
    assert not_finished(payload, ["first", "absent"]) == ["absent (not run)"]  # only the stages asked about


def test_only_and_resume_keep_the_other_stages_and_refuse_another_profile_or_seed():
    stages = [Stage("a", _ok(1)), Stage("b", _boom), Stage("c", _ok(3))]
    first = run_stages(stages, {"n": 4, "seed": 0}, deadline_s=None, **QUIET)
    fixed = [Stage("a", _ok(10)), Stage("b", _ok(2)), Stage("c", _ok(30))]
    second = run_stages(fixed, {"n": 4, "seed": 0}, deadline_s=None, only=["b"], previous=json.loads(json.dumps(first)), **QUIET)
    assert (second["a"], second["b"], second["c"]) == (1, 2, 3) and second["complete"]
    assert list(second["stages"]) == ["a", "b", "c"] and [r["stages"] for r in second["runs"]] == [["a", "b", "c"], ["b"]]
    with pytest.raises(ParameterError, match="seed 0"):
        run_stages(fixed, {"n": 4, "seed": 1}, deadline_s=None, previous=first, **QUIET)
    with pytest.raises(ParameterError, match=r"another profile \(differs in \['n'\]\)"):
        run_stages(fixed, {"n": 5, "seed": 0}, deadline_s=None, previous=first, **QUIET)
    with pytest.raises(ParameterError, match="written by the stage runner"):
        run_stages(fixed, {"n": 4, "seed": 0}, deadline_s=None, previous={"config": {"n": 4}}, **QUIET)
    with pytest.raises(ParameterError, match="written by the stage runner"):
        run_stages(fixed, {"n": 4, "seed": 0}, deadline_s=None, previous={"profile": {"n": 4, "seed": 0}}, **QUIET)


def test_a_resumed_stage_sees_its_own_earlier_result_where_it_finished():
    seen = {}

    def look(name):
        def run(ctx):
            seen[name] = ctx.earlier
            return {"seeds": [name]}
        return run

    stages = [Stage("a", look("a")), Stage("b", _boom), Stage("c", look("c"))]
    first = run_stages(stages, {"seed": 0}, deadline_s=None, **QUIET)
    assert seen == {"a": None, "c": None}  # a run that resumes nothing
    fixed = [Stage("a", look("a")), Stage("b", look("b")), Stage("c", look("c"))]
    run_stages(fixed, {"seed": 0}, deadline_s=None, previous=json.loads(json.dumps(first)), **QUIET)
    assert seen == {"a": {"seeds": ["a"]}, "b": None, "c": {"seeds": ["c"]}}  # b failed there: nothing to keep


def test_a_profile_without_a_seed_resumes_as_seed_0():
    stages = [Stage("a", _ok(1)), Stage("b", _ok(2))]
    first = run_stages(stages, {"n": 4}, deadline_s=None, only=["a"], **QUIET)
    second = run_stages(stages, {"n": 4}, deadline_s=None, only=["b"], previous=first, **QUIET)
    assert (second["a"], second["b"]) == (1, 2) and second["complete"]


@pytest.mark.parametrize("bad, match", [
    (dict(only=["nope"]), "stages of this study: a"),
    (dict(only=[]), "one or more of a"),
    (dict(deadline_s=-1), "deadline_s"),
    (dict(deadline_s="10"), "deadline_s"),
])
def test_bad_calls_are_refused_with_what_is_allowed(bad, match):
    with pytest.raises(ParameterError, match=match):
        run_stages([Stage("a", _ok(1))], {"seed": 0}, **{"deadline_s": None, **bad}, **QUIET)


@pytest.mark.parametrize("stages", [[], [Stage("a", _ok(1)), Stage("a", _ok(2))], [Stage("profile", _ok(1))],
                                    [Stage("not an identifier", _ok(1))], [Stage("a", _ok(1), needs_s=float("nan"))]])
def test_malformed_studies_are_refused(stages):
    with pytest.raises(ValueError):
        run_stages(stages, {"seed": 0}, deadline_s=None, **QUIET)


def test_a_profile_that_json_cannot_write_is_refused():
    with pytest.raises(ParameterError, match="JSON-able"):
        run_stages([Stage("a", _ok(1))], {"seed": 0, "f": object()}, deadline_s=None, **QUIET)


def test_sigterm_mid_stage_leaves_the_stage_unfinished_in_the_file(tmp_path):
    """A process killed inside a stage (a wall-clock limit sends SIGTERM) leaves that stage marked unfinished."""
    out = tmp_path / "study.json"
    script = textwrap.dedent(f"""
        import time
        from companion.core.atomic import write_json_atomic
        from companion.core.stages import Stage, run_stages
        run_stages([Stage("quick", lambda ctx: 1), Stage("slow", lambda ctx: time.sleep(60))], {{"seed": 0}},
                   deadline_s=None, save=lambda p: write_json_atomic({str(out)!r}, p), log=lambda *a: None)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.exists() and json.loads(out.read_text()).get("stages", {}).get("slow", {}).get("state") == "unfinished":
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == -signal.SIGTERM
    finally:
        proc.kill()
    payload = json.loads(out.read_text())
    assert stage_states(payload) == {"quick": "done", "slow": "unfinished"} and not payload["complete"]
    assert not_finished(payload) == ["slow (unfinished)"]


def test_a_smoke_run_of_the_entry_killed_mid_stage_leaves_that_stage_unfinished(tmp_path):
    """`python -m companion.bench hollowflow --smoke` sent SIGTERM while its second stage (the LJ55 toy, a few
    seconds) runs: the JSON on disk marks that stage unfinished, the first one done, holds no later stage, and says
    the run is not complete."""
    from companion.core import repo_path

    out = tmp_path / "hollowflow_gpu.json"
    proc = subprocess.Popen([sys.executable, "-m", "companion.bench", "hollowflow", "--smoke", "--out-dir", str(tmp_path)],
                            cwd=repo_path(), env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo_path())},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if stage_states(json.loads(out.read_text())).get("toy_LJ55") == "unfinished":
                    proc.send_signal(signal.SIGTERM)
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        assert proc.wait(timeout=60) == -signal.SIGTERM, "the run ended before its second stage could be interrupted"
    finally:
        proc.kill()
    payload = json.loads(out.read_text())
    assert stage_states(payload) == {"toy_LJ13": "done", "toy_LJ55": "unfinished"}
    assert not payload["complete"] and payload["smoke"] and "exit" not in payload


def test_stage_dates_name_the_last_call_that_ran_each_stage():
    from companion.core.stages import stage_dates

    runs = [{"stages": ["a", "b"], "ended": "day 1"}, {"stages": ["b"], "ended": "day 2"}, {"stages": ["c"]}]
    assert stage_dates({"runs": runs}) == {"a": "day 1", "b": "day 2"}
    assert stage_dates(None) == {} and stage_dates({}) == {}
