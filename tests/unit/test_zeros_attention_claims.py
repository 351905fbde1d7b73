"""Paper 04, ZeroS: the claims table's verdicts, each threshold tested just inside and just outside,
and the kernel rows on both recorded row formats ("not measured" where a peer was not measured)."""

import pytest

from companion.core import VERDICTS, Claim
from companion.zeros_attention.claims import (
    CONVEX_FLOOR_MIN,
    EQUIV_TOL,
    EXPRESSIVITY_MARGIN,
    L1_BOUND,
    LEVEL_OFF_RATIO,
    MQAR_LEARNED_MIN,
    MQAR_LINEAR_MARGIN,
    MQAR_TIE_MARGIN,
    ROW_SUM_TOL,
    T_MAX_R_BOUND,
    ZEROS_NMSE_MAX,
    bounded,
    claim_rows,
    kernel_claim_rows,
)
from companion.zeros_attention.scale import kernel_rows, kernel_table, ratio_table

EPS = 1e-9
DECAY = {"t": [1, 2, 4, 8], "max_abs": [1.0, 0.5, 0.25, 0.125], "l1": [0.5, 0.5, 0.5, 0.5]}
NORMS = {"zeros": [0.1, 0.2]}


def rows(row_sum=0.0, neg=0.5, equiv=0.0, decay=DECAY, toy=(0.1, 0.6, 0.1), mqar=(0.5, 0.5, 0.1), kernel=None):
    return claim_rows(row_sum_max=row_sum, neg_share=neg, weights_scale="w", equiv={"a": equiv}, equiv_scale="e",
                      decay=decay, norms=NORMS, property_t=8,
                      toy={"zeros": {"test_nmse": toy[0]}, "softmax": {"test_nmse": toy[1]}, "zeros_sm": {"test_nmse": toy[2]}},
                      toy_scale="one seed", mqar={"zeros": {"test_acc": mqar[0]}, "softmax": {"test_acc": mqar[1]},
                                                  "linear": {"test_acc": mqar[2]}}, mqar_scale="one seed", kernel=kernel)


def row(rs, start):
    return next(r for r in rs if r.claim.startswith(start))


def test_rows_are_claims():
    rs = rows()
    assert all(isinstance(r, Claim) and r.verdict in VERDICTS for r in rs)
    assert row(rs, "linear time").verdict == "not run here"


def test_exact_tolerances():
    assert row(rows(row_sum=ROW_SUM_TOL * 0.99), "zero-sum").verdict == "reproduced"
    assert row(rows(row_sum=ROW_SUM_TOL * 1.01), "zero-sum").verdict == "not reproduced"
    assert row(rows(neg=0.0), "zero-sum").verdict == "not reproduced"
    assert row(rows(equiv=EQUIV_TOL * 0.99), "exact").verdict == "reproduced"
    assert row(rows(equiv=EQUIV_TOL * 1.01), "exact").verdict == "not reproduced"


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
    assert row(rows(decay=_decay([1.0, 1.0, 1.0])), "|r|").verdict == "reproduced"
    assert row(rows(decay=_decay([1.0, 1.0, 1.0], l1=L1_BOUND + 0.1)), "|r|").verdict == "not reproduced"


@pytest.mark.parametrize("zs, sm, verdict", [
    (ZEROS_NMSE_MAX - EPS, CONVEX_FLOOR_MIN + EPS, "reproduced"),
    (ZEROS_NMSE_MAX + 1e-3, CONVEX_FLOOR_MIN + EPS, "partly reproduced"),
    (ZEROS_NMSE_MAX - EPS, CONVEX_FLOOR_MIN - 1e-3, "partly reproduced"),
    (0.5 - EXPRESSIVITY_MARGIN + 1e-3, 0.5, "not reproduced"),
    (0.5 - EXPRESSIVITY_MARGIN - 1e-3, 0.5, "partly reproduced"),
])
def test_expressivity(zs, sm, verdict):
    assert row(rows(toy=(zs, sm, 0.1)), "one layer").verdict == verdict


@pytest.mark.parametrize("za, sa, la, verdict", [
    (0.5 - MQAR_TIE_MARGIN + 1e-6, 0.5, 0.1, "reproduced"),
    (0.5 - MQAR_TIE_MARGIN - 1e-3, 0.5, 0.1, "partly reproduced"),  # above linear only
    (0.5, 0.5, 0.5 - MQAR_LINEAR_MARGIN + 1e-3, "partly reproduced"),  # tie only
    (0.3, 0.5, 0.3 - MQAR_LINEAR_MARGIN + 1e-3, "not reproduced"),
    (MQAR_LEARNED_MIN - 1e-3, MQAR_LEARNED_MIN - 1e-3, 0.0, "not reproduced"),  # nothing learned: no ordering read
    (MQAR_LEARNED_MIN + 1e-3, MQAR_LEARNED_MIN - 1e-3, 0.0, "reproduced"),
])
def test_mqar(za, sa, la, verdict):
    assert row(rows(mqar=(za, sa, la)), "MQAR").verdict == verdict


OLD = {"device": "H200", "date": "d", "rows": [
    {"T": 2048, "op": "ours", "fwd_ms": 1.0, "fwd_peak_mib": 90.0, "fwdbwd_ms": 3.0, "fwdbwd_peak_mib": 130.0},
    {"T": 2048, "op": "sdpa_flash", "fwd_ms": 0.5, "fwdbwd_ms": 0.3},
    {"T": 2048, "op": "fla_chunk_dk192", "fwd_ms": 0.25, "fwdbwd_ms": 1.5},
    {"T": 65536, "op": "ours", "fwd_ms": 32.0, "fwdbwd_ms": 90.0},
]}
NEW = {"device": "H200", "date": "d", "rows": [
    {"T": T, "impl": impl, "mode": mode, "ms": ms, "peak_mib": 100.0}
    for T, impl, mode, ms in [(2048, "fla_dk192", "fwd", 0.25), (2048, "sdpa_flash", "fwd", 0.5), (2048, "zeros", "fwd", 1.0),
                              (2048, "zeros", "fwd_bwd", 3.0), (2048, "sdpa_flash", "fwd_bwd", 0.3),
                              (65536, "zeros", "fwd", 32.0), (65536, "zeros", "fwd_bwd", 90.0)]
] + [{"T": 65536, "impl": "sdpa_flash", "mode": "fwd", "error": "OOM"}]}


@pytest.mark.parametrize("payload", [OLD, NEW], ids=["old format", "new format"])
def test_kernel_rows_say_not_measured(payload):
    table = kernel_table(payload)
    assert table[2048]["fwd"] == {"zeros": 1.0, "sdpa_flash": 0.5, "fla_dk192": 0.25}
    assert "sdpa_flash" not in table[65536].get("fwd", {})
    rs = kernel_claim_rows(payload)
    assert all(r.verdict == "recorded on GPU" for r in rs)
    sdpa = next(r for r in rs if "SDPA" in r.claim)
    assert "T=2048 2.00x" in sdpa.measured and "not measured at T=65536" in sdpa.measured
    assert "time x32.0 for T x32" in rs[0].measured
    ratios = {r["T"]: r for r in ratio_table(payload)}
    assert ratios[2048]["fwd: ours / fla_dk192"] == 4.0 and ratios[65536]["fwd: ours / sdpa_flash"] == "not measured"


def test_kernel_rows_without_results():
    assert [r.verdict for r in kernel_claim_rows(None)] == ["not run here"]
    assert [r.verdict for r in kernel_claim_rows({"rows": []})] == ["not run here"]
    assert kernel_rows({"rows": [{"T": 1, "impl": "zeros", "mode": "fwd", "error": "x"}]})[0]["error"] == "x"
