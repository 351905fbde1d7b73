"""Paper 08's GPU study without a GPU: the notebook's kernel table and its caption (the kernel study's record first, else
the older record of this study's ``kernel`` stages), an outlier stage on a tiny model, and the GPU profile's shape.
The kernel study and its agreement measure: tests/unit/test_dartquant_kernel.py."""

import math
import time

import pytest

from companion.core.stages import StageContext
from companion.dartquant import kernel_bench as K
from companion.dartquant import scale
from companion.dartquant import study as S


def _recorded(compile_row=None, compile_state=None, **kernel):
    """A payload of this study recorded before the kernel study: its ``kernel`` and ``kernel_compile`` stages."""
    base = {"tokens": 32768, "n": 4096, "bits": 4, "dtype": "bfloat16", "bytes": K.kernel_bytes(32768, 4096, 2),
            "flop": 2 * 32768 * 4096 ** 2, "bytes_counted": "X read + R read once + quantized Y written",
            "eager_ms": 4.0, "triton_ms": 2.0, "speedup_vs_eager": 2.0,
            "agreement": {"off_frac": 1e-4, "max_steps": 1.0, "whip_rel": 1e-6, "matches": True}}
    base.update(kernel)
    for name in ("eager", "triton"):
        r = K.rates(base[f"{name}_ms"], 32768, 4096, 2)
        base[f"{name}_tbps"], base[f"{name}_tflops"] = r["tbps"], r["tflops"]
    stages = {"kernel": {"state": "done"},
              "kernel_compile": compile_state or {"state": "done" if compile_row else "skipped", "reason": "deadline"}}
    return {"device": "NVIDIA H200", "date": "2026-12-02", "stages": stages, "kernel": base,
            **({"kernel_compile": compile_row} if compile_row else {})}


def _kernel_run(state="done", matches=True):
    """A kernel-study payload (companion.dartquant.scale_kernel) with one tile of each variant."""
    agree = {"off_frac": 1e-4, "max_steps": 1.0, "whip_rel": 1e-6, "matches": matches}
    rows = [{"variant": v, "tile": [128, 128, 64, 8, 3], "agreement": agree, **K.rates(ms, 32768, 4096, 2),
             "vs_compiled": round(1.6 / ms, 3), "vs_eager": round(5.5 / ms, 3)} for v, ms in (("fused", 2.9), ("split", 1.9))]
    kernel = {"tokens": 32768, "n": 4096, "bits": 4, "dtype": "bfloat16", "bytes_counted": "X read",
              "compiled": {"compile_seconds": 9.0, "agreement": agree, **K.rates(1.6, 32768, 4096, 2)},
              "eager": K.rates(5.5, 32768, 4096, 2), "ours": rows, "all_match": matches}
    return {"device": "NVIDIA H200", "date": "2026-12-05", "stages": {"kernel": {"state": state}}, "kernel": kernel}


def test_kernel_summary_of_the_older_record():
    none = scale.kernel_summary(None, {})
    assert "not recorded (python -m companion.bench dartquant_kernel has no finished kernel stage" in none
    assert "no GPU run recorded (python -m companion.bench dartquant)" in none
    cut = scale.kernel_summary({"stages": {"kernel": {"state": "failed", "error": "OutOfMemoryError: x"}}}, {})
    assert "the older record: the recorded run's stage kernel (failed: OutOfMemoryError: x)" in cut
    txt = scale.kernel_summary(_recorded(), {})
    assert "speed-up 2.00×" in txt and "TB/s" in txt and "Matches PyTorch: yes" in txt
    assert "torch.compile not timed beside it (the recorded run's stage kernel_compile (skipped: deadline))" in txt
    assert "an older record: python -m companion.bench dartquant_kernel not run yet" in txt
    rec = _recorded(compile_row={"compiled_ms": 3.0, "speedup_vs_compiled": 1.5})
    assert "torch.compile of the same function 3.000 ms" in scale.kernel_summary(rec, {})
    assert "1.50× its speed" in scale.kernel_summary(rec, {})
    assert math.isclose(rec["kernel"]["triton_tbps"], rec["kernel"]["bytes"] / 2.0 / 1e9, rel_tol=1e-3)
    bad = _recorded(agreement={"off_frac": 0.5, "max_steps": 3.0, "whip_rel": 0.1, "matches": False})
    assert "Matches PyTorch: NO" in scale.kernel_summary(bad, {})
    assert scale.kernel_mismatches(bad, {}) == ["fused (older record)"] and scale.kernel_mismatches(rec, {}) == []
    assert scale.kernel_mismatches(None, {}) == []


def test_kernel_summary_reads_the_kernel_study_first():
    txt = scale.kernel_summary(_recorded(), _kernel_run())
    assert txt == scale.kernel_table(None, _kernel_run())[0] and "older record" not in txt  # the table's caption
    assert "Every tile tried matches PyTorch: at most 0.010 % of elements" in txt and "Bytes counted: X read." in txt
    skipped = _kernel_run()
    skipped["kernel"]["ours"].append({"variant": "split", "tile": [128, 256, 64, 8, 3], "skipped": "deadline"})
    assert "Not timed (the study's deadline): split 128×256×64 w8 s3." in scale.kernel_summary(None, skipped)
    assert scale.kernel_summary(None, _kernel_run()) == txt  # the study's record stands without this study's
    assert scale.kernel_mismatches(_recorded(), _kernel_run(matches=False)) == ["fused 128×128×64 w8 s3",
                                                                                "split 128×128×64 w8 s3"]
    unfinished = _kernel_run(state="unfinished")
    assert scale.kernel_summary(_recorded(), unfinished) == scale.kernel_summary(_recorded(), {})  # the older record


def test_the_committed_records_read_without_error():
    gpu = scale.recorded()
    if gpu is None:
        pytest.skip("no recorded GPU run")
    if not scale.missing(gpu, "kernel_compile"):  # recorded before the kernel study
        assert gpu["kernel_compile"]["speedup_vs_compiled"] == round(gpu["kernel_compile"]["compiled_ms"] / gpu["kernel"]["triton_ms"], 3)
    assert "Whip" in scale.kernel_summary(gpu) and "Whip kernel" in scale.kernel_summary(gpu, {})
    assert scale.kernel_mismatches(gpu) == []
    # a recorded run keeps the stages it ran: this study's stages, and the kernel stages of an older run
    assert set(s.name for s in scale.STAGES) <= set(gpu["stages"])
    assert set(gpu["stages"]) - set(s.name for s in scale.STAGES) <= {"kernel", "kernel_compile"}


def _ctx(profile, results=None, left=math.inf):
    """A stage's context on the CPU with ``left`` seconds to use."""
    return StageContext(profile=profile, device="cpu", log=lambda *a: None, results=results or {},
                        until=time.perf_counter() + left)


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
    assert [s.name for s in scale.STAGES] == [*scale.OUTLIER_STAGES, "cost", "step_cost"]  # the kernel: its own study
    assert set(scale.SMOKE_PROFILE) == set(P)
    assert sum(s.needs_s for s in scale.STAGES) <= scale.DEADLINE_S <= 330
    # each outlier stage's estimate covers its model's training and the end-to-end steps at ~0.2 s a step
    assert all(s.needs_s >= P["outlier_model"]["train_seconds"] + 0.2 * P["e2e_steps"] for s in scale.STAGES[:3])


def test_kernel_table_peers_first_then_every_tile():
    """The notebook's table of the kernel study: the compiled and eager peers first, then every tile timed, with
    speeds relative to both peers; None without the study's record (the notebook prints the summary then)."""
    head, rows = scale.kernel_table(None, _kernel_run())
    assert "recorded on" in head and [r["schedule"] for r in rows[:2]] == ["torch.compile (peer)", "eager PyTorch"]
    assert rows[0]["× torch.compile"] == 1.0 and rows[1]["× eager"] == 1.0
    timed = [r for r in _kernel_run()["kernel"]["ours"] if "ms" in r]
    assert len(rows) == 2 + len(timed)
    for row, r in zip(rows[2:], timed):
        assert row["ms"] == round(r["ms"], 3) and row["matches PyTorch"] == ("yes" if r["agreement"]["matches"] else "NO")
    split = next(r for r in rows if r["schedule"] == "split 128×128×64 w8 s3")
    assert split["ms"] == 1.9 and split["× torch.compile"] == round(1.6 / 1.9, 2) and split["× eager"] == round(5.5 / 1.9, 2)
    assert rows[0]["ms"] == 1.6 and rows[1]["ms"] == 5.5
    mismatch = scale.kernel_table(None, _kernel_run(matches=False))
    assert "does NOT all match" in mismatch[0] and {r["matches PyTorch"] for r in mismatch[1][2:]} == {"NO"}
    assert scale.kernel_table(None, {}) is None
