"""The stage runner of every GPU study and benchmark: ordered, named stages, each with the seconds it needs.

A study (``companion/<slug>/scale.py``) is a list of :class:`Stage`; :func:`run_stages` runs them in order
and calls ``save(payload)`` after every change of state, so the JSON on disk always says how far the run got.
Every stage ends in one of :data:`STATES`:

- ``done``: it returned; its result is ``payload[<stage name>]``;
- ``skipped``: fewer seconds were left before ``deadline_s`` than the stage needs;
- ``failed``: it raised; the exception's type and message are recorded and the later stages still run;
- ``unfinished``: written *before* the stage starts, so a process killed mid-stage (a wall-clock limit,
  SIGTERM, out of memory) leaves that mark in the file.

``only`` runs a subset of the stages; ``previous`` (the payload of an earlier call, same profile) keeps the
results and states of the stages not run again, so a study can be completed, or one stage redone, over
several calls; ``payload["runs"]`` lists every call. The profile (with its ``seed``) is recorded, and a
``previous`` of another profile or seed is refused.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from companion.core.validation import ParameterError

STATES = ("done", "skipped", "failed", "unfinished")
RESERVED = frozenset({"name", "profile", "stages", "runs", "seconds", "complete", "smoke", "command", "commit",
                      "exit", "device", "torch", "triton", "python", "date"})


@dataclass(frozen=True)
class Stage:
    """One named part of a study. ``run(ctx)`` returns the stage's JSON-able result; ``needs_s`` is the time it
    needs (it is skipped when fewer seconds are left before the deadline). ``run``'s docstring says what it
    measures."""

    name: str
    run: Callable[[StageContext], Any]
    needs_s: float = 0.0


@dataclass
class StageContext:
    """What a stage gets: the profile (with its ``seed``), the device, the log, the payload so far (earlier
    stages' results, read only) and ``shared``, objects one stage hands to a later one within a call (a
    trained model, a data set). ``left()`` is the seconds this stage may still use: the time to the deadline
    less what the later stages of this call need (those that can still fit after this one's ``needs_s``).
    ``earlier`` is this stage's own result in the file a run resumes (``previous``), where that stage finished
    there (None otherwise): a stage that loops over seeds can keep the seeds it finished and run the others."""

    profile: dict
    device: str
    log: Callable[..., Any]
    results: dict
    shared: dict = field(default_factory=dict)
    until: float = math.inf
    earlier: Any = None

    @property
    def seed(self) -> int:
        return int(self.profile.get("seed", 0))

    def left(self) -> float:
        return self.until - time.perf_counter()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _plain(profile: dict) -> dict:
    """The profile as JSON writes and reads it (tuples become lists), so a recorded one compares equal."""
    try:
        return json.loads(json.dumps(profile))
    except (TypeError, ValueError) as err:
        raise ParameterError("profile", profile, f"a JSON-able dict ({err})") from None


def check_stages(stages: Sequence[Stage]) -> tuple[str, ...]:
    """The stage names, after checking they are unique, not one of the payload's own keys, with a finite
    non-negative ``needs_s``."""
    names = tuple(s.name for s in stages)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"a study needs uniquely named stages, got {names}")
    for s in stages:
        if not isinstance(s, Stage) or not s.name.isidentifier() or s.name in RESERVED:
            raise ValueError(f"stage {s!r}: a Stage whose name is an identifier other than {sorted(RESERVED)}")
        if not (math.isfinite(s.needs_s) and s.needs_s >= 0):
            raise ValueError(f"stage {s.name}: needs_s must be a finite number of seconds >= 0, got {s.needs_s}")
    return names


def _check_previous(previous: dict, profile: dict) -> None:
    if not isinstance(previous, dict) or "profile" not in previous or "stages" not in previous:
        raise ParameterError("previous", "a file without 'profile' and 'stages'",
                             "the JSON of an earlier run of this study (written by the stage runner)")
    theirs = previous["profile"]
    if theirs.get("seed", 0) != profile.get("seed", 0):
        raise ParameterError("previous", f"a run of seed {theirs.get('seed', 0)}", f"a run of seed {profile.get('seed', 0)}")
    if theirs != profile:
        keys = sorted(k for k in set(theirs) | set(profile) if theirs.get(k) != profile.get(k))
        raise ParameterError("previous", f"a run of another profile (differs in {keys})", "a run of this profile")


def stage_states(payload: dict | None) -> dict[str, str]:
    """``{stage: state}`` of a recorded payload (empty for one written before the stage runner)."""
    return {name: s.get("state", "") for name, s in ((payload or {}).get("stages") or {}).items()}


def stage_dates(payload: dict | None) -> dict[str, str]:
    """``{stage: when the last call that ran it ended}`` from ``payload["runs"]`` (a resumed file mixes calls of
    several dates; its top-level ``date`` is only the last one's)."""
    dates: dict[str, str] = {}
    for run in (payload or {}).get("runs", []):
        for name in run.get("stages", []):
            if "ended" in run:
                dates[name] = run["ended"]
    return dates


def not_finished(payload: dict | None, stages: Sequence[str] | None = None) -> list[str]:
    """The stages of a recorded payload that did not end ``done``, as ``"name (state: why)"``; with ``stages``,
    only those, a stage the payload does not hold counting as ``"name (not run)"``."""
    recorded = (payload or {}).get("stages") or {}
    out = []
    for name in recorded if stages is None else stages:
        s = recorded.get(name, {"state": "not run"})
        if s.get("state") != "done":
            why = s.get("error") or s.get("reason") or ""
            out.append(f"{name} ({s.get('state')}{': ' + why if why else ''})")
    return out


def run_stages(stages: Sequence[Stage], profile: dict, *, device: str = "cpu", deadline_s: float | None = None,
               log: Callable[..., Any] = print, save: Callable[[dict], Any] | None = None,
               only: Sequence[str] | None = None, previous: dict | None = None) -> dict:
    """Run ``stages`` (all, or the names in ``only``, in the study's order) under ``deadline_s`` seconds
    (None: no deadline) and return the payload; ``save(payload)`` is called before and after every stage."""
    names = check_stages(stages)
    if not isinstance(profile, dict):
        raise ParameterError("profile", profile, "a dict (the study's GPU_PROFILE or SMOKE_PROFILE)")
    profile = _plain(profile)
    if deadline_s is not None and not (isinstance(deadline_s, (int, float)) and deadline_s >= 0):
        raise ParameterError("deadline_s", deadline_s, "a number of seconds >= 0, or None for no deadline")
    chosen = list(names if only is None else only)
    for name in chosen:
        if name not in names:
            raise ParameterError("stages", name, f"stages of this study: {', '.join(names)}")
    if not chosen:
        raise ParameterError("stages", "nothing", f"one or more of {', '.join(names)}")
    payload: dict = {"profile": profile, "stages": {}, "runs": []}
    if previous is not None:
        _check_previous(previous, profile)
        for name in names:
            if name not in chosen and name in previous["stages"]:
                payload["stages"][name] = previous["stages"][name]
                if name in previous:
                    payload[name] = previous[name]
        payload["runs"] = list(previous.get("runs", []))
    t0 = time.perf_counter()
    deadline = math.inf if deadline_s is None else t0 + deadline_s
    ctx = StageContext(profile=profile, device=str(device), log=log, results=payload)

    def write():
        payload["stages"] = {n: payload["stages"][n] for n in names if n in payload["stages"]}  # the study's order
        payload["complete"] = all(stage_states(payload).get(n) == "done" for n in names)
        if save is not None:
            save(payload)

    todo = [s for s in stages if s.name in chosen]
    for i, stage in enumerate(todo):
        payload.pop(stage.name, None)
        left = deadline - time.perf_counter()
        if left < stage.needs_s:
            payload["stages"][stage.name] = {"state": "skipped",
                                             "reason": f"deadline: {max(left, 0):.0f} s left, needs {stage.needs_s:.0f} s"}
            log(f"[{stage.name}] skipped: {payload['stages'][stage.name]['reason']}")
            write()
            continue
        payload["stages"][stage.name] = {"state": "unfinished", "started": _now()}
        write()
        room, reserve = deadline - time.perf_counter() - stage.needs_s, 0.0
        for later in todo[i + 1:]:  # keep the time of the later stages that can still run after this one
            if reserve + later.needs_s <= room:
                reserve += later.needs_s
        ctx.until = deadline - reserve
        ctx.earlier = (previous.get(stage.name) if previous is not None
                       and stage_states(previous).get(stage.name) == "done" else None)
        ts = time.perf_counter()
        try:
            result = stage.run(ctx)
        except Exception as err:  # noqa: BLE001 - recorded; the later stages still run
            payload["stages"][stage.name] = {"state": "failed", "seconds": round(time.perf_counter() - ts, 1),
                                             "error": f"{type(err).__name__}: {err}"}
            log(f"[{stage.name}] failed: {type(err).__name__}: {err}\n{traceback.format_exc()}")
        else:
            if result is not None:
                payload[stage.name] = result
            payload["stages"][stage.name] = {"state": "done", "seconds": round(time.perf_counter() - ts, 1)}
            log(f"[{stage.name}] done in {time.perf_counter() - ts:.1f} s ({time.perf_counter() - t0:.1f} s total)")
        write()
    payload["seconds"] = round(time.perf_counter() - t0, 1)
    payload["runs"].append({"stages": chosen, "seconds": payload["seconds"], "ended": _now()})
    write()
    return payload


def study_functions(stages: Sequence[Stage], results_name: str):
    """``(run_scale_up, recorded)`` of a study module (``companion/<slug>/scale.py``), written once:
    ``run_scale_up(profile, *, device, deadline_s, log=print, save=None)`` runs every stage on ``profile``
    (``GPU_PROFILE`` on an H200) and calls ``save(payload)`` after every stage; ``recorded()`` is the committed
    ``benchmarks/results/<results_name>.json`` (None when not recorded yet)."""
    from companion.core.results import recorded_results

    check_stages(stages)

    def run_scale_up(profile: dict, *, device: str, deadline_s: float | None, log: Callable[..., Any] = print,
                     save: Callable[[dict], Any] | None = None) -> dict:
        return run_stages(stages, profile, device=device, deadline_s=deadline_s, log=log, save=save)

    def recorded() -> dict | None:
        return recorded_results(results_name)

    run_scale_up.__doc__ = f"Every stage of the study ({', '.join(s.name for s in stages)}) on ``profile``; " \
                           "``save(payload)`` after every stage."
    recorded.__doc__ = f"The committed ``benchmarks/results/{results_name}.json`` (None when not recorded yet)."
    return run_scale_up, recorded
