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


def test_the_migrated_record_reads_as_every_stage_done():
    gpu = scale.recorded()
    assert gpu["complete"] and all(scale.missing(gpu, s.name) is None for s in scale.STAGES)
    assert gpu["kernel_compile"]["speedup_vs_compiled"] == round(gpu["kernel_compile"]["compiled_ms"] / gpu["kernel"]["triton_ms"], 3)
    assert "torch.compile of the same function" in scale.kernel_summary(gpu)


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


def test_models_stage_records_the_models_it_has_no_time_for():
    P = {**scale.SMOKE_PROFILE, "text_bytes": 20_000}
    out = S.run_models(_ctx(P, left=5.0))  # each model needs train_seconds + MODEL_OVERHEAD_S
    assert [m["name"] for m in out] == ["smoke-d64"] and out[0]["not_run"].endswith(f"needs {0.3 + S.MODEL_OVERHEAD_S} s")
    assert "ppl" not in out[0]


def test_profiles():
    P = scale.GPU_PROFILE
    assert [m["name"] for m in P["models"]] == ["d512-L8", "d1024-L12"]
    assert sum(m["train_seconds"] for m in P["models"]) <= 30  # both sizes inside the models stage
    assert P["kernel_n"] == 4096 and 16384 <= P["kernel_tokens"] <= 65536
    assert set(scale.SMOKE_PROFILE) == set(P) and P["seed"] == 0
    assert sum(s.needs_s for s in scale.STAGES) <= scale.DEADLINE_S
