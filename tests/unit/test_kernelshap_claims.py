"""Paper 16's claim rows: every threshold of claims.py just inside and just outside, on constructed results."""

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.kernelshap.claims import (
    ERROR_RATIO_MAX,
    KERNEL,
    LEVERAGE,
    MODIFIED,
    MV_KERNEL,
    MV_LEVERAGE,
    SLOPE_SHALLOWEST,
    SLOPE_STEEPEST,
    SPEEDUP_TARGET,
    claim_rows,
    scale_claim_rows,
)
from companion.kernelshap.experiment import SHAP, without_replacement

EPS = 1e-6
BUDGETS = [64, 128, 256]
LEVEL = {LEVERAGE: 1e-3, MODIFIED: 2e-3, KERNEL: 4e-3, MV_LEVERAGE: 1e-1, MV_KERNEL: 2e-1,
         "unbiased KernelSHAP (MV, leverage)": 1e-1, SHAP: 5e-3, without_replacement(LEVERAGE): 5e-4}


def _results(slope=-1.0, level=None, names=("a", "b")):
    level = {**LEVEL, **(level or {})}
    seeds = 3
    out = {}
    for n in names:
        curves = {}
        for method, base in level.items():
            med = base * (np.array(BUDGETS) / BUDGETS[0]) ** slope
            curves[method] = np.stack([med * 0.5, med, med * 2.0], axis=1)[:, :seeds]
        out[n] = (10, BUDGETS, curves)
    return out


def _rows(slope=-1.0, level=None, lam=(1e-2, 2e-2), speed=10.0, ratio=0.5):
    results = _results(slope, level)
    ref = {n: 128 for n in results}
    lam_rows = [{"data set": n, "m": 128, "MV kernel, λ=α": lam[0], "MV kernel, λ=0": lam[1]} for n in results]
    speed_rows = [{"data set": n, "m": 128, "speed-up": speed, "error ratio (ours / shap)": ratio} for n in results]
    rows = claim_rows(results, ref, lam_rows, speed_rows, seeds=3, scale="test scale")
    assert all(r.verdict in VERDICTS for r in rows)
    return rows


def _row(rows, word):
    (row,) = [r for r in rows if word in r.claim]
    return row


@pytest.mark.parametrize("slope, verdict", [
    (SLOPE_STEEPEST + EPS, "reproduced"), (SLOPE_STEEPEST - EPS, "partly reproduced"),
    (SLOPE_SHALLOWEST - EPS, "reproduced"), (SLOPE_SHALLOWEST + EPS, "partly reproduced"),
])
def test_slope_window(slope, verdict):
    row = _row(_rows(slope=slope), "1/m")
    assert row.verdict == verdict
    assert "64…256" in row.scale  # the budgets the run used


@pytest.mark.parametrize("speed, ratio, verdict", [
    (SPEEDUP_TARGET + EPS, ERROR_RATIO_MAX - EPS, "reproduced"),
    (SPEEDUP_TARGET - EPS, ERROR_RATIO_MAX - EPS, "partly reproduced"),
    (SPEEDUP_TARGET + EPS, ERROR_RATIO_MAX + EPS, "partly reproduced"),
])
def test_speed_target(speed, ratio, verdict):
    assert _row(_rows(speed=speed, ratio=ratio), "faster than shap").verdict == verdict


def test_shap_comparison_and_ordering():
    rows = _rows()
    assert _row(rows, "beat the shap library").verdict == "reproduced"
    assert "medians over 3 seeds" in _row(rows, "beat the shap library").scale
    assert _row(rows, "matrix-vector").verdict == "reproduced"
    assert _row(rows, "kernel sampling").verdict == "reproduced"
    # shap better than LeverageSHAP (with and without replacement) at every budget: not reproduced
    worse = {LEVERAGE: 1e-2, without_replacement(LEVERAGE): 1e-2}
    assert _row(_rows(level=worse), "beat the shap library").verdict == "not reproduced"
    # only without replacement ahead everywhere: partly
    assert _row(_rows(level={LEVERAGE: 1e-2}), "beat the shap library").verdict == "partly reproduced"
    assert _row(_rows(level={LEVERAGE: 3e-1}), "matrix-vector").verdict == "not reproduced"
    assert _row(_rows(level={KERNEL: 1e-4}), "kernel sampling").verdict == "not reproduced"


def test_lambda_row():
    assert _row(_rows(lam=(1e-2, 2e-2)), "lambda").verdict == "reproduced"
    assert _row(_rows(lam=(3e-2, 2e-2)), "lambda").verdict == "not reproduced"


def test_scale_rows():
    assert [r.verdict for r in scale_claim_rows([], measured_here=False, source=None)] == ["not run here"]

    def rec(nmse):
        return {k: [[v] * 5 for v in nmse] for k in ("spearman", "seconds", "solve_seconds")} | {"nmse": [[v] * 5 for v in nmse]}

    study = {"d": 784, "budgets": [500, 5000], "seeds": 5, "device": "cuda",
             "methods": {LEVERAGE: rec([1e-2, 1e-3]), MV_LEVERAGE: rec([1e2, 1e1])}}
    (row,) = scale_claim_rows([study], measured_here=True, source=None)
    assert row.verdict == "reproduced" and "5 seeds" in row.scale and "d=784 m=5000" in row.measured
    study["methods"][MV_LEVERAGE] = rec([1e2, 1e-4])
    assert scale_claim_rows([study], measured_here=True, source=None)[0].verdict == "not reproduced"
    (row,) = scale_claim_rows([study], measured_here=False, source="recorded on H200")
    assert row.verdict == "recorded on GPU" and "H200" in row.scale
