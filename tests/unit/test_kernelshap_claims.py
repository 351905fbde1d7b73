"""Paper 16's claim rows: every threshold of claims.py just inside and just outside, on constructed results, on the
one rule (one value per seed)."""

import json

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.kernelshap.claims import (
    BEATS,
    KERNEL,
    LAM_SHIFT,
    LAM_SHIFT_MIN,
    LEVERAGE,
    MODIFIED,
    MV_KERNEL,
    MV_LEVERAGE,
    SLOPE_SHALLOWEST,
    SLOPE_STEEPEST,
    claim_rows,
    per_seed_advantage,
    per_seed_slopes,
    scale_claim_rows,
)
from companion.kernelshap.experiment import ERROR_RATIO_MAX, SHAP, SPEEDUP_TARGET, speed_summary, without_replacement

EPS = 1e-6
BUDGETS = [64, 128, 256]
LEVEL = {LEVERAGE: 1e-3, MODIFIED: 2e-3, KERNEL: 4e-3, MV_LEVERAGE: 1e-1, MV_KERNEL: 2e-1,
         "unbiased KernelSHAP (MV, leverage)": 1e-1, SHAP: 5e-3, without_replacement(LEVERAGE): 5e-4}


def _results(slope=-1.0, level=None, seeds=3, names=("a", "b"), scatter=None):
    """Curves whose error at seed j is level · (m / 64)^slope · scatter[j] (the same for every method by default)."""
    level = {**LEVEL, **(level or {})}
    scatter = np.ones(seeds) if scatter is None else np.asarray(scatter, float)
    out = {}
    for n in names:
        curves = {}
        for method, base in level.items():
            per_seed = np.asarray(base, float) * np.ones(seeds)  # a number, or one level per seed
            slope_j = np.asarray(slope, float) * np.ones(seeds)
            curves[method] = np.stack([per_seed * (m / BUDGETS[0]) ** slope_j * scatter for m in BUDGETS])
        out[n] = (10, BUDGETS, curves)
    return out


def _rows(slope=-1.0, level=None, lam=(1e-2, 2e-2), seeds=3, shift=None, lam_by_set=None):
    """``shift``: {data set: |v([d]) − v(∅)| / Σ|φ*|} (default 1 everywhere); ``lam_by_set``: {data set: (λ=α, λ=0)}."""
    results = _results(slope, level, seeds)
    ref = {n: 128 for n in results}
    lam_of = {n: (lam_by_set or {}).get(n, lam) for n in results}
    lam_rows = [{"data set": n, "m": 128, "MV kernel, λ=α": lam_of[n][0], "MV kernel, λ=0": lam_of[n][1],
                 LAM_SHIFT: (shift or {}).get(n, 1.0)} for n in results]
    lam_seeds = {n: (np.full(seeds, lam_of[n][0]) * np.ones(seeds), np.full(seeds, lam_of[n][1])) for n in results}
    rows = claim_rows(results, ref, lam_rows, lam_seeds=lam_seeds, seeds=seeds, scale="test scale")
    assert all(r.verdict in VERDICTS and r.evidence for r in rows)
    return rows


def _row(rows, word):
    (row,) = [r for r in rows if word in r.claim]
    return row


@pytest.mark.parametrize("slope, verdict", [
    (SLOPE_STEEPEST + EPS, "reproduced"), (SLOPE_STEEPEST - EPS, "not reproduced"),
    (SLOPE_SHALLOWEST - EPS, "reproduced"), (SLOPE_SHALLOWEST + EPS, "not reproduced"),
])
def test_slope_window(slope, verdict):
    row = _row(_rows(slope=slope), "1/m")
    assert row.verdict == verdict
    assert "64…256" in row.scale  # the budgets the run used
    assert (f"≤ {SLOPE_SHALLOWEST:.2f}" in row.evidence) == (slope > -1.0)  # the side of the window nearer the mean


def test_per_seed_slopes_average_the_curves():
    results = _results(slope=[-0.9, -1.0, -1.1])
    assert per_seed_slopes(results, [LEVERAGE, KERNEL]) == pytest.approx([-0.9, -1.0, -1.1])
    straddle = _row(_rows(slope=[-0.2, -0.8, -0.8]), "1/m")
    assert straddle.verdict == "inconclusive" and "straddles" in straddle.evidence


def test_beats_just_inside_and_outside():
    # the shap row: LeverageSHAP without replacement against shap, per seed
    at = {SHAP: 5e-3, without_replacement(LEVERAGE): 5e-3 * 10 ** -(BEATS + 1e-3)}
    assert _row(_rows(level=at), "beat the shap library").verdict == "reproduced"
    at[without_replacement(LEVERAGE)] = 5e-3 * 10 ** -(BEATS - 1e-3)
    assert _row(_rows(level=at), "beat the shap library").verdict == "not reproduced"
    assert _row(_rows(level={MV_LEVERAGE: 1e-3 * 10 ** (BEATS + 1e-3)}), "matrix-vector").verdict == "reproduced"
    assert _row(_rows(level={MV_LEVERAGE: 1e-3 * 10 ** (BEATS - 1e-3)}), "matrix-vector").verdict == "not reproduced"
    lev_mod = {LEVERAGE: 1e-3, MODIFIED: 1e-3}
    assert _row(_rows(level={**lev_mod, KERNEL: 1e-3 * 10 ** (BEATS + 1e-3)}), "kernel sampling").verdict == "reproduced"
    assert _row(_rows(level={**lev_mod, KERNEL: 1e-3 * 10 ** (BEATS - 1e-3)}), "kernel sampling").verdict == "not reproduced"
    assert _row(_rows(lam=(1e-2, 1e-2 * 10 ** (BEATS + 1e-3))), "lambda").verdict == "reproduced"
    assert _row(_rows(lam=(1e-2, 1e-2 * 10 ** (BEATS - 1e-3))), "lambda").verdict == "not reproduced"


def test_lambda_row_leaves_out_a_data_set_where_alpha_vanishes():
    """Where v([d]) − v(∅) is a negligible share of Σ|φ*|, λ = α ≈ 0: both arms are one estimator, and its noise
    must not decide the row (diabetes: the two errors agree to 1%, seed by seed)."""
    same = {"a": (1e-2, 1e-2 * 10 ** -0.01)}  # data set a: λ = 0 a hair ahead, the arms coincide
    inside = _row(_rows(lam=(1e-2, 2e-2), lam_by_set=same, shift={"a": LAM_SHIFT_MIN * (1 - EPS)}), "lambda")
    assert inside.verdict == "reproduced" and "not counted" in inside.measured + inside.details
    assert "a (0.10)" in inside.measured + inside.details
    outside = _row(_rows(lam=(1e-2, 2e-2), lam_by_set=same, shift={"a": LAM_SHIFT_MIN}), "lambda")
    assert outside.verdict == "not reproduced"  # at the floor it counts, and there λ = α loses by a hair
    none = _row(_rows(shift={"a": 0.0, "b": 0.0}), "lambda")
    assert none.verdict == "inconclusive" and "coincide" in none.evidence


def test_default_levels():
    rows = _rows()
    for word in ("beat the shap library", "matrix-vector", "kernel sampling", "lambda", "1/m"):
        assert _row(rows, word).verdict == "reproduced", word
    assert "3 seeds" in _row(rows, "beat the shap library").scale
    assert _row(rows, "MNIST").verdict == "not run here"


def test_one_seed_is_inconclusive():
    rows = _rows(seeds=1)
    for word in ("beat the shap library", "matrix-vector", "kernel sampling", "lambda", "1/m"):
        row = _row(rows, word)
        assert row.verdict == "inconclusive" and row.evidence.startswith("n=1"), word


def test_a_straddling_spread_is_inconclusive():
    # shap's error per seed 10^0.4, 10^-0.3, 10^-0.3 times LeverageSHAP's: the mean misses by less than the spread
    wo = without_replacement(LEVERAGE)
    row = _row(_rows(level={SHAP: [1e-3 * 10 ** 0.4, 1e-3 * 10 ** -0.3, 1e-3 * 10 ** -0.3], wo: 1e-3}), "beat the shap library")
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_worst_data_set_per_seed():
    results = _results()
    _, _, curves = results["b"]
    curves[SHAP] = curves[SHAP] * np.array([1.0, 1e-3, 1.0])  # data set b, seed 1: shap far ahead
    adv = per_seed_advantage(results, LEVERAGE, SHAP)
    assert adv[0] == pytest.approx(np.log10(5)) and adv[1] == pytest.approx(np.log10(5e-3))


def test_speed_target_and_error_ratio_max():
    def rows(speed, ratio):
        return [{"data set": n, "m": 128, "speed-up": speed, "error ratio (ours / shap)": ratio} for n in ("diabetes", "digits")]
    assert speed_summary(rows(SPEEDUP_TARGET + EPS, ERROR_RATIO_MAX - EPS))[1]
    assert not speed_summary(rows(SPEEDUP_TARGET - EPS, ERROR_RATIO_MAX - EPS))[1]
    assert not speed_summary(rows(SPEEDUP_TARGET + EPS, ERROR_RATIO_MAX + EPS))[1]
    text, _ = speed_summary(rows(10.0, 0.5))
    assert "digits m=128: 10.0x faster" in text and "diabetes" not in text and "not a paper claim" in text


def _study(d, ls, mv, seeds):
    def rec(levels):
        return {"nmse": [list(np.asarray(v, float) * np.ones(seeds)) for v in levels]} | {
            k: [[0.1] * seeds for _ in levels] for k in ("spearman", "seconds", "solve_seconds")}
    return {"d": d, "budgets": [500, 5000], "seeds": seeds, "device": "cuda", "methods": {LEVERAGE: rec(ls), MV_LEVERAGE: rec(mv)}}


def _payload(studies, state="done", why=""):
    """The GPU study's payload in the stage runner's layout, its ``studies`` stage ended in ``state``."""
    return {"device": "H200", "date": "today", "stages": {"studies": {"state": state, "reason": why}}, "studies": studies}


def test_scale_rows_from_a_constructed_json():
    assert [r.verdict for r in scale_claim_rows(None)] == ["not run here"]
    studies = json.loads(json.dumps([_study(784, [1e-2, 1e-3], [1e2, 1e1], 10), _study(3072, [1e-1, 1e-2], [1e3, 1e2], 5)]))
    (row,) = scale_claim_rows(_payload(studies))
    assert row.verdict == "reproduced" and row.evidence.startswith("n=5") and "10/5 seeds" in row.scale
    assert "H200, today" in row.scale and "d=784 m=5000" in row.measured
    # MV ahead of LS at d = 3072: not reproduced
    studies[1] = _study(3072, [1e-1, 1e-2], [1e-2, 1e-3], 5)
    assert scale_claim_rows(_payload(studies))[0].verdict == "not reproduced"
    one = [_study(784, [1e-2, 1e-3], [1e2, 1e1], 1)]
    assert scale_claim_rows(_payload(one))[0].verdict == "inconclusive"


def test_scale_row_of_a_stage_that_did_not_finish_is_not_run():
    studies = [_study(784, [1e-2, 1e-3], [1e2, 1e1], 10)]
    (row,) = scale_claim_rows(_payload(studies, "unfinished", "killed"))
    assert row.verdict == "not run here" and "studies (unfinished: killed)" in row.measured


def test_scale_rows_from_the_recorded_json():
    from companion.kernelshap.scale import GPU_PROFILE, recorded

    rec = recorded()
    if rec is None:
        pytest.skip("no recorded GPU run")
    assert rec["profile"] == GPU_PROFILE and rec["complete"]
    (row,) = scale_claim_rows(rec)
    assert row.verdict in VERDICTS and row.verdict != "not run here" and row.evidence.startswith("n=")


def test_an_exact_estimate_counts_as_tiny_error():
    from companion.kernelshap.claims import TINY

    results = _results(level={LEVERAGE: 0.0, SHAP: 0.0})  # both exact: equal, not NaN
    assert per_seed_advantage(results, LEVERAGE, SHAP) == [0.0, 0.0, 0.0]
    results = _results(level={LEVERAGE: 0.0})
    expected = np.mean([np.log10(5e-3 * (m / BUDGETS[0]) ** -1.0 / TINY) for m in BUDGETS])
    assert per_seed_advantage(results, LEVERAGE, SHAP)[0] == pytest.approx(expected)
