"""Paper 19's claim rows on the one rule: each threshold just inside and just outside (three seeds), one seed
(inconclusive), a straddling spread, the sign flip that must not count as debiasing, and the GPU rows."""

import copy

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.diverse_sampling import claims as C
from companion.diverse_sampling.scale import ADAPTIVE_SCHEDULE


def _toy(**over):
    toy = {"n": 8, "lam": 3.0, "k": 8, "aggregation": "max", "true_se": 1.506, "trials": 100,
           "covered": {"iid": 4.0, "steered": 6.0},
           "bias": {"iid": -0.4, "steered": 0.3, "steered_is": -0.1, "steered_is_cv": -0.1},
           "rmse": {"iid": 0.5, "steered": 0.36, "steered_is": 0.3, "steered_is_cv": 0.2},
           "ess": 0.5, "ess_min": 0.2}
    for key, val in over.items():
        toy[key] = {**toy[key], **val} if isinstance(val, dict) else val
    return toy


def _seeds(n=3, **over):
    return [_toy(**copy.deepcopy(over)) for _ in range(n)]


def _text(iid=(0.7,), is_=(0.8,), cov_iid=2.0, cov_st=3.0):
    seeds = len(iid)
    return {"auroc": {"iid": (float(np.mean(iid)), float(np.std(iid))), "steered_is": (float(np.mean(is_)), float(np.std(is_))),
                      "steered_is_cv": (0.8, 0.0), "steered_unweighted": (0.8, 0.0)},
            "auroc_seeds": {"iid": list(iid), "steered_is": list(is_)},
            "auroc_truth": 0.9, "n": 8, "n_questions": 18, "seeds": list(range(seeds)),
            "covered_iid": np.full((seeds, 4), cov_iid), "covered_steered": np.full((seeds, 4), cov_st),
            "ess": np.full((seeds, 4), 0.5), "agree": np.full((seeds, 4), 1.0)}


def test_coverage_ratio():
    eps = 1e-6
    inside = _seeds(covered={"iid": 4.0, "steered": 4.0 * C.COVERAGE_RATIO + eps})
    outside = _seeds(covered={"iid": 4.0, "steered": 4.0 * C.COVERAGE_RATIO - eps})
    assert C.coverage_row(inside, "s").verdict == "reproduced"
    row = C.coverage_row(outside, "s")
    assert row.verdict == "not reproduced" and "3 seeds" in row.scale and "n=3" in row.evidence


def test_one_seed_is_inconclusive():
    row = C.coverage_row(_toy(covered={"iid": 1.0, "steered": 9.0}), "s")  # a single dict is one seed
    assert row.verdict == "inconclusive" and "one seed" in row.scale and "fewer than 3" in row.evidence
    assert C.bias_row([_toy()], "s").verdict == "inconclusive"


def test_straddling_spread():
    # steered/IID 1.0, 1.0, 1.8: mean 1.27 below 1.3, mean + std above it
    toys = [_toy(covered={"iid": 5.0, "steered": s}) for s in (5.0, 5.0, 9.0)]
    row = C.coverage_row(toys, "s")
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_steer_bias_min():
    assert C.steer_bias_row(_seeds(bias={"steered": C.STEER_BIAS_MIN + 1e-6}), "s").verdict == "reproduced"
    assert C.steer_bias_row(_seeds(bias={"steered": C.STEER_BIAS_MIN - 1e-6}), "s").verdict == "not reproduced"


def test_bias_reduction_on_the_magnitude():
    up = 0.3
    inside = _seeds(bias={"steered": up, "steered_is": -up * C.BIAS_REDUCTION * (1 - 1e-6)})
    outside = _seeds(bias={"steered": up, "steered_is": up * C.BIAS_REDUCTION * (1 + 1e-6)})
    assert C.bias_row(inside, "s").verdict == "reproduced"
    assert C.bias_row(outside, "s").verdict == "not reproduced"


def test_a_sign_flip_with_rising_rmse_is_not_debiasing():
    """A recorded run's bias +0.323 -> -0.284 with RMSE 0.362 -> 0.455 was counted as debiased."""
    flip = _seeds(bias={"steered": 0.323, "steered_is": -0.284}, rmse={"steered": 0.362, "steered_is": 0.455})
    bias, rmse = C.bias_row(flip, "s"), C.rmse_row(flip, "s")
    assert bias.verdict == "not reproduced" and "0.88" in bias.evidence  # |−0.284| / 0.323 of the bias is left
    assert rmse.verdict == "not reproduced" and "1.26x" in rmse.evidence


def test_rmse_ratio_max():
    inside = _seeds(rmse={"steered": 0.4, "steered_is": 0.4 * C.RMSE_RATIO_MAX * (1 - 1e-6)})
    outside = _seeds(rmse={"steered": 0.4, "steered_is": 0.4 * C.RMSE_RATIO_MAX * (1 + 1e-6)})
    assert C.rmse_row(inside, "s").verdict == "reproduced"
    assert C.rmse_row(outside, "s").verdict == "not reproduced"


def test_magnitude_ratio_edges():
    assert C.magnitude_ratio(-0.1, 0.2) == pytest.approx(0.5)
    assert C.magnitude_ratio(0.0, 0.0) == 1.0 and C.magnitude_ratio(0.1, 0.0) == float("inf")
    row = C.bias_row(_seeds(bias={"steered": 0.0, "steered_is": 0.1}), "s")  # no steering bias: nothing removed
    assert row.verdict != "reproduced" and "inf" in row.evidence


def test_cv_rmse_gain():
    inside = _seeds(rmse={"steered_is": 1.0, "steered_is_cv": C.CV_RMSE_GAIN - 1e-6})
    outside = _seeds(rmse={"steered_is": 1.0, "steered_is_cv": C.CV_RMSE_GAIN + 1e-6})
    assert C.cv_row(inside, "s").verdict == "reproduced"
    assert C.cv_row(outside, "s").verdict == "not reproduced"


def test_ess_paper_and_weaker_bar():
    assert C.ess_row(_seeds(ess=C.ESS_PAPER + 1e-6), "s").verdict == "reproduced"
    assert C.ess_row(_seeds(ess=C.ESS_PAPER - 1e-6), "s").verdict == "partly reproduced"
    assert C.ess_row(_seeds(ess=C.ESS_MIN + 1e-6), "s").verdict == "partly reproduced"
    assert C.ess_row(_seeds(ess=C.ESS_MIN - 1e-6), "s").verdict == "not reproduced"


def test_curve_shrink():
    base = {"n": [2, 32], "bias_l1_is": [0.1, 0.01], "bias_l1_unweighted": [0.2, 0.2]}
    inside = [{**base, "error_l1_is": [1.0, C.CURVE_SHRINK - 1e-6]}] * 3
    outside = [{**base, "error_l1_is": [1.0, C.CURVE_SHRINK + 1e-6]}] * 3
    assert C.curve_row(inside, "s").verdict == "reproduced"
    assert C.curve_row(outside, "s").verdict == "not reproduced"
    assert C.curve_row(inside[0], "s").verdict == "inconclusive"


def test_auroc_margin_per_seed():
    m = C.AUROC_MARGIN
    assert C.auroc_row(_text(iid=(0.7,) * 3, is_=(0.7 + m + 1e-6,) * 3), "s").verdict == "reproduced"
    assert C.auroc_row(_text(iid=(0.7,) * 3, is_=(0.7 + m - 1e-6,) * 3), "s").verdict == "not reproduced"
    one = C.auroc_row(_text(), "s")
    assert one.verdict == "inconclusive" and "one seed" in one.scale
    spread = C.auroc_row(_text(iid=(0.7, 0.7, 0.7), is_=(0.6, 0.7, 0.9)), "s")  # gains -0.1, 0, +0.2
    assert spread.verdict == "inconclusive" and "3 seeds" in spread.scale
    assert C.auroc_row(None, "s").verdict == "not run here"
    assert C.auroc_row(_text(iid=(float("nan"),), is_=(0.8,)), "s").verdict == "not run here"  # AUROC undefined


def test_text_coverage_ratio():
    r = C.TEXT_COVERAGE_RATIO
    three = (0.7, 0.7, 0.7)
    assert C.text_coverage_row(_text(iid=three, is_=three, cov_iid=2.0, cov_st=2.0 * r + 1e-6), "s").verdict == "reproduced"
    assert C.text_coverage_row(_text(iid=three, is_=three, cov_iid=2.0, cov_st=2.0 * r - 1e-6), "s").verdict == "not reproduced"
    assert C.text_coverage_row(_text(cov_iid=2.0, cov_st=4.0), "s").verdict == "inconclusive"
    assert C.text_coverage_row(None, "s").verdict == "not run here"


def _point(n, schedule, ratios=None, gains=None, ess=0.5, **over):
    r = {"n": n, "schedule": schedule, "auroc_iid": 0.7, "auroc_is": 0.8, "auroc_is_cv": 0.8, "auroc_truth": 0.9,
         "covered_iid": 2.0, "covered_steered": 3.0, "ess": ess, "ms_per_sample": 1.0, **over}
    if ratios is not None:
        r.update(covered_ratio_seeds=list(ratios), auroc_gain_seeds=list(gains), seeds=list(range(len(ratios))))
    return r


def _gpu(sweep, seeds=(0,), scorer="MiniLM partial NLI ([TRUNC] row + head)", schedule=ADAPTIVE_SCHEDULE):
    gpu = {"device": "H200", "date": "d", "text_model": {"scorer": scorer}, "sweep": sweep,
           "profile": {"seeds": list(seeds), "questions_per_type": 8, "lm_dim": 128},
           "stages": {k: {"state": "done"} for k in ("text_model", "sweep", "k_sweep")}}
    if schedule is not None:
        gpu["profile"]["adaptive_schedule"] = schedule
    return gpu


def test_gpu_rows_judged_per_seed():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    sweep = [_point(16, "fixed λ=3", [1.5, 1.4, 1.6], [0.1, 0.08, 0.12]),
             _point(16, "adaptive η=3", [1.0, 1.05, 0.95], [0.0, -0.02, 0.01], adaptive=True)]
    rows = C.gpu_rows(_gpu(sweep, seeds=(0, 1, 2)))
    assert [r.verdict for r in rows] == ["reproduced", "not reproduced", "reproduced", "not run here", "not run here",
                                         "not reproduced", "not run here", "not run here"]
    assert all("3 seeds" in r.scale and "H200" in r.scale and "MiniLM partial NLI" in r.scale for r in rows)
    assert "kept no per-seed bias" in rows[3].evidence
    assert "unsteered" not in " ".join(r.claim + r.measured for r in rows)  # recorded with the current schedule


def test_gpu_rows_one_seed_and_the_oracle_in_the_scale():
    rows = C.gpu_rows(_gpu([_point(4, "fixed λ=3")], scorer="oracle partial similarity (MiniLM unavailable)"))
    assert [r.verdict for r in rows] == ["inconclusive"] and "one seed" in rows[0].scale
    assert "oracle partial similarity" in rows[0].scale and "not an NLI model" in rows[0].scale


def test_gpu_adaptive_rows_recorded_with_the_old_schedule_are_unsteered_and_inconclusive():
    """The recorded 'adaptive' rows were IID draws (ESS/N 1.00)."""
    sweep = [_point(16, "fixed λ=3"), _point(16, "adaptive η=3", ess=1.0, covered_steered=1.9)]
    rows = C.gpu_rows(_gpu(sweep, schedule=None))
    cover_fixed, cover_adaptive, auroc_fixed, _, _, auroc_adaptive, _, _ = rows
    assert "unsteered" not in cover_fixed.claim and "unsteered" in cover_adaptive.claim
    assert cover_adaptive.verdict == "inconclusive" and "λ stayed 0 until the meaning word" in cover_adaptive.measured
    assert auroc_adaptive.verdict == "inconclusive" and "unsteered" in auroc_adaptive.claim


def test_gpu_rows_of_a_sweep_that_did_not_finish_are_not_run():
    gpu = _gpu([])
    del gpu["sweep"]
    gpu["stages"]["sweep"] = {"state": "skipped", "reason": "deadline: 20 s left, needs 30 s"}
    (row,) = C.gpu_rows(gpu)
    assert row.verdict == "not run here" and "stage sweep (skipped: deadline: 20 s left, needs 30 s)" in row.evidence
    gpu["stages"]["sweep"] = {"state": "done"}
    assert C.gpu_rows(gpu)[0].verdict == "not run here"  # done but absent (never run in this file)


def test_gpu_rows_of_the_recorded_study():
    from companion.diverse_sampling.scale import recorded

    rows = C.gpu_rows(recorded())
    # 10 sweep points; at N = 16 per schedule an AUROC row and the |bias| and RMSE rows, each judged on 3 seeds
    assert len(rows) == 16 and not any("unsteered" in r.claim for r in rows)
    assert not any(r.verdict == "not run here" for r in rows) and all("n=3" in r.evidence for r in rows)
    assert all("MiniLM partial NLI" in r.scale and "3 seeds" in r.scale for r in rows)


def test_gpu_rows_without_per_seed_values_are_not_judged_on_a_mean():
    rows = C.gpu_rows(_gpu([_point(8, "fixed λ=3")], seeds=(0, 1, 2)))  # three seeds, only their mean kept
    assert [r.verdict for r in rows] == ["not run here"]


def test_claim_rows_all_valid():
    curve = {"n": [2, 32], "error_l1_is": [1.0, 0.1], "bias_l1_is": [0.1, 0.01], "bias_l1_unweighted": [0.2, 0.2]}
    rows = C.claim_rows(toy=_seeds(), curve=[curve] * 3, text=None, toy_scale="a", text_scale="b")
    assert len(rows) == 10 and all(r.verdict in VERDICTS and r.evidence for r in rows)
    assert [r.verdict for r in rows[:7]] == ["reproduced"] * 7 and rows[-1].verdict == "not run here"


def _errors(ratios_bias, ratios_rmse):
    """A sweep point at N = 16 whose steered + IS + CV |bias| and RMSE are the given multiples of IID's, per seed."""
    seeds = len(ratios_bias)
    r = _point(C.GPU_N, "fixed λ=3", [1.5] * seeds, [0.1] * seeds)
    r["bias_seeds"] = {"iid": [-0.2] * seeds, "steered_unweighted": [0.3] * seeds, "steered_is": [0.1] * seeds,
                       "steered_is_cv": [0.2 * q * (-1) ** i for i, q in enumerate(ratios_bias)]}  # sign flips count by size
    r["rmse_seeds"] = {"iid": [0.4] * seeds, "steered_unweighted": [0.5] * seeds, "steered_is": [0.3] * seeds,
                       "steered_is_cv": [0.4 * q for q in ratios_rmse]}
    return r


def _error_rows(ratios_bias, ratios_rmse, scorer="MiniLM partial NLI ([TRUNC] row + head)"):
    rows = C.gpu_rows(_gpu([_errors(ratios_bias, ratios_rmse)], seeds=range(len(ratios_bias)), scorer=scorer))
    return [r for r in rows if r.claim.startswith("Debiased SE estimate")]


def test_gpu_bias_and_rmse_rows_against_iid():
    eps = 1e-6
    bias, rmse = _error_rows([C.GPU_BIAS_RATIO - eps] * 3, [C.GPU_RMSE_RATIO - eps] * 3)
    assert (bias.verdict, rmse.verdict) == ("reproduced", "reproduced")
    assert "|bias|" in bias.claim and "IID -0.200" in bias.measured and "RMSE" in rmse.claim and "IID 0.400" in rmse.measured
    bias, rmse = _error_rows([C.GPU_BIAS_RATIO + eps] * 3, [C.GPU_RMSE_RATIO + eps] * 3)
    assert (bias.verdict, rmse.verdict) == ("not reproduced", "not reproduced")


def test_gpu_bias_and_rmse_rows_one_seed_straddle_and_oracle():
    assert [r.verdict for r in _error_rows([0.1], [0.1])] == ["inconclusive"] * 2  # one seed
    straddle = _error_rows([0.5, 0.5, 2.2], [0.5, 0.5, 2.2])  # mean 1.07 above 1, mean - std below it
    assert all(r.verdict == "inconclusive" and "straddles" in r.evidence for r in straddle)
    oracle = _error_rows([0.5] * 3, [0.5] * 3, scorer="oracle partial similarity (exact, from the templates)")
    assert all("not an NLI model" in r.scale for r in oracle)


def test_gpu_outcome_is_built_from_the_rows():
    assert C.gpu_outcome(None).startswith("No one-GPU result to report: no GPU results recorded")
    text = C.gpu_outcome(_gpu([_errors([0.5] * 3, [2.0] * 3)], seeds=(0, 1, 2)))
    assert "MiniLM partial NLI" in text and "not an NLI model" not in text
    assert text.splitlines()[1:] == ["Steered sampling: reproduced at N = 16 (fixed λ=3).",
                                     "Higher AUROC of SE: reproduced at N = 16 (fixed λ=3).",
                                     "Debiased SE estimate vs IID, |bias|: reproduced at N = 16 (fixed λ=3).",
                                     "Debiased SE estimate vs IID, RMSE: not reproduced at N = 16 (fixed λ=3)."]
    assert "not an NLI model" in C.gpu_outcome(_gpu([_point(4, "fixed λ=3")], scorer="oracle partial similarity"))
