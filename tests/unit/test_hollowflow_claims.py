"""Paper 13's claim rows under the one rule (companion.core.judge): every threshold just inside and just outside,
one seed, a straddling spread, the ESS floor and the GPU rows, on constructed results."""

import copy

import pytest

from companion.core import limit_threads
from companion.hollowflow import claims as C
from companion.hollowflow.claims import (
    DIV_TOL,
    EFFSU_MARGIN,
    EFFSU_TARGET_LJ13,
    EFFSU_TARGET_LJ55,
    ESS_FLOOR,
    GPU_SPEEDUP_TARGET,
    SPEEDUP64_TARGET,
    GPU_TOY_PAPER,
    KERNEL_MIN_N,
    KERNEL_SPEEDUP_TARGET,
    LEAK_MIN,
    PATH_TOL,
    PEER_TOL,
    SLOPE_GAP_MIN,
    claim_rows,
)


@pytest.fixture(autouse=True)
def _one_thread():
    with limit_threads(1):
        yield


def _part(err=0.0, leaks=0, diag=0.0, selfdep=0.0):
    return {"counts": [100, 40, 26], "removed": [0, 60, 74], "leaks": leaks, "line_nodes": 34, "trace": 1.0,
            "hollow": 1.0 + err, "div_error": err, "diag_block_diff": diag, "offblock_detached": 0.0,
            "self_dependence": selfdep}


def _check(err=0.0, unpruned_err=0.1, unpruned_leaks=34):
    return {"n": 9, "k": 3, "steps": 3, "pruned": _part(err), "unpruned": _part(unpruned_err, unpruned_leaks, 0.01, 0.01)}


def _cost(slope_brute=2.0, slope_hollow=0.5, speedups=(2.0, 50.0)):
    return {"n": [4, 64], "k": 4, "hollow_s": [1, 1], "brute_s": [1, 1], "slope_brute": slope_brute,
            "slope_hollow": slope_hollow, "speedup": list(speedups), "vjp_sample": 24}


def _res(ess, sps=0.01):
    return {"ess": ess, "ess_rem": ess, "ess_ci": (ess, ess), "ess_rem_ci": (ess, ess), "seconds_per_sample": sps,
            "path_diff": 0.0}


def _toy(h_ess=0.2, b_ess=0.2, h_sps=0.01, b_sps=0.01, baseline=True, path=0.0):
    t = {"system": "LJ13", "k": 6, "n_samples": 100, "ode_steps": 20, "hollow": _res(h_ess, h_sps)}
    t["hollow"]["path_diff"] = path
    if baseline:
        t["baseline"] = _res(b_ess, b_sps)
    return t


def test_div_tol():
    assert C.theorem_row(_check(0.9 * DIV_TOL), "s").verdict == "reproduced"
    assert C.theorem_row(_check(1.1 * DIV_TOL), "s").verdict == "not reproduced"
    bad = _check()
    bad["pruned"]["leaks"] = 1
    assert C.theorem_row(bad, "s").verdict == "not reproduced"
    bad = _check()
    bad["pruned"]["offblock_detached"] = 1.1 * DIV_TOL  # J_τ must vanish off the diagonal blocks
    assert C.theorem_row(bad, "s").verdict == "not reproduced"
    assert "error" in C.theorem_row(_check(), "s").evidence  # an exact claim: one run, error vs tolerance


def _seeds(*errors, leaks=34):
    c = _check()
    c["unpruned_seeds"] = [_part(e, leaks, 0.01, 0.01) for e in errors]
    c["unpruned"] = c["unpruned_seeds"][0]
    return c


def test_leak_min_three_seeds():
    assert C.pruning_row(_seeds(*[1.1 * LEAK_MIN] * 3), "s").verdict == "reproduced"
    assert C.pruning_row(_seeds(*[0.5 * LEAK_MIN] * 3), "s").verdict == "not reproduced"
    assert C.pruning_row(_seeds(0.1, 0.1, 0.1, leaks=0), "s").verdict == "not reproduced"  # nothing leaks: no effect
    row = C.pruning_row(_seeds(1.1 * LEAK_MIN, 1.1 * LEAK_MIN, 0.9 * LEAK_MIN), "s")
    assert row.verdict == "partly reproduced" and "3 seeds" in row.scale  # the mean is past, one seed is not


def test_pruning_one_seed_is_inconclusive():
    row = C.pruning_row(_check(unpruned_err=0.1), "s")  # no "unpruned_seeds": the one seed of "unpruned"
    assert row.verdict == "inconclusive" and "n=1" in row.evidence and "1 seed" in row.scale


def test_pruning_spread_straddles_leak_min():
    row = C.pruning_row(_seeds(0.1 * LEAK_MIN, 0.2 * LEAK_MIN, 2.2 * LEAK_MIN), "s")  # mean 0.83, std 1.18
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_slope_gap_min_per_size_exponents():
    g = SLOPE_GAP_MIN  # the speed-up's exponent in n between consecutive sizes (a timing: one run is enough)
    n = [4, 8, 16, 32]
    grow = lambda e: [2.0 * (m / 4) ** e for m in n]  # noqa: E731 - a speed-up growing as n^e
    assert C.cost_row(_cost(speedups=grow(1.1 * g)) | {"n": n}, "s").verdict == "reproduced"
    assert C.cost_row(_cost(speedups=grow(0.9 * g)) | {"n": n}, "s").verdict == "not reproduced"
    one = C.cost_row(_cost(speedups=(2.0, 2.0 * 16 ** (1.1 * g))), "s")  # n 4 → 64: a single exponent is judged
    assert one.verdict == "reproduced" and "n=1" in one.evidence
    # exponents 0.5, 1.0, 1.8: mean 1.1 past the bar, the first size short of it -> partly
    sp = [2.0, 2.0 * 2 ** 0.5, 2.0 * 2 ** 1.5, 2.0 * 2 ** 3.3]
    assert C.cost_row(_cost(speedups=sp) | {"n": n}, "s").verdict == "partly reproduced"
    # exponents 0.2, 0.4, 2.1: mean 0.9 short of the bar, within one std -> inconclusive
    sp = [2.0, 2.0 * 2 ** 0.2, 2.0 * 2 ** 0.6, 2.0 * 2 ** 2.7]
    row = C.cost_row(_cost(speedups=sp) | {"n": n}, "s")
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_path_tol():
    assert C.paths_row(_toy(path=0.9 * PATH_TOL), "s").verdict == "reproduced"
    assert C.paths_row(_toy(path=1.1 * PATH_TOL), "s").verdict == "not reproduced"


def test_peer_tol():
    mk = lambda d: {"max_abs_diff": d, "ode_steps": 20}  # noqa: E731
    assert C.peer_row(mk(0.9 * PEER_TOL), "s").verdict == "reproduced"
    assert C.peer_row(mk(1.1 * PEER_TOL), "s").verdict == "not reproduced"
    assert C.peer_row(None, "s").verdict == "not run here"


def _effsu_seeds(effsus, h_ess=0.2, b_ess=0.2, nh=100, nb=100):
    """One (hollow, baseline, samples, samples) per seed with the given EffSU (equal ESS, baseline slower)."""
    return [(_res(h_ess, 0.01), _res(b_ess, 0.01 * e * b_ess / h_ess), nh, nb) for e in effsus]


def test_effsu_targets_margin_and_one_seed():
    t = EFFSU_TARGET_LJ13
    judged = lambda effs, target=t: C.effsu_judgement(_effsu_seeds(effs), target)[0].verdict  # noqa: E731
    assert judged([1.01 * t] * 3) == "reproduced"
    assert judged([0.99 * t] * 3) == "partly reproduced"  # past the margin, short of the paper's 31.9
    assert judged([1.01 * EFFSU_MARGIN] * 3) == "partly reproduced"
    assert judged([0.99 * EFFSU_MARGIN] * 3) == "not reproduced"
    assert judged([1.01 * EFFSU_TARGET_LJ55] * 3, EFFSU_TARGET_LJ55) == "reproduced"
    assert judged([0.99 * EFFSU_TARGET_LJ55] * 3, EFFSU_TARGET_LJ55) == "partly reproduced"
    assert judged([100.0]) == "inconclusive"  # one seed, however large
    # the notebook's CPU row: one seed of LJ13 -> inconclusive with its numbers
    row = C.ess_row(_toy(h_sps=0.01, b_sps=0.01 * 1.1 * EFFSU_MARGIN), "s")
    assert row.verdict == "inconclusive" and "n=1: 2.2×" in row.evidence
    assert C.ess_row(_toy(baseline=False), "s").verdict == "not run here"


def test_ess_floor_leaves_a_seed_out():
    """The review's item 17: a model below ESS_FLOOR effective samples gives no EffSU, so no verdict rests on it."""
    n = 100
    fast = dict(h_sps=0.001, b_sps=1.0)  # EffSU 1,000 when both ESS are equal: a floor seed must not count
    row = C.ess_row(_toy(h_ess=0.99 * ESS_FLOOR / n, b_ess=0.5, **fast), "s")
    assert row.verdict == "inconclusive" and "floor" in row.measured and "floor" in row.evidence
    row = C.ess_row(_toy(h_ess=1.01 * ESS_FLOOR / n, b_ess=0.5, **fast), "s")
    assert row.verdict == "inconclusive" and "floor" not in row.measured  # measured, one seed
    # three seeds, all past the paper, one of them at the floor: judged on the other two -> inconclusive
    seeds = _effsu_seeds([1000.0] * 3)
    seeds[2] = (_res(0.99 * ESS_FLOOR / n, 0.001), _res(0.5, 1.0), n, n)
    judgement, note, kept = C.effsu_judgement(seeds, EFFSU_TARGET_LJ13)
    assert len(kept) == 2
    assert judgement.verdict == "inconclusive" and "n=2" in judgement.evidence and "hollow 1.98 of 100" in note
    seeds[1] = (_res(0.5, 0.001), _res(0.99 * ESS_FLOOR / n, 1.0), n, n)  # the baseline at the floor counts too
    assert C.effsu_judgement(seeds, EFFSU_TARGET_LJ13)[0].verdict == "inconclusive"
    assert C.effsu_judgement(seeds[1:], EFFSU_TARGET_LJ13)[0].verdict == "inconclusive"


def _gpu_toy(system, k, h_samples=1000, b_samples=1000, h_ess=0.1, b_ess=0.1, recipe=True):
    """A toy result as :func:`companion.hollowflow.study.toy_study` records it (``recipe=False``: the earlier layout)."""
    run = dict(iterations=100, train_seconds=40.0, first_loss=0.9, final_loss=0.4)
    h = dict(_res(h_ess), samples=h_samples, **run)
    b = dict(_res(b_ess, 0.05), samples=b_samples, **run)
    t = {"system": system, "k": k, "hollow": h, "baseline": b, "effsu": (h_ess / 0.01) / (b_ess / 0.05),
         "effsu_rem": 2.0, "data_energy": 5.0}
    if recipe:
        t["recipe"] = {"lr": 2e-3, "lr_final": 5e-5, "batch": 256, "burn_in": 4000, "thin": 20, "data": 8192,
                       "ode_steps": 20}
    return t


def _row(rows, start):
    (row,) = [r for r in rows if r.claim.startswith(start)]
    return row


def _kernel_entry(n, speed, reused=None, old=False):
    """A kernel-stage row at size n: index_add_ time / kernel time ``speed`` (RK4 step with the plans rebuilt, and
    the micro-benchmarks), ``reused`` with the plans reused (default 1.1 × speed); ``old``: the layout recorded
    before the sort-free plan build (no reused variant, ``plan_ms`` the sorted build)."""
    reused = 1.1 * speed if reused is None else reused
    row = {"n": n, "k": 7, "batch": 1000, "impl": "triton", "features": 67, "line_edges": [100, 40],
           "index_add_ms": 1.0, "segment_sum_ms": 1.0 / speed, "plan_ms": 0.5, "index_add_fwd_bwd_ms": 2.0,
           "segment_sum_fwd_bwd_ms": 2.0 / speed, "rk4_index_add_ms": 10.0, "rk4_segment_sum_ms": 10.0 / speed,
           "max_abs_diff": 1e-6, "divergence_max_abs_diff": 1e-7, "speedup_fwd": speed, "speedup_fwd_bwd": speed,
           "speedup_rk4": speed}
    if not old:
        row.update({"sort_plan_ms": 1.5, "rk4_segment_sum_reused_ms": 10.0 / reused, "speedup_rk4_reused": reused})
    return row


def _step(n, k, speedup):
    return {"n": n, "k": k, "k_label": f"k = {k}", "speedup": speedup, "baseline_ms": 100.0, "hollow_ms": 100 / speedup}


def _gpu(steps, *, segment_sum=None, toys=None, states=None):
    """A recorded payload in the stage-runner layout: the likelihood-step rows, the kernel rows, the toy results
    ({system: result}); ``states`` overrides a stage's state record."""
    gpu = {"device": "H200", "date": "d", "stages": {"likelihood_step": {"state": "done"}},
           "likelihood_step": {"batch": 1000, "rows": steps, "exponents": {}, "skipped": []}}
    if segment_sum is not None:
        gpu["stages"]["segment_sum"] = {"state": "done"}
        gpu["segment_sum"] = {"rows": segment_sum, "skipped": []}
    for system, result in (toys or {}).items():
        gpu["stages"][f"toy_{system}"] = {"state": "done"}
        gpu[f"toy_{system}"] = result
    for name, state in (states or {}).items():
        gpu["stages"][name] = state
        gpu.pop(name, None)
    return gpu


TIMING, SPEED64, KERNEL = "Per-step likelihood", "Likelihood step ≥ 10×", "Triton segment sum"


def test_gpu_rows_from_a_constructed_json():
    assert C.gpu_rows(None)[0].verdict == "not run here"
    s = GPU_SPEEDUP_TARGET
    steps = [_step(13, 7, 5.0), _step(55, 7, 1.1 * s), _step(55, 8, 1.2 * s)]
    # a run of the timing stage alone: the kernel and the toy rows say their stage was not run
    rows = C.gpu_rows(_gpu(steps))
    timing = _row(rows, TIMING)
    assert timing.verdict == "reproduced" and "n = 55" in timing.measured and len(rows) == 9
    assert "n=2" in timing.evidence and "one run" in timing.scale  # a timing: both k at n = 55 show the spread
    assert "n = 13, k = 7: 5×" in timing.details and "{" not in timing.details  # every size, no raw dict
    assert {r.cell for r in rows} == {C.GPU_CELL}  # each row links to the Scale-up cell that shows the record
    assert [r.verdict for r in rows if r is not timing] == ["not run here"] * 8
    assert "segment_sum (not run)" in _row(rows, KERNEL).measured
    assert "toy_LJ13 (not run)" in _row(rows, "LJ13 EffSU").measured
    assert "toy_LJ55 (not run)" in _row(rows, "LJ55 hollow NoBGNN: ESS").measured
    assert "n = 64 was not timed" in _row(rows, SPEED64).measured
    slow = _gpu([_step(13, 7, 5.0), _step(55, 7, 0.9 * s), _step(55, 8, 0.95 * s)])
    assert _row(C.gpu_rows(slow), TIMING).verdict == "not reproduced"
    assert _row(C.gpu_rows(_gpu([_step(13, 7, 5.0)])), TIMING).verdict == "not run here"  # n = 55 not timed
    # the kernel judged on the RK4 step with the plans rebuilt, at the sizes n >= KERNEL_MIN_N
    toys = {"LJ13": _gpu_toy("LJ13", 6), "LJ55": _gpu_toy("LJ55", 7, b_samples=8, b_ess=0.5)}
    sizes = [_kernel_entry(13, 0.9), _kernel_entry(KERNEL_MIN_N, 0.95), _kernel_entry(200, 0.95)]
    rows = C.gpu_rows(_gpu(steps, segment_sum=sizes, toys=toys))
    kernel = _row(rows, KERNEL)
    assert kernel.verdict == "not reproduced" and "kernel slower" in kernel.details and "n=2" in kernel.evidence
    assert "n = 13" not in kernel.measured and "n = 13" in kernel.details and "impl triton" in kernel.scale
    assert f"0.95× at n = {KERNEL_MIN_N}, 0.95× at n = 200 (plans reused" in kernel.measured
    assert "plans built in 0.500 ms without a sort (1.500 ms with one)" in kernel.details
    # the toy rows: one seed -> inconclusive, with the EffSU in the evidence
    lj13, lj55 = _row(rows, "LJ13 EffSU"), _row(rows, "LJ55 EffSU")
    assert "EffSU 5.0" in lj13.measured and GPU_TOY_PAPER["LJ13"] == lj13.paper
    assert lj13.verdict == lj55.verdict == "inconclusive" and "one seed" in lj13.scale
    assert "at least 1/8" in lj55.details and "at least" not in lj13.details
    # a kernel stage that timed no size, a toy stage skipped for the deadline
    none = _gpu(steps, segment_sum=[], toys=toys, states={"toy_LJ55": {"state": "skipped", "reason": "deadline: 9 s left"}})
    none["segment_sum"]["skipped"] = [{"n": 13, "reason": "time budget"}]
    rows = C.gpu_rows(none)
    assert _row(rows, "LJ55 EffSU").verdict == "not run here"
    assert "toy_LJ55 (skipped: deadline: 9 s left)" in _row(rows, "LJ55 EffSU").measured
    assert _row(rows, KERNEL).verdict == "not run here" and "n = 13: time budget" in _row(rows, KERNEL).measured


def test_kernel_row_judges_the_rebuilt_plans_at_large_n():
    """KERNEL_SPEEDUP_TARGET just inside and just outside, n = KERNEL_MIN_N judged and n = KERNEL_MIN_N − 1 not,
    the reused-plan bound reported but not judged, one size per run (n=1) or a straddling pair."""
    t = KERNEL_SPEEDUP_TARGET
    judged = lambda *entries: _row(C.gpu_rows(_gpu([_step(55, 7, 1e3)], segment_sum=list(entries))), KERNEL)  # noqa: E731
    row = judged(_kernel_entry(13, 0.5), _kernel_entry(KERNEL_MIN_N, 1.01 * t))  # the small size is not judged
    assert row.verdict == "reproduced" and "n=1" in row.evidence and "n = 13 (140 line edges): forward" in row.details
    assert judged(_kernel_entry(KERNEL_MIN_N, 0.99 * t)).verdict == "not reproduced"
    assert judged(_kernel_entry(KERNEL_MIN_N, 0.99 * t, reused=3 * t)).verdict == "not reproduced"  # bound not judged
    pair = lambda a, b: judged(_kernel_entry(KERNEL_MIN_N, a * t), _kernel_entry(2 * KERNEL_MIN_N, b * t))  # noqa: E731
    assert pair(0.98, 1.1).verdict == "partly reproduced" and pair(0.5, 1.2).verdict == "inconclusive"
    below = judged(_kernel_entry(KERNEL_MIN_N - 1, 2 * t))
    assert below.verdict == "not run here" and f"n ≥ {KERNEL_MIN_N}" in below.evidence


def test_kernel_row_of_a_record_before_the_sort_free_plans_is_not_run():
    """A record without the reused-plan variant was timed with the sorted plan rebuilt at every evaluation: the row
    shows its values and is not judged, whatever they are; the committed record gives a row either way."""
    from companion.hollowflow import scale

    row = _row(C.gpu_rows(_gpu([_step(55, 7, 1e3)], segment_sum=[_kernel_entry(13, 0.87, old=True),
                                                                 _kernel_entry(55, 2.0, old=True)])), KERNEL)
    assert row.verdict == "not run here" and "predates the sort-free plan build" in row.evidence
    assert "0.87× at n = 13, 2.00× at n = 55" in row.measured and "plans built with a sort in 0.500 ms" in row.details
    gpu = scale.recorded()
    if gpu is None:
        pytest.skip("no recorded GPU run")
    row = _row(C.gpu_rows(gpu), KERNEL)
    stale = any("rk4_segment_sum_reused_ms" not in r for r in gpu.get("segment_sum", {}).get("rows", []))
    assert row.evidence and (row.verdict == "not run here" if stale else "plans reused" in row.measured)


def test_speedup_at_64_judged_there_only():
    """The ≥ 10× row reads the n = 64 rows alone (both k, timed side by side): just inside and just outside the
    target, a spread across it, and other sizes far past it do not count."""
    t = SPEEDUP64_TARGET
    judged = lambda *sp: _row(C.gpu_rows(_gpu([_step(55, 7, 1e3), *(_step(64, 7 + i, x) for i, x in enumerate(sp)),  # noqa: E731
                                               _step(100, 7, 1e3)])), SPEED64)
    row = judged(1.01 * t, 1.5 * t)
    assert row.verdict == "reproduced" and "n=2" in row.evidence and "k = 7" in row.measured and "n = 64" in row.scale
    assert judged(1.01 * t).verdict == "reproduced" and "n=1" in judged(1.01 * t).evidence
    assert judged(0.99 * t).verdict == "not reproduced"
    assert judged(0.98 * t, 1.1 * t).verdict == "partly reproduced"  # mean past, one k short
    assert judged(0.5 * t, 1.2 * t).verdict == "inconclusive"  # the spread straddles the target


def test_gpu_ess_rows_use_the_bootstrap_interval():
    """An ESS row judges the 68 % bootstrap interval's ends (in effective samples) against ESS_FLOOR: the whole
    interval past it, one end past it, none; one sample (N = 1) can never pass; the earlier layout is not run."""
    def ess_row(lo, hi, ess=None, samples=1000):
        toy = _gpu_toy("LJ13", 6, h_samples=samples, h_ess=(ess or hi) / samples)
        toy["hollow"]["ess_ci"] = (lo / samples, hi / samples)
        toy["hollow"]["diverged"], toy["data_energy_halves"] = 3, [4.5, 5.5]
        return _row(C.gpu_rows(_gpu([_step(55, 7, 1e3)], toys={"LJ13": toy})), "LJ13 hollow NoBGNN: ESS")

    row = ess_row(1.01 * ESS_FLOOR, 3 * ESS_FLOOR)
    assert row.verdict == "reproduced" and "68% bootstrap interval 2.02–6.00" in row.measured and "n=2" in row.evidence
    assert "40 s (100 iterations)" in row.measured and "loss 0.900 → 0.400" in row.details
    assert "4.50 / 5.50" in row.details and "3 of 1000 trajectories blew up" in row.details
    assert ess_row(0.5 * ESS_FLOOR, 1.6 * ESS_FLOOR).verdict == "partly reproduced"  # mean past, low end short
    assert ess_row(0.2 * ESS_FLOOR, 1.2 * ESS_FLOOR).verdict == "inconclusive"  # straddles
    assert ess_row(0.5, 0.8).verdict == "not reproduced"  # the whole interval well below the floor
    assert ess_row(1.0, 1.0, samples=1).verdict == "not reproduced"
    old = _gpu([_step(55, 7, 1e3)], toys={"LJ13": _gpu_toy("LJ13", 6, recipe=False)})
    rows = [r for r in C.gpu_rows(old) if r.claim.startswith("LJ13")]
    assert len(rows) == 3 and all(r.verdict == "not run here" and "predates" in r.measured for r in rows)


def test_gpu_rows_of_stages_that_did_not_finish():
    """A stage killed mid-way (``unfinished``) or that raised (``failed``): its row says the stage did not finish,
    with the recorded state, and is not judged."""
    toys = {"LJ13": _gpu_toy("LJ13", 6), "LJ55": _gpu_toy("LJ55", 7)}
    gpu = _gpu([_step(55, 7, 100.0)], segment_sum=[_kernel_entry(55, 2.0)], toys=toys,
               states={"likelihood_step": {"state": "unfinished", "started": "t"},
                       "toy_LJ13": {"state": "failed", "error": "OutOfMemoryError: CUDA out of memory"}})
    rows = C.gpu_rows(gpu)
    timing, lj13 = _row(rows, TIMING), _row(rows, "LJ13 EffSU")
    assert timing.verdict == lj13.verdict == _row(rows, SPEED64).verdict == "not run here"
    assert "did not finish: likelihood_step (unfinished)" in timing.measured and "unfinished" in timing.evidence
    assert "toy_LJ13 (failed: OutOfMemoryError" in lj13.measured
    assert "toy_LJ13 (failed" in _row(rows, "LJ13 fully connected baseline: ESS").measured
    assert _row(rows, KERNEL).verdict == "reproduced" and _row(rows, "LJ55 EffSU").verdict == "inconclusive"


def test_gpu_toy_rows_at_the_floor_say_so():
    """LJ13's hollow ESS at 1.76 effective samples of 1,000, LJ55's exactly 1 (and its baseline 1 of 8): below
    ESS_FLOOR, so the EffSU rows compare nothing and say so, however large the EffSU."""
    toys = {"LJ13": _gpu_toy("LJ13", 6, h_ess=0.00176, b_ess=0.012),
            "LJ55": _gpu_toy("LJ55", 7, b_samples=8, h_ess=0.001, b_ess=0.125)}
    toys["LJ13"]["effsu"] = toys["LJ55"]["effsu"] = 500.0
    gpu = _gpu([_step(55, 7, 100.0)], toys=toys)
    lj13, lj55 = _row(C.gpu_rows(gpu), "LJ13 EffSU"), _row(C.gpu_rows(gpu), "LJ55 EffSU")
    assert lj13.verdict == lj55.verdict == "inconclusive"
    assert lj13.measured.startswith("no EffSU compared") and "500" not in lj13.measured
    assert "hollow 1.76 of 1000" in lj13.measured and "hollow 1.76 of 1000" in lj13.evidence
    assert "hollow 1.00 of 1000, baseline 1.00 of 8" in lj55.measured and "floor of 2" in lj55.evidence
    three = copy.deepcopy(gpu)
    three["toy_LJ13"]["seeds"] = [copy.deepcopy(gpu["toy_LJ13"])] * 3
    assert _row(C.gpu_rows(three), "LJ13 EffSU").verdict == "inconclusive"
    assert "3 seeds" in _row(C.gpu_rows(three), "LJ13 EffSU").scale


def test_scale_summary_and_figure_follow_the_rows():
    """The Scale-up paragraph is built from the GPU rows (each toy row's verdict and evidence, the n = 64 row); the
    figure plots the recorded effective samples and names what was not recorded."""
    from companion.hollowflow.figures import gpu_toy_figure

    assert "no GPU run recorded" in C.scale_summary(None) and "not recorded" in gpu_toy_figure(None).layout.title.text
    toys = {"LJ13": _gpu_toy("LJ13", 6, h_ess=0.004, b_ess=0.01)}
    gpu = _gpu([_step(64, 7, 50.0)], toys=toys)
    text = C.scale_summary(gpu)
    for r in C.gpu_rows(gpu):
        if "ESS" in r.claim or "EffSU" in r.claim or "≥ 10×" in r.claim:
            assert f"{r.claim}" in text and r.verdict in text
    assert "4.00 effective of 1000" in text and "50×" in text
    fig = gpu_toy_figure(gpu)
    assert [list(t.y) for t in fig.data] == [[4.0], [10.0]] and "LJ55" in fig.layout.title.text


def test_recorded_json_rows():
    from companion.hollowflow import scale

    gpu = scale.recorded()
    if gpu is None:
        pytest.skip("no recorded GPU run")
    rows = C.gpu_rows(gpu)
    assert all(r.evidence for r in rows) and len(rows) == 9


def test_scale_recorded_absent_or_present():
    from companion.hollowflow import scale

    got = scale.recorded()
    assert got is None or set(got["stages"]) == {s.name for s in scale.STAGES}


def test_all_rows_and_scale_follows_parameters():
    rows = claim_rows(check=_check(), cost=_cost(), toy=_toy(), peer=None, gpu=None, check_scale="a", cost_scale="b",
                      toy_scale="LJ13, 10 iterations")
    assert len(rows) == 7 and rows[-1].verdict == "not run here"
    assert any(r.scale == "LJ13, 10 iterations" for r in rows)


@pytest.mark.parametrize("iterations", [10, 11])
def test_rows_from_real_small_runs(iterations):
    """The smallest notebook sizes give rows; the mechanism rows reproduce."""
    from companion.hollowflow.experiments import construction_check, cost_scaling, toy_flow

    check = construction_check(hidden=8, ablation_seeds=3)
    cost = cost_scaling((4, 8), k=2, hidden=4, reps=1, vjp_sample=4)
    toy = toy_flow(iterations=iterations, n_samples=16, ode_steps=2, check_samples=2, check_steps=1, train_size=64,
                   batch=8, resamples=10, baseline=False, burn_in=20)
    rows = claim_rows(check=check, cost=copy.deepcopy(cost), toy=toy, peer=None, check_scale="a", cost_scale="b",
                      toy_scale="c")
    assert rows[0].verdict == "reproduced" and rows[1].verdict == "reproduced"
    assert rows[4].verdict == "reproduced"


def test_run_summary_follows_the_rows():
    check = _seeds(0.05, 0.02, 0.001)
    toy = dict(_toy(h_ess=0.01, baseline=False), iterations=20)
    rows = claim_rows(check=check, cost=_cost(), toy=toy, peer=None, check_scale="a", cost_scale="b", toy_scale="c")
    text = C.run_summary(check, _cost(), toy, rows)
    assert "differ by 1.0e-03–5.0e-02 (3 seeds of the weights)" in text and "34 of 34 line states" in text
    assert "2.0× faster than the brute force at n = 4 and 50× at n = 64" in text
    assert "1.00 effective" in text and "below the floor of 2" in text
    assert all(f"{r.claim}: {r.verdict}" in text for r in rows)
    assert "below the floor" not in C.run_summary(check, _cost(), dict(toy, hollow=_res(0.5)), rows)
