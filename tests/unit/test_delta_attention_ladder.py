"""Δ Attention's GPU ladder (paper 09): the stage bodies on tiny CPU inputs (reference kernels), the deadline, the
summary's arithmetic, and the committed ladder in the stage-runner layout."""

import json
import math
import time

import pytest

from companion.core import ParameterError
from companion.core.stages import StageContext, stage_states
from companion.delta_attention import ladder, scale
from companion.delta_attention.claims import ladder_rows


def _ctx(results=None, until=math.inf, **changes):
    profile = {**scale.SMOKE_PROFILE, "impl": "reference", **changes}
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results=results or {}, until=until)


def test_delta_rows_share():
    assert ladder.delta_rows_share(256, 1, 0) == pytest.approx(1.0)           # γ = 1: every row is dense
    n, gamma, tail = 1 << 15, 64, 128                                            # anchors + a 128-row tail
    rows = ladder.delta_plan(n, gamma, tail).dense_rows().double()
    assert ladder.delta_rows_share(n, gamma, tail) == pytest.approx(float((rows + 1).sum()) / (n * (n + 1) / 2))
    assert 1 / gamma < ladder.delta_rows_share(n, gamma, tail) < 2 / gamma


def test_checks_stage_matches_the_reference_and_eq67():
    out = ladder.checks(_ctx())
    assert out["N"] == scale.SMOKE_PROFILE["sizes"][0]
    assert all(v < 1e-5 for k, v in out.items() if k.endswith("max_abs")), out


def test_rows_stage_times_the_dense_peers_first_at_every_size():
    rows = ladder.rows(_ctx())
    for n in scale.SMOKE_PROFILE["sizes"]:
        names = [r["contender"] for r in rows if r["N"] == n]
        assert names[0] == "SDPA flash" and names[1] == "sparse"
        assert names.count("sparse + Δ") == names.count("Δ only") == len(scale.SMOKE_PROFILE["gammas"])
        assert names[-1] == "sparse + Δ (unfused)"
    assert all(r["ms"] > 0 for r in rows)


def test_rows_after_the_deadline_are_skipped():
    rows = ladder.rows(_ctx(until=time.perf_counter() - 1))
    assert [(r["N"], r["contender"], r["skipped"]) for r in rows] == [(n, "all", "deadline") for n in scale.SMOKE_PROFILE["sizes"]]


def test_summary_speedups_and_overhead():
    rows = [{"N": 1024, "contender": "SDPA flash", "gamma": None, "ms": 64.0},
            {"N": 1024, "contender": "SDPA cuDNN", "gamma": None, "ms": 32.0},
            {"N": 1024, "contender": "sparse", "gamma": None, "ms": 2.0},
            {"N": 1024, "contender": "sparse + Δ", "gamma": 32, "ms": 4.0},
            {"N": 2048, "contender": "all", "skipped": "deadline"}]
    (s,) = ladder.summary(_ctx(results={"rows": rows}, sizes=[1024, 2048], gammas=[32, 64]))
    assert s == {"N": 1024, "gamma": 32, "sparse_delta_ms": 4.0, "sparse_ms": 2.0, "speedup_vs_flash": 16.0,
                 "speedup_vs_cudnn": 8.0, "delta_overhead_ms": 2.0, "dense_share_ms": 2.0}
    with pytest.raises(RuntimeError, match="needs the rows stage"):
        ladder.summary(_ctx())


def test_a_wrong_profile_value_names_its_key():
    with pytest.raises(ParameterError, match="dense"):
        ladder.rows(_ctx(dense=["flash", "xformers"]))
    with pytest.raises(ParameterError, match="tune_configs"):
        ladder.tuning(_ctx(tune_configs={}))


def test_the_committed_ladder_in_the_stage_layout():
    rec = scale.recorded()
    assert stage_states(rec) == dict.fromkeys(("tuning", "checks", "rows", "summary"), "done") and rec["complete"]
    assert rec["tuning"]["best"] in rec["profile"]["tune_configs"]
    assert rec["profile"] == json.loads(json.dumps(scale.GPU_PROFILE))  # recorded with this profile: --resume takes it
    assert all(r.verdict != "not run here" for r in ladder_rows(rec))
