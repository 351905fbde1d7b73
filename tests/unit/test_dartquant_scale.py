"""Paper 08's GPU-section helpers that run without a GPU: the fused kernel's agreement measure (thresholds
just inside and just outside), its byte count, the notebook's one-line summary, and the GPU profile's shape."""

import math

import pytest
import torch

from companion.dartquant import scale as S


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


def _recorded(**kernel):
    base = {"tokens": 32768, "n": 4096, "bits": 4, "dtype": "bfloat16", "bytes": S.kernel_bytes(32768, 4096, 2),
            "flop": 2 * 32768 * 4096 ** 2, "bytes_counted": "X read + R read once + quantized Y written",
            "eager_ms": 4.0, "triton_ms": 2.0,
            "agreement": {"off_frac": 1e-4, "max_steps": 1.0, "whip_rel": 1e-6, "matches": True}}
    base.update(kernel)
    S._rates(base)
    return {"device": "NVIDIA H200", "date": "2026-12-02", "smoke": False, "kernel": base}


def test_kernel_summary():
    for gpu in (None, {"device": "x"}, {**_recorded(), "smoke": True}):
        assert "not recorded yet" in S.kernel_summary(gpu)
    assert "not recorded yet" in S.kernel_summary({"kernel": {"skipped": "no CUDA device"}, "smoke": False})
    txt = S.kernel_summary(_recorded())
    assert "speed-up 2.00×" in txt and "TB/s" in txt and "Matches PyTorch: yes" in txt and "not timed" in txt
    rec = _recorded(compiled_ms=3.0)
    assert rec["kernel"]["speedup_vs_compiled"] == 1.5 and "torch.compile of the same function 3.000 ms" in S.kernel_summary(rec)
    assert "1.50× its speed" in S.kernel_summary(rec)
    assert math.isclose(rec["kernel"]["triton_tbps"], rec["kernel"]["bytes"] / 2.0 / 1e9, rel_tol=1e-3)
    bad = _recorded(agreement={"off_frac": 0.5, "max_steps": 3.0, "whip_rel": 0.1, "matches": False})
    assert "Matches PyTorch: NO" in S.kernel_summary(bad)


def test_profile_runs_both_sizes_with_shorter_training():
    P = S.GPU_PROFILE
    assert [m["name"] for m in P["models"]] == ["d512-L8", "d1024-L12"]
    assert sum(m["train_seconds"] for m in P["models"]) <= 30  # both sizes inside the 150 s run
    assert P["kernel_n"] == 4096 and 16384 <= P["kernel_tokens"] <= 65536
