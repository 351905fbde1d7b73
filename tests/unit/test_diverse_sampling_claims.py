"""Paper 19's claim thresholds, each just inside and just outside."""

import numpy as np

from companion.diverse_sampling import claims as C


def _toy(**over):
    toy = {"n": 8, "lam": 3.0, "k": 8, "aggregation": "max", "true_se": 1.506, "trials": 100,
           "covered": {"iid": 4.0, "steered": 6.0},
           "bias": {"iid": -0.4, "steered": 0.3, "steered_is": -0.1, "steered_is_cv": -0.1},
           "rmse": {"iid": 0.5, "steered": 0.36, "steered_is": 0.4, "steered_is_cv": 0.3},
           "ess": 0.5, "ess_min": 0.2}
    for key, val in over.items():
        if isinstance(val, dict):
            toy[key] = {**toy[key], **val}
        else:
            toy[key] = val
    return toy


def _text(iid=0.7, is_=0.8, std=0.0, seeds=(0,), cov_iid=2.0, cov_st=3.0):
    return {"auroc": {"iid": (iid, std), "steered_is": (is_, std), "steered_is_cv": (is_, std),
                      "steered_unweighted": (is_, std)}, "auroc_truth": 0.9, "n": 8, "n_questions": 18,
            "seeds": list(seeds), "covered_iid": np.array([[cov_iid]]), "covered_steered": np.array([[cov_st]]),
            "ess": np.array([[0.5]]), "agree": np.array([[1.0]])}


def test_coverage_ratio():
    eps = 1e-6
    assert C.coverage_row(_toy(covered={"iid": 4.0, "steered": 4.0 * C.COVERAGE_RATIO + eps}), "s").verdict == "reproduced"
    assert C.coverage_row(_toy(covered={"iid": 4.0, "steered": 4.0 * C.COVERAGE_RATIO - eps}), "s").verdict == "not reproduced"


def test_steer_bias_min_and_bias_reduction():
    up = C.STEER_BIAS_MIN + 0.01
    assert C.bias_row(_toy(bias={"steered": up, "steered_is": up * C.BIAS_REDUCTION * 0.99}), "s").verdict == "reproduced"
    # IS does not cut the bias enough (same sign, just above the fraction)
    assert C.bias_row(_toy(bias={"steered": up, "steered_is": up * C.BIAS_REDUCTION * 1.01}), "s").verdict == "partly reproduced"
    # steered bias just below the floor, IS still fixes it
    low = C.STEER_BIAS_MIN - 0.001
    assert C.bias_row(_toy(bias={"steered": low, "steered_is": 0.0}), "s").verdict == "partly reproduced"
    assert C.bias_row(_toy(bias={"steered": low, "steered_is": low}), "s").verdict == "not reproduced"


def test_cv_rmse_gain():
    assert C.cv_row(_toy(rmse={"steered_is": 1.0, "steered_is_cv": C.CV_RMSE_GAIN - 1e-6}), "s").verdict == "reproduced"
    assert C.cv_row(_toy(rmse={"steered_is": 1.0, "steered_is_cv": C.CV_RMSE_GAIN + 1e-6}), "s").verdict == "not reproduced"


def test_ess_min():
    assert C.ess_row(_toy(ess=C.ESS_MIN + 1e-6), "s").verdict == "reproduced"
    assert C.ess_row(_toy(ess=C.ESS_MIN - 1e-6), "s").verdict == "not reproduced"


def test_curve_shrink():
    base = {"n": [2, 32], "bias_l1_is": [0.1, 0.01], "bias_l1_unweighted": [0.2, 0.2]}
    inside = {**base, "error_l1_is": [1.0, C.CURVE_SHRINK - 1e-6]}
    outside = {**base, "error_l1_is": [1.0, C.CURVE_SHRINK + 1e-6]}
    assert C.curve_row(inside, "s").verdict == "reproduced"
    assert C.curve_row(outside, "s").verdict == "not reproduced"


def test_auroc_margin_one_seed_and_spread():
    assert C.auroc_row(_text(0.7, 0.7 + C.AUROC_MARGIN + 1e-6), "s").verdict == "partly reproduced"
    assert C.auroc_row(_text(0.7, 0.7 + C.AUROC_MARGIN - 1e-6), "s").verdict == "not reproduced"
    row = C.auroc_row(_text(0.7, 0.8, std=0.2, seeds=(0, 1, 2)), "s")
    assert row.verdict == "not reproduced" and "3 seeds" in row.scale
    assert "one seed" in C.auroc_row(_text(), "s").scale
    assert C.auroc_row(None, "s").verdict == "not run here"
    assert C.auroc_row(_text(float("nan"), 0.8), "s").verdict == "not reproduced"


def test_text_coverage_ratio():
    r = C.TEXT_COVERAGE_RATIO
    assert C.text_coverage_row(_text(cov_iid=2.0, cov_st=2.0 * r + 1e-6), "s").verdict == "reproduced"
    assert C.text_coverage_row(_text(cov_iid=2.0, cov_st=2.0 * r - 1e-6), "s").verdict == "not reproduced"
    assert C.text_coverage_row(None, "s").verdict == "not run here"


def test_gpu_rows_and_claim_rows():
    assert C.gpu_rows(None)[0].verdict == "not run here"
    gpu = {"device": "H200", "date": "d", "sweep": [{"n": 4, "schedule": "fixed", "auroc_iid": 0.7, "auroc_is": 0.8,
                                                      "covered_iid": 2.0, "covered_steered": 3.0, "ess": 0.5,
                                                      "ms_per_sample": 1.0}]}
    assert [r.verdict for r in C.gpu_rows(gpu)] == ["recorded on GPU"]
    curve = {"n": [2, 32], "error_l1_is": [1.0, 0.1], "bias_l1_is": [0.1, 0.01], "bias_l1_unweighted": [0.2, 0.2]}
    rows = C.claim_rows(toy=_toy(), curve=curve, text=None, toy_scale="a", text_scale="b")
    assert len(rows) == 8 and rows[0].verdict == "reproduced"
