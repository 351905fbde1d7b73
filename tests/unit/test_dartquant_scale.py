"""Paper 08's GPU study without a GPU: the fused kernel's agreement measure (thresholds just inside and just
outside), its byte count, the notebook's one-line summary of a recorded payload, stage bodies on tiny inputs, and
the GPU profile's shape."""

import math
import time

import pytest
import torch

from companion.core import ParameterError
from companion.core.stages import StageContext
from companion.dartquant import scale
from companion.dartquant import study as S


def _pair(tokens=40, n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(tokens, n, generator=g)
    from companion_kernels.rotate_quant_whip.reference import fake_quant_rows, whip_rows

    return y, fake_quant_rows(y, 4), whip_rows(y)


def _step(y, bits=4, clip=0.9):
    return (y.amax(-1, keepdim=True).clamp(min=0) - y.amin(-1, keepdim=True).clamp(max=0)) * clip / (2 ** bits - 1)


def test_agreement_identical_and_thresholds():
    y, q, w = _pair()
    a = S.kernel_agreement(q, w, q, w, y, 4)
    assert a["matches"] and a["off_frac"] == 0.0 and a["max_steps"] == 0.0 and a["elements"] == y.numel()
    step = _step(y)
    # one element off by exactly one step: inside every threshold (1 of 640 elements, 1.0 <= KERNEL_MAX_STEPS)
    q1 = q.clone()
    q1[3, 5] += step[3, 0]
    a1 = S.kernel_agreement(q1, w, q, w, y, 4)
    assert a1["matches"] and abs(a1["max_steps"] - 1.0) < 1e-5 and math.isclose(a1["off_frac"], 1 / y.numel(), rel_tol=1e-6)
    # off by 1.05 steps: outside the fp32 bound (1 + 1.8e-6 steps)
    q2 = q.clone()
    q2[3, 5] += 1.05 * step[3, 0]
    assert not S.kernel_agreement(q2, w, q, w, y, 4)["matches"]


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_steps_bound_is_one_step_plus_output_rounding(bits):
    b = S.kernel_steps_bound(bits, torch.bfloat16)
    assert b == pytest.approx(1 + (2 ** bits - 1) / 128) and S.kernel_steps_bound(bits, torch.float32) < 1 + 1e-4
    a = {"off_frac": 0.001, "whip_rel": 1e-6}
    assert S.kernel_matches({**a, "max_steps": b * 0.999}, bits, torch.bfloat16)
    assert not S.kernel_matches({**a, "max_steps": b * 1.001}, bits, torch.bfloat16)
    assert not S.kernel_matches({**a, "max_steps": 1.0, "off_frac": 1.001 * S.KERNEL_MAX_OFF_FRAC}, bits, torch.bfloat16)


def test_agreement_fraction_and_whip_thresholds():
    y, q, w = _pair(tokens=100, n=100)
    step = _step(y)
    n_in = int(S.KERNEL_MAX_OFF_FRAC * y.numel())  # exactly at the allowed fraction
    flat = torch.randperm(y.numel(), generator=torch.Generator().manual_seed(1))
    qin = q.clone().reshape(-1)
    rows = flat[:n_in] // 100
    qin[flat[:n_in]] += step[rows, 0]
    assert S.kernel_agreement(qin.reshape(q.shape), w, q, w, y, 4)["matches"]
    qout = q.clone().reshape(-1)
    rows = flat[: n_in + 1] // 100
    qout[flat[: n_in + 1]] += step[rows, 0]
    assert not S.kernel_agreement(qout.reshape(q.shape), w, q, w, y, 4)["matches"]
    assert S.kernel_agreement(q, w * (1 + 0.9 * S.KERNEL_WHIP_RTOL), q, w, y, 4)["matches"]
    assert not S.kernel_agreement(q, w * (1 + 1.1 * S.KERNEL_WHIP_RTOL), q, w, y, 4)["matches"]


def test_kernel_bytes():
    assert S.kernel_bytes(32768, 4096, 2) == 2 * 32768 * 4096 * 2 + 4096 * 4096 * 2 + 4 * 32768


def _recorded(compile_row=None, compile_state=None, **kernel):
    base = {"tokens": 32768, "n": 4096, "bits": 4, "dtype": "bfloat16", "bytes": S.kernel_bytes(32768, 4096, 2),
            "flop": 2 * 32768 * 4096 ** 2, "bytes_counted": "X read + R read once + quantized Y written",
            "eager_ms": 4.0, "triton_ms": 2.0, "speedup_vs_eager": 2.0,
            "agreement": {"off_frac": 1e-4, "max_steps": 1.0, "whip_rel": 1e-6, "matches": True}}
    base.update(kernel)
    for name in ("eager", "triton"):
        S.add_rates(base, name, 32768, 4096, 2)
    stages = {"kernel": {"state": "done"},
              "kernel_compile": compile_state or {"state": "done" if compile_row else "skipped", "reason": "deadline"}}
    return {"device": "NVIDIA H200", "date": "2026-12-02", "stages": stages, "kernel": base,
            **({"kernel_compile": compile_row} if compile_row else {})}


def test_kernel_summary():
    assert "no GPU run recorded (python -m companion.bench dartquant)" in scale.kernel_summary(None)
    cut = scale.kernel_summary({"stages": {"kernel": {"state": "failed", "error": "OutOfMemoryError: x"}}})
    assert "not recorded (the recorded run's stage kernel (failed: OutOfMemoryError: x))" in cut
    txt = scale.kernel_summary(_recorded())
    assert "speed-up 2.00×" in txt and "TB/s" in txt and "Matches PyTorch: yes" in txt
    assert "torch.compile not timed beside it (the recorded run's stage kernel_compile (skipped: deadline))" in txt
    rec = _recorded(compile_row={"compiled_ms": 3.0, "speedup_vs_compiled": 1.5})
    assert "torch.compile of the same function 3.000 ms" in scale.kernel_summary(rec)
    assert "1.50× its speed" in scale.kernel_summary(rec)
    assert math.isclose(rec["kernel"]["triton_tbps"], rec["kernel"]["bytes"] / 2.0 / 1e9, rel_tol=1e-3)
    bad = _recorded(agreement={"off_frac": 0.5, "max_steps": 3.0, "whip_rel": 0.1, "matches": False})
    assert "Matches PyTorch: NO" in scale.kernel_summary(bad)


def test_the_committed_record_reads_without_error():
    gpu = scale.recorded()
    if gpu is None:
        pytest.skip("no recorded GPU run")
    if not scale.missing(gpu, "kernel_compile"):
        assert gpu["kernel_compile"]["speedup_vs_compiled"] == round(gpu["kernel_compile"]["compiled_ms"] / gpu["kernel"]["triton_ms"], 3)
    assert "Fused rotate + INT4 fake-quant + Whip kernel" in scale.kernel_summary(gpu)


def _ctx(profile, results=None, left=math.inf):
    """A stage's context on the CPU with ``left`` seconds to use."""
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results=results or {},
                        until=time.perf_counter() + left)


def test_compile_stage_times_the_reference_and_the_kernel_beside_it():
    P = {**scale.SMOKE_PROFILE, "kernel_tokens": 9, "kernel_n": 8}
    row = S.run_kernel_compile(_ctx(P, {"kernel": {"triton_ms": 0.5}}))
    assert row["compiled_agreement"]["matches"] and row["compiled_agreement"]["off_frac"] == 0.0
    assert row["speedup_vs_compiled"] == round(row["compiled_ms"] / 0.5, 3) and row["compiled_tbps"] >= 0
    assert "speedup_vs_compiled" not in S.run_kernel_compile(_ctx(P))  # no kernel stage in this payload
    with pytest.raises(ParameterError, match="kernel_dtype"):
        S.run_kernel_compile(_ctx({**P, "kernel_dtype": "int8"}))


def test_outlier_stage_on_a_tiny_model():
    """One seed of the massive-channel study end to end on the CPU: both injections leave the float model as it
    was, fused norms cancel the norm-gain one, the largest s breaks the unrotated model more than s = 1 does, the
    residual-stream channels stand out, and the payload holds what the claims read."""
    P = {**scale.SMOKE_PROFILE, "text_bytes": 60_000, "outlier_scales": [1, 50]}
    ctx = _ctx(P)
    out = S.outlier_stage(1)(ctx)
    assert out["seed"] == P["seed"] + 1 and len(out["channels"]) == P["outlier_channels"]
    assert set(out["ppl"]) == {"fp32", "none", "fused", "stream"}
    assert set(out["ppl"]["stream"]) == {"none", "quarot", "dartquant", "end-to-end"}
    assert set(out["ppl"]["none"]) == {"1", "50"} and set(out["injected"]) == {"1", "50"}
    assert all(r["logit_diff"] < 1e-4 and r["fused_weight_diff"] < 1e-5 for r in out["injected"].values())
    assert out["injected"]["50"]["peak_ratio"] > 1.5 * out["injected"]["1"]["peak_ratio"]
    st = out["stream"]
    assert st["logit_diff"] < 1e-4 and st["rms_ratio"] > st["rms_ratio_fused"]
    before, after = out["cost"]["e2e_fixed_loss"]
    assert len(out["cost"]["e2e_loss"]) == P["e2e_steps"] and out["cost"]["e2e_loss_drop"] == pytest.approx(1 - after / before, abs=1e-4)
    assert "text" in ctx.shared  # read once per call, for the later stages


def test_profiles():
    P = scale.GPU_PROFILE
    assert P["outlier_model"]["hidden"] != P["cost_models"][0]["hidden"]  # two widths
    assert {10, 50} <= set(P["outlier_scales"]) and P["seed"] == 0
    assert [s.name for s in scale.STAGES][: scale.N_SEEDS] == list(scale.OUTLIER_STAGES) == [
        "outliers_seed0", "outliers_seed1", "outliers_seed2"]
    assert P["kernel_n"] == 4096 and 16384 <= P["kernel_tokens"] <= 65536
    assert set(scale.SMOKE_PROFILE) == set(P)
    assert sum(s.needs_s for s in scale.STAGES) <= scale.DEADLINE_S <= 330
    # each outlier stage's estimate covers its model's training and the end-to-end steps at ~0.2 s a step
    assert all(s.needs_s >= P["outlier_model"]["train_seconds"] + 0.2 * P["e2e_steps"] for s in scale.STAGES[:3])
