"""Paper 17's claim builders on the one rule: every threshold just inside and just outside, one seed,
a straddling spread, and the GPU rows from a constructed JSON."""

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.gain_rl import claims as C
from companion.gain_rl.experiments import released_formula_audit


def _identity(err):
    return {"rel_err": np.array([0.0, err]), "layer": "layers.1.mlp.up_proj"}


def _signals(*last_rhos, n=40):
    """One checkpoint per value, each with two layers (the first at 0.9, the last at the given ρ)."""
    base = np.random.default_rng(0).normal(size=n)
    return {f"ck{i}": {"layers": [{"spearman": 0.9, "C": base}, {"spearman": r, "C": base}]}
            for i, r in enumerate(last_rhos)}


def test_identity_threshold():
    assert C.identity_row(_identity(C.IDENTITY_TOL * 0.9), "s").verdict == "reproduced"
    assert C.identity_row(_identity(C.IDENTITY_TOL * 1.1), "s").verdict == "not reproduced"
    assert "error 1.1e-05 vs ≤ 1.0e-05" in C.identity_row(_identity(C.IDENTITY_TOL * 1.1), "s").evidence


def test_correlation_threshold_on_the_last_layer_per_checkpoint():
    inside, outside = C.RHO_MIN + 0.01, C.RHO_MIN - 0.01
    assert C.correlation_row(_signals(inside, inside, inside), "s").verdict == "reproduced"
    assert C.correlation_row(_signals(outside - 0.5, outside - 0.5, outside - 0.5), "s").verdict == "not reproduced"
    # the first layer's 0.9 does not count: the claim is judged on the last layer
    row = C.correlation_row(_signals(0.1, 0.2, 0.15), "s")
    assert row.verdict == "not reproduced" and "layer 0 +0.90" in row.measured and "40 prompts" in row.measured
    assert "3 checkpoints" in row.scale


def test_correlation_two_checkpoints_are_inconclusive():
    # the notebook has two checkpoints (warm start, GAIN mid-training): fewer than three values
    row = C.correlation_row(_signals(0.9, 0.9), "s")
    assert row.verdict == "inconclusive" and "fewer than 3" in row.evidence and "n=2" in row.evidence


def test_correlation_straddling_spread():
    row = C.correlation_row(_signals(C.RHO_MIN - 0.3, C.RHO_MIN - 0.25, C.RHO_MIN + 0.4), "s")
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_speedup_ratios_are_per_seed_and_censored():
    r = C.speedup_ratios([2, 4, None], [5, 8, 6], 6)
    assert r == pytest.approx([2.5, 2.0, 6 / 7])  # GAIN not within 6 epochs counts 7: its ratio is at most 1
    assert C.speedup_ratios([None], [None], [6], [9]) == pytest.approx([10 / 7])  # each run's own epochs
    with pytest.raises(ValueError, match="seeds"):
        C.speedup_ratios([1, 2], [1], 4)


def _summary(gain, uniform):
    return {k: {"steps": s, "final": np.array([0.5] * len(s))} for k, s in (("uniform", uniform), ("GAIN", gain))}


def _speedup(gain, uniform, epochs=500):
    return C.speedup_row(_summary(gain, uniform), 0.5, epochs, "s")


def test_speedup_paper_threshold():
    assert C.SPEEDUP_PAPER == 2.5
    # every seed at 2.5x exactly (target included) vs every seed just under it
    assert _speedup([2, 4, 10], [5, 10, 25]).verdict == "reproduced"
    row = _speedup([100, 100, 100], [249, 249, 249])
    assert row.verdict == "partly reproduced"  # past the weaker bar only
    assert "uniform/GAIN per seed: 2.49x, 2.49x, 2.49x" in row.measured and "3 seeds" in row.scale


def test_speedup_margin_weaker_bar():
    inside = round(100 * C.SPEEDUP_MARGIN) + 1
    outside = round(100 * C.SPEEDUP_MARGIN) - 1
    assert _speedup([100] * 3, [inside] * 3).verdict == "partly reproduced"
    assert _speedup([100] * 3, [outside] * 3).verdict == "not reproduced"


def test_speedup_one_seed_is_inconclusive():
    row = _speedup([1], [10])  # 10x, but one seed
    assert row.verdict == "inconclusive" and "n=1" in row.evidence and "one seed" in row.scale


def test_speedup_straddling_spread():
    # ratios 1, 1, 5: mean 2.33, below 2.5 but past the weaker 1.25 -> partly
    assert _speedup([10, 10, 2], [10, 10, 10]).verdict == "partly reproduced"
    # 0.5, 0.5, 1.2: mean 0.73 ± 0.40 misses 2.5 by more than the spread -> not reproduced
    assert _speedup([10, 10, 10], [5, 5, 12], epochs=20).verdict == "not reproduced"
    # 0.2, 0.2, 3.2: mean 1.2 ± 1.73 misses both bars, but mean + std passes 2.5 -> inconclusive
    row = _speedup([10, 10, 10], [2, 2, 32], epochs=40)
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_speedup_never_reached():
    row = _speedup([None, None, None], [None, None, None], epochs=6)
    assert row.verdict == "not reproduced" and "1.00x" in row.measured and "counted as 7" in row.measured


def test_claim_rows_all_verdicts_valid():
    sig = _signals(0.1, 0.4)
    rows = C.claim_rows(identity=_identity(1e-9), signals=sig, summary=_summary([2, 3], [3, None]), target=0.5,
                        epochs=6, identity_scale="a", signal_scale="b", run_scale="c", gpu=None)
    assert len(rows) == 5 and all(r.verdict in VERDICTS for r in rows) and all(r.evidence for r in rows)
    assert [r.verdict for r in rows] == ["reproduced", "inconclusive", "inconclusive", "not run here", "not run here"]
    assert "2 seeds" in rows[2].scale and "—" in rows[2].measured
    assert not any("C_intra + 8" in r.claim for r in rows)  # the code audit lives in the notebook's Checks


def test_released_formula_audit():
    T, p = 12, 3  # prefix 3, question 3..10, suffix 2: rows 3..9, then rows 3..-2 of those: 6..7
    rng = np.random.default_rng(0)
    C_ = rng.normal(size=20)
    layer = {"states": np.zeros((20, T, 4)), "C": C_, "released": np.full(20, np.nan), "released_second": C_}
    audit = released_formula_audit({"spans": {"prefix": (0, p), "question": (p, 10)}, "layers": [layer]})
    assert audit["nan_share"] == 1.0 and audit["expected_nan_share"] == 0.0 and audit["rho_second"] == pytest.approx(1.0)
    short = released_formula_audit({"spans": {"prefix": (0, 5), "question": (5, 8)}, "layers": [{**layer, "states":
                                                                                                  np.zeros((20, 10, 4))}]})
    assert short["expected_nan_share"] == 1.0  # rows 5..8, then 10..6: empty


def _gpu(gain, uniform, runs=None, angle_timing=None, spearman=(0.1, 0.9)):
    """A recorded study in the stage runner's layout, every stage done."""
    summary = {k: {"epochs_to_target": s, "seconds_to_target": [None if v is None else 0.5 * v for v in s],
                   "final": [0.5 + 0.1 * i for i in range(len(s))]} for k, s in (("uniform", uniform), ("GAIN", gain))}
    t = angle_timing or {"batch": 16, "T": 1024, "d": 896, "explicit_ms": 2.0, "segment_ms": 0.5, "speedup": 4.0}
    stages = ("angle_timing", "sft", "layer_correlation", "grpo")
    return {"device": "H200", "date": "2026-12-02", "profile": {"model": "m", "epochs": 150, "run_seconds": 10.0, "pool": 64,
                                                            "lr": 1.25e-5, "recipe": C.GRPO_RECIPE},
            "stages": {k: {"state": "done"} for k in stages}, "angle_timing": t, "sft": {},
            "layer_correlation": {"spearman": list(spearman)},
            "grpo": {"summary": summary, "target": 0.4, **({"runs": runs} if runs else {})}}


def test_gpu_rows_judged_by_the_rule():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    # a recorded run's numbers: GAIN 34/28/62 epochs against uniform's 4/19/18
    row = C.gpu_rows(_gpu([34, 28, 62], [4, 19, 18]))[0]
    assert row.verdict == "not reproduced" and "n=3" in row.evidence and "3 seeds" in row.scale
    assert "H200" in row.scale and "150 epochs" in row.scale
    assert "epochs to target 34, 28, 62 (17.0, 14.0, 31.0 s)" in row.measured and "0.12x, 0.68x, 0.29x" in row.measured
    assert C.gpu_rows(_gpu([2, 2, 2], [6, 6, 6]))[0].verdict == "reproduced"
    one = C.gpu_rows(_gpu([2], [6]))[0]
    assert one.verdict == "inconclusive" and "one seed" in one.scale


def test_gpu_rows_censor_with_each_runs_epochs():
    runs = {"GAIN": [{"eval_acc": [0.0] * 41}], "uniform": [{"eval_acc": [0.0] * 11}]}
    row = C.gpu_rows(_gpu([None], [5], runs=runs))[0]
    assert "0.12x" in row.measured  # 5 / (40 + 1)


def test_gpu_timing_and_layer_rows():
    t = {"batch": 16, "T": 1024, "d": 896, "explicit_ms": 2.0, "segment_ms": 0.5, "speedup": 4.0}
    rows = C.gpu_rows(_gpu([2, 2, 2], [6, 6, 6], angle_timing=t))
    assert len(rows) == 6 and "4.0x" in rows[1].measured and rows[1].verdict == "reproduced"
    slow = {**t, "speedup": C.SEGMENT_SPEEDUP_MIN * 0.99}
    assert C.gpu_rows(_gpu([2], [6], angle_timing=slow))[1].verdict == "not reproduced"
    fast = {**t, "speedup": C.SEGMENT_SPEEDUP_MIN * 1.01}
    assert C.gpu_rows(_gpu([2], [6], angle_timing=fast))[1].verdict == "reproduced"  # one timing is enough
    layer = rows[2]
    assert layer.verdict == "inconclusive" and "+0.10, +0.90" in layer.measured and "one warm-started model" in layer.scale


def test_gpu_row_records_mu_arrival_from_mu_used():
    mu = [0.0, 20.0, 40.0, 63.0, 63.0]  # μ after epoch 3 is the last rank
    runs = {"GAIN": [{"eval_acc": [0.1] * 6, "mu_used": mu + [63.0], "mean_reward": [0.3] * 5, "ang": [0.4] * 5}] * 3}
    row = C.gpu_rows(_gpu([2, 2, 2], [6, 6, 6], runs=runs))[0]
    assert "reached the last of 64 ranks after epoch 3, 3, 3 (of 5, 5, 5)" in row.measured


def test_gpu_rows_of_stages_that_did_not_finish_are_not_run():
    """A stage the runner marked skipped, failed or unfinished (or one the run did not hold) judges nothing."""
    gpu = _gpu([2, 2, 2], [6, 6, 6])
    gpu["stages"]["grpo"] = {"state": "unfinished", "started": "2026-12-04"}
    del gpu["grpo"]
    gpu["stages"]["angle_timing"] = {"state": "failed", "error": "RuntimeError: out of memory"}
    del gpu["layer_correlation"], gpu["stages"]["layer_correlation"]
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["not run here"] * 6
    assert "stage grpo (unfinished)" in rows[0].measured and "out of memory" in rows[1].evidence
    assert "layer_correlation not in the recorded run" in rows[2].measured


def test_gpu_rows_of_the_recorded_study():
    """The committed JSON gives one row per stage; its grpo rows, trained with an older GRPO recipe than this
    code's, come out not run with the reason, the other stages judged."""
    from companion.gain_rl.scale import recorded

    gpu = recorded()
    assert gpu["complete"] and set(gpu["stages"]) == {"angle_timing", "sft", "layer_correlation", "grpo"}
    rows = C.gpu_rows(gpu)
    assert len(rows) == 6 and rows[1].verdict != "not run here" and rows[2].verdict != "not run here"
    grpo = [rows[0], *rows[3:]]
    if gpu["profile"].get("recipe", 1) < C.GRPO_RECIPE:
        assert all(r.verdict == "not run here" and "GRPO recipe" in r.measured for r in grpo)
    else:
        assert all(r.verdict != "not run here" for r in grpo) and "reached the last of" in rows[0].measured
        if all(e is None for e in gpu["grpo"]["summary"]["GAIN"]["mu_end_epoch"]):  # μ stayed inside the ranking
            assert "never reached" in rows[0].measured and "from then on" not in rows[0].measured


def test_older_recipe_is_not_run():
    gpu = _scheduled([2, 2, 2], [2, 2, 2], [0.5] * 3)
    gpu["profile"] = {k: v for k, v in gpu["profile"].items() if k != "recipe"}  # recipe 1 named nothing
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["not run here", "reproduced", "inconclusive", *["not run here"] * 3]
    assert "GRPO recipe 1" in rows[0].measured and "lr 1.25e-05" in rows[0].measured


def _scheduled(gain, filt, reach, epochs=150, gains=(0.2, 0.2, 0.2)):
    """A recorded study of the per-subset schedule: filter and GAIN epochs to the target, μ's furthest share, and
    uniform's held-out accuracy gain over the start (0.45) per seed."""
    gpu = _gpu(gain, [6] * len(gain))
    gpu["grpo"]["summary"]["filter"] = {"epochs_to_target": filt, "seconds_to_target": [None] * len(filt),
                                        "final": [0.5] * len(filt), "epochs": [epochs] * len(filt)}
    gpu["grpo"]["summary"]["GAIN"].update(mu_reach=list(reach), mu_end_epoch=[None] * len(reach),
                                          epochs=[epochs] * len(gain))
    gpu["grpo"]["summary"]["uniform"]["epochs"] = [epochs] * len(gain)
    gpu["grpo"]["schedule"] = {"sigma": 125.0, "n": 62.5, "alpha": 2.0, "beta": 0.5, "adj_min": 0.0, "adj_max": 125.0}
    gpu["grpo"]["runs"] = {"uniform": [{"eval_acc": [0.45, 0.3, 0.45 + g]} for g in gains]}
    return gpu


def _rows(gpu):
    return {r.claim.split(",")[0].split(" through")[0]: r for r in C.gpu_rows(gpu)}


def test_new_rows_not_run_on_the_old_layout():
    rows = _rows(_gpu([2, 2, 2], [6, 6, 6]))
    for key in ("GAIN vs DAPO-style filtering", "μ stays inside the pool", PREMISE):
        assert rows[key].verdict == "not run here" and "predates" in rows[key].measured


def test_filter_ratio_threshold():
    inside = [20 * C.FILTER_RATIO_MIN] * 3  # filter 20 epochs, GAIN 20: ratio exactly at the bar
    assert _rows(_scheduled([20, 20, 20], inside, [0.5] * 3))["GAIN vs DAPO-style filtering"].verdict == "reproduced"
    row = _rows(_scheduled([21, 21, 21], [20, 20, 20], [0.5] * 3))["GAIN vs DAPO-style filtering"]
    assert row.verdict == "not reproduced" and "0.95x, 0.95x, 0.95x" in row.measured and "3 seeds" in row.scale
    one = _rows(_scheduled([10], [20], [0.5]))["GAIN vs DAPO-style filtering"]
    assert one.verdict == "inconclusive" and "one seed" in one.scale
    straddle = _rows(_scheduled([10, 40, 50], [20, 20, 20], [0.5] * 3))["GAIN vs DAPO-style filtering"]
    assert straddle.verdict == "inconclusive"  # ratios 2, 0.5, 0.4: mean 0.97 ± 0.9 straddles 1


def test_mu_reach_threshold():
    row = _rows(_scheduled([2] * 3, [2] * 3, [C.MU_REACH_MAX * 0.99] * 3))["μ stays inside the pool"]
    assert row.verdict == "reproduced" and "σ = 125, n = 62.5" in row.measured
    out = _rows(_scheduled([2] * 3, [2] * 3, [C.MU_REACH_MAX * 1.01] * 3))["μ stays inside the pool"]
    assert out.verdict == "not reproduced"
    assert _rows(_scheduled([2], [2], [0.1]))["μ stays inside the pool"].verdict == "inconclusive"  # one seed
    straddle = _rows(_scheduled([2] * 3, [2] * 3, [0.8, 1.0, 1.0]))["μ stays inside the pool"]
    assert straddle.verdict == "inconclusive" and "0.80, 1.00, 1.00" in straddle.measured  # 0.93 ± 0.12 vs ≤ 0.9


PREMISE = "GRPO improves held-out accuracy from the warm start"


def test_premise_threshold():
    row = _rows(_scheduled([2] * 3, [2] * 3, [0.5] * 3, gains=[C.GRPO_GAIN_MIN * 1.01] * 3))[PREMISE]
    assert row.verdict == "reproduced" and "+0.101, +0.101, +0.101" in row.measured and "3 seeds" in row.scale
    assert "best epoch's gain" in row.measured and "0.450 at the warm start" in row.measured
    below = _rows(_scheduled([2] * 3, [2] * 3, [0.5] * 3, gains=[C.GRPO_GAIN_MIN * 0.99] * 3))[PREMISE]
    assert below.verdict == "not reproduced"
    one = _rows(_scheduled([2], [2], [0.5], gains=[0.3]))[PREMISE]
    assert one.verdict == "inconclusive" and "one seed" in one.scale
    straddle = _rows(_scheduled([2] * 3, [2] * 3, [0.5] * 3, gains=[0.0, 0.09, 0.18]))[PREMISE]
    assert straddle.verdict == "inconclusive"  # 0.09 ± 0.09 straddles the bar


def test_premise_sign_flip_is_not_reproduced():
    """Accuracy that falls from the warm start (the recorded recipe-1 runs) is the opposite of the claim."""
    row = _rows(_scheduled([2] * 3, [2] * 3, [0.5] * 3, gains=[-0.02, -0.05, -0.045]))[PREMISE]
    assert row.verdict == "not reproduced" and "-0.020, -0.050, -0.045" in row.measured
