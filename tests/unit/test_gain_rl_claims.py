"""Paper 17's claim builders: every threshold just inside and just outside, from constructed results."""

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.gain_rl import claims as C


def _identity(err):
    return {"rel_err": np.array([0.0, err]), "layer": "layers.1.mlp.up_proj"}


def _signals(rhos_initial, rhos_mid, nan_share=0.0, second=None):
    n = 40
    rng = np.random.default_rng(0)
    base = rng.normal(size=n)

    def layers(rhos):
        out = []
        for r in rhos:
            released = np.where(np.arange(n) < nan_share * n, np.nan, 1.0)
            out.append({"spearman": r, "C": base, "released": released,
                        "released_second": base if second is None else second})
        return out
    return {"initial": {"layers": layers(rhos_initial)}, "mid-training": {"layers": layers(rhos_mid)}}


def test_identity_threshold():
    assert C.identity_row(_identity(C.IDENTITY_TOL * 0.9), "s").verdict == "reproduced"
    assert C.identity_row(_identity(C.IDENTITY_TOL * 1.1), "s").verdict == "not reproduced"


def test_correlation_threshold():
    inside, outside = C.RHO_MIN + 0.01, C.RHO_MIN - 0.01
    assert C.correlation_row(_signals([0.0, inside], [0.0, inside]), "s").verdict == "reproduced"
    assert C.correlation_row(_signals([0.0, inside], [0.0, outside]), "s").verdict == "partly reproduced"
    assert C.correlation_row(_signals([outside, outside], [0.0, -0.5]), "s").verdict == "not reproduced"
    row = C.correlation_row(_signals([0.1, 0.2], [0.1, 0.2]), "s")
    assert "layer 1 +0.20" in row.measured and "40 prompts" in row.measured


def test_fidelity_row():
    assert C.fidelity_row(_signals([0.1], [0.1], nan_share=0.5), "s").verdict == "not reproduced"
    assert C.fidelity_row(_signals([0.1], [0.1], nan_share=0.0), "s").verdict == "reproduced"
    noise = np.random.default_rng(1).normal(size=40)
    assert C.fidelity_row(_signals([0.1], [0.1], second=noise), "s").verdict == "not reproduced"


def test_speedup_paper_threshold_and_margin():
    # one seed: no spread, the margins decide
    assert C.speedup_verdict([2], [5], 10)[0] == "reproduced"  # 2.5x exactly
    v, s = C.speedup_verdict([4], [9], 10)  # 2.25x
    assert v == "partly reproduced" and s == pytest.approx(2.25)
    assert C.SPEEDUP_PAPER == 2.5
    # SPEEDUP_MARGIN just inside / outside
    assert C.speedup_verdict([100], [round(100 * C.SPEEDUP_MARGIN) + 1], 500)[0] == "partly reproduced"
    assert C.speedup_verdict([100], [round(100 * C.SPEEDUP_MARGIN) - 1], 500)[0] == "not reproduced"
    # not reaching the target counts as epochs + 1, and blocks "reproduced"
    v, s = C.speedup_verdict([None], [None], 6)
    assert v == "not reproduced" and s == 1.0
    assert C.speedup_verdict([2, None], [10, 10], 4)[0] != "reproduced"


def test_speedup_spread_factor():
    # mean gap 3 steps; spread of the differences just below / above SPREAD_FACTOR * pooled std decides
    g, u = [2, 4], [5, 7]  # pooled std 1.41 -> gap 3 > 1.41
    assert C.speedup_verdict(g, u, 10)[0] in ("reproduced", "partly reproduced")
    g2, u2 = [1, 7], [4, 10]  # pooled std 4.24 -> gap 3 < SPREAD_FACTOR * 4.24
    assert 3 < C.SPREAD_FACTOR * np.sqrt((np.var(g2, ddof=1) + np.var(u2, ddof=1)) / 2)
    assert C.speedup_verdict(g2, u2, 20)[0] == "not reproduced"


def _summary(steps):
    return {k: {"steps": s, "final": np.array([0.5] * len(s))} for k, s in steps.items()}


def test_claim_rows_all_verdicts_valid():
    rows = C.claim_rows(identity=_identity(1e-9), signals=_signals([0.1, 0.4], [0.1, 0.4]),
                        summary=_summary({"uniform": [3, None], "GAIN": [2, 3], "filter": [1, 1]}), target=0.5,
                        epochs=6, identity_scale="a", signal_scale="b", run_scale="c", gpu=None)
    assert len(rows) == 6 and all(r.verdict in VERDICTS for r in rows)
    assert rows[-1].verdict == "not run here"
    assert "2 seeds" in rows[3].scale and "—" in rows[3].measured


def test_gpu_rows_recorded():
    gpu = {"device": "H200", "date": "2026-12-02", "n_seeds": 3, "model": "m", "layer_spearman": [0.1, 0.2],
           "summary": {k: {"epochs_to_target": [2, None, 7], "seconds_to_target": [1.0, None, 3.0], "final": [0.5, 0.6, 0.7]}
                       for k in ("uniform", "GAIN", "filter")}, "target": 0.4}
    rows = C.gpu_rows(gpu)
    assert [r.verdict for r in rows] == ["recorded on GPU", "recorded on GPU"]
    assert "epochs to target 2, —, 7 (1.0, —, 3.0 s)" in rows[0].measured and "0.600 ± 0.082" in rows[0].measured
    assert "target held-out accuracy 0.400" in rows[0].measured and "+0.20" in rows[1].measured
    gpu["angle_timing"] = {"batch": 16, "T": 1024, "d": 896, "explicit_ms": 2.0, "segment_ms": 0.5, "speedup": 4.0}
    rows = C.gpu_rows(gpu)
    assert len(rows) == 3 and "4.0x" in rows[1].measured
