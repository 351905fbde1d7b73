"""companion.gaussian_video.claims: every verdict threshold, just inside and just outside, on constructed
results (no training)."""

from types import SimpleNamespace

import pytest

from companion.core import VERDICTS
from companion.gaussian_video import claims as C
from companion.gaussian_video.pipeline import Config

CFG = Config(L=4)


def key_study(full_low=27.0, op_low=26.0, vol_low=25.0, flat_low=20.0, rate_scale=1.0, L=4):
    """Keyframe curves: a base curve; ablations shift the base-layer PSNR, 'no rate term' scales the bytes."""
    base_b = [100.0 * (l + 1) for l in range(L)]
    base_p = [full_low + 1.0 * l for l in range(L)]

    def shifted(low):
        return {"bytes": base_b, "psnr": [low] + base_p[1:]}

    curves = {"full": {"bytes": base_b, "psnr": base_p}, "opacity-only Ψ": shifted(op_low),
              "volume-only Ψ": shifted(vol_low), "no hierarchy": shifted(flat_low),
              "no rate term": {"bytes": [b * rate_scale for b in base_b], "psnr": base_p}}
    return SimpleNamespace(cfg=Config(L=L) if L <= 8 else CFG, curves=curves)


class Seq:
    def __init__(self, bytes_, psnr, cfg=CFG, n=6, groups=(0, 3)):
        self._c = {"l": list(range(1, len(psnr) + 1)), "bytes": list(bytes_), "psnr": list(psnr)}
        self.cfg, self.frames, self.groups = cfg, [{}] * n, list(groups)

    def rd_curve(self):
        return self._c


def groups(g1_scale=2.0, g5_scale=1.1, psnr=(26.0, 27.0, 27.5, 28.0), bytes_=(300.0, 400.0, 500.0, 600.0)):
    return {"motion-aware": Seq(bytes_, psnr), "fixed group of 1": Seq([b * g1_scale for b in bytes_], psnr),
            "fixed group of 5": Seq([b * g5_scale for b in bytes_], psnr)}


def test_progressive_thresholds():
    ok = C.progressive_row(groups()).verdict
    assert ok == "reproduced"  # ratio 0.5, gap 2 dB, monotone
    t = C.PSNR_MONOTONE_TOL_DB
    assert C.progressive_row(groups(psnr=(26.0, 27.0, 27.0 - 0.99 * t, 28.0))).verdict == "reproduced"
    assert C.progressive_row(groups(psnr=(26.0, 27.0, 27.0 - 1.01 * t, 28.0))).verdict == "not reproduced"
    r = C.MAX_LOW_BYTE_RATIO
    assert C.progressive_row(groups(bytes_=(600 * r * 0.99, 400, 500, 600))).verdict == "reproduced"
    assert C.progressive_row(groups(bytes_=(600 * r * 1.01, 400, 500, 600))).verdict == "partly reproduced"
    gmax = C.MAX_LOW_GAP_DB
    assert C.progressive_row(groups(psnr=(28.0 - 0.99 * gmax, 27.0, 27.5, 28.0))).verdict == "reproduced"
    assert C.progressive_row(groups(psnr=(28.0 - 1.01 * gmax, 27.0, 27.5, 28.0))).verdict == "partly reproduced"


def test_psi_margin():
    m = C.PSI_MARGIN_DB
    assert C.psi_row(key_study(27.0, 27.0 - 1.01 * m, 27.0 - 1.01 * m)).verdict == "reproduced"
    assert C.psi_row(key_study(27.0, 27.0 - 0.99 * m, 27.0 - 1.01 * m)).verdict == "partly reproduced"
    assert C.psi_row(key_study(27.0, 27.0 - 0.99 * m, 27.0 - 0.99 * m)).verdict == "not reproduced"


def test_hierarchy_margin():
    m = C.HIER_MARGIN_DB
    assert C.hierarchy_row(key_study(flat_low=27.0 - 1.01 * m)).verdict == "reproduced"
    assert C.hierarchy_row(key_study(flat_low=27.0 - 0.99 * m)).verdict == "partly reproduced"
    assert C.hierarchy_row(key_study(flat_low=27.5)).verdict == "not reproduced"


def test_rate_term_threshold():
    t = C.RATE_TERM_MIN_BDRATE
    assert C.rate_row(key_study(rate_scale=1 + 1.01 * t / 100)).verdict == "reproduced"
    assert C.rate_row(key_study(rate_scale=1 + 0.99 * t / 100)).verdict == "partly reproduced"
    assert C.rate_row(key_study(rate_scale=0.95)).verdict == "not reproduced"


def test_group1_threshold():
    t = C.GROUP1_MIN_BDRATE
    assert C.grouping_row(groups(g1_scale=1 + 1.01 * t / 100)).verdict == "reproduced"
    assert C.grouping_row(groups(g1_scale=1 + 0.99 * t / 100)).verdict == "partly reproduced"
    assert C.grouping_row(groups(g1_scale=0.9)).verdict == "not reproduced"


def _gpu(high_ms, low_ms, triton_ms=1.0, peer_ms=2.0):
    return {"device": "NVIDIA H200", "date": "2026-12-02 10:00 UTC", "scene": {"n_gaussians": 100000, "width": 512},
            "per_layer": [{"l": 1, "total_ms": low_ms, "decode_ms": low_ms / 2, "render_ms": low_ms / 2},
                          {"l": 2, "total_ms": high_ms, "decode_ms": high_ms / 2, "render_ms": high_ms / 2}],
            "rasterizer": {"triton_ms": triton_ms, "peer_ms": peer_ms, "peer": "PyTorch", "max_abs_diff": 1e-6,
                           "gsplat": "not installed on this machine"}}


def test_gpu_rows_and_targets():
    """The JSON of the first H200 run (zlib only, no gsplat) still gives its rows."""
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    rt, ratio = C.REALTIME_MS, C.LOW_HIGH_RATIO
    rows = C.gpu_rows(_gpu(rt * 0.99, rt * 0.99 * ratio * 0.99))
    assert all(r.verdict == "recorded on GPU" for r in rows) and "(met)" in rows[0].measured
    assert rows[0].measured.startswith("zlib")
    assert "(not met)" in C.gpu_rows(_gpu(rt * 1.01, 1.0))[0].measured
    assert "(not met)" in C.gpu_rows(_gpu(10.0, 10.0 * ratio * 1.01))[0].measured
    s = C.TRITON_MIN_SPEED
    assert f"{s}×" in C.gpu_rows(_gpu(10.0, 1.0, triton_ms=1.0, peer_ms=s * 1.01))[1].measured
    assert "H200" in rows[0].scale


def _h264_gpu(high_ms, low_ms, gsplat=True, kernel_diff=1e-5, speed=1.0):
    """A run with the H.264 path per layer and (optionally) the gsplat comparison."""
    gpu = _gpu(1.0, 1.0)
    for row, total in zip(gpu["per_layer"], (low_ms, high_ms)):
        row.update({"h264_decode_ms": total / 2, "h264_dequant_ms": 0.0, "h264_render_ms": total / 2,
                    "h264_total_ms": total, "h264_psnr_vs_unquantised": 20.0 + row["l"],
                    "psnr_vs_unquantised": 30.0 + row["l"]})
    gpu["h264"] = {"codec": "libx264", "lossless_qp0": {"psnr_vs_unquantised_all_layers": 55.5, "decode_ms_all_layers": 3.0}}
    if gsplat:
        gpu["rasterizer"].update({"gsplat": "gsplat 1.5.3", "gsplat_rasterization_ms": 4.0,
                                  "gsplat_rasterize_to_pixels_ms": 2.0,
                                  "triton_on_gsplat_lists_ms": 2.0 / speed, "triton_end_to_end_ms": 8.0,
                                  "kernel_mean_abs_diff": kernel_diff, "kernel_max_abs_diff": 10 * kernel_diff,
                                  "end_to_end_mean_abs_diff": 2e-5, "end_to_end_max_abs_diff": 1e-3})
    return gpu


def test_gpu_rows_with_h264_and_gsplat():
    rt, ratio = C.REALTIME_MS, C.LOW_HIGH_RATIO
    rows = C.gpu_rows(_h264_gpu(rt * 0.99, rt * 0.99 * ratio * 0.99))
    assert len(rows) == 3 and all(r.verdict == "recorded on GPU" for r in rows)
    assert rows[0].measured.startswith("H.264") and "(met)" in rows[0].measured
    assert "PSNR l = 1..2: 21.0/22.0 dB" in rows[0].measured and "qp 0 (lossless): High 55.5 dB" in rows[0].measured
    assert "zlib path for comparison: High 1.0 ms" in rows[0].measured
    assert "(not met)" in C.gpu_rows(_h264_gpu(rt * 1.01, 1.0))[0].measured
    assert "(not met)" in C.gpu_rows(_h264_gpu(10.0, 10.0 * ratio * 1.01))[0].measured
    s = C.TRITON_MIN_SPEED
    assert "(target ≥ 0.5×: met)" in C.gpu_rows(_h264_gpu(10.0, 1.0, speed=s * 1.01))[1].measured
    assert "(target ≥ 0.5×: not met)" in C.gpu_rows(_h264_gpu(10.0, 1.0, speed=s * 0.99))[1].measured
    assert "rasterize_to_pixels 2.00 ms" in rows[1].measured and "0.50×" in rows[1].measured  # end to end 4 vs 8 ms
    d = C.GSPLAT_MAX_MEAN_ABS_DIFF
    assert "(met)" in C.gpu_rows(_h264_gpu(10.0, 1.0, kernel_diff=d * 0.99))[2].measured
    assert "(not met)" in C.gpu_rows(_h264_gpu(10.0, 1.0, kernel_diff=d * 1.01))[2].measured


def test_gpu_rows_without_gsplat_or_h264():
    gpu = _h264_gpu(10.0, 1.0, gsplat=False)
    gpu["rasterizer"]["gsplat"] = "unavailable: gsplat has no CPU path: it needs a CUDA device"
    rows = C.gpu_rows(gpu)
    assert len(rows) == 2 and "PyTorch 2.00 ms" in rows[1].measured
    assert "unavailable: gsplat has no CPU path" in rows[1].measured
    gpu = _gpu(10.0, 1.0)
    gpu["h264"] = "not available: this PyAV build has no libx264 encoder"
    assert "H.264: not available" in C.gpu_rows(gpu)[0].measured
    failed = _gpu(10.0, 1.0)
    failed["rasterizer"] = {"gsplat": "failed: RuntimeError: boom"}
    assert len(C.gpu_rows(failed)) == 1  # no timings of the rasterisers, the decode row stays


@pytest.mark.parametrize("L", [2, 4, 8])
def test_rows_follow_the_run_sizes(L):
    psnr = [26.0 + 0.5 * l for l in range(L)]
    bytes_ = [100.0 * (l + 1) for l in range(L)]
    g = {"motion-aware": Seq(bytes_, psnr, Config(L=L)), "fixed group of 1": Seq([2 * b for b in bytes_], psnr),
         "fixed group of 5": Seq(bytes_, psnr)}
    rows = C.claim_rows(key_study(L=L), g)
    assert all(r.verdict in VERDICTS for r in rows)
    assert f"L = {L}" in rows[0].scale and "one seed" in rows[1].scale


def test_train3d_row_from_the_recorded_run_and_without_one():
    from companion.gaussian_video.train3d import recorded

    assert C.train3d_row(None).verdict == "not run here"
    payload = recorded()
    row = C.train3d_row(payload)
    assert row.verdict == "recorded on GPU" and f"{payload['per_layer'][0]['psnr_test']:.2f} dB" in row.measured
    assert C.train3d_row({**payload, "smoke": True}).verdict == "not run here"
    flat = {**payload, "psnr_monotone_in_l": False}
    assert "NOT monotone" in C.train3d_row(flat).measured
