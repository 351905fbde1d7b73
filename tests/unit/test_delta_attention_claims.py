"""Δ Attention's claim rows (paper 09): every threshold of claims.py just inside and just outside."""

import numpy as np
import pandas as pd
import pytest

from companion.core import VERDICTS
from companion.delta_attention.claims import (
    LEARNED_FACTOR,
    MIN_GAP,
    OVERHEAD_SLACK,
    RECOVERED_SHARE,
    claim_rows,
    ladder_rows,
)

EPS = 1e-6
CHANCE = 1 / 16


def _tables(delta_gain=0.01, recompute_gap=0.005, cos=(0.99, 0.9)):
    depth = pd.DataFrame([{"mode": "sparse", "sink": 4, "window": 32, "layer": l + 1, "cos_attn": c}
                          for l, c in enumerate(cos)])
    final = []
    for s in (4, 16):
        final += [{"mode": "sparse", "sink": s, "window": 32, "gamma": np.nan, "final_cos": 0.9, "last_layer_spearman": 0.5},
                  {"mode": "recompute", "sink": s, "window": 32, "gamma": 16, "final_cos": 0.9 + delta_gain - recompute_gap,
                   "last_layer_spearman": 0.6},
                  {"mode": "delta", "sink": s, "window": 32, "gamma": 16, "final_cos": 0.9 + delta_gain, "last_layer_spearman": 0.7}]
    return depth, pd.DataFrame(final)


def _metrics(dense, sparse, delta):
    return {"dense": {"accuracy": dense, "nll": 0.1}, "sparse": {"accuracy": sparse, "nll": 0.5},
            "recompute": {"accuracy": sparse, "nll": 0.4}, "sparse + Δ": {"accuracy": delta, "nll": 0.2}}


def _rows(metrics=None, ladder=None, **kw):
    depth, final = _tables(**kw)
    return claim_rows(depth, final, metrics or _metrics(0.9, 0.3, 0.8), sinks=[4, 16], windows=[32], gamma=16,
                      n_tokens=512, batch=1, chance=CHANCE, recall_scale="toy", ladder=ladder)


def _row(rows, word):
    (row,) = [r for r in rows if word in r.claim]
    assert row.verdict in VERDICTS
    return row


def test_depth_and_delta_rows():
    rows = _rows()
    assert _row(rows, "compounds").verdict == "reproduced"
    assert _row(_rows(cos=(0.9, 0.99)), "compounds").verdict == "not reproduced"
    assert _row(rows, "back toward").verdict == "partly reproduced"
    assert _row(_rows(delta_gain=-0.01), "back toward").verdict == "not reproduced"
    assert _row(rows, "Eq. 5").verdict == "reproduced"
    assert _row(_rows(recompute_gap=-0.01), "Eq. 5").verdict == "not reproduced"


def test_learned_factor():
    dense = LEARNED_FACTOR * CHANCE
    assert _row(_rows(_metrics(dense - EPS, 0.0, 0.0)), "retrieval").verdict == "not reproduced"
    assert "did not learn" in _row(_rows(_metrics(dense - EPS, 0.0, 0.0)), "retrieval").measured
    assert "did not learn" not in _row(_rows(_metrics(dense + EPS, 0.0, 0.0)), "retrieval").measured


def test_min_gap():
    row = _row(_rows(_metrics(0.9, 0.9 - MIN_GAP + EPS, 0.9)), "retrieval")
    assert row.verdict == "not reproduced" and "no sparse-prefill gap" in row.measured
    assert _row(_rows(_metrics(0.9, 0.9 - MIN_GAP - EPS, 0.9)), "retrieval").verdict == "reproduced"


@pytest.mark.parametrize("share, verdict", [(RECOVERED_SHARE + 1e-3, "reproduced"), (RECOVERED_SHARE - 1e-3, "partly reproduced")])
def test_recovered_share(share, verdict):
    row = _row(_rows(_metrics(0.9, 0.1, 0.1 + share * 0.8)), "retrieval")
    assert row.verdict == verdict and "one seed" in row.scale


def test_ladder_rows():
    assert [r.verdict for r in ladder_rows(None)] == ["not run here", "not run here"]
    ladder = {"device": "H200", "date": "today", "summary": [
        {"N": 1 << 20, "gamma": 64, "speedup_vs_flash": 30.0, "speedup_vs_cudnn": 20.0, "delta_overhead_ms": 10.0,
         "dense_share_ms": 5.0, "overhead_within_share_plus_20pct": True},
        {"N": 1 << 15, "gamma": 8, "speedup_vs_flash": 3.0, "speedup_vs_cudnn": 2.0, "delta_overhead_ms": 1.0,
         "dense_share_ms": 0.1, "overhead_within_share_plus_20pct": False}]}
    fast, cost = ladder_rows(ladder)
    assert fast.verdict == cost.verdict == "recorded on GPU"
    assert "30.0×" in fast.measured and "N=1,048,576" in fast.measured
    assert f"+ {OVERHEAD_SLACK:.0%} at 1/2" in cost.measured and "missed at N=32K γ=8" in cost.measured
