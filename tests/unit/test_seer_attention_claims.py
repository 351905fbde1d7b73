"""SeerAttention's claim rows (paper 01): every threshold of claims.py just inside and just outside."""

from types import SimpleNamespace

import pytest

from companion.core import VERDICTS
from companion.seer_attention.claims import (
    COSINE_LOSSLESS,
    COSINE_PARTLY,
    KL_REDUCTION,
    RECALL_MARGIN,
    claim_rows,
    recorded_rows,
)

SP = [0.5, 0.9]
EPS = 1e-6


def _results(gap=0.1, cos_lo=0.99, cos_hi=0.99):
    base = {"oracle": 0.95, "untrained": 0.5, "random": 0.4, "a-shape": 0.7}
    blocks = [SimpleNamespace(method=m, sparsity=s, mass_recall=v) for s in SP for m, v in base.items()]
    blocks += [SimpleNamespace(method="gate", sparsity=s, mass_recall=0.7 + gap) for s in SP]
    outputs = [{"method": m, "sparsity": s, "embedding_cosine": 0.9} for s in SP for m in base]
    outputs += [{"method": "gate", "sparsity": SP[0], "embedding_cosine": cos_lo},
                {"method": "gate", "sparsity": SP[-1], "embedding_cosine": cos_hi}]
    return blocks, outputs


def _rows(gap=0.1, cos_lo=0.99, cos_hi=0.99, kl_ratio=0.1, recorded=None):
    blocks, outputs = _results(gap, cos_lo, cos_hi)
    return claim_rows(blocks, outputs, kl_untrained=[2.0, 2.0], kl_trained=[2.0 * kl_ratio] * 2, train_seconds=3.0,
                      gate_params=1234, sparsities=SP, scale="test scale", steps=7, output_seqs=1, recorded=recorded)


def _verdict(rows, word):
    (row,) = [r for r in rows if word in r.claim]
    assert row.verdict in VERDICTS
    return row


def test_recall_margin():
    assert _verdict(_rows(gap=RECALL_MARGIN + EPS), "learned gate").verdict == "reproduced"
    assert _verdict(_rows(gap=RECALL_MARGIN - EPS), "learned gate").verdict == "partly reproduced"
    assert _verdict(_rows(gap=-EPS), "learned gate").verdict == "not reproduced"
    row = _verdict(_rows(), "learned gate")
    assert "one seed" in row.scale and "0.80/0.80" in row.measured


def test_kl_reduction():
    assert _verdict(_rows(kl_ratio=KL_REDUCTION - EPS), "self-distillation").verdict == "reproduced"
    assert _verdict(_rows(kl_ratio=KL_REDUCTION + EPS), "self-distillation").verdict == "partly reproduced"
    assert "7 steps" in _verdict(_rows(), "self-distillation").measured


@pytest.mark.parametrize("cos_hi, cos_lo, verdict", [
    (COSINE_LOSSLESS + EPS, 0.0, "reproduced"),
    (COSINE_LOSSLESS - EPS, COSINE_PARTLY + EPS, "partly reproduced"),
    (COSINE_LOSSLESS - EPS, COSINE_PARTLY - EPS, "not reproduced"),
])
def test_cosine_thresholds(cos_hi, cos_lo, verdict):
    row = _verdict(_rows(cos_lo=cos_lo, cos_hi=cos_hi), "near-lossless")
    assert row.verdict == verdict
    assert "proxy" in row.claim and "no task accuracy" in row.measured


def test_rows_follow_the_sparsities_given():
    row = _verdict(_rows(), "learned gate")
    assert "50%/90% sparsity" in row.measured


def test_recorded_rows_show_the_block_rope_result_and_the_4x_kl():
    assert [r.verdict for r in recorded_rows(None)] == ["not run here"]
    rec = {
        "device": "GPU", "date": "today", "config": {"seq_len": 8192, "long_len": 32768},
        "timings": [{"seq_len": 8192, "backend": "block-sparse Triton", "mask": "gate top-k 90% sparse", "speedup_vs_dense": 2.0}],
        "recall": [{"length": "train_len", "method": "gate", "sparsity": 0.9, "mass_recall": 0.91},
                   {"length": "train_len", "method": "gate (no block RoPE)", "sparsity": 0.9, "mass_recall": 0.5},
                   {"length": "long", "method": "gate", "sparsity": 0.9, "mass_recall": 0.86}],
        "heldout_kl": {"block_rope": [0.05, 0.05], "no_rope": [0.93, 0.93], "block_rope_long": [0.88, 0.88]},
    }
    rows = _rows(recorded=rec)
    rope = _verdict(rows, "block positions")
    assert rope.verdict == "recorded on GPU"
    assert "0.05 at the trained length -> 0.88 at 4x" in rope.measured and "0.93" in rope.measured
    assert "8k: 2.00x" in _verdict(rows, "speed-up").measured
