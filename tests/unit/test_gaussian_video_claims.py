"""companion.gaussian_video.claims: every verdict threshold, just inside and just outside, on constructed
results (no training), judged by the one rule: three seeds where an effect needs them, one seed gives
inconclusive, a spread that straddles the target gives inconclusive; the GPU rows from constructed JSON."""

from types import SimpleNamespace

import pytest

from companion.core import VERDICTS
from companion.gaussian_video import claims as C
from companion.gaussian_video.pipeline import Config

CFG = Config(L=4)
SEEDS = 3


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


def seeds(**kw):
    """The same constructed study for each of three seeds (spread 0: every seed past the bar, or none)."""
    return [key_study(**kw) for _ in range(SEEDS)]


class Seq:
    def __init__(self, bytes_, psnr, cfg=CFG, n=6, groups=(0, 3)):
        self._c = {"l": list(range(1, len(psnr) + 1)), "bytes": list(bytes_), "psnr": list(psnr)}
        self.cfg, self.frames, self.groups = cfg, [{}] * n, list(groups)

    def rd_curve(self):
        return self._c


def groups(g1_scale=2.0, g5_scale=1.1, psnr=(26.0, 27.0, 27.5, 28.0), bytes_=(300.0, 400.0, 500.0, 600.0)):
    return {"motion-aware": Seq(bytes_, psnr), "fixed group of 1": Seq([b * g1_scale for b in bytes_], psnr),
            "fixed group of 5": Seq([b * g5_scale for b in bytes_], psnr)}


def group_seeds(**kw):
    return [groups(**kw) for _ in range(SEEDS)]


def _verdicts(rows):
    return [r.verdict for r in rows]


def test_progressive_thresholds():
    rows = C.progressive_rows(group_seeds())
    assert _verdicts(rows) == ["reproduced"] * 3  # worst step +0.5 dB, ratio 0.5, gap 2 dB
    t = C.PSNR_MONOTONE_TOL_DB
    assert C.progressive_rows(group_seeds(psnr=(26.0, 27.0, 27.0 - 0.99 * t, 28.0)))[0].verdict == "reproduced"
    assert C.progressive_rows(group_seeds(psnr=(26.0, 27.0, 27.0 - 1.01 * t, 28.0)))[0].verdict == "not reproduced"
    r = C.MAX_LOW_BYTE_RATIO
    assert C.progressive_rows(group_seeds(bytes_=(600 * r * 0.99, 400, 500, 600)))[1].verdict == "reproduced"
    assert C.progressive_rows(group_seeds(bytes_=(600 * r * 1.01, 400, 500, 600)))[1].verdict == "not reproduced"
    gmax = C.MAX_LOW_GAP_DB
    assert C.progressive_rows(group_seeds(psnr=(28.0 - 0.99 * gmax, 27.0, 27.5, 28.0)))[2].verdict == "reproduced"
    assert C.progressive_rows(group_seeds(psnr=(28.0 - 1.01 * gmax, 27.0, 27.5, 28.0)))[2].verdict == "not reproduced"
    assert "3 seeds" in rows[0].scale and "n=3" in rows[0].evidence and "first of 3 seeds" in rows[0].measured


def test_psi_margin_against_the_better_single_term():
    m = C.PSI_MARGIN_DB
    assert C.psi_row(seeds(op_low=27.0 - 1.01 * m, vol_low=27.0 - 1.01 * m)).verdict == "reproduced"
    assert C.psi_row(seeds(op_low=27.0 - 0.99 * m, vol_low=27.0 - 1.01 * m)).verdict == "not reproduced"
    assert C.psi_row(seeds(op_low=27.0 - 1.01 * m, vol_low=27.0 - 0.99 * m)).verdict == "not reproduced"
    row = C.psi_row(seeds(op_low=26.0, vol_low=25.0))
    assert "+1.00 dB over the better of the two" in row.measured and "≥ 0.10 dB" in row.evidence


def test_hierarchy_margin_and_partly_bar():
    m, p = C.HIER_MARGIN_DB, C.HIER_PARTLY_DB
    assert C.hierarchy_row(seeds(flat_low=27.0 - 1.01 * m)).verdict == "reproduced"
    assert C.hierarchy_row(seeds(flat_low=27.0 - 0.99 * m)).verdict == "partly reproduced"
    assert C.hierarchy_row(seeds(flat_low=27.0 - p - 0.01)).verdict == "partly reproduced"
    assert C.hierarchy_row(seeds(flat_low=27.0 - p + 0.01)).verdict == "not reproduced"


def test_rate_term_threshold_and_partly_bar():
    t, p = C.RATE_TERM_MIN_BDRATE, C.RATE_TERM_PARTLY_BDRATE
    assert C.rate_row(seeds(rate_scale=1 + 1.01 * t / 100)).verdict == "reproduced"
    assert C.rate_row(seeds(rate_scale=1 + 0.99 * t / 100)).verdict == "partly reproduced"
    assert C.rate_row(seeds(rate_scale=1 + (p + 0.01) / 100)).verdict == "partly reproduced"
    assert C.rate_row(seeds(rate_scale=1 + (p - 0.01) / 100)).verdict == "not reproduced"


def test_group_thresholds_sizes_1_and_5():
    t, p = C.GROUP1_MIN_BDRATE, C.GROUP1_PARTLY_BDRATE
    size1 = lambda **kw: C.grouping_rows(group_seeds(**kw))[0].verdict  # noqa: E731
    size5 = lambda **kw: C.grouping_rows(group_seeds(**kw))[1].verdict  # noqa: E731
    assert size1(g1_scale=1 + 1.01 * t / 100) == "reproduced"
    assert size1(g1_scale=1 + 0.99 * t / 100) == "partly reproduced"
    assert size1(g1_scale=1 + (p + 0.01) / 100) == "partly reproduced"
    assert size1(g1_scale=1 + (p - 0.01) / 100) == "not reproduced"
    g5 = C.GROUP5_MIN_BDRATE
    assert size5(g5_scale=1 + (g5 + 0.01) / 100) == "reproduced"
    assert size5(g5_scale=1 + (g5 - 0.01) / 100) == "not reproduced"


def test_grouping_is_judged_against_size_5_too():
    """The recorded run's fixed groups of 5 give fewer bytes and higher PSNR at 3 of 4 layers.
    The size-5 row must say so (negative BD-rate, not the "+22.8 %" of a PSNR-sorted zig-zag), whatever size 1
    shows."""
    ma = Seq([314.67, 417.67, 512.67, 609.33], [24.7682, 27.7456, 28.1329, 28.0923])
    g1 = Seq([617.83, 820.67, 1011.83, 1204.5], [21.1766, 25.5808, 25.8763, 27.0441])
    g5 = Seq([311.67, 409.83, 501.5, 595.0], [24.9088, 27.9756, 27.9060, 28.3519])
    rows = C.grouping_rows([{"motion-aware": ma, "fixed group of 1": g1, "fixed group of 5": g5}] * SEEDS)
    assert _verdicts(rows) == ["reproduced", "not reproduced"]
    assert "-4.4 % BD-rate" in rows[1].measured
    assert "dropped, as they add bytes and lower PSNR: motion-aware l = 4; fixed group of 5 l = 3" in rows[1].details
    one = C.grouping_rows({"motion-aware": ma, "fixed group of 1": g1, "fixed group of 5": g5})
    assert _verdicts(one) == ["inconclusive", "inconclusive"] and "one seed" in one[1].scale


def test_rate_row_on_a_top_layer_that_lowers_psnr():
    """The recorded keyframe curves; the PSNR-sorted fit printed +49.75 % BD-rate."""
    k = key_study()
    k.curves["full"] = {"bytes": [618, 821, 1014, 1205], "psnr": [22.8353, 26.5221, 26.6761, 26.5521]}
    k.curves["no rate term"] = {"bytes": [617, 822, 1015, 1211], "psnr": [22.8862, 26.5506, 26.6779, 26.5390]}
    row = C.rate_row([k] * SEEDS)
    assert row.verdict == "not reproduced" and "-0.54 % BD-rate" in row.measured
    assert "full l = 4; no rate term l = 4" in row.details


def test_one_seed_is_inconclusive():
    """The notebook's default: one seed per study. Every CPU effect row shows its number, without a verdict
    of reproduced or not, however large the margin."""
    rows = [*C.progressive_rows(groups()), C.psi_row(key_study()), C.hierarchy_row(key_study(flat_low=10.0)),
            C.rate_row(key_study(rate_scale=2.0)), *C.grouping_rows(groups(g1_scale=3.0))]
    assert all(r.verdict == "inconclusive" for r in rows), _verdicts(rows)
    assert all(r.evidence.startswith("n=1:") and "fewer than 3 seeds" in r.evidence for r in rows)
    assert all("one seed" in r.scale for r in rows)


def test_spread_that_straddles_the_target_is_inconclusive():
    straddle = [key_study(flat_low=27.0 - g) for g in (-1.0, -0.5, 1.3)]  # gains: mean -0.07 ± 1.2 dB
    row = C.hierarchy_row(straddle)
    assert row.verdict == "inconclusive" and "straddles" in row.evidence  # below the weaker bar, the target within the spread
    straddle = [key_study(op_low=27.0 - g, vol_low=20.0) for g in (-0.5, 0.0, 0.4)]  # Ψ margins: mean -0.03 ± 0.45
    row = C.psi_row(straddle)
    assert row.verdict == "inconclusive" and "straddles" in row.evidence
    partly = [key_study(op_low=27.0 - g, vol_low=20.0) for g in (0.05, 0.2, 0.3)]  # mean 0.18 ± 0.13: not every seed
    assert C.psi_row(partly).verdict == "partly reproduced"


def test_bd_row_without_a_common_psnr_range_is_inconclusive():
    k = key_study()
    k.curves["no rate term"] = {"bytes": [100.0, 200.0, 300.0, 400.0], "psnr": [40.0, 41.0, 42.0, 43.0]}
    row = C.rate_row([k] * SEEDS)
    assert row.verdict == "inconclusive" and "share no PSNR range" in row.evidence


def _gpu(high_ms, low_ms):
    """A decode study's JSON with the zlib path only (its h264 stage failed)."""
    return {"device": "NVIDIA H200", "date": "2026-12-02 10:00 UTC",
            "profile": {"n_gaussians": 100000, "width": 512, "L": 2},
            "stages": {"h264": {"state": "failed", "error": "H264Unavailable: no libx264"},
                       "per_layer": {"state": "done"}},
            "per_layer": [{"l": 1, "total_ms": low_ms, "decode_ms": low_ms / 2, "render_ms": low_ms / 2},
                          {"l": 2, "total_ms": high_ms, "decode_ms": high_ms / 2, "render_ms": high_ms / 2}]}


def _h264_gpu(high_ms, low_ms):
    """A run with the H.264 path per layer."""
    gpu = _gpu(1.0, 1.0)
    for row, total in zip(gpu["per_layer"], (low_ms, high_ms)):
        row.update({"h264_decode_ms": total / 2, "h264_dequant_ms": 0.0, "h264_render_ms": total / 2,
                    "h264_total_ms": total, "h264_psnr_vs_unquantised": 20.0 + row["l"],
                    "psnr_vs_unquantised": 30.0 + row["l"]})
    gpu["h264"] = {"codec": "libx264", "lossless_qp0": {"psnr_vs_unquantised_all_layers": 55.5, "decode_ms_all_layers": 3.0}}
    gpu["stages"]["h264"] = {"state": "done"}
    return gpu


@pytest.mark.parametrize("make", [_gpu, _h264_gpu])
def test_gpu_decode_rows_timing_thresholds(make):
    rt, ratio = C.REALTIME_MS, C.LOW_HIGH_RATIO
    rows = C.gpu_rows(make(rt * 0.99, rt * 0.99 * ratio * 0.99))
    assert _verdicts(rows) == ["reproduced", "reproduced"]
    assert _verdicts(C.gpu_rows(make(rt * 1.01, 1.0)))[0] == "not reproduced"
    assert _verdicts(C.gpu_rows(make(10.0, 10.0 * ratio * 1.01)))[1] == "not reproduced"
    assert rows[0].evidence.startswith("n=1:") and "≤ 33.0 ms" in rows[0].evidence
    assert rows[0].scale.startswith("NVIDIA H200, one run")


def test_gpu_decode_rows_say_what_ran():
    """The decode benchmark codes an untrained synthetic scene, and its entropy coder is zlib,
    not constriction; the rows say both."""
    zlib_rows = C.gpu_rows(_gpu(10.0, 4.0))
    assert zlib_rows[0].measured.startswith("zlib level 9 (standing in for the constriction")
    h264 = C.gpu_rows(_h264_gpu(10.0, 4.0))
    assert h264[0].measured.startswith("H.264") and "PSNR against the unquantised render l = 1..2: 21.0/22.0 dB" in h264[0].measured
    assert "qp 0 (lossless): High 55.5 dB" in h264[0].measured
    assert "zlib level 9 (standing in for the constriction entropy coder" in h264[0].measured
    for row in zlib_rows + h264:
        assert "untrained synthetic scene" in row.scale and "not fitted to any image" in row.scale
    assert "H.264 not timed: stage h264 (failed: H264Unavailable: no libx264)" in zlib_rows[0].measured


def test_gpu_rows_from_the_recorded_json():
    from companion.gaussian_video.scale import recorded

    gpu = recorded()
    rows = C.gpu_rows(gpu)
    hi, lo = gpu["per_layer"][-1]["h264_total_ms"], gpu["per_layer"][0]["h264_total_ms"]
    assert rows[0].verdict == ("reproduced" if hi <= C.REALTIME_MS else "not reproduced")
    assert rows[1].verdict == ("reproduced" if lo / hi <= C.LOW_HIGH_RATIO else "not reproduced")
    assert all(r.verdict in VERDICTS for r in rows)


def test_gpu_rows_without_a_run_or_a_finished_per_layer_stage():
    """Not run here, saying why: no run; the per_layer stage cut off (a kill leaves it unfinished), skipped or
    never run; or stopped by the deadline before l = L."""
    assert _verdicts(C.gpu_rows(None)) == ["not run here"]
    killed = _gpu(10.0, 4.0)
    killed["stages"]["per_layer"] = {"state": "unfinished", "started": "2026-12-02 10:00:00 UTC"}
    row = C.gpu_rows(killed)[0]
    assert row.verdict == "not run here" and "stage per_layer (unfinished)" in row.measured
    skipped = _gpu(10.0, 4.0)
    skipped["stages"]["per_layer"] = {"state": "skipped", "reason": "deadline: 3 s left, needs 30 s"}
    assert "per_layer (skipped: deadline: 3 s left, needs 30 s)" in C.gpu_rows(skipped)[0].measured
    never = _gpu(10.0, 4.0)
    del never["stages"]["per_layer"], never["per_layer"]
    assert "per_layer (not run)" in C.gpu_rows(never)[0].measured
    short = _gpu(10.0, 4.0)
    short["per_layer"] = short["per_layer"][:1]
    row = C.gpu_rows(short)[0]
    assert row.verdict == "not run here" and "timed l = 1..1 of L = 2 before its deadline" in row.measured


def test_train3d_row_one_seed_smoke_unfinished_and_none():
    from companion.gaussian_video.scale_train3d import recorded

    assert C.train3d_row(None).verdict == "not run here"
    payload = recorded()
    row = C.train3d_row(payload)
    seq = payload["sequence"]
    assert row.verdict == "inconclusive" and row.evidence.startswith("n=1:")
    assert f"{seq['per_layer'][0]['psnr_test']:.2f} dB" in row.measured and "worst step in l" in row.details
    assert row.scale.startswith(f"{payload['device']}, one seed")
    sc = payload["profile"]["scene"]
    assert f"{sc['n_gt']} ground-truth" in row.scale and f"({len(seq['test_cameras'])} held out)" in row.scale
    assert f"{seq['n_frames_done']} of {seq['n_frames_planned']} frames" in row.scale and "gsplat renderer" in row.scale
    smoke = C.train3d_row({**payload, "smoke": True})
    assert smoke.verdict == "inconclusive" and smoke.scale.startswith("smoke run (CPU)")
    flat = {**payload, "sequence": {**seq, "psnr_monotone_in_l": False}}
    assert "NOT monotone" in C.train3d_row(flat).details
    killed = {**payload, "stages": {**payload["stages"], "sequence": {"state": "unfinished", "started": "now"}}}
    row = C.train3d_row(killed)
    assert row.verdict == "not run here" and "stage sequence (unfinished)" in row.measured


@pytest.mark.parametrize("L", [2, 4, 8])
def test_rows_follow_the_run_sizes(L):
    psnr = [26.0 + 0.5 * l for l in range(L)]
    bytes_ = [100.0 * (l + 1) for l in range(L)]
    g = {"motion-aware": Seq(bytes_, psnr, Config(L=L)), "fixed group of 1": Seq([2 * b for b in bytes_], psnr),
         "fixed group of 5": Seq(bytes_, psnr)}
    rows = C.claim_rows(key_study(L=L), g)
    assert all(r.verdict in VERDICTS and r.evidence for r in rows)
    assert f"L = {L}" in rows[0].scale and "one seed" in rows[3].scale


def test_rate_row_without_a_common_range_writes_n_a():
    """Curves that share no PSNR (or rate) range have no BD numbers: the row says n/a, never "nan"."""
    k = key_study()
    k.curves["full"] = {"bytes": [100, 200, 300, 400], "psnr": [20.0, 21.0, 22.0, 23.0]}
    k.curves["no rate term"] = {"bytes": [1000, 2000, 3000, 4000], "psnr": [30.0, 31.0, 32.0, 33.0]}
    row = C.rate_row([k] * SEEDS)
    assert row.verdict == "inconclusive" and "n/a" in row.measured
    assert "nan" not in (row.measured + row.details + row.evidence).lower()


def t3d(key_top=(28.0, 29.0), inter_top=23.0, gain=0.5, curve=True, n_frames=6, groups=(0, 3)):
    """A constructed 3-D study payload (L = 2): keyframes at ``groups`` with held-out PSNR ``key_top`` at the top
    layer, inter-frames at ``inter_top``; each keyframe's training curve (every 50 steps to 1,000) gains ``gain`` dB
    over its last 200 steps."""
    keys = iter(key_top)
    frames = []
    for t in range(n_frames):
        top = next(keys) if t in groups else inter_top
        f = {"t": t, "kind": "key" if t in groups else "inter", "psnr_test": [top - 3.0, top]}
        if curve and t in groups:
            steps = list(range(50, 1001, 50))
            f["curve"] = {"every": 50, "step": steps, "train_psnr": [top + 1.0 + gain * (s - 1000) / 200 for s in steps],
                          "stopped_at": None}
        frames.append(f)
    per_layer = [{"l": l + 1, "psnr_test": sum(f["psnr_test"][l] for f in frames) / n_frames, "mb_per_frame": 0.1 * (l + 1),
                  "n_gaussians": 500.0 * (l + 1)} for l in range(2)]
    return {"device": "GPU X", "stages": {"sequence": {"state": "done"}},
            "profile": {"backend": "gsplat", "scene": {"n_gt": 1000, "n_cameras": 8, "width": 64},
                        "train": {"key_steps": 1000, "L": 2}},
            "sequence": {"frames": frames, "per_layer": per_layer, "groups": list(groups), "test_cameras": [3, 7],
                         "n_frames_done": n_frames, "n_frames_planned": n_frames, "psnr_monotone_in_l": True,
                         "train_min_per_frame": 0.1}}


def test_keyframe_row_target_just_inside_and_outside():
    t = C.TRAIN3D_TARGET_DB
    assert C.keyframe_row([t3d(key_top=(t + 0.01, t + 0.01))] * SEEDS).verdict == "reproduced"
    assert C.keyframe_row([t3d(key_top=(t - 0.01, t - 0.01))] * SEEDS).verdict == "not reproduced"
    # one value per seed, the mean over its keyframes: one keyframe below the target, the mean above it
    assert C.keyframe_row([t3d(key_top=(t - 0.5, t + 0.6))] * SEEDS).verdict == "reproduced"


def test_keyframe_row_one_seed_straddle_and_missing_curve():
    t = C.TRAIN3D_TARGET_DB
    one = C.keyframe_row(t3d(key_top=(t + 2, t + 2)))
    assert one.verdict == "inconclusive" and one.evidence.startswith("n=1:")
    assert "one seed" in one.scale and one.scale.endswith("2 keyframes")
    assert f"t = 0 {t + 2:.2f} dB, t = 3 {t + 2:.2f} dB" in one.measured
    spread = [t3d(key_top=(v, v)) for v in (t - 1.5, t - 0.2, t + 1.0)]
    assert C.keyframe_row(spread).verdict == "inconclusive" and "straddles" in C.keyframe_row(spread).evidence
    old = C.keyframe_row(t3d(curve=False))
    assert old.verdict == "not run here" and "no keyframe training curve" in old.evidence
    assert C.keyframe_row(None).verdict == "not run here"
    killed = {**t3d(), "stages": {"sequence": {"state": "unfinished"}}}
    assert C.keyframe_row(killed).verdict == "not run here" and C.sequence_row(killed).verdict == "not run here"
    assert C.keyframe_row({**t3d(), "smoke": True}).verdict == "inconclusive"


def test_keyframe_curve_plateau_threshold():
    g, w = C.PLATEAU_GAIN_DB, C.PLATEAU_WINDOW_STEPS
    rising = C.keyframe_row(t3d(gain=g + 0.01)).details
    flat = C.keyframe_row(t3d(gain=g - 0.01)).details
    assert f"over the last {w} steps (still rising" in rising and "(plateaued" not in rising
    assert f"over the last {w} steps (plateaued" in flat and "still rising" not in flat
    # the training curve ends 1 dB above the held-out PSNR in the constructed payload
    assert "+1.00 dB above held-out" in flat


def test_sequence_row_high_target_and_partly_bar():
    hi, t = C.PAPER_HIGH_DB, C.TRAIN3D_TARGET_DB

    def flat(v):
        return [t3d(key_top=(v, v), inter_top=v)] * SEEDS

    assert C.sequence_row(flat(hi + 0.01)).verdict == "reproduced"
    assert C.sequence_row(flat(hi - 0.01)).verdict == "partly reproduced"
    assert C.sequence_row(flat(t + 0.01)).verdict == "partly reproduced"
    assert C.sequence_row(flat(t - 0.01)).verdict == "not reproduced"
    assert C.sequence_row(t3d(key_top=(hi + 1, hi + 1), inter_top=hi + 1)).verdict == "inconclusive"  # one seed
    # below the partly bar on the mean, but a spread that reaches past the target
    spread = [t3d(key_top=(v, v), inter_top=v) for v in (t - 3.0, t - 1.0, hi + 0.5)]
    assert C.sequence_row(spread).verdict == "inconclusive" and "straddles" in C.sequence_row(spread).evidence


def test_sequence_row_names_the_keyframe_to_inter_drop():
    row = C.sequence_row(t3d(key_top=(29.0, 28.0), inter_top=23.0))
    assert "keyframes 28.50 dB, inter-frames 23.00 dB" in row.measured
    assert "group from t = 0: keyframe 29.00 dB, its 2 inter-frames 23.00 dB (-6.00 dB" in row.details
    assert "group from t = 3: keyframe 28.00 dB, its 2 inter-frames 23.00 dB (-5.00 dB" in row.details
    assert C.sequence_row(None).verdict == "not run here"


def test_quality_rows_on_the_recorded_run():
    from companion.gaussian_video.scale_train3d import recorded

    payload = recorded()
    keys = [f for f in payload["sequence"]["frames"] if f["kind"] == "key"]
    key, seq = C.keyframe_row(payload), C.sequence_row(payload)
    assert key.verdict == seq.verdict == "inconclusive" and "fewer than 3 seeds" in key.evidence
    assert all(f"t = {f['t']} {f['psnr_test'][-1]:.2f} dB" in key.measured for f in keys)
    assert f"{len(keys)} keyframes" in key.scale and "one seed" in seq.scale
    assert f"{payload['sequence']['per_layer'][-1]['psnr_test']:.2f} dB" in seq.measured


def test_the_keyframe_row_reads_the_longer_run_the_other_3d_rows_the_complete_one():
    g = {"motion-aware": Seq([100.0, 200.0], [26.0, 27.0], Config(L=2)), "fixed group of 1": Seq([200.0, 400.0], [26.0, 27.0]),
         "fixed group of 5": Seq([100.0, 200.0], [26.0, 27.0])}
    complete, longer = t3d(key_top=(28.0, 29.0)), t3d(key_top=(31.0, 32.0), n_frames=5)

    def rows(**kw):
        return {r.claim: r for r in C.claim_rows(key_study(L=2), g, train3d=complete, **kw)}

    key_claim, seq_claim = C.keyframe_row(complete).claim, C.sequence_row(complete).claim
    assert rows()[key_claim].measured == C.keyframe_row(complete).measured
    both = rows(train3d_longer=longer)
    assert both[key_claim].measured == C.keyframe_row(longer).measured and "31.00 dB" in both[key_claim].measured
    assert both[seq_claim].measured == C.sequence_row(complete).measured
