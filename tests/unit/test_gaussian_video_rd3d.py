"""companion.gaussian_video.rd3d and its claim rows: the fixed groupings and the RD curve of a coded sequence on a
tiny CPU scene; the rows of constructed payloads judged by the one rule (one seed, a straddling spread, a sign
flip, no run, an unfinished stage, a smoke run)."""

import math
import time
from types import SimpleNamespace

import pytest

from companion.core.stages import StageContext
from companion.gaussian_video import claims as C
from companion.gaussian_video import rd3d as R
from companion.gaussian_video import scale_rd3d as S
from companion.gaussian_video.experiments import GROUP_VARIANTS, KEY_VARIANTS
from companion.gaussian_video.pipeline import Config as PipelineConfig
from companion.gaussian_video.train3d import Config, make_dataset

TINY = Config.from_profile({**S.SMOKE_PROFILE, "seed": 0})


@pytest.fixture(scope="module")
def data():
    return make_dataset(**{**S.SMOKE_PROFILE["scene"], "n_frames": 3}, backend="torch", device="cpu", seed=0)


def test_fixed_groups_code_segments_and_reuse_keyframes(data):
    fives = R.fixed_groups(data, TINY, "torch", 5, keyframes := {})
    assert [f["kind"] for f in fives] == ["key", "inter", "inter"] and [f["t"] for f in fives] == [0, 1, 2]
    assert set(keyframes) == {0}
    twos = R.fixed_groups(data, TINY, "torch", 2, keyframes)
    assert [f["kind"] for f in twos] == ["key", "inter", "key"] and set(keyframes) == {0, 2}
    assert "reused" not in twos[-1]  # frame 2 was coded here, not reused
    ones = R.fixed_groups(data, TINY, "torch", 1, keyframes)
    assert [f["t"] for f in ones if f.get("reused")] == [0, 2] and [f["kind"] for f in ones] == ["key"] * 3
    assert set(keyframes) == {0, 1, 2}
    curve = R.rd_curve(ones)
    L = TINY.L
    assert len(curve["bytes"]) == L and curve["bytes"][0] == pytest.approx(sum(f["bytes"][0] for f in ones) / 3)
    assert all(a <= b for a, b in zip(curve["bytes"], curve["bytes"][1:]))  # bytes add over layers


def test_frames_of_keeps_cameras_and_cuts_frames(data):
    part = R.frames_of(data, 1, 3)
    assert part["images"].shape[0] == 2 and part["train"] == data["train"] and part["viewmats"] is data["viewmats"]


def test_seeds_stop_once_the_longest_seed_no_longer_fits():
    def run(s):
        return {"seed": s}

    ctx = StageContext(profile={"seeds": [0, 1, 2]}, device="cpu", log=lambda *a: None, results={})
    ctx.until = time.perf_counter() + 3600
    assert [r["seed"] for r in R._per_seed(ctx, run)["seeds"]] == [0, 1, 2]
    ctx.until = time.perf_counter() - 1  # no time left: the first seed still runs, no other
    out = R._per_seed(ctx, run)
    assert [r["seed"] for r in out["seeds"]] == [0] and out["seeds_planned"] == [0, 1, 2] and "seconds" in out["seeds"][0]


def test_a_resumed_stage_keeps_its_finished_seeds_and_runs_the_others():
    ran = []

    def run(s):
        ran.append(s)
        return {"seed": s, "value": 10 * s}

    ctx = StageContext(profile={"seeds": [0, 1, 2]}, device="cpu", log=lambda *a: None, results={},
                       earlier={"seeds": [{"seed": 2, "value": -1, "seconds": 5.0}, {"seed": 7, "seconds": 1.0}],
                                "seeds_planned": [0, 1, 2, 7]})
    ctx.until = time.perf_counter() + 3600
    out = R._per_seed(ctx, run)
    assert ran == [0, 1]  # seed 2 kept as recorded, seed 7 (not in this profile) dropped
    assert [(r["seed"], r["value"]) for r in out["seeds"]] == [(0, 0), (1, 10), (2, -1)]
    ctx.until = time.perf_counter() + 2  # less than the kept seed's 5 s: no new seed starts
    ran.clear()
    assert [r["seed"] for r in R._per_seed(ctx, run)["seeds"]] == [2] and ran == []


def test_progressive_stage_reads_the_full_keyframes():
    full = {"bytes": [100, 250, 400], "psnr": [20.0, 23.0, 22.9]}
    rate = {"seeds": [{"seed": 4, "curves": {"full": full}}], "seeds_planned": [4, 5]}
    out = R.progressive_stage(StageContext(profile={}, device="cpu", log=print, results={"rate_term": rate}))
    (one,) = out["seeds"]
    assert out["seeds_planned"] == [4, 5] and one["seed"] == 4 and one["curve"] == full
    assert one["worst_step_db"] == pytest.approx(-0.1) and one["byte_ratio"] == 0.25 and one["gap_db"] == pytest.approx(2.9)
    with pytest.raises(RuntimeError, match="rate_term"):
        R.progressive_stage(StageContext(profile={}, device="cpu", log=print, results={}))


# --- claim rows on constructed payloads ---------------------------------------------------------

L = 4


def _curve(scale=1.0, low=22.0):
    return {"bytes": [1000.0 * scale * (l + 1) for l in range(L)], "psnr": [low + l for l in range(L)]}


def payload(rate_bds=(20.0, 25.0, 30.0), g1=(60.0, 50.0, 55.0), g5=(5.0, 6.0, 7.0), worst=(0.5, 0.4, 0.6),
            ratio=(0.3, 0.25, 0.28), gap=(2.0, 2.5, 1.5), smoke=False, states=None):
    """A recorded rd3d run, one entry per seed of the given values (BD-rates in %; None: undefined)."""
    seeds = list(range(len(rate_bds)))
    bd = lambda v: {"bd_rate": v, "bd_psnr": None if v is None else -v / 20, "dropped": [[], []]}  # noqa: E731
    stages = {n: {"state": "done"} for n in ("rate_term", "progressive", "grouping")}
    stages.update(states or {})
    return {
        "profile": S.GPU_PROFILE | {"seeds": seeds}, "device": "NVIDIA H200", "smoke": smoke, "stages": stages,
        "rate_term": {"seeds_planned": seeds, "seeds": [
            {"seed": s, "curves": {"full": _curve(), "no rate term": _curve(1.3)}, "bd": bd(v)}
            for s, v in zip(seeds, rate_bds)]},
        "progressive": {"seeds_planned": seeds, "seeds": [
            {"seed": s, "curve": _curve(), "worst_step_db": w, "byte_ratio": r, "gap_db": g}
            for s, w, r, g in zip(seeds, worst, ratio, gap)]},
        "grouping": {"seeds_planned": seeds, "seeds": [
            {"seed": s, "curves": {"motion-aware": _curve(), "fixed group of 5": _curve(1.05), "fixed group of 1": _curve(2)},
             "bd": {"fixed group of 5": bd(b5), "fixed group of 1": bd(b1)},
             "groups": {"motion-aware": [0, 3], "fixed group of 5": [0, 5], "fixed group of 1": list(range(6))}}
            for s, b1, b5 in zip(seeds, g1, g5)]},
    }


def verdicts(p):
    return [r.verdict for r in C.rd3d_rows(p)]


def test_rows_of_three_seeds_past_every_target():
    rows = C.rd3d_rows(payload())
    assert [r.verdict for r in rows] == ["reproduced"] * 6
    assert "3 seeds" in rows[0].scale and "256²" in rows[0].scale and "+20.0 % BD-rate" in rows[0].measured
    assert "motion-aware at frames 0, 3" in rows[4].details


def test_thresholds_are_the_cpu_rows():
    at = payload(rate_bds=[C.RATE_TERM_MIN_BDRATE] * 3, g1=[C.GROUP1_MIN_BDRATE] * 3, g5=[C.GROUP5_MIN_BDRATE + 0.1] * 3,
                 worst=[-C.PSNR_MONOTONE_TOL_DB] * 3, ratio=[C.MAX_LOW_BYTE_RATIO] * 3, gap=[C.MAX_LOW_GAP_DB] * 3)
    assert verdicts(at) == ["reproduced"] * 6
    below = payload(rate_bds=[C.RATE_TERM_PARTLY_BDRATE + 0.5] * 3, g1=[C.GROUP1_PARTLY_BDRATE + 1] * 3)
    assert verdicts(below)[0] == "partly reproduced" and verdicts(below)[4] == "partly reproduced"


def test_one_seed_is_inconclusive():
    one = payload(rate_bds=[20.0], g1=[60.0], g5=[5.0], worst=[0.5], ratio=[0.3], gap=[2.0])
    rows = C.rd3d_rows(one)
    assert all(r.verdict == "inconclusive" for r in rows) and "one seed" in rows[0].scale


def test_spread_straddling_the_target_is_inconclusive():
    straddle = payload(rate_bds=[-3.0, 4.0, -2.5], g5=[-3.0, 4.0, -2.5])
    rows = C.rd3d_rows(straddle)
    assert [rows[0].verdict, rows[5].verdict] == ["inconclusive", "inconclusive"]
    assert "straddles" in rows[0].evidence and "straddles" in rows[5].evidence
    t = C.RATE_TERM_MIN_BDRATE  # the mean misses the target but clears the partly bar
    assert verdicts(payload(rate_bds=[t - 3.0, t + 2.0, t - 1.5]))[0] == "partly reproduced"


def test_sign_flip_is_not_reproduced():
    flipped = payload(rate_bds=(-20.0, -25.0, -30.0), g1=(-10.0, -12.0, -9.0), g5=(-5.0, -6.0, -7.0),
                      worst=(-1.0, -0.8, -1.2), ratio=(0.9, 0.95, 0.85), gap=(6.0, 7.0, 5.5))
    assert verdicts(flipped) == ["not reproduced"] * 6


def test_undefined_bd_rate_is_inconclusive_and_written_n_a():
    rows = C.rd3d_rows(payload(rate_bds=(None, 20.0, 25.0)))
    assert rows[0].verdict == "inconclusive" and "n/a % BD-rate" in rows[0].measured
    assert math.isnan(C._bd_values(payload(rate_bds=(None, 1.0, 2.0))["rate_term"]["seeds"])[0])


def test_no_run_unfinished_stage_no_seed_and_smoke():
    rows = C.rd3d_rows(None)
    assert len(rows) == 6 and all(r.verdict == "not run here" and "gaussian_video_rd3d" in r.evidence for r in rows)
    cut = payload(states={"grouping": {"state": "skipped", "reason": "deadline: 10 s left, needs 280 s"}})
    assert verdicts(cut) == ["reproduced"] * 4 + ["not run here"] * 2
    assert "grouping (skipped: deadline" in C.rd3d_rows(cut)[-1].measured
    empty = payload()
    empty["rate_term"]["seeds"] = []
    assert verdicts(empty)[0] == "not run here" and "finished no seed" in C.rd3d_rows(empty)[0].measured
    partial = payload()
    partial["grouping"]["seeds"] = partial["grouping"]["seeds"][:2]
    assert "2 seeds of 3 planned" in C.rd3d_rows(partial)[-1].scale
    assert all(r.verdict == "inconclusive" and "smoke" in r.evidence for r in C.rd3d_rows(payload(smoke=True)))


def test_claim_rows_take_the_rd3d_payload():
    cfg = PipelineConfig(L=2)
    curve = {"bytes": [100.0, 200.0], "psnr": [25.0, 26.0]}
    key = SimpleNamespace(cfg=cfg, curves={name: curve for name in KEY_VARIANTS})
    groups = {name: SimpleNamespace(cfg=cfg, frames=[{}] * 6, groups=[0, 3], rd_curve=lambda: curve)
              for name in GROUP_VARIANTS}
    rows = C.claim_rows(key, groups)
    assert [r.verdict for r in rows[-6:]] == ["not run here"] * 6
    rows = C.claim_rows(key, groups, rd3d=payload())
    assert [r.verdict for r in rows[-6:]] == ["reproduced"] * 6 and rows[-1].cell == C.GPU_CELL
