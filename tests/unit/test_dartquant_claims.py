"""companion.dartquant.claims: every verdict threshold, just inside and just outside, on the one rule."""

import json

import pytest

from companion.core import VERDICTS
from companion.dartquant import claims as C

SCALE = "constructed"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    from companion.core import limit_threads

    with limit_threads(1):
        yield


def _m(identity=0.06, hadamard=0.0073, whip=0.007, layer=False):
    def row(q):
        r = {"quant_mse": q, "kurtosis": 3.0, "max_abs": 4.0, "outlier_frac": 0.0, "orth_err": 1e-7}
        if layer:
            r["layer_err"] = 0.1
        return r
    return {"identity": row(identity), "hadamard": row(hadamard), "qr_orth/whip": row(whip)}


def _seeds(*ratios, identity=0.06, hadamard=0.01, drop=0.05):
    """Seed rows with the given Whip/Hadamard ratios (and identity/Hadamard = identity/hadamard, Whip drop)."""
    return [{"seed": i, "identity": identity, "hadamard": hadamard, "whip": hadamard * r,
             "whip_start": 100.0, "whip_end": 100.0 * (1 - drop)} for i, r in enumerate(ratios)]


def test_orth_tol():
    assert C.orthogonality_row({"a": C.ORTH_TOL * 0.99}).verdict == "reproduced"
    row = C.orthogonality_row({"a": 1e-7, "b": C.ORTH_TOL * 1.01})
    assert row.verdict == "not reproduced" and "max error" in row.evidence


def _drops(*drops):
    return [{"whip_start": 100.0, "whip_end": 100.0 * (1 - d)} for d in drops]


def test_whip_drop_min():
    inside, outside = C.WHIP_DROP_MIN * 1.01, C.WHIP_DROP_MIN * 0.99
    assert C.whip_decrease_row({"a": _drops(inside, inside, inside)}, SCALE).verdict == "reproduced"
    assert C.whip_decrease_row({"a": _drops(outside, outside, outside)}, SCALE).verdict == "not reproduced"
    # the claim must hold on every layer: a seed counts with its smallest drop over the sources
    two = {"a": _drops(0.05, 0.05, 0.05), "b": _drops(0.0015, outside, 0.0012)}
    assert C.whip_drops(two)[1] == pytest.approx(outside)
    assert C.whip_decrease_row(two, SCALE).verdict == "partly reproduced"  # mean past by less than the spread, one seed not
    assert C.whip_decrease_row({"a": _drops(-0.01, -0.01, -0.01)}, SCALE).verdict == "not reproduced"  # Whip rose
    with pytest.raises(ValueError):
        C.whip_drops({"a": _drops(0.1), "b": _drops(0.1, 0.1)})


def test_whip_drop_one_seed_is_inconclusive():
    row = C.whip_decrease_row({"a": _drops(0.5), "b": _drops(0.5)}, SCALE)
    assert row.verdict == "inconclusive" and row.evidence.startswith("n=1") and "one seed" in row.scale


def test_identity_factor():
    h = 0.01
    inside, outside = C.IDENTITY_FACTOR * h * 1.01, C.IDENTITY_FACTOR * h * 0.99
    assert C.outlier_row(_m(), _seeds(1, 1, 1, identity=inside, hadamard=h), SCALE).verdict == "reproduced"
    assert C.outlier_row(_m(), _seeds(1, 1, 1, identity=outside, hadamard=h), SCALE).verdict == "not reproduced"
    one = C.outlier_row(_m(), _seeds(1, identity=10 * h, hadamard=h), SCALE)
    assert one.verdict == "inconclusive" and "one seed" in one.scale


def test_better_margin_and_noninferior():
    inside, outside = (1 - C.BETTER_MARGIN) * 0.999, (1 - C.BETTER_MARGIN) * 1.001
    assert C.synthetic_gain_row(_seeds(inside, inside, inside), SCALE).verdict == "reproduced"
    assert C.synthetic_gain_row(_seeds(outside, outside, outside), SCALE).verdict == "partly reproduced"  # no worse
    assert C.synthetic_gain_row(_seeds(C.NONINFERIOR * 0.999, C.NONINFERIOR * 0.999, C.NONINFERIOR * 0.999),
                                SCALE).verdict == "partly reproduced"
    assert C.synthetic_gain_row(_seeds(C.NONINFERIOR * 1.001, C.NONINFERIOR * 1.001, C.NONINFERIOR * 1.001),
                                SCALE).verdict == "not reproduced"
    # the mean past the target by less than the spread, one seed not past it: partly
    assert C.synthetic_gain_row(_seeds(0.97, 0.97, 0.99), SCALE).verdict == "partly reproduced"
    assert "3 seeds" in C.synthetic_gain_row(_seeds(0.9, 0.9, 0.9), SCALE).scale
    real = C.real_gain_row(_m(layer=True), _seeds(inside, inside, inside), 2, SCALE)
    assert real.verdict == "reproduced" and "layer 2" in real.measured and "3 seeds" in real.scale
    assert C.real_gain_row(_m(), _seeds(*[C.NONINFERIOR * 1.001] * 3), 2, SCALE).verdict == "not reproduced"


def test_gain_one_seed_is_inconclusive():
    for row in (C.synthetic_gain_row(_seeds(0.5), SCALE), C.real_gain_row(_m(), _seeds(0.5), 2, SCALE)):
        assert row.verdict == "inconclusive" and "one seed" in row.scale and "fewer than 3 seeds" in row.evidence


def test_gain_spread_straddling_the_target_is_inconclusive():
    # the mean misses both bars, but by less than the spread: inconclusive
    row = C.synthetic_gain_row(_seeds(0.68, 1.23, 1.23), SCALE)
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def _ablation(moved, flat):
    return {"moved": moved, "flat": flat, "whip_range": 0.6, "mse": {"hadamard": 0.007, "qr_orth/whip": 0.0068}, "steps": 10}


def test_var_move_tol_and_flat_tol():
    assert C.variance_signal_row(_ablation(C.VAR_MOVE_TOL * 0.99, 1.0), SCALE).verdict == "reproduced"
    assert C.variance_signal_row(_ablation(C.VAR_MOVE_TOL * 1.01, 0.0), SCALE).verdict == "not reproduced"
    assert C.variance_flat_row(_ablation(1.0, C.FLAT_TOL * 0.99), SCALE).verdict == "reproduced"
    assert C.variance_flat_row(_ablation(0.0, C.FLAT_TOL * 1.01), SCALE).verdict == "not reproduced"


def test_invariance_tol():
    inv = {"max_abs_logit": 1.0, "model": "m"}
    assert C.invariance_row({**inv, "max_abs_diff": C.INVARIANCE_TOL * 0.99}).verdict == "reproduced"
    assert C.invariance_row({**inv, "max_abs_diff": C.INVARIANCE_TOL * 1.01}).verdict == "not reproduced"


def test_qr_speedup_min_and_step_reps():
    assert C.step_cost_row(10.0, 10.0 * C.QR_SPEEDUP_MIN * 1.01, 256, SCALE).verdict == "reproduced"
    assert C.step_cost_row(10.0, 10.0 * C.QR_SPEEDUP_MIN * 0.99, 256, SCALE).verdict == "not reproduced"
    assert C.step_cost_row(10.0, 14.0, 256, SCALE).evidence == f"n=1: 1.40× vs ≥ {C.QR_SPEEDUP_MIN:.2f}×"
    assert C.STEP_REPS >= 3


def _gpu(step=((4096, 10.0, 14.0), (8192, 10.0, 15.0)), ppl=None, cost=None, states=None, models=None):
    """A recorded payload in the stage runner's layout; ``states`` overrides stage states (a stage not done
    has no result)."""
    ppl = ppl or {"fp32": {"source": 4.5, "docs": 5.6}, "none": {"source": 4.7, "docs": 5.9},
                  "quarot": {"source": 4.6, "docs": 5.7}, "dartquant": {"source": 4.5, "docs": 5.6},
                  "end-to-end": {"source": 4.55, "docs": 5.65}}
    cost = cost or {"dartquant_s": 2.0, "dartquant_mib": 100.0, "e2e_s": 40.0, "e2e_mib": 900.0}
    stages = {"step_cost": {"state": "done"}, "models": {"state": "done"}, **(states or {})}
    payload = {"device": "NVIDIA H200", "date": "2026-12-02", "stages": stages,
               "step_cost": {"rows": [{"n": n, "tokens": 2048, "qr_ms": q, "cayley_ms": c} for n, q, c in step],
                             "tokens": 2048},
               "models": models or [{"name": "small", "train_seconds": 20, "ppl": ppl, "cost": cost}]}
    for name, s in stages.items():
        if s["state"] != "done":
            payload.pop(name)
    return json.loads(json.dumps(payload))  # as scale.recorded() reads it back


def test_gpu_rows_without_a_run():
    rows = C.gpu_rows(None)
    assert [r.verdict for r in rows] == ["not run here"] * 3 and all(r.evidence for r in rows)
    assert all("python -m companion.bench dartquant" in r.evidence for r in rows)


def test_gpu_rows_of_stages_that_did_not_finish_say_so():
    cut = {"state": "unfinished", "started": "2026-12-02 09:00 UTC"}
    rows = C.gpu_rows(_gpu(states={"models": cut, "step_cost": {"state": "skipped", "reason": "deadline: 3 s left, needs 10 s"}}))
    assert [r.verdict for r in rows] == ["not run here"] * 3
    assert "stage step_cost (skipped: deadline: 3 s left, needs 10 s)" in rows[0].evidence
    assert all("stage models (unfinished)" in r.evidence for r in rows[1:])
    failed = C.gpu_rows(_gpu(states={"models": {"state": "failed", "error": "OutOfMemoryError: CUDA"}}))
    assert failed[0].verdict == "reproduced" and "models (failed: OutOfMemoryError: CUDA)" in failed[1].evidence
    assert "stage models (not run)" in C.gpu_rows({"stages": {}, "device": "x"})[1].evidence


def test_gpu_rows_of_models_cut_short_are_not_run():
    first = _gpu()["models"][0]
    no_e2e = {**first, "ppl": {k: v for k, v in first["ppl"].items() if k != "end-to-end"},
              "not_run": "end-to-end R1 training: 10 s left, needs 25 s"}
    no_e2e.pop("cost")
    rows = C.gpu_rows(_gpu(models=[no_e2e, {"name": "big", "not_run": "20 s left, needs 46 s"}]))
    ppl = [r for r in rows if "perplexity" in r.claim]
    assert [r.verdict for r in ppl] == ["inconclusive", "not run here", "not run here", "not run here"]
    assert "end-to-end R1 training: 10 s left" in ppl[1].evidence and "big: 20 s left" in ppl[3].evidence
    (cost,) = [r for r in rows if r.claim.startswith("Calibration")]
    assert cost.verdict == "not run here" and "end-to-end training" in cost.evidence


def test_gpu_step_cost_row_judged_on_the_recorded_ratios():
    row = C.gpu_step_cost_row(_gpu())
    assert row.verdict == "reproduced" and "n=4096" in row.measured and "n=2: 1.45×" in row.evidence
    assert "one run" in row.scale and "H200" in row.scale
    t = C.QR_SPEEDUP_MIN
    assert C.gpu_step_cost_row(_gpu(step=((4096, 10.0, 10 * t * 1.01),))).verdict == "reproduced"
    assert C.gpu_step_cost_row(_gpu(step=((4096, 10.0, 10 * t * 0.99),))).verdict == "not reproduced"
    # the recorded H200 run: Cayley 35.4 vs QR-Orth 40.0 ms at n=4096, 173.4 vs 164.3 at 8192
    assert C.gpu_step_cost_row(_gpu(step=((4096, 40.012, 35.4), (8192, 164.284, 173.388)))).verdict == "not reproduced"


def test_gpu_ppl_rows_one_seed_are_inconclusive_and_ppl_ratio_max():
    rows = C.gpu_rows(_gpu())
    ppl = [r for r in rows if "perplexity" in r.claim]
    assert len(ppl) == 2 and all(r.verdict == "inconclusive" and "one seed" in r.scale for r in ppl)
    assert "fewer than 3 seeds" in ppl[0].evidence and f"≤ {C.PPL_RATIO_MAX:.4f}" in ppl[0].evidence
    assert C.mean_ppl({"a": {"x": 2.0, "y": 4.0}}, "a") == 3.0
    # the ratio behind the row: DartQuant's average PPL over the peer's, against PPL_RATIO_MAX
    m = {"name": "m", "ppl": {"quarot": {"s": 10.0}, "dartquant": {"s": 10.0 * C.PPL_RATIO_MAX * 1.001}}}
    assert "1.0010" in C.ppl_row(m, "quarot", "H200").evidence


def test_gpu_cost_rows_cost_time_paper_memory_paper_and_cheaper():
    time_row, mem_row = [r for r in C.gpu_rows(_gpu()) if r.claim.startswith("Calibration")]
    assert "20.00×" in time_row.evidence and "9.00×" in mem_row.evidence
    assert time_row.verdict == "partly reproduced" and mem_row.verdict == "partly reproduced"  # cheaper, not 47× / 10×
    just = {"dartquant_s": 1.0, "dartquant_mib": 1.0}
    at = C.cost_rows([{"name": "m", "cost": {**just, "e2e_s": C.COST_TIME_PAPER * 1.01, "e2e_mib": C.COST_MEMORY_PAPER * 1.01}}], "H200")
    assert [r.verdict for r in at] == ["reproduced", "reproduced"]
    below = C.cost_rows([{"name": "m", "cost": {**just, "e2e_s": C.COST_TIME_PAPER * 0.99, "e2e_mib": C.COST_MEMORY_PAPER * 0.99}}], "H200")
    assert [r.verdict for r in below] == ["partly reproduced", "partly reproduced"]
    dearer = C.cost_rows([{"name": "m", "cost": {**just, "e2e_s": C.CHEAPER * 0.9, "e2e_mib": C.CHEAPER * 0.9}}], "H200")
    assert [r.verdict for r in dearer] == ["not reproduced", "not reproduced"]


def test_gpu_rows_from_the_recorded_json():
    from companion.dartquant.scale import recorded

    gpu = recorded()
    if gpu is None:
        pytest.skip("no recorded GPU run")
    rows = C.gpu_rows(gpu)
    assert all(r.verdict in VERDICTS and r.evidence for r in rows)
    assert all("one seed" in r.scale for r in rows if "perplexity" in r.claim)
    assert all(r.verdict == "inconclusive" for r in rows if "perplexity" in r.claim)


def test_claim_rows_from_a_tiny_real_run():
    import torch

    from companion.dartquant import experiment as DE
    from companion.dartquant.activations import synthetic_activations

    x = synthetic_activations(256, 16, massive=1, seed=0)
    syn = DE.layer_study(x, torch.randn(32, 16), steps=10, lr=0.02, batch=32, n_snapshots=2)
    real = DE.layer_study(x, None, steps=10, lr=0.02, batch=32, learned=[("qr_orth", "whip")], n_snapshots=2)
    seeds = [DE.study_seed_row(syn, 0)] + DE.seed_comparison(lambda s: synthetic_activations(256, 16, massive=1, seed=s),
                                                             [1, 2], steps=10, lr=0.02, batch=32)
    real_seeds = [DE.study_seed_row(real, 0)] + DE.seed_comparison(lambda s: x, [1, 2], steps=10, lr=0.02, batch=32)
    assert seeds[0]["hadamard"] == syn["metrics"]["hadamard"]["quant_mse"] and seeds[0]["whip_start"] > 0
    kw = dict(synthetic=syn, real=real, real_layer=0, seeds=seeds, real_seeds=real_seeds,
              invariance={"max_abs_diff": 1e-7, "max_abs_logit": 1.0, "model": "m"},
              angle=DE.angle_study(DE.laplace_cloud(200), angles=[0, 45, 90]))
    rows = C.claim_rows(**kw)
    assert len(rows) == 12 and all(r.verdict in VERDICTS and r.evidence for r in rows)
    assert "mean step of the calibration runs" in rows[8].scale and "3 seeds" in rows[3].scale
    for factor, verdict in ((1.01, "reproduced"), (0.99, "not reproduced")):
        timed = C.claim_rows(**kw, step_cost={"n": 16, "tokens": 32, "qr_ms": 1.0, "cayley_ms": C.QR_SPEEDUP_MIN * factor})
        assert timed[8].verdict == verdict and f"median of {C.STEP_REPS} timed steps of 32 tokens" in timed[8].scale
    assert "256 tokens × d=16, 10 steps of 32 tokens" in rows[2].scale
    assert rows[0].verdict == "reproduced" and rows[7].verdict == "reproduced"
    one = C.claim_rows(**{**kw, "seeds": seeds[:1], "real_seeds": real_seeds[:1]})
    assert all(one[i].verdict == "inconclusive" for i in (1, 2, 3, 4))  # the effect rows with one seed


@pytest.mark.parametrize("name", ["ORTH_TOL", "WHIP_DROP_MIN", "IDENTITY_FACTOR", "BETTER_MARGIN", "NONINFERIOR",
                                  "VAR_MOVE_TOL", "FLAT_TOL", "INVARIANCE_TOL", "QR_SPEEDUP_MIN", "STEP_REPS",
                                  "PPL_RATIO_MAX", "COST_TIME_PAPER", "COST_MEMORY_PAPER", "CHEAPER"])
def test_constants_are_positive_numbers(name):
    assert getattr(C, name) > 0
