"""companion.graph_multiview.claims: every verdict threshold, just inside and just outside."""

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.graph_multiview import claims as C
from companion.graph_multiview.training import RunResult


def run(method, acc, kl=0.1, dis=5.0, train=1.0, cache=0.0):
    return RunResult(method, acc, dis, kl, train, cache, np.zeros((1, 2, 3)), np.zeros(1), [1.0], {})


def runs(gmv_accs, van_accs, *, kl_gmv=0.1, kl_ref=0.1, t_gmv=2.0, t_van=1.0, abl=(50.0, 50.0)):
    out = {"vanilla": [run("vanilla", a, train=t_van) for a in van_accs],
           "gmimo": [run("gmimo", a, kl=kl_ref) for a in van_accs],
           "mixed_single": [run("mixed_single", abl[0]) for _ in van_accs],
           "decomposition": [run("decomposition", abl[1]) for _ in van_accs],
           "gmv": [run("gmv", a, kl=kl_gmv, train=t_gmv, cache=0.1) for a in gmv_accs]}
    return out


INV = dict(pairs=10, identity_err=0.0, weight_err=0.0, size_errors=0, feature_errors=0, non_images=0,
           removed_inside=0, mean_w_src=0.2)


def test_exact_tol():
    ok = C.mechanics_rows({**INV, "weight_err": C.EXACT_TOL * 0.99}, 0.0, "s")[0]
    bad = C.mechanics_rows({**INV, "weight_err": C.EXACT_TOL * 1.01}, 0.0, "s")[0]
    assert ok.verdict == "reproduced" and bad.verdict == "not reproduced"
    assert C.mechanics_rows({**INV, "non_images": 1}, 0.0, "s")[0].verdict == "not reproduced"


def test_ppr_tol():
    assert C.mechanics_rows(INV, C.PPR_TOL * 0.99, "s")[1].verdict == "reproduced"
    assert C.mechanics_rows(INV, C.PPR_TOL * 1.01, "s")[1].verdict == "not reproduced"


def test_acc_margin_pp_and_spread_factor():
    m = C.ACC_MARGIN_PP
    assert C.accuracy_row(runs([70 + m * 1.01] * 3, [70] * 3), "s").verdict == "partly reproduced"
    assert C.accuracy_row(runs([70 + m * 0.99] * 3, [70] * 3), "s").verdict == "not reproduced"
    # a mean gain beyond the margin but within SPREAD_FACTOR standard deviations does not count
    gains = np.array([m + 10, m + 10, -2 * m])
    g = gains.mean()
    sd = gains.std(ddof=1)
    assert g < C.SPREAD_FACTOR * sd
    assert C.gain_verdict(gains) == "not reproduced"
    assert C.gain_verdict([m * 2, m * 2 + 0.1]) == "partly reproduced"


def test_ablation_row():
    assert C.ablation_row(runs([80] * 2, [70] * 2, abl=(70, 70)), "s").verdict == "partly reproduced"
    assert C.ablation_row(runs([80] * 2, [70] * 2, abl=(79, 60)), "s").verdict == "not reproduced"
    r = runs([80] * 2, [70] * 2)
    del r["mixed_single"]
    assert C.ablation_row(r, "s").verdict == "not run here"


def test_diversity_factor():
    f = C.DIVERSITY_FACTOR
    assert C.diversity_row(runs([1], [1], kl_gmv=f * 1.01, kl_ref=1.0), "s").verdict == "partly reproduced"
    assert C.diversity_row(runs([1], [1], kl_gmv=f * 0.99, kl_ref=1.0), "s").verdict == "not reproduced"


def test_overhead_lo_hi():
    for ratio, verdict in ((C.OVERHEAD_LO * 1.01, "reproduced"), (C.OVERHEAD_LO * 0.99, "not reproduced"),
                           (C.OVERHEAD_HI * 0.99, "reproduced"), (C.OVERHEAD_HI * 1.01, "not reproduced")):
        assert C.overhead_row(runs([1], [1], t_gmv=ratio, t_van=1.0), "s").verdict == verdict


def test_gpu_rows():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    stat = {"acc_mean": 80.0, "acc_std": 1.0, "folds": 3}
    gpu = {"device": "NVIDIA H200", "date": "2026-12-02", "config": {"graphs": 720},
           "main": {"gcn": {"vanilla": stat, "gmv": stat}}, "heads_sweep": {"2": stat},
           "label_noise": {"20%": {"vanilla": stat}}, "label_ratio": {"50%": {"gmv": stat}},
           "latency_ms": {"vanilla": 1.0, "gmv": 1.1}}
    rows = C.gpu_rows(gpu)
    assert len(rows) == 5 and all(r.verdict == "recorded on GPU" for r in rows) and "H200" in rows[0].scale


@pytest.mark.parametrize("n_folds", [1, 3])
def test_rows_follow_the_run(n_folds):
    rows = C.claim_rows(runs([80] * n_folds, [70] * n_folds), INV, 0.0, scale="60 motif graphs")
    assert all(r.verdict in VERDICTS for r in rows)
    assert ("one fold" if n_folds == 1 else f"{n_folds} folds") in rows[2].scale
    assert any("not reproduced: data not shipped" in r.measured for r in rows)
