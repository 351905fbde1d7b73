"""companion.dartquant.claims: every verdict threshold, just inside and just outside."""

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


def test_orth_tol():
    assert C.orthogonality_row({"a": C.ORTH_TOL * 0.99}).verdict == "reproduced"
    assert C.orthogonality_row({"a": 1e-7, "b": C.ORTH_TOL * 1.01}).verdict == "not reproduced"


def test_whip_drop_min():
    inside = 1 - C.WHIP_DROP_MIN * 1.01
    outside = 1 - C.WHIP_DROP_MIN * 0.99
    assert C.whip_decrease_row({"a": (100.0, 100.0 * inside)}, SCALE).verdict == "reproduced"
    assert C.whip_decrease_row({"a": (100.0, 100.0 * inside), "b": (100.0, 100.0 * outside)}, SCALE).verdict == "not reproduced"
    assert C.whip_decrease_row({"a": (100.0, 101.0)}, SCALE).verdict == "not reproduced"


def test_identity_factor():
    h = 0.01
    assert C.outlier_row(_m(identity=C.IDENTITY_FACTOR * h * 1.01, hadamard=h), SCALE).verdict == "reproduced"
    assert C.outlier_row(_m(identity=C.IDENTITY_FACTOR * h * 0.99, hadamard=h), SCALE).verdict == "not reproduced"


def test_better_margin_and_noninferior():
    def seeds(*ratios):
        return [{"hadamard": 0.01, "whip": 0.01 * r} for r in ratios]
    assert C.synthetic_gain_row(seeds((1 - C.BETTER_MARGIN) * 0.999), SCALE).verdict == "reproduced"
    assert C.synthetic_gain_row(seeds(0.5, (1 - C.BETTER_MARGIN) * 1.001), SCALE).verdict == "partly reproduced"
    assert C.synthetic_gain_row(seeds(C.NONINFERIOR * 0.999), SCALE).verdict == "partly reproduced"
    assert C.synthetic_gain_row(seeds(C.NONINFERIOR * 1.001), SCALE).verdict == "not reproduced"
    assert "one seed" in C.synthetic_gain_row(seeds(0.9), SCALE).scale
    assert "3 seeds" in C.synthetic_gain_row(seeds(0.9, 0.9, 0.9), SCALE).scale
    real = C.real_gain_row(_m(hadamard=0.01, whip=0.01 * (1 - C.BETTER_MARGIN) * 0.999, layer=True), 2, SCALE)
    assert real.verdict == "reproduced" and "layer 2" in real.measured and "one seed" in real.scale
    assert C.real_gain_row(_m(hadamard=0.01, whip=0.01 * C.NONINFERIOR * 1.001), 2, SCALE).verdict == "not reproduced"


def _ablation(moved, flat):
    return {"moved": moved, "flat": flat, "whip_range": 0.6, "mse": {"hadamard": 0.007, "qr_orth/whip": 0.0068}, "steps": 10}


def test_var_move_tol_and_flat_tol():
    assert C.ablation_row(_ablation(C.VAR_MOVE_TOL * 0.99, C.FLAT_TOL * 0.99), SCALE).verdict == "reproduced"
    assert C.ablation_row(_ablation(C.VAR_MOVE_TOL * 1.01, C.FLAT_TOL * 0.99), SCALE).verdict == "not reproduced"
    assert C.ablation_row(_ablation(C.VAR_MOVE_TOL * 0.99, C.FLAT_TOL * 1.01), SCALE).verdict == "not reproduced"


def test_invariance_tol():
    inv = {"max_abs_logit": 1.0, "model": "m"}
    assert C.invariance_row({**inv, "max_abs_diff": C.INVARIANCE_TOL * 0.99}).verdict == "reproduced"
    assert C.invariance_row({**inv, "max_abs_diff": C.INVARIANCE_TOL * 1.01}).verdict == "not reproduced"


def test_qr_speedup_min():
    assert C.step_cost_row(10.0, 10.0 * C.QR_SPEEDUP_MIN * 1.01, 256, SCALE).verdict == "reproduced"
    assert C.step_cost_row(10.0, 10.0 * C.QR_SPEEDUP_MIN * 0.99, 256, SCALE).verdict == "not reproduced"
    gpu = {"device": "NVIDIA H200", "date": "2026-12-02", "step_cost": {"rows": [{"n": 4096, "qr_ms": 10.0, "cayley_ms": 14.0}]}}
    row = C.step_cost_row(10.0, 10.0, 256, SCALE, gpu)
    assert row.verdict == "recorded on GPU" and "n=4096" in row.measured and "1.40×" in row.measured


def test_gpu_rows():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here", "not run here"]
    gpu = {"device": "NVIDIA H200", "date": "2026-12-02", "models": [
        {"name": "small", "train_seconds": 20, "ppl": {"none": {"source": 9.0, "docs": 12.0}},
         "cost": {"dartquant_s": 2.0, "dartquant_mib": 100.0, "e2e_s": 40.0, "e2e_mib": 900.0}}]}
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["recorded on GPU", "recorded on GPU"]
    assert "20.0× time" in rows[1].measured and "9.0× memory" in rows[1].measured


def test_claim_rows_from_a_tiny_real_run():
    import torch

    from companion.dartquant import experiment as DE
    from companion.dartquant.activations import synthetic_activations

    x = synthetic_activations(256, 16, massive=1, seed=0)
    syn = DE.layer_study(x, torch.randn(32, 16), steps=10, lr=0.02, batch=32, n_snapshots=2)
    real = DE.layer_study(x, None, steps=10, lr=0.02, batch=32, learned=[("qr_orth", "whip")], n_snapshots=2)
    seeds = [{"hadamard": syn["metrics"]["hadamard"]["quant_mse"], "whip": syn["metrics"]["qr_orth/whip"]["quant_mse"]}]
    rows = C.claim_rows(synthetic=syn, real=real, real_layer=0, seeds=seeds,
                        invariance={"max_abs_diff": 1e-7, "max_abs_logit": 1.0, "model": "m"},
                        angle=DE.angle_study(DE.laplace_cloud(200), angles=[0, 45, 90]))
    assert len(rows) == 10 and all(r.verdict in VERDICTS for r in rows)
    assert "mean step of the calibration runs" in rows[7].scale
    for factor, verdict in ((1.01, "reproduced"), (0.99, "not reproduced")):
        timed = C.claim_rows(synthetic=syn, real=real, real_layer=0, seeds=seeds,
                             invariance={"max_abs_diff": 1e-7, "max_abs_logit": 1.0, "model": "m"},
                             angle=DE.angle_study(DE.laplace_cloud(200), angles=[0, 45, 90]),
                             step_cost={"n": 16, "tokens": 32, "qr_ms": 1.0, "cayley_ms": C.QR_SPEEDUP_MIN * factor})
        assert timed[7].verdict == verdict and f"median of {C.STEP_REPS} timed steps of 32 tokens" in timed[7].scale
    assert "256 tokens × d=16, 10 steps of 32 tokens" in rows[2].scale
    assert rows[0].verdict == "reproduced" and rows[6].verdict == "reproduced"


@pytest.mark.parametrize("name", ["ORTH_TOL", "WHIP_DROP_MIN", "IDENTITY_FACTOR", "BETTER_MARGIN", "NONINFERIOR",
                                  "VAR_MOVE_TOL", "FLAT_TOL", "INVARIANCE_TOL", "QR_SPEEDUP_MIN", "STEP_REPS"])
def test_constants_are_positive_numbers(name):
    assert getattr(C, name) > 0
