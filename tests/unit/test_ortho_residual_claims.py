"""Paper 10's claim rows: every threshold just inside and just outside, on constructed results."""

import pytest

from companion.ortho_residual import claims as C
from companion.ortho_residual.claims import (
    ACC_MARGIN_PP,
    BF16_FACTOR,
    COS_TOL,
    GROWTH_TOL,
    LOSS_MARGIN,
    PARALLEL_MIN,
    SPREAD_FACTOR,
    claim_rows,
)


def _row(cos_update=0.0, growth=0.01, shrink=0.0, abs_cos=0.3, rho=0.02):
    return {"block": 0, "add": "attn", "mode": "feature", "x_norm": 1.0, "rho_par": rho, "rho_ortho": 0.1,
            "abs_cos_x_out": abs_cos, "cos_x_update": cos_update, "growth_min": growth, "shrink_share": shrink}


def _run(acc=0.8, **kw):
    return {"test_acc": acc, "val_loss": 2.0, "snapshots": [{"step": 0, "rows": [_row(**kw)]}]}


def _vit(ortho=None, lin=None, acc_lin=(0.8,), acc_orth=(0.8,)):
    ortho, lin = ortho or {}, lin or {}
    return {"linear": [_run(a, **{"cos_update": 0.3, "growth": -0.2, "shrink": 0.3, **lin}) for a in acc_lin],
            "feature": [_run(a, **ortho) for a in acc_orth], "global": [_run(a, **ortho) for a in acc_orth]}


def test_cos_tolerance():
    assert C.mechanism_rows(_vit({"cos_update": 0.9 * COS_TOL}), "s")[0].verdict == "reproduced"
    assert C.mechanism_rows(_vit({"cos_update": 1.1 * COS_TOL}), "s")[0].verdict == "not reproduced"


def test_growth_tolerance():
    assert C.mechanism_rows(_vit({"growth": -0.9 * GROWTH_TOL}), "s")[1].verdict == "reproduced"
    assert C.mechanism_rows(_vit({"growth": -1.1 * GROWTH_TOL}), "s")[1].verdict == "not reproduced"
    assert C.mechanism_rows(_vit({"shrink": 0.01}), "s")[1].verdict == "not reproduced"


def test_parallel_minimum():
    assert C.mechanism_rows(_vit(lin={"abs_cos": 1.1 * PARALLEL_MIN}), "s")[2].verdict == "reproduced"
    assert C.mechanism_rows(_vit(lin={"abs_cos": 0.9 * PARALLEL_MIN}), "s")[2].verdict == "not reproduced"


def test_accuracy_margin_one_seed():
    d = ACC_MARGIN_PP / 100
    inside = C.accuracy_row(_vit(acc_lin=(0.5,), acc_orth=(0.5 + 1.1 * d,)), "s")
    outside = C.accuracy_row(_vit(acc_lin=(0.5,), acc_orth=(0.5 + 0.9 * d,)), "s")
    assert inside.verdict == "partly reproduced" and "one seed" in inside.scale
    assert outside.verdict == "not reproduced"
    assert C.accuracy_row(_vit(acc_lin=(0.6,), acc_orth=(0.5,)), "s").verdict == "not reproduced"


def test_spread_factor_with_seeds():
    g = 2 * ACC_MARGIN_PP  # mean gap above the margin; the spread of the differences decides
    assert C.gap_verdict([g, g, g], ACC_MARGIN_PP) == "partly reproduced"
    tight = [g - 0.9 * g / SPREAD_FACTOR, g, g + 0.9 * g / SPREAD_FACTOR]  # std just below g / factor
    wide = [g - 1.1 * g / SPREAD_FACTOR, g, g + 1.1 * g / SPREAD_FACTOR]  # std just above g / factor
    assert C.gap_verdict(tight, ACC_MARGIN_PP) == "partly reproduced"
    assert C.gap_verdict(wide, ACC_MARGIN_PP) == "not reproduced"
    row = C.accuracy_row(_vit(acc_lin=(0.5, 0.5), acc_orth=(0.7, 0.7)), "s")
    assert "2 seeds" in row.scale and "±" in row.measured


def test_loss_margin():
    lm = lambda gap: {"linear": [{"val_loss": 2.0 + gap}], "feature": [{"val_loss": 2.0}]}  # noqa: E731
    assert C.lm_row(lm(1.1 * LOSS_MARGIN), "s").verdict == "partly reproduced"
    assert C.lm_row(lm(0.9 * LOSS_MARGIN), "s").verdict == "not reproduced"


def test_bf16_factor():
    tab = lambda bf: [{"precision": "fp64", "mean": 1e-12, "max": 1e-12}, {"precision": "fp32", "mean": 1e-8, "max": 1e-8},  # noqa: E731
                      {"precision": "bf16", "mean": bf, "max": bf}, {"precision": "bf16_fp32coef", "mean": 1e-5, "max": 1e-5}]
    assert C.precision_row(tab(1.1 * BF16_FACTOR * 1e-8), "s").verdict == "reproduced"
    assert C.precision_row(tab(0.9 * BF16_FACTOR * 1e-8), "s").verdict == "not reproduced"


def test_gpu_rows_and_all_rows():
    assert C.gpu_rows(None)[0].verdict == "not run here"
    gpu = {"device": "H200", "date": "d", "training": {m: {"seconds": 50, "val_loss": 1.5, "steps": 10} for m in ("linear", "feature")},
           "step_time_ms": {"eager": {"linear": 100.0, "feature": 130.0, "overhead_pct": 30.0}}}
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["recorded on GPU"] * 2 and "+30.0%" in rows[1].measured
    assert "torch.compile not measured" in rows[1].measured
    gpu["step_time_ms"]["compiled"] = {"linear": 80.0, "feature": 60.0, "overhead_pct": -25.0}
    gpu["bf16_coef_training"] = {d: {"steps": s, "val_loss": v, "spikes": k, "cos_update_max": 2e-6}
                                 for d, s, v, k in (("float32", 12, 2.07, 0), ("input", 11, 2.06, 3))}
    rows = C.gpu_rows(gpu)
    assert "80.0 → 60.0 ms (-25.0%)" in rows[1].measured
    assert "input coefficient: validation loss 2.060, 3 loss spikes" in rows[2].measured and "11 steps each" in rows[2].scale
    assert C.gpu_rows({**gpu, "bf16_coef_training": "skipped: time budget"})[-1] == rows[1]
    lm = {"linear": [{"val_loss": 2.0}], "feature": [{"val_loss": 2.0}]}
    tab = [{"precision": p, "mean": 1e-3 if p.startswith("bf16") else 1e-9, "max": 1e-3} for p in ("fp64", "fp32", "bf16", "bf16_fp32coef")]
    all_rows = claim_rows(vit=_vit(), lm=lm, precision=tab, vit_scale="v", lm_scale="l", precision_scale="p", gpu=gpu)
    assert len(all_rows) == 9


@pytest.mark.parametrize("steps", [10, 11])
def test_rows_follow_real_small_runs(steps):
    """The smallest allowed notebook sizes give rows (mechanism rows reproduced)."""
    from companion.ortho_residual.experiments import digits_data, train_vit

    data = digits_data(0)
    vit = {m: [train_vit(m, data, steps=steps, batch=8, seed=0, snapshots=1, depth=1)] for m in ("linear", "feature", "global")}
    rows = C.mechanism_rows(vit, "tiny")
    assert rows[0].verdict == "reproduced" and rows[1].verdict == "reproduced"
