"""Paper 08's kernel study (companion.dartquant.scale_kernel) without a GPU: the agreement measure of the Triton op
against eager PyTorch (thresholds just inside and just outside), the byte and FLOP rates, the summary line and the
mismatch list of a recorded payload, the choice of the split tile the breakdown times, the profiles, and the
refusals that come before any kernel is imported. The stages themselves run end to end in the smoke test
(tests/unit/test_package_shape.py: ``python -m companion.bench dartquant_kernel --smoke``)."""

import math
import time

import pytest
import torch

from companion.core import ParameterError
from companion.core.stages import StageContext
from companion.dartquant import kernel_bench as K
from companion.dartquant import scale_kernel


def _pair(tokens=40, n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(tokens, n, generator=g)
    from companion_kernels.rotate_quant_whip.reference import fake_quant_rows, whip_rows

    return y, fake_quant_rows(y, 4), whip_rows(y)


def _step(y, bits=4, clip=0.9):
    return (y.amax(-1, keepdim=True).clamp(min=0) - y.amin(-1, keepdim=True).clamp(max=0)) * clip / (2 ** bits - 1)


def test_agreement_identical_and_thresholds():
    y, q, w = _pair()
    a = K.kernel_agreement(q, w, q, w, y, 4)
    assert a["matches"] and a["off_frac"] == 0.0 and a["max_steps"] == 0.0 and a["elements"] == y.numel()
    step = _step(y)
    # one element off by exactly one step: inside every threshold (1 of 640 elements, 1.0 <= the steps bound)
    q1 = q.clone()
    q1[3, 5] += step[3, 0]
    a1 = K.kernel_agreement(q1, w, q, w, y, 4)
    assert a1["matches"] and abs(a1["max_steps"] - 1.0) < 1e-5 and math.isclose(a1["off_frac"], 1 / y.numel(), rel_tol=1e-6)
    # off by 1.05 steps: outside the fp32 bound (1 + 1.8e-6 steps)
    q2 = q.clone()
    q2[3, 5] += 1.05 * step[3, 0]
    assert not K.kernel_agreement(q2, w, q, w, y, 4)["matches"]


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_steps_bound_is_one_step_plus_output_rounding(bits):
    b = K.kernel_steps_bound(bits, torch.bfloat16)
    assert b == pytest.approx(1 + (2 ** bits - 1) / 128) and K.kernel_steps_bound(bits, torch.float32) < 1 + 1e-4
    a = {"off_frac": 0.001, "whip_rel": 1e-6}
    assert K.kernel_matches({**a, "max_steps": b * 0.999}, bits, torch.bfloat16)
    assert not K.kernel_matches({**a, "max_steps": b * 1.001}, bits, torch.bfloat16)
    assert not K.kernel_matches({**a, "max_steps": 1.0, "off_frac": 1.001 * K.KERNEL_MAX_OFF_FRAC}, bits, torch.bfloat16)


def test_agreement_fraction_and_whip_thresholds():
    y, q, w = _pair(tokens=100, n=100)
    step = _step(y)
    n_in = int(K.KERNEL_MAX_OFF_FRAC * y.numel())  # exactly at the allowed fraction
    flat = torch.randperm(y.numel(), generator=torch.Generator().manual_seed(1))
    qin = q.clone().reshape(-1)
    rows = flat[:n_in] // 100
    qin[flat[:n_in]] += step[rows, 0]
    assert K.kernel_agreement(qin.reshape(q.shape), w, q, w, y, 4)["matches"]
    qout = q.clone().reshape(-1)
    rows = flat[: n_in + 1] // 100
    qout[flat[: n_in + 1]] += step[rows, 0]
    assert not K.kernel_agreement(qout.reshape(q.shape), w, q, w, y, 4)["matches"]
    assert K.kernel_agreement(q, w * (1 + 0.9 * K.KERNEL_WHIP_RTOL), q, w, y, 4)["matches"]
    assert not K.kernel_agreement(q, w * (1 + 1.1 * K.KERNEL_WHIP_RTOL), q, w, y, 4)["matches"]


def test_bytes_and_rates():
    assert K.kernel_bytes(32768, 4096, 2) == 2 * 32768 * 4096 * 2 + 4096 * 4096 * 2 + 4 * 32768
    r = K.rates(2.0, 32768, 4096, 2)
    assert r["ms"] == 2.0 and math.isclose(r["tbps"], K.kernel_bytes(32768, 4096, 2) / 2e9, rel_tol=1e-3)
    assert math.isclose(r["tflops"], 2 * 32768 * 4096 ** 2 / 2e9, rel_tol=1e-4)  # 1.1 TFLOP in 2 ms: 549.76


_AGREE = {"off_frac": 1e-4, "max_steps": 1.03, "whip_rel": 4e-7, "elements": 134217728, "matches": True}


def _row(variant, tile, ms, compiled_ms=1.6, eager_ms=5.5, **agreement):
    a = {**_AGREE, **agreement}
    a["matches"] = K.kernel_matches(a, 4, torch.bfloat16)
    return {"variant": variant, "tile": tile, "agreement": a, **K.rates(ms, 32768, 4096, 2),
            "vs_compiled": round(compiled_ms / ms, 3), "vs_eager": round(eager_ms / ms, 3)}


def _payload(ours, state="done"):
    """A kernel-study payload with the peers at 1.6 ms (compiled) and 5.5 ms (eager) and ``ours``' rows."""
    tried = [r for r in ours if "ms" in r]
    kernel = {"tokens": 32768, "n": 4096, "bits": 4, "dtype": "bfloat16", "clip": 0.9,
              "bytes_counted": "X read + R read once + quantized Y written + fp32 Whip sums written",
              "compiled": {"backend": "inductor", "compile_seconds": 12.3, "agreement": _AGREE,
                           **K.rates(1.6, 32768, 4096, 2)},
              "eager": K.rates(5.5, 32768, 4096, 2), "ours": ours,
              "all_match": all(r["agreement"]["matches"] for r in tried)}
    return {"device": "NVIDIA H200", "date": "2026-12-05", "stages": {"kernel": {"state": state}}, "kernel": kernel}


def test_table_gives_every_tile_against_the_peers_and_its_caption_the_agreement():
    rows = [_row("fused", [128, 128, 64, 8, 3], 3.1), _row("fused", [64, 256, 64, 8, 3], 2.9),
            _row("split", [128, 256, 64, 8, 3, 1], 1.9), _row("split", [128, 128, 64, 4, 4, 0], 1.5, off_frac=0.5),
            {"variant": "split", "tile": [128, 128, 64, 8, 3], "skipped": "deadline: 3 s left, needs 5 s"}]
    p = _payload(rows)
    caption, table = scale_kernel.table(p)
    assert "compilation took 12.3 s" in caption and "NVIDIA H200, 2026-12-05" in caption
    assert [r["schedule"] for r in table] == ["torch.compile (peer)", "eager PyTorch", "fused 128×128×64 w8 s3",
                                              "fused 64×256×64 w8 s3", "split 128×256×64 w8 s3 TMA",  # TMA named
                                              "split 128×128×64 w4 s4"]
    assert [r["ms"] for r in table] == [1.6, 5.5, 3.1, 2.9, 1.9, 1.5]
    tma = table[4]
    assert tma["× torch.compile"] == 0.84 and tma["× eager"] == 2.89 and tma["matches PyTorch"] == "yes"
    assert table[5]["matches PyTorch"] == "NO"  # the fastest tile does not match: the table says so
    assert "Not timed (the study's deadline): split 128×128×64 w8 s3." in caption
    assert "does NOT all match PyTorch: at most 50.000 % of elements" in caption
    assert scale_kernel.mismatches(p) == ["split 128×128×64 w4 s4"]
    good = _payload(rows[:3])
    assert "Every tile tried matches PyTorch" in scale_kernel.table(good)[0] and scale_kernel.mismatches(good) == []
    assert scale_kernel.mismatches(_payload(rows, state="failed")) == []  # the stage did not finish: nothing read


def _ctx(profile, results=None):
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results=results or {},
                        until=time.perf_counter() + 60)


def test_breakdown_times_the_fastest_matching_split_tile():
    rows = [_row("split", [128, 256, 64, 8, 3], 1.9), _row("split", [128, 128, 64, 8, 3], 1.7),
            _row("split", [128, 128, 64, 4, 4], 1.5, off_frac=0.5), _row("fused", [64, 256, 64, 8, 3], 1.0)]
    P = scale_kernel.GPU_PROFILE
    assert K._best_split_tile(_ctx(P, {"kernel": _payload(rows)["kernel"]})) == [128, 128, 64, 8, 3]
    assert K._best_split_tile(_ctx(P)) == P["tiles"]["split"][0]  # no kernel stage in this payload


def test_stages_refuse_before_importing_a_kernel(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    for stage in scale_kernel.STAGES:
        with pytest.raises(RuntimeError, match="needs a CUDA device, or TRITON_INTERPRET=1"):
            stage.run(_ctx(scale_kernel.SMOKE_PROFILE))
    with pytest.raises(ParameterError, match="dtype"):
        K.run_kernel(_ctx({**scale_kernel.SMOKE_PROFILE, "dtype": "int8"}))
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # past the device check, refused before the kernels are imported
    with pytest.raises(ParameterError, match="tiles"):
        K.run_kernel(_ctx({**scale_kernel.SMOKE_PROFILE, "tiles": {"tiled": [[16, 32, 32, 4, 1]]}}))
    with pytest.raises(ParameterError, match="compile_backend"):
        K.run_kernel(_ctx({**scale_kernel.SMOKE_PROFILE, "compile_backend": "tvm"}))


def test_profiles():
    P, S = scale_kernel.GPU_PROFILE, scale_kernel.SMOKE_PROFILE
    assert (P["tokens"], P["n"], P["dtype"], P["bits"], P["compile_backend"]) == (32768, 4096, "bfloat16", 4, "inductor")
    assert set(P["tiles"]) == {"fused", "split", "matmul"}
    assert all(len(t) == 6 and t[5] in (0, 1) for ts in P["tiles"].values() for t in ts)  # the last: TMA loads
    assert {t[5] for v in ("fused", "split") for t in P["tiles"][v]} == {0, 1}
    assert set(S) == set(P) and S["compile_backend"] == "eager" and S["tiles"] == P["tiles"]
    # the smoke shape is a multiple of no tile: every mask is exercised
    gemm_tiles = [t for v in ("fused", "split") for t in S["tiles"][v]]
    assert all(S["tokens"] % t[0] and S["n"] % t[1] and S["n"] % t[2] for t in gemm_tiles)
    assert all(S["n"] % t[1] for t in S["tiles"]["matmul"])  # the row pass's column steps: a ragged last one
    assert [s.name for s in scale_kernel.STAGES] == ["kernel", "breakdown"]
    assert sum(s.needs_s for s in scale_kernel.STAGES) <= scale_kernel.DEADLINE_S <= 150
