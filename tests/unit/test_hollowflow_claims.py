"""Paper 13's claim rows: every threshold just inside and just outside, on constructed results."""

import copy

import pytest

from companion.core import limit_threads
from companion.hollowflow import claims as C
from companion.hollowflow.claims import (
    DIV_TOL,
    EFFSU_MARGIN,
    ESS_FLOOR,
    GPU_SPEEDUP_TARGET,
    GPU_TOY_PAPER,
    LEAK_MIN,
    PATH_TOL,
    PEER_TOL,
    SLOPE_GAP_MIN,
    SPEEDUP_MIN,
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


def test_leak_min():
    assert C.pruning_row(_check(unpruned_err=1.1 * LEAK_MIN), "s").verdict == "reproduced"
    assert C.pruning_row(_check(unpruned_err=0.9 * LEAK_MIN), "s").verdict == "not reproduced"
    assert C.pruning_row(_check(unpruned_leaks=0), "s").verdict == "not reproduced"


def test_speedup_min_and_slope_gap():
    assert C.cost_row(_cost(speedups=(2, 1.1 * SPEEDUP_MIN)), "s").verdict == "reproduced"
    assert C.cost_row(_cost(speedups=(2, 0.9 * SPEEDUP_MIN)), "s").verdict == "partly reproduced"
    g = SLOPE_GAP_MIN
    assert C.cost_row(_cost(2.0, 2.0 - 1.1 * g), "s").verdict == "reproduced"
    assert C.cost_row(_cost(2.0, 2.0 - 0.9 * g), "s").verdict == "partly reproduced"
    assert C.cost_row(_cost(2.0, 2.0 - 0.9 * g, (2, 0.9 * SPEEDUP_MIN)), "s").verdict == "not reproduced"


def test_path_tol():
    assert C.paths_row(_toy(path=0.9 * PATH_TOL), "s").verdict == "reproduced"
    assert C.paths_row(_toy(path=1.1 * PATH_TOL), "s").verdict == "not reproduced"


def test_peer_tol():
    mk = lambda d: {"max_abs_diff": d, "ode_steps": 20}  # noqa: E731
    assert C.peer_row(mk(0.9 * PEER_TOL), "s").verdict == "reproduced"
    assert C.peer_row(mk(1.1 * PEER_TOL), "s").verdict == "not reproduced"
    assert C.peer_row(None, "s").verdict == "not run here"


def test_effsu_margin_and_ess_floor():
    assert C.ess_row(_toy(h_sps=0.01, b_sps=0.01 * 1.1 * EFFSU_MARGIN), "s").verdict == "partly reproduced"
    assert C.ess_row(_toy(h_sps=0.01, b_sps=0.01 * 0.9 * EFFSU_MARGIN), "s").verdict == "not reproduced"
    n = 100
    fast = dict(h_sps=0.001, b_sps=1.0)
    assert C.ess_row(_toy(h_ess=1.1 * ESS_FLOOR / n, b_ess=0.5, **fast), "s").verdict == "partly reproduced"
    row = C.ess_row(_toy(h_ess=0.9 * ESS_FLOOR / n, b_ess=0.5, **fast), "s")
    assert row.verdict == "not reproduced" and "floor" in row.measured
    assert C.ess_row(_toy(baseline=False), "s").verdict == "not run here"


def _gpu_toy(system, k, h_samples=1000, b_samples=1000):
    r = dict(_res(0.1), iterations=100, samples=h_samples)
    return {"system": system, "k": k, "hollow": r, "baseline": dict(r, samples=b_samples), "effsu": 3.0, "effsu_rem": 2.0}


def _kernel_entry(n, speed):
    return {"n": n, "k": 7, "batch": 1000, "impl": "triton", "features": 67, "line_edges": [100, 40],
            "index_add_ms": 1.0, "segment_sum_ms": 1.0 / speed, "index_add_fwd_bwd_ms": 2.0,
            "segment_sum_fwd_bwd_ms": 2.0 / speed, "rk4_index_add_ms": 10.0, "rk4_segment_sum_ms": 10.0 / speed,
            "max_abs_diff": 1e-6, "divergence_max_abs_diff": 1e-7, "verdict": f"forward: kernel {speed:.2f}× faster"}


def test_gpu_rows():
    assert C.gpu_rows(None)[0].verdict == "not run here"
    gpu = {"device": "H200", "date": "d", "batch": 1000, "likelihood_step": [
        {"n": 55, "k": 7, "k_label": "k = 7", "speedup": 1.1 * GPU_SPEEDUP_TARGET, "baseline_ms": 100.0, "hollow_ms": 4.0}]}
    # the older JSON: no kernel stage, the toy skipped as a whole -> the kernel and both toy rows say so
    rows = C.gpu_rows(dict(gpu, toy="skipped: time budget"))
    assert rows[0].verdict == "recorded on GPU" and "n = 55" in rows[0].measured and len(rows) == 4
    assert [r.verdict for r in rows[1:]] == ["not run here"] * 3
    assert "older run" in rows[1].measured and "time budget" in rows[2].measured and "LJ55" in rows[3].claim
    # the new JSON: kernel rows (one slower, one faster) and both systems
    gpu["segment_sum"] = [_kernel_entry(13, 0.5), _kernel_entry(200, 2.0)]
    gpu["toy"] = {"LJ13": _gpu_toy("LJ13", 6), "LJ55": _gpu_toy("LJ55", 7, b_samples=8)}
    rows = C.gpu_rows(gpu)
    assert len(rows) == 4 and all(r.verdict == "recorded on GPU" for r in rows)
    assert "n = 13" in rows[1].measured and "n = 200" in rows[1].measured and "impl triton" in rows[1].scale
    assert "EffSU 3.0" in rows[2].measured and "LJ13" in rows[2].claim and GPU_TOY_PAPER["LJ13"] == rows[2].paper
    assert "at least 1/8" in rows[3].measured and "at least" not in rows[2].measured
    gpu["toy"]["LJ55"] = "skipped: time budget"
    gpu["segment_sum"] = []
    rows = C.gpu_rows(gpu)
    assert rows[3].verdict == "not run here" and "time budget" in rows[3].measured
    assert rows[1].verdict == "not run here" and "time budget" in rows[1].measured


def test_scale_recorded_absent_or_present():
    from companion.hollowflow import scale

    got = scale.recorded()
    assert got is None or "likelihood_step" in got


def test_all_rows_and_scale_follows_parameters():
    rows = claim_rows(check=_check(), cost=_cost(), toy=_toy(), peer=None, gpu=None, check_scale="a", cost_scale="b",
                      toy_scale="LJ13, 10 iterations")
    assert len(rows) == 7 and rows[-1].verdict == "not run here"
    assert any(r.scale == "LJ13, 10 iterations" for r in rows)


@pytest.mark.parametrize("iterations", [10, 11])
def test_rows_from_real_small_runs(iterations):
    """The smallest notebook sizes give rows; the mechanism rows reproduce."""
    from companion.hollowflow.experiments import construction_check, cost_scaling, toy_flow

    check = construction_check(hidden=8)
    cost = cost_scaling((4, 8), k=2, hidden=4, reps=1, vjp_sample=4)
    toy = toy_flow(iterations=iterations, n_samples=16, ode_steps=2, check_samples=2, check_steps=1, train_size=64,
                   batch=8, resamples=10, baseline=False, burn_in=20)
    rows = claim_rows(check=check, cost=copy.deepcopy(cost), toy=toy, peer=None, check_scale="a", cost_scale="b",
                      toy_scale="c")
    assert rows[0].verdict == "reproduced" and rows[1].verdict == "reproduced"
    assert rows[4].verdict == "reproduced"
