"""Paper 04, ZeroS: the claims table on the one rule (companion.core.judge), each threshold tested just inside
and just outside; exact rows on one run, the toy row judged on ZeroS's NMSE per seed (inconclusive with one), the
one-seed MQAR rows inconclusive, the kernel row a timing judged from a constructed JSON in the stage runner's layout."""

import math

import pytest

from companion.core import VERDICTS, Claim, judge
from companion.zeros_attention.claims import (
    CONVEX_FLOOR,
    EQUIV_TOL,
    EXPRESSIVITY_MARGIN,
    L1_BOUND,
    LEVEL_OFF_RATIO,
    LINEAR_SLOPE_MAX,
    MQAR_LEARNED_MIN,
    MQAR_LINEAR_MARGIN,
    MQAR_TIE_MARGIN,
    ROW_SUM_TOL,
    T_MAX_R_BOUND,
    ZEROS_NMSE_MAX,
    bounded,
    claim_rows,
    kernel_claim_rows,
    kernel_slopes,
    lemma_shares,
)
from companion.zeros_attention.scale import kernel_rows, kernel_table, launch_table, ratio_table, targets_sentence

EPS = 1e-9
DECAY = {"t": [1, 2, 4, 8], "max_abs": [1.0, 0.5, 0.25, 0.125], "l1": [0.5, 0.5, 0.5, 0.5]}
NORMS = {"zeros": [0.1, 0.2]}


def rows(row_sum=0.0, neg=0.5, equiv=0.0, decay=DECAY, toy=(0.1, 0.6, 0.1), mqar=(0.5, 0.5, 0.1), kernel=None, toy_zeros=None):
    return claim_rows(toy_zeros=None if toy_zeros is None else [{"test_nmse": v} for v in toy_zeros],row_sum_max=row_sum, neg_share=neg, weights_scale="w", equiv={"a": equiv, "b": 0.0}, equiv_scale="e",
                      decay=decay, norms=NORMS, property_t=8,
                      toy={"zeros": {"test_nmse": toy[0]}, "softmax": {"test_nmse": toy[1]}, "zeros_sm": {"test_nmse": toy[2]}},
                      toy_scale="one seed", mqar={"zeros": {"test_acc": mqar[0]}, "softmax": {"test_acc": mqar[1]},
                                                  "linear": {"test_acc": mqar[2]}}, mqar_scale="one seed", kernel=kernel)


def row(rs, start):
    (r,) = [r for r in rs if r.claim.startswith(start)]
    assert isinstance(r, Claim) and r.verdict in VERDICTS and r.evidence
    return r


def test_rows_are_claims():
    rs = rows()
    assert len(rs) == 9
    assert row(rs, "linear time").verdict == "not run here"


def test_exact_tolerances():
    assert row(rows(row_sum=ROW_SUM_TOL * 0.99), "zero-sum").verdict == "reproduced"
    assert row(rows(row_sum=ROW_SUM_TOL * 1.01), "zero-sum").verdict == "not reproduced"
    assert "0% of the non-zero weights negative" in row(rows(neg=0.0), "zero-sum").measured
    assert row(rows(equiv=EQUIV_TOL * 0.99), "exact").verdict == "reproduced"
    r = row(rows(equiv=EQUIV_TOL * 1.01), "exact")
    assert r.verdict == "not reproduced" and r.evidence == f"max error {EQUIV_TOL * 1.01:.3g} vs ≤ {EQUIV_TOL:.3g}"


def _decay(t_max_r, l1=0.5):
    t = list(range(1, len(t_max_r) + 1))
    return {"t": t, "max_abs": [v / ti for v, ti in zip(t_max_r, t)], "l1": [l1] * len(t)}


def test_bounded_thresholds():
    assert bounded([1.0, 1.0, T_MAX_R_BOUND - 1e-6], [0.5]) is False  # inside the bound but not levelling off
    inside = [T_MAX_R_BOUND - 1e-6] * 3
    assert bounded(inside, [L1_BOUND - 1e-6])
    assert not bounded([T_MAX_R_BOUND + 1e-6] * 3, [0.5])
    assert not bounded(inside, [L1_BOUND + 1e-6])
    mid = 1.0
    assert bounded([0.5, mid, LEVEL_OFF_RATIO * mid - 1e-6], [0.5])
    assert not bounded([0.5, mid, LEVEL_OFF_RATIO * mid + 1e-6], [0.5])
    assert lemma_shares([1.0, 2.0, 3.0], [1.0]) == pytest.approx(
        {"t·max|r|": 3.0 / T_MAX_R_BOUND, "its growth over the second half": 1.5 / LEVEL_OFF_RATIO, "Σ|r|": 1.0 / L1_BOUND})


@pytest.mark.parametrize("t_max_r, l1, verdict", [
    ([1.0, 1.0, 1.0], 0.5, "reproduced"),
    ([1.0, 1.0, 1.0], L1_BOUND + 0.1, "not reproduced"),
    ([T_MAX_R_BOUND + 0.1] * 3, 0.5, "not reproduced"),
    ([0.5, 1.0, LEVEL_OFF_RATIO + 0.01], 0.5, "not reproduced"),
    ([0.5, 1.0, LEVEL_OFF_RATIO - 0.01], 0.5, "reproduced"),
])
def test_lemma_row_is_exact_on_each_measures_share_of_its_bound(t_max_r, l1, verdict):
    r = row(rows(decay=_decay(t_max_r, l1=l1)), "|r|")
    assert r.verdict == verdict and r.evidence.startswith("max error") and r.evidence.endswith("vs ≤ 1")


@pytest.mark.parametrize("zs, verdict", [
    (ZEROS_NMSE_MAX - EPS, "reproduced"),
    (ZEROS_NMSE_MAX + 1e-3, "partly reproduced"),  # below the convex floor by the margin, not solved
    (CONVEX_FLOOR - EXPRESSIVITY_MARGIN - 1e-3, "partly reproduced"),
    (CONVEX_FLOOR - EXPRESSIVITY_MARGIN + 1e-3, "not reproduced"),
])
def test_expressivity(zs, verdict):
    """One seed: the row is inconclusive and shows the target and the weaker bar; three seeds of ZeroS decide."""
    r = row(rows(toy=(zs, 0.6, 0.1)), "one layer")
    assert r.verdict == "inconclusive" and r.evidence.startswith("n=1:") and r.scale.endswith("ZeroS on one seed")
    assert f"vs ≤ {ZEROS_NMSE_MAX:.3g} (partly ≤ {CONVEX_FLOOR - EXPRESSIVITY_MARGIN:.3g})" in r.evidence
    r3 = row(rows(toy=(zs, 0.6, 0.1), toy_zeros=[zs] * 3), "one layer")
    assert r3.verdict == verdict and r3.evidence.startswith("n=3:")
    assert r3.scale.endswith("ZeroS on 3 seeds, ZeroS-SM and softmax on the first")
    assert f"ZeroS {zs:.3f} mean over 3 seeds ({zs:.3f}, {zs:.3f}, {zs:.3f})" in r3.measured


def test_expressivity_judges_zeros_per_seed_not_the_first_alone():
    """The judged values are ZeroS's per seed (``toy_zeros``), not the one of ``toy``: two seeds past the bar and
    one far outside straddle it; the other mixers' NMSE does not enter the verdict."""
    r = row(rows(toy=(0.1, 0.6, 0.1), toy_zeros=[0.1, 0.1, 1.2]), "one layer")
    assert r.verdict == "inconclusive" and r.evidence.startswith("n=3: 0.467")
    assert row(rows(toy=(0.9, 0.6, 0.1), toy_zeros=[0.1, 0.15, 0.12]), "one layer").verdict == "reproduced"


def test_a_straddling_spread_is_inconclusive():
    assert judge([0.1, 0.2, 0.35], ZEROS_NMSE_MAX, direction="lower").verdict == "inconclusive"


@pytest.mark.parametrize("za, sa, la, tie, above", [
    (0.5 - MQAR_TIE_MARGIN + 1e-6, 0.5, 0.1, "reproduced", "reproduced"),
    (0.5 - MQAR_TIE_MARGIN - 1e-3, 0.5, 0.1, "not reproduced", "reproduced"),
    (0.5, 0.5, 0.5 - MQAR_LINEAR_MARGIN + 1e-3, "reproduced", "not reproduced"),
    (0.5, 0.5, 0.5 - MQAR_LINEAR_MARGIN - 1e-3, "reproduced", "reproduced"),
])
def test_mqar(za, sa, la, tie, above):
    rs = rows(mqar=(za, sa, la))
    r_tie, r_above = row(rs, "MQAR: ZeroS competitive"), row(rs, "MQAR: ZeroS above")
    assert r_tie.verdict == r_above.verdict == "inconclusive"  # one seed
    assert f"vs ≥ {-MQAR_TIE_MARGIN:.3g}" in r_tie.evidence and f"vs ≥ {MQAR_LINEAR_MARGIN:.3g}" in r_above.evidence
    assert judge([za - sa] * 3, -MQAR_TIE_MARGIN, direction="higher").verdict == tie
    assert judge([za - la] * 3, MQAR_LINEAR_MARGIN, direction="higher").verdict == above


def test_mqar_not_learned_reads_no_ordering():
    """The old rule called an unlearned task "not reproduced"; with no mixer past MQAR_LEARNED_MIN the rows say why
    they were not tested."""
    rs = rows(mqar=(MQAR_LEARNED_MIN - 1e-3, MQAR_LEARNED_MIN - 1e-3, 0.0))
    for start in ("MQAR: ZeroS competitive", "MQAR: ZeroS above"):
        r = row(rs, start)
        assert r.verdict == "inconclusive" and "no mixer learned" in r.evidence
    assert row(rows(mqar=(MQAR_LEARNED_MIN + 1e-3, MQAR_LEARNED_MIN - 1e-3, 0.0)), "MQAR: ZeroS above").verdict == "inconclusive"


def recorded(rows, state=("done", "")):
    """A recorded payload in the stage runner's layout whose ``rows`` stage ended in ``state`` (state, why)."""
    stages = {"rows": {"state": state[0], "reason": state[1]}}
    return {"device": "H200", "date": "d", "profile": {"B": 1}, "stages": stages, "rows": rows}


PAYLOAD = recorded([
    {"T": T, "impl": impl, "mode": mode, "ms": ms, "peak_mib": 100.0}
    for T, impl, mode, ms in [(2048, "fla_dk192", "fwd", 0.25), (2048, "sdpa_flash", "fwd", 0.5), (2048, "zeros", "fwd", 1.0),
                              (2048, "zeros", "fwd_bwd", 3.0), (2048, "sdpa_flash", "fwd_bwd", 0.3),
                              (65536, "zeros", "fwd", 32.0), (65536, "zeros", "fwd_bwd", 90.0)]
] + [{"T": 65536, "impl": "sdpa_flash", "mode": "fwd", "error": "OOM"}])


def test_kernel_row_is_a_timing_of_the_slope():
    payload = PAYLOAD
    table = kernel_table(payload)
    assert table[2048]["fwd"] == {"zeros": 1.0, "sdpa_flash": 0.5, "fla_dk192": 0.25}
    assert "sdpa_flash" not in table[65536].get("fwd", {})
    slopes = kernel_slopes(payload)
    assert slopes["fwd"] == (2048, 65536, pytest.approx(1.0)) and slopes["fwd_bwd"][2] == pytest.approx(math.log(30) / math.log(32))
    (r,) = kernel_claim_rows(payload)
    assert r.verdict == "reproduced" and r.evidence.startswith("n=2:") and f"vs ≤ {LINEAR_SLOPE_MAX:.3g}" in r.evidence
    assert "fwd 1.00 (T=2048->65536)" in r.measured and "one run" in r.scale
    ratios = {r["T"]: r for r in ratio_table(payload)}
    assert ratios[2048]["fwd: ours / fla_dk192"] == 4.0 and ratios[65536]["fwd: ours / sdpa_flash"] == "not measured"


def test_kernel_row_of_an_unfinished_rows_stage_is_not_run():
    """A rows stage killed mid-run (or skipped) leaves no rows to judge: the row names the stage and its state."""
    payload = recorded(PAYLOAD["rows"], ("unfinished", "killed at the wall-clock limit"))
    (r,) = kernel_claim_rows(payload)
    assert r.verdict == "not run here" and "rows (unfinished: killed at the wall-clock limit)" in r.measured
    assert kernel_table(payload) == {} and ratio_table(payload) == []


def test_launch_table_reads_the_launch_stage_only_when_done():
    rows = [{"T": 2048, "impl": "fla_dk192", "mode": "fwd", "ms": 0.1444, "host_us": 61.04, "graph_ms": 0.0213},
            {"T": 2048, "impl": "zeros", "mode": "fwd", "ms": 0.186, "host_us": 90.0, "graph_ms": None,
             "graph_error": "RuntimeError: capture"},
            {"T": 2048, "impl": "zeros_one_segment", "mode": "fwd", "error": "OutOfResources"}]
    payload = {**PAYLOAD, "stages": {**PAYLOAD["stages"], "launch": {"state": "done"}}, "launch": rows}
    table = launch_table(payload)
    assert table[0] == {"T": 2048, "contender": "fla_dk192", "forward ms (do_bench)": 0.144, "host µs a call": 61.0,
                        "CUDA-graph ms a call": 0.021}
    assert table[1]["CUDA-graph ms a call"] == "RuntimeError: capture" and table[2]["error"] == "OutOfResources"
    unfinished = {**payload, "stages": {**payload["stages"], "launch": {"state": "unfinished"}}}
    assert launch_table(unfinished) == [] and launch_table(PAYLOAD) == [] and launch_table(None) == []


def test_targets_sentence_says_each_target_with_its_value():
    targets = {"Tmax": 65536, "fwd_ratio_vs_fla_dk192_at_Tmax": 1.2, "fwd_ratio_source": "fla measured in this run",
               "sdpa_over_zeros_fwd_at_Tmax": 45.43, "faster_than_sdpa_fwd_from_T": 8192,
               "met": {"fwd_le_fla": False, "ge_30x_sdpa_fwd": True, "faster_than_sdpa_from_8k": True}}
    payload = {**PAYLOAD, "stages": {**PAYLOAD["stages"], "targets": {"state": "done"}}, "targets": targets}
    text = targets_sentence(payload)
    assert "forward at T = 65536 ≤ 1× fla's time: 1.20× (not met)" in text and "45.4× (met)" in text
    assert "forward+backward" not in text and text.endswith("(fla measured in this run).")
    assert targets_sentence(PAYLOAD) is None


def test_committed_results_are_read_in_the_stage_layout():
    from companion.zeros_attention.scale import recorded as committed

    rec = committed()
    if rec is None:
        pytest.skip("no recorded GPU run")
    assert rec["profile"]["seed"] == 0 and rec["stages"]["rows"]["state"] == "done"
    assert kernel_claim_rows(rec)[0].verdict != "not run here" and len(kernel_table(rec)) == len(rec["profile"]["T_list"])


@pytest.mark.parametrize("slope, verdict", [(LINEAR_SLOPE_MAX - 1e-3, "reproduced"), (LINEAR_SLOPE_MAX + 1e-3, "not reproduced")])
def test_linear_slope_max(slope, verdict):
    payload = recorded([{"T": T, "impl": "zeros", "mode": "fwd", "ms": (T / 1024) ** slope} for T in (1024, 4096)])
    (r,) = kernel_claim_rows(payload)
    assert r.verdict == verdict and r.evidence.startswith("n=1:")


def test_a_quadratic_kernel_is_not_linear_time():
    payload = recorded([{"T": T, "impl": "zeros", "mode": mode, "ms": (T / 1024) ** 2}
                        for T in (1024, 2048, 4096) for mode in ("fwd", "fwd_bwd")])
    assert kernel_claim_rows(payload)[0].verdict == "not reproduced"


def test_kernel_rows_without_results():
    assert [r.verdict for r in kernel_claim_rows(None)] == ["not run here"]
    assert [r.verdict for r in kernel_claim_rows(recorded([]))] == ["not run here"]
    one_t = recorded([{"T": 1, "impl": "zeros", "mode": "fwd", "ms": 1.0}])
    assert [r.verdict for r in kernel_claim_rows(one_t)] == ["not run here"]
    assert kernel_rows(recorded([{"T": 1, "impl": "zeros", "mode": "fwd", "error": "x"}]))[0]["error"] == "x"
