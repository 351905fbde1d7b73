"""companion.lorasuite.claims: every verdict threshold, just inside and just outside."""

import pytest

from companion.core import VERDICTS
from companion.lorasuite import claims as C


def hist(final):
    return {"steps": [0, 3, 6], "val": [3.0, 2.9, final], "train": []}


def result(lft=(2.0,), scratch=(2.5,), lft_low=None, base=3.0, full=2.0, transferred=3.0, seeds=None,
           t_transfer=1.0, t_lft=2.0, t_scratch=2.0, steps=21, full_steps=250):
    """A constructed experiment result: LFT finals at the highest lr (``lft``), at the lowest (``lft_low``)."""
    n = len(lft)
    low = lft_low if lft_low is not None else tuple(x + 1.0 for x in lft)
    return {"lft": {1e-4: [hist(x) for x in low], 1e-3: [hist(x) for x in lft]},
            "scratch": {1e-4: [hist(x + 0.5) for x in scratch], 1e-3: [hist(x) for x in scratch]},
            "val": {"new_base": base, "full_lora": full, "transferred": transferred, "old_base": 3.1, "old_lora": 2.0},
            "seconds": {"transfer": t_transfer, "lft": [t_lft] * n, "scratch": [t_scratch] * n},
            "sizes": {"n_samples": 100, "epochs": 3, "batch": 16, "steps": steps, "seeds": list(seeds or range(n)),
                      "lrs": [1e-4, 1e-3], "full_steps": full_steps, "full_batch": 16, "scratch_warmup": 0}}


def checks(pairs=((0, 0), (1, 2), (2, 3), (3, 5)), heads=1.0):
    return {"layer_pairs": list(pairs), "true_layer_pairs": [(0, 0), (1, 2), (2, 3), (3, 5)], "head_recovery": heads,
            "cka_minibatches": 8, "cka_tokens": 128}


def test_loss_margin_one_seed():
    m = C.LOSS_MARGIN
    assert C.lft_vs_scratch_row(result(lft=(2.0,), scratch=(2.0 + 1.01 * m,))).verdict == "reproduced"
    assert C.lft_vs_scratch_row(result(lft=(2.0,), scratch=(2.0 + 0.99 * m,))).verdict == "not reproduced"
    assert "one seed" in C.lft_vs_scratch_row(result()).scale


def test_spread_factor_several_seeds():
    # gaps 0.1 ± s: the mean must exceed SPREAD_FACTOR standard deviations of the per-seed gaps
    base = (2.0, 2.0, 2.0)
    sd = 0.1 / C.SPREAD_FACTOR
    for factor, verdict in ((0.99, "reproduced"), (1.01, "not reproduced")):
        s = sd * factor
        scr = (2.1 - s, 2.1, 2.1 + s)  # std(ddof=1) of the gaps = s
        assert C.gap_verdict([x - y for x, y in zip(scr, base)]) == verdict
    assert "3 seeds" in C.lft_vs_scratch_row(result(lft=base, scratch=(2.5, 2.5, 2.5))).scale


def test_recovery_partly():
    r = C.RECOVERY_PARTLY  # base 3, full 2: LFT at 3 - f
    assert C.full_row(result(lft=(2.0,))).verdict == "reproduced"
    assert C.full_row(result(lft=(1.9,))).verdict == "reproduced"
    assert C.full_row(result(lft=(3.0 - 1.01 * r,))).verdict == "partly reproduced"
    assert C.full_row(result(lft=(3.0 - 0.99 * r,))).verdict == "not reproduced"


def test_no_lft_fraction():
    f = C.NO_LFT_FRACTION
    assert C.no_lft_row(result(transferred=3.0 - 0.99 * f)).verdict == "reproduced"
    assert C.no_lft_row(result(transferred=3.0 - 1.01 * f)).verdict == "not reproduced"
    assert C.no_lft_row(result(transferred=3.2)).verdict == "reproduced"  # worse than the base: no help at all


def test_lr_row_margin():
    m = C.LOSS_MARGIN
    # scratch best = 2.5; LFT at 1e-3: 2.5 - g_hi, at 1e-4: 2.5 - g_lo
    assert C.lr_row(result(lft=(2.5 - 2 * m,), lft_low=(2.5 - 0.99 * m,))).verdict == "reproduced"
    assert C.lr_row(result(lft=(2.5 - 2 * m,), lft_low=(2.5 - 1.01 * m,))).verdict == "partly reproduced"
    assert C.lr_row(result(lft=(2.5,), lft_low=(2.4,))).verdict == "not reproduced"


def test_layer_and_head_rows():
    assert C.layer_row(checks()).verdict == "reproduced"
    assert C.layer_row(checks(pairs=((0, 0), (1, 2), (2, 4), (3, 5)))).verdict == "partly reproduced"
    assert C.layer_row(checks(pairs=((0, 1), (1, 3), (2, 4), (3, 5)))).verdict == "not reproduced"
    h = C.HEAD_RECOVERY_MIN
    assert C.head_row(checks(heads=h * 1.01)).verdict == "reproduced"
    assert C.head_row(checks(heads=h * 0.99)).verdict == "not reproduced"


def test_time_saving_min():
    # LoRA(full) ≈ 2 s / 21 steps · 250 steps ≈ 23.8 s; ours = transfer + LFT
    full = 2.0 / 21 * 250
    edge = (1 - C.TIME_SAVING_MIN) * full
    assert C.time_row(result(t_transfer=0.99 * edge - 2.0)).verdict == "reproduced"
    assert C.time_row(result(t_transfer=1.01 * edge - 2.0)).verdict == "not reproduced"


def test_gpu_rows():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    gpu = {"device": "NVIDIA H200", "date": "2026-12-02 00:00 UTC", "new_base": 2.0,
           "lft": [{"n_samples": 100, "lr": 1e-3, "val": 1.5, "seconds": 3.0, "peak_gb": 2.0}],
           "full_lora": {"val": 1.4, "seconds": 12.0, "peak_gb": 3.0},
           "svd": [{"d": 2048, "full_ms": 100.0, "randomized_ms": 5.0, "rel_err": 1e-3}]}
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["recorded on GPU"] * 2 and "H200" in rows[0].scale


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_rows_follow_the_run(n_seeds):
    rows = C.claim_rows(result(lft=(2.0,) * n_seeds, scratch=(2.5,) * n_seeds), checks())
    assert all(r.verdict in VERDICTS for r in rows) and len(rows) == 8
    assert "100 windows" in rows[0].scale and "21 steps" in rows[0].scale
