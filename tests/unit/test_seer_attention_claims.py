"""SeerAttention's claim rows (paper 01): every threshold of claims.py just inside and just outside, on the
one rule (companion.core.judge): one gate set (one seed) is inconclusive, the kernel speed-up a timing."""

import copy
from types import SimpleNamespace

import pytest

from companion.core import VERDICTS, judge
from companion.seer_attention.claims import (
    COSINE_LOSSLESS,
    COSINE_PARTLY,
    KL_REDUCTION,
    LONG_RECALL_SHARE,
    PAPER_SPEEDUPS,
    RECALL_MARGIN,
    SPEEDUP_SHARE,
    _SPARSITY,
    claim_rows,
    recorded_rows,
)

SP = [0.5, 0.9]
EPS = 1e-6


def _results(gap=0.1, cos_lo=0.99, cos_hi=0.99):
    base = {"oracle": 0.95, "untrained": 0.5, "random": 0.4, "a-shape": 0.7}
    blocks = [SimpleNamespace(method=m, sparsity=s, mass_recall=v) for s in SP for m, v in base.items()]
    blocks += [SimpleNamespace(method="gate", sparsity=s, mass_recall=0.7 + gap) for s in SP]
    outputs = [{"method": m, "sparsity": s, "embedding_cosine": 0.9} for s in SP for m in base]
    outputs += [{"method": "gate", "sparsity": SP[0], "embedding_cosine": cos_lo},
                {"method": "gate", "sparsity": SP[-1], "embedding_cosine": cos_hi}]
    return blocks, outputs


def _rows(gap=0.1, cos_lo=0.99, cos_hi=0.99, kl_ratio=0.1, recorded=None):
    blocks, outputs = _results(gap, cos_lo, cos_hi)
    return claim_rows(blocks, outputs, kl_untrained=[2.0, 2.0], kl_trained=[2.0 * kl_ratio] * 2, train_seconds=3.0,
                      gate_params=1234, sparsities=SP, scale="test scale", steps=7, output_seqs=1, recorded=recorded)


def _row(rows, word):
    (row,) = [r for r in rows if word in r.claim]
    assert row.verdict in VERDICTS and row.evidence
    return row


def test_one_gate_set_is_one_seed_so_every_cpu_row_is_inconclusive():
    """The CPU run trains one gate set: however far past its target, each effect row stays inconclusive."""
    rows = _rows(gap=0.5, cos_hi=1.0, kl_ratio=0.01)
    for word in ("learned gate", "self-distillation", "near-lossless"):
        row = _row(rows, word)
        assert row.verdict == "inconclusive" and row.evidence.startswith("n=1:") and "one seed" in row.scale


def test_recall_margin():
    """RECALL_MARGIN is the target of the smallest gap over the sparsities; 0 is the weaker bar."""
    assert f"vs ≥ {RECALL_MARGIN:.3g} (partly ≥ 0)" in _row(_rows(gap=RECALL_MARGIN + EPS), "learned gate").evidence
    assert _row(_rows(gap=RECALL_MARGIN + EPS), "learned gate").evidence.startswith(f"n=1: {RECALL_MARGIN + EPS:.3g}")
    # the rule on three seeds of that value, just inside / just outside the margin and below 0
    assert judge([RECALL_MARGIN + EPS] * 3, RECALL_MARGIN, direction="higher", weaker=0.0).verdict == "reproduced"
    assert judge([RECALL_MARGIN - EPS] * 3, RECALL_MARGIN, direction="higher", weaker=0.0).verdict == "partly reproduced"
    assert judge([-EPS] * 3, RECALL_MARGIN, direction="higher", weaker=0.0).verdict == "not reproduced"
    row = _row(_rows(), "learned gate")
    assert "0.80/0.80" in row.measured and "50%/90% sparsity" in row.measured


def test_kl_reduction():
    row = _row(_rows(kl_ratio=KL_REDUCTION - EPS), "self-distillation")
    assert f"vs ≤ {KL_REDUCTION:.3g} (partly ≤ 1)" in row.evidence and "7 steps" in row.measured
    assert judge([KL_REDUCTION - EPS] * 3, KL_REDUCTION, direction="lower", weaker=1.0).verdict == "reproduced"
    assert judge([KL_REDUCTION + EPS] * 3, KL_REDUCTION, direction="lower", weaker=1.0).verdict == "partly reproduced"
    # a KL that rises is no reduction at all (the old rule called it "partly")
    assert judge([1.2] * 3, KL_REDUCTION, direction="lower", weaker=1.0).verdict == "not reproduced"


@pytest.mark.parametrize("cos_hi, verdict", [
    (COSINE_LOSSLESS + EPS, "reproduced"),
    (COSINE_LOSSLESS - EPS, "partly reproduced"),
    (COSINE_PARTLY - EPS, "not reproduced"),
])
def test_cosine_thresholds(cos_hi, verdict):
    row = _row(_rows(cos_hi=cos_hi), "near-lossless")
    assert f"n=1: {cos_hi:.3g} vs ≥ {COSINE_LOSSLESS:.3g} (partly ≥ {COSINE_PARTLY:.3g})" in row.evidence
    assert judge([cos_hi] * 3, COSINE_LOSSLESS, direction="higher", weaker=COSINE_PARTLY).verdict == verdict
    assert "proxy" in row.claim and "no task accuracy" in row.measured


def test_a_straddling_spread_is_inconclusive():
    """Three seeds whose mean misses the margin while mean ± std reaches it."""
    assert judge([0.0, 0.01, 0.04], RECALL_MARGIN, direction="higher").verdict == "inconclusive"


def test_the_block_rope_rows_read_the_papers_sparsity():
    assert _SPARSITY == 0.9  # the paper's kernel numbers and Fig. 4 are at 90 % sparsity


def _recorded(speedups=(6.0, 7.2, 8.1), long_gate=0.864, long_oracle=0.920, no_rope_long=0.484, no_rope_train=0.50):
    lens = (8192, 32768, 131072)
    recall = []
    for length, vals in (("train_len", {"gate": 0.912, "oracle": 0.914, "a-shape": 0.61, "gate (no block RoPE)": no_rope_train}),
                         ("long", {"gate": long_gate, "oracle": long_oracle, "a-shape": 0.60, "gate (no block RoPE)": no_rope_long})):
        recall += [{"length": length, "method": m, "sparsity": _SPARSITY, "mass_recall": v} for m, v in vals.items()]
    return {
        "device": "GPU X", "date": "today", "profile": {"seq_len": 8192},
        "stages": {s: {"state": "done"} for s in ("distil", "mask_densities", "timings")},
        "timings": [{"seq_len": n, "backend": "block-sparse Triton", "mask": "gate top-k 90% sparse", "speedup_vs_dense": s,
                     "density": d} for n, s, d in zip(lens, speedups, (0.121, 0.106, 0.102))]
        + [{"seq_len": 8192, "backend": "SDPA flash", "mask": "dense", "speedup_vs_dense": None}],
        "distil": {"long_len": 32768, "recall": recall,
                   "heldout_kl": {"block_rope": [0.05, 0.05], "no_rope": [0.93, 0.93], "block_rope_long": [0.88, 0.88],
                                  "no_rope_long": [1.46, 1.46]}},
    }


def test_no_gpu_results_are_not_run():
    rows = recorded_rows(None)
    assert [r.verdict for r in rows] == ["not run here"] * 3


@pytest.mark.parametrize("share, verdict", [(SPEEDUP_SHARE + 1e-3, "reproduced"), (SPEEDUP_SHARE - 1e-3, "not reproduced")])
def test_kernel_speedup_is_a_timing_judged_against_the_papers_per_length(share, verdict):
    """Each length's recorded speed-up over the paper's at that length; one run of ratios is enough."""
    row = _row(recorded_rows(_recorded(speedups=[share * PAPER_SPEEDUPS[n] for n in (8192, 32768, 131072)])), "speed-up")
    assert row.verdict == verdict and row.evidence.startswith("n=3:")
    assert "one run" in row.scale and "GPU X" in row.scale


def test_kernel_speedup_from_the_recorded_numbers():
    row = _row(recorded_rows(_recorded()), "speed-up")
    assert "8k: 6.00x (paper 4.15x)" in row.measured and "128k: 8.10x (paper 7.34x)" in row.measured
    # the gate's "90%" masks keep the last two block rows dense: the row says the sparsity the kernel ran at
    assert "realised sparsity 87.9%/89.4%/89.8%" in row.measured + "; " + row.details
    # 6.0/4.15, 7.2/7.37, 8.1/7.34: the mean is past 1 by less than the spread, one length short: partly
    assert row.verdict == "partly reproduced"


def test_block_rope_row_says_what_was_measured_review_item_15():
    """Review item 15: at 4x length the gate keeps 0.864 of the mass against the oracle's 0.920; only the KL
    rises. The row reports both, is judged on the recall share (one seed: inconclusive), and no longer says that
    the gate does not length-generalise."""
    rows = recorded_rows(_recorded())
    long = _row(rows, "4x that length")
    assert "gate 0.864, oracle 0.920 (the gate keeps 94% of the oracle's)" in long.measured
    assert "goes from 0.05 at the trained length to 0.88" in long.measured
    assert long.verdict == "inconclusive" and long.evidence.startswith(f"n=1: 0.939 vs ≥ {LONG_RECALL_SHARE:.3g}")
    assert "one seed" in long.scale and "trained at 8k, tested at 8k and 32k" in long.scale
    assert not any("does not length-generalise" in r.claim + r.measured for r in rows)
    without = _row(rows, "without block RoPE")
    assert "0.500 at the trained length (55% of the oracle's), 0.484 at 4x (53%)" in without.measured
    assert "without block RoPE 0.93 at the trained length, 1.46 at 4x, with it 0.05" in without.measured
    assert without.verdict == "inconclusive"


@pytest.mark.parametrize("share, verdict", [(LONG_RECALL_SHARE + 1e-3, "reproduced"), (LONG_RECALL_SHARE - 1e-3, "not reproduced")])
def test_long_recall_share(share, verdict):
    row = _row(recorded_rows(_recorded(long_gate=share * 0.92, long_oracle=0.92)), "4x that length")
    assert row.evidence.startswith(f"n=1: {share:.3g}")
    assert judge([share] * 3, LONG_RECALL_SHARE, direction="higher").verdict == verdict


def test_a_gate_without_block_rope_that_fails_at_its_trained_length_shows_no_failure_beyond_it():
    """The committed run's gate without block RoPE keeps 0.51 of the mass at its trained length against the oracle's
    0.92 (and 0.49 at 4x): it never worked, so a large gap to the block-RoPE gate at 4x is no evidence of Fig. 4's
    failure beyond the trained length. The row is inconclusive and says why, however many seeds."""
    row = _row(recorded_rows(_recorded()), "without block RoPE")
    assert row.verdict == "inconclusive" and "already at its trained length" in row.evidence
    assert "fewer than" not in row.evidence
    from companion.seer_attention.scale import recorded

    assert "already at its trained length" in _row(recorded_rows(recorded()), "without block RoPE").evidence


def _no_rope_row(extra, no_rope_train=0.912):
    """A gate without block RoPE that keeps ``no_rope_train`` at its trained length and loses ``extra`` more of the
    oracle's share than the block-RoPE gate (0.912 of 0.914, then 0.864 of 0.920) from the trained length to 4x."""
    rope_loss = 0.912 / 0.914 - 0.864 / 0.920
    long_share = no_rope_train / 0.914 - rope_loss - extra
    return _row(recorded_rows(_recorded(no_rope_train=no_rope_train, no_rope_long=long_share * 0.920)), "without block RoPE")


def test_block_rope_failure_is_the_extra_loss_beyond_the_trained_length():
    """Judged: the share of the oracle's mass lost from the trained length to 4x without block RoPE minus that lost
    with it. A gap at 4x that was already there at the trained length is not a failure beyond it."""
    row = _no_rope_row(0.0)
    assert abs(float(row.evidence.split()[1])) < 1e-6 and "(judged: the share of the oracle's mass lost" in row.measured
    # 0.83 at the trained length is still 91% of the oracle's, 0.08 below the block-RoPE gate's: the same gap at 4x
    # is no failure beyond the trained length
    row = _no_rope_row(0.0, no_rope_train=0.83)
    assert abs(float(row.evidence.split()[1])) < 1e-6 and row.verdict == "inconclusive"


@pytest.mark.parametrize("extra, verdict", [(RECALL_MARGIN + 1e-3, "reproduced"), (RECALL_MARGIN - 1e-3, "not reproduced")])
def test_block_rope_failure_uses_recall_margin(extra, verdict):
    row = _no_rope_row(extra)
    assert f"vs ≥ {RECALL_MARGIN:.3g}" in row.evidence and row.evidence.startswith(f"n=1: {extra:.3g}")
    assert judge([extra] * 3, RECALL_MARGIN, direction="higher").verdict == verdict


def test_missing_block_rope_study_is_not_run():
    rec = copy.deepcopy(_recorded())
    rec["distil"]["recall"] = [r for r in rec["distil"]["recall"] if r["method"] != "oracle"]
    rows = recorded_rows(rec)
    assert [r.verdict for r in rows] == ["partly reproduced", "not run here", "not run here"]


@pytest.mark.parametrize("stage, state, why", [("timings", "unfinished", ""), ("timings", "failed", "OutOfMemoryError: x"),
                                               ("distil", "skipped", "deadline: 3 s left, needs 30 s")])
def test_a_recorded_stage_that_did_not_finish_leaves_its_rows_not_run(stage, state, why):
    """A killed, failed or skipped stage: its rows are not run and say which stage and why, even with numbers present."""
    rec = copy.deepcopy(_recorded())
    rec["stages"][stage] = {"state": state, **({"error" if state == "failed" else "reason": why} if why else {})}
    rows = recorded_rows(rec)
    hit = [r for r in rows if f"stage {stage} ({state}" in r.measured]
    assert hit and all(r.verdict == "not run here" for r in hit) and all(why in r.measured for r in hit)
    assert len(hit) == (1 if stage == "timings" else 2)
    assert all(r.verdict != "not run here" for r in rows if r not in hit)


def test_the_committed_gpu_run_is_judged():
    from companion.seer_attention.scale import recorded

    rows = recorded_rows(recorded())
    assert len(rows) == 3 and all(r.verdict in VERDICTS and r.verdict != "not run here" for r in rows)


def test_cpu_and_gpu_rows_together():
    rows = _rows(recorded=_recorded())
    assert len(rows) == 6 and all(r.verdict in VERDICTS for r in rows)
