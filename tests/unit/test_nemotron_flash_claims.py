"""companion.nemotron_flash.claims: every verdict threshold, just inside and just outside, on the one rule (judge)."""

import pytest

from companion.core import VERDICTS
from companion.nemotron_flash import claims as C
from companion.nemotron_flash.search import NF_PATTERN, Genome


def dw(ratio):
    return {"rows": [{"depth": 2, "width": 256, "params": 1_570_048, "ms_batch1": 1.0, "tokens_per_s": 1, "mode": "eager"},
                     {"depth": 16, "width": 90, "params": 1_558_170, "ms_batch1": ratio, "tokens_per_s": 1, "mode": "eager"}],
            "context": 64, "batch": 4, "device": "CPU"}


def test_depth_latency_ratio_and_weaker_bar():
    t, w = C.DEPTH_LATENCY_RATIO, C.DEPTH_LATENCY_WEAKER
    assert C.depth_row(dw(t * 1.01)).verdict == "reproduced"
    assert C.depth_row(dw(t * 0.99)).verdict == "partly reproduced"   # slower, not by the target: past the weaker bar
    assert C.depth_row(dw(w * 0.99)).verdict == "not reproduced"
    row = C.depth_row(dw(2.0))
    assert "n=1" in row.evidence and "≥ 1.50x" in row.evidence      # one timing ratio is enough for a timing claim


def ops(attn, lin, m2=1.0):
    return {"ms": {"a": [1.0, attn], "deltanet": [1.0, lin], "m2": [1.0, m2], "f": [1.0, 1.0]},
            "contexts": [128, 8192], "width": 64, "batch": 16, "device": "CPU"}


def test_attention_growth_threshold():
    a = C.ATTN_GROWTH_MIN
    assert C.operator_rows(ops(a * 1.01, 1.0))[0].verdict == "reproduced"
    assert C.operator_rows(ops(a * 0.99, 1.0))[0].verdict == "not reproduced"


def test_linear_flat_threshold_and_spread():
    f = C.LINEAR_FLAT_MAX
    assert C.operator_rows(ops(3.0, f * 0.99, f * 0.99))[1].verdict == "reproduced"
    assert C.operator_rows(ops(3.0, f * 1.01, f * 1.01))[1].verdict == "not reproduced"
    # one operator far past the bar, the other well inside: the mean is within the bar, not every ratio
    mixed = C.operator_rows(ops(3.0, f * 1.6, 1.0))[1]
    assert mixed.verdict == "partly reproduced" and "n=2" in mixed.evidence
    # one inside the bar, one far past it: the mean misses the bar by less than the spread
    wide = C.operator_rows(ops(3.0, f * 0.5, f * 1.9))[1]
    assert wide.verdict == "inconclusive" and "straddles" in wide.evidence


def wn(plain, norm):
    plain, norm = list(plain), list(norm)
    return {"max_norm_error": 1e-7, "val_plain": plain, "val_wn": norm, "seeds": list(range(len(plain))),
            "depth": 2, "width": 48, "steps": 40, "placement": "after_step"}


def test_weight_norm_loss_margin():
    m = C.WN_LOSS_MARGIN
    assert C.weight_norm_row(wn([3.0] * 3, [3.0 - m * 1.01] * 3)).verdict == "reproduced"
    assert C.weight_norm_row(wn([3.0] * 3, [3.0 - m * 0.99] * 3)).verdict == "not reproduced"
    one = C.weight_norm_row(wn([3.0], [2.5]))
    assert one.verdict == "inconclusive" and "one seed" in one.scale and "n=1" in one.evidence
    assert "3 seeds" in C.weight_norm_row(wn([3.0] * 3, [2.9] * 3)).scale


def test_weight_norm_straddle():
    m = C.WN_LOSS_MARGIN
    row = C.weight_norm_row(wn([3.0] * 3, [3.0 - m * 3, 3.0 + m, 3.0 - m * 0.5]))  # gains 3m, -m, m/2: mean < m < mean+std
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def law(errors, a=0.5):
    return {"test_ppl_rel_error_max": max(errors), "test_ppl_rel_error_mean": sum(errors) / len(errors),
            "test_ppl_rel_errors": list(errors), "holdout": "largest_tokens",
            "params": {"L0": 1.0, "a": a, "alpha": 0.54, "b": 0.5, "beta": 0.5, "c": 2.0, "gamma": 0.3},
            "n_train": 30, "n_test": len(errors)}


def test_law_ppl_error_is_an_exact_claim():
    t = C.LAW_PPL_ERROR
    assert C.law_row(law([t * 0.5, t * 0.99])).verdict == "reproduced"
    assert C.law_row(law([t * 0.5, t * 1.01])).verdict == "not reproduced"   # every held-out point must be within
    assert C.law_row(law([t * 0.99])).verdict == "reproduced"               # an exact claim needs one run


def test_law_row_says_when_the_fit_has_no_depth_term():
    """Review item 13: the fit had a = 0 while the row printed α = 0.54 as if the depth term existed."""
    n = C.NEGLIGIBLE_TERM
    flat = C.law_row(law([0.01], a=n * 0.5))
    assert "no depth term" in flat.measured and "not identified" in flat.measured
    assert "a = 5e-07" in flat.measured
    kept = C.law_row(law([0.01], a=n * 2))
    assert "no depth term" not in kept.measured and "α = 0.54" in kept.measured


def search(gain):
    best = {"genome": NF_PATTERN, "fitness": 3.0 - gain}
    return {"initial_best": 3.0, "best": best, "population": [None] * 8, "history": [None] * 18, "steps": 4,
            "width": 24, "latency_limit": 2.0, "device": "CPU"}


def test_search_min_gain_one_seed():
    g = C.SEARCH_MIN_GAIN
    # one search run: never past inconclusive, whatever its gain; its numbers are shown
    for gain in (g * 1.01, g * 0.99, 0.5):
        row = C.search_row(search(gain))
        assert row.verdict == "inconclusive" and "n=1" in row.evidence and f"≥ +{g:.3f}" in row.evidence
    assert "10 cycles" in C.search_row(search(0.5)).scale
    empty = dict(search(0.1), best=None)
    assert C.search_row(empty).verdict == "inconclusive"
    assert isinstance(NF_PATTERN, Genome)


def gpu(lat_ratio, thr_ratio, depth_ratio=None, states=None):
    """A recorded payload in the stage-runner layout; ``states`` overrides a stage's state (and drops its result)."""
    out = {"device": "NVIDIA H200", "date": "2026-12-02 10:00 UTC",
           "profile": {"n_tokens": 8192, "dtype": "bfloat16"},
           "stages": {"transformer": {"state": "done"}, "hybrid": {"state": "done"}},
           "transformer": {"decode_seconds": 10.0, "max_throughput": 1000.0, "max_throughput_batch": 128,
                           "params": 6e8, "mode": "cuda-graph"},
           "hybrid": {"decode_seconds": 10.0 * lat_ratio, "max_throughput": 1000.0 * thr_ratio,
                      "max_throughput_batch": 1024, "params": 1e9, "mode": "cuda-graph"}}
    if depth_ratio is not None:
        out["stages"]["depth_width"] = {"state": "done"}
        out["depth_width"] = dict(dw(depth_ratio), device="NVIDIA H200", context=1024)
    for name, state in (states or {}).items():
        out["stages"][name] = state
        out.pop(name, None)
    return out


def test_gpu_rows_judged_by_the_rule():
    lat, thr = C.LATENCY_RATIO_MAX, C.THROUGHPUT_RATIO_MIN
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"] * 2
    assert [r.verdict for r in C.gpu_rows(gpu(lat * 0.99, thr * 1.01))[:2]] == ["reproduced", "reproduced"]
    assert [r.verdict for r in C.gpu_rows(gpu(lat * 1.01, thr * 1.01))[:2]] == ["not reproduced", "reproduced"]
    assert [r.verdict for r in C.gpu_rows(gpu(lat * 0.99, thr * 0.99))[:2]] == ["reproduced", "not reproduced"]
    rows = C.gpu_rows(gpu(0.7, 1.3, depth_ratio=6.4))
    assert len(rows) == 3 and all("H200" in r.scale for r in rows) and "one run" in rows[0].scale
    assert rows[2].verdict == "reproduced" and "6.40x" in rows[2].measured


def test_gpu_rows_of_stages_that_did_not_finish():
    """A row resting on a stage that was killed, failed or never run says so and is not judged; the others are."""
    killed = gpu(0.7, 10.0, depth_ratio=6.4,
                 states={"hybrid": {"state": "unfinished", "reason": "the process ended inside it"}})
    lat, thr, depth = C.gpu_rows(killed)
    assert lat.verdict == thr.verdict == "not run here" and depth.verdict == "reproduced"
    assert "hybrid (unfinished: the process ended inside it)" in lat.measured and "did not finish" in thr.evidence
    failed = gpu(0.7, 10.0, states={"depth_width": {"state": "failed", "error": "OutOfMemoryError: CUDA"}})
    lat, thr, depth = C.gpu_rows(failed)
    assert lat.verdict == thr.verdict == "reproduced"
    assert depth.verdict == "not run here" and "depth_width (failed: OutOfMemoryError" in depth.measured
    assert "depth_width (not run)" in C.gpu_rows(gpu(0.7, 10.0))[2].measured


def test_recorded_run_killed_inside_the_fla_stage():
    """The committed H200 run was killed inside its last stage (fla vs ours) and its first JSON said
    ``stages_skipped: []``: the migrated file marks the stage unfinished, with the evidence, and the rows resting on
    finished stages are judged."""
    from companion.core.stages import not_finished
    from companion.nemotron_flash.scale import STAGES, recorded

    got = recorded()
    if got is None:
        pytest.skip("no recorded GPU run")
    assert list(got["stages"]) == [s.name for s in STAGES] and got["complete"] is False
    assert got["stages"]["fla_vs_ours"]["state"] == "unfinished" and "fla_vs_ours" not in got
    assert [s.split(" (")[0] for s in not_finished(got)] == ["fla_vs_ours"]
    assert "no fla_vs_ours result" in got["stages"]["fla_vs_ours"]["reason"]
    assert all(r.verdict != "not run here" and r.evidence for r in C.gpu_rows(got))


def runs_at(depth_loss_ms):
    runs = [{"budget": 400_000, "depth": d, "loss": loss, "steps": 30} for d, loss, _ in depth_loss_ms]
    return runs, [ms for _, _, ms in depth_loss_ms]


def test_frontier_compares_the_best_depth_at_two_budgets():
    """Review item 13: 'the fastest Pareto point is shallower than the lowest-loss point' does not test that the
    best depth grows with the budget; the row now compares the best depth under a tight and a loose budget."""
    assert C.TIGHT_BUDGET_QUANTILE < C.LOOSE_BUDGET_QUANTILE == 1.0
    grows = C.frontier_summary(*runs_at([(3, 3.2, 1.0), (3, 3.3, 1.1), (6, 3.1, 2.0), (12, 3.0, 4.0)]))
    assert grows["tight"]["depth"] == 3 and grows["loose"]["depth"] == 12
    row = C.frontier_row(grows, "CPU")
    assert "+9 blocks" in row.measured
    # one set of single-seed cached runs: shown, but inconclusive by the rule
    assert row.verdict == "inconclusive" and "n=1" in row.evidence
    # the old rule passed this: the fastest front point (depth 3) is shallower than the lowest-loss point (6),
    # yet within the tight budget the best depth is already 6, the same as with no limit
    flat = C.frontier_summary(*runs_at([(3, 3.3, 1.0), (6, 3.0, 1.01), (6, 3.1, 1.5), (12, 3.2, 2.0), (12, 3.25, 4.0)]))
    assert flat["front_depths"] == [3, 6]
    assert flat["tight"]["depth"] == flat["loose"]["depth"] == 6
    assert "+0 blocks" in C.frontier_row(flat, "CPU").measured


def test_frontier_depth_growth_threshold():
    """The rule on the growth values themselves (3 values: what three seeds of cached runs would give)."""
    from companion.core import judge

    g = C.MIN_DEPTH_GROWTH
    assert judge([g, g, g * 2], g, direction="higher").verdict == "reproduced"
    assert judge([g - 1] * 3, g, direction="higher").verdict == "not reproduced"


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_all_rows_at_both_ends(n_seeds):
    runs, ms = runs_at([(3, 3.0, 1.0), (6, 3.0, 2.0)])
    rows = C.claim_rows(dw=dw(2.0), ops=ops(3.0, 1.0), front=C.frontier_summary(runs, ms), front_device="CPU",
                        wn=wn([3.0] * n_seeds, [2.9] * n_seeds), law=law([0.01]), search=search(0.1), gpu=None)
    assert len(rows) == 10 and all(r.verdict in VERDICTS for r in rows) and all(r.evidence for r in rows)
    assert [r.verdict for r in rows[-3:]] == ["not run here"] * 3
    assert not any("unit sphere" in r.claim for r in rows)  # a check of the implementation, not a claim
