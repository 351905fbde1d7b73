"""companion.nemotron_flash.claims: every verdict threshold, just inside and just outside."""

import pytest

from companion.core import VERDICTS
from companion.nemotron_flash import claims as C
from companion.nemotron_flash.search import NF_PATTERN, Genome


def dw(ratio):
    return {"rows": [{"depth": 2, "width": 256, "params": 1_570_048, "ms_batch1": 1.0, "tokens_per_s": 1, "mode": "eager"},
                     {"depth": 16, "width": 90, "params": 1_558_170, "ms_batch1": ratio, "tokens_per_s": 1, "mode": "eager"}],
            "context": 64, "batch": 4, "device": "CPU"}


def test_depth_latency_ratio():
    t = C.DEPTH_LATENCY_RATIO
    assert C.depth_row(dw(t * 1.01)).verdict == "reproduced"
    assert C.depth_row(dw(t * 0.99)).verdict == "partly reproduced"
    assert C.depth_row(dw(0.9)).verdict == "not reproduced"


def ops(attn, lin):
    return {"ms": {"a": [1.0, attn], "deltanet": [1.0, lin], "m2": [1.0, 1.0], "f": [1.0, 1.0]},
            "contexts": [128, 8192], "width": 64, "batch": 16, "device": "CPU"}


def test_operator_thresholds():
    a, l_ = C.ATTN_GROWTH_MIN, C.LINEAR_FLAT_MAX
    assert C.operator_row(ops(a * 1.01, l_ * 0.99)).verdict == "reproduced"
    assert C.operator_row(ops(a * 0.99, l_ * 0.99)).verdict == "partly reproduced"
    assert C.operator_row(ops(a * 1.01, l_ * 1.01)).verdict == "partly reproduced"
    assert C.operator_row(ops(a * 0.99, l_ * 1.01)).verdict == "not reproduced"


def wn(err, plain, norm, seeds=(0,)):
    return {"max_norm_error": err, "val_plain": [plain] * len(seeds), "val_wn": [norm] * len(seeds),
            "seeds": list(seeds), "depth": 2, "width": 48, "steps": 40, "placement": "after_step"}


def test_norm_tolerance_and_loss_margin():
    t, m = C.NORM_TOLERANCE, C.WN_LOSS_MARGIN
    assert C.weight_norm_rows(wn(t * 0.99, 3, 3))[0].verdict == "reproduced"
    assert C.weight_norm_rows(wn(t * 1.01, 3, 3))[0].verdict == "not reproduced"
    assert C.weight_norm_rows(wn(0, 3.0, 3.0 - m * 1.01))[1].verdict == "reproduced"
    assert C.weight_norm_rows(wn(0, 3.0, 3.0 - m * 0.99))[1].verdict == "not reproduced"
    assert "one seed" in C.weight_norm_rows(wn(0, 3, 3))[1].scale
    assert "3 seeds" in C.weight_norm_rows(wn(0, 3, 3, seeds=(0, 1, 2)))[1].scale


def law(err):
    return {"test_ppl_rel_error_max": err, "test_ppl_rel_error_mean": err / 2, "holdout": "largest_tokens",
            "params": {"alpha": 0.5, "beta": 0.5, "gamma": 0.3}, "n_train": 30, "n_test": 10}


def test_law_ppl_error():
    t = C.LAW_PPL_ERROR
    assert C.law_row(law(t * 0.99)).verdict == "reproduced"
    assert C.law_row(law(t * 1.01)).verdict == "partly reproduced"
    assert C.law_row(law(2 * t * 1.01)).verdict == "not reproduced"


def search(gain):
    best = {"genome": NF_PATTERN, "fitness": 3.0 - gain}
    return {"initial_best": 3.0, "best": best, "population": [None] * 8, "history": [None] * 18, "steps": 4,
            "width": 24, "latency_limit": 2.0, "device": "CPU"}


def test_search_min_gain():
    g = C.SEARCH_MIN_GAIN
    assert C.search_row(search(g * 1.01 + 1e-9)).verdict == "partly reproduced"
    assert C.search_row(search(g * 0.99)).verdict == "not reproduced"
    assert "10 cycles" in C.search_row(search(0.5)).scale
    assert isinstance(NF_PATTERN, Genome)


def gpu(lat_ratio, thr_ratio):
    return {"device": "NVIDIA H200", "date": "2026-12-02 10:00 UTC", "hybrid_vs_transformer": {
        "n_tokens": 8192,
        "transformer": {"decode_seconds": 10.0, "max_throughput": 1000.0, "params": 6e8, "mode": "cuda-graph"},
        "hybrid": {"decode_seconds": 10.0 * lat_ratio, "max_throughput": 1000.0 * thr_ratio, "params": 1e9,
                   "mode": "cuda-graph"}}}


def test_gpu_thresholds():
    lat, thr = C.LATENCY_RATIO_MAX, C.THROUGHPUT_RATIO_MIN
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    assert C.gpu_rows(gpu(lat * 0.99, thr * 1.01))[0].verdict == "recorded on GPU"
    assert C.gpu_rows(gpu(lat * 1.01, thr * 1.01))[0].verdict == "not reproduced"
    assert C.gpu_rows(gpu(lat * 0.99, thr * 0.99))[0].verdict == "not reproduced"
    assert "H200" in C.gpu_rows(gpu(0.5, 10))[0].scale


def test_frontier_row():
    runs = [{"budget": 400_000, "depth": d, "loss": loss, "steps": 30} for d, loss in ((3, 3.2), (6, 3.1), (12, 3.0))]
    s = C.frontier_summary(runs, [1.0, 2.0, 4.0])
    assert s["front_depths"] == [3, 6, 12]
    assert C.frontier_row(s, "CPU").verdict == "reproduced"
    s = C.frontier_summary(runs, [5.0, 2.0, 1.0])
    assert C.frontier_row(s, "CPU").verdict == "not reproduced"


@pytest.mark.parametrize("seeds", [(0,), (0, 1, 2)])
def test_all_rows_at_both_ends(seeds):
    runs = [{"budget": 100_000, "depth": d, "loss": 3.0, "steps": 30} for d in (3, 6)]
    rows = C.claim_rows(dw=dw(2.0), ops=ops(3.0, 1.0), front=C.frontier_summary(runs, [1.0, 2.0]), front_device="CPU",
                        wn=wn(1e-7, 3.0, 2.9, seeds), law=law(0.01), search=search(0.1), gpu=None)
    assert len(rows) == 9 and all(r.verdict in VERDICTS for r in rows)
    assert rows[-2].verdict == "not run here"
