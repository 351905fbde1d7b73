"""Paper 10's claim rows: every threshold just inside and just outside, on constructed results, under the one
rule (companion.core.judge): exact rows on one run, effect rows on per-seed values, the timing row on ratios."""

import math

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.ortho_residual import claims as C
from companion.ortho_residual.claims import (
    ACC_MARGIN_PP,
    COS_TOL,
    GROWTH_TOL,
    LOSS_MARGIN,
    OVERHEAD_MAX,
    PARALLEL_MIN,
    claim_rows,
)


def _row(cos_update=0.0, growth=0.01, shrink=0.0, abs_cos=0.3, rho=0.02):
    return {"block": 0, "add": "attn", "mode": "feature", "x_norm": 1.0, "rho_par": rho, "rho_ortho": 0.1,
            "abs_cos_x_out": abs_cos, "cos_x_update": cos_update, "growth_min": growth, "shrink_share": shrink}


def _run(acc=0.8, **kw):
    return {"test_acc": acc, "val_loss": 2.0, "snapshots": [{"step": 0, "rows": [_row(**kw)]}]}


def _vit(ortho=None, lin=None, acc_lin=(0.8,), acc_orth=(0.8,), lin_cos=None):
    """``lin_cos``: one linear-model mean |cos(x, f)| per seed (overrides ``lin``'s)."""
    ortho, lin = ortho or {}, lin or {}
    lin_runs = [_run(a, **{"cos_update": 0.3, "growth": -0.2, "shrink": 0.3, **lin}) for a in acc_lin]
    if lin_cos is not None:
        lin_runs = [_run(0.8, cos_update=0.3, growth=-0.2, shrink=0.3, abs_cos=c) for c in lin_cos]
    return {"linear": lin_runs, "feature": [_run(a, **ortho) for a in acc_orth], "global": [_run(a, **ortho) for a in acc_orth]}


# ---------------------------------------------------------------------------------- exact rows (one run)
def test_cos_tolerance():
    assert C.mechanism_rows(_vit({"cos_update": 0.9 * COS_TOL}), "s")[0].verdict == "reproduced"
    assert C.mechanism_rows(_vit({"cos_update": 1.1 * COS_TOL}), "s")[0].verdict == "not reproduced"
    assert "error" in C.mechanism_rows(_vit(), "s")[0].evidence


def test_growth_tolerance():
    assert C.mechanism_rows(_vit({"growth": -0.9 * GROWTH_TOL}), "s")[1].verdict == "reproduced"
    assert C.mechanism_rows(_vit({"growth": -1.1 * GROWTH_TOL, "shrink": 0.01}), "s")[1].verdict == "not reproduced"
    # a growing stream is no error at all
    assert C.mechanism_rows(_vit({"growth": 0.5}), "s")[1].verdict == "reproduced"


# ---------------------------------------------------------------------------------- effect rows (per seed)
def test_parallel_minimum_is_above_chance():
    """Independent directions in the ViT's width d = 64 have E|cos| = sqrt(2/(πd)) ≈ 0.10; the bar is twice
    that (the old bar, 0.05, sat below chance and passed random directions)."""
    d = 64
    chance = math.sqrt(2 / (math.pi * d))
    assert PARALLEL_MIN >= 2 * chance * 0.99
    x, f = np.random.default_rng(0).normal(size=(2, 20_000, d))
    empirical = np.mean(np.abs((x * f).sum(1)) / (np.linalg.norm(x, axis=1) * np.linalg.norm(f, axis=1)))
    assert abs(empirical - chance) < 0.005
    # a linear model whose updates are as aligned as random directions does not carry a parallel part
    assert C.mechanism_rows(_vit(lin_cos=[empirical] * 3), "s")[2].verdict == "not reproduced"


def test_parallel_minimum():
    assert C.mechanism_rows(_vit(lin_cos=[1.1 * PARALLEL_MIN] * 3), "s")[2].verdict == "reproduced"
    assert C.mechanism_rows(_vit(lin_cos=[0.9 * PARALLEL_MIN] * 3), "s")[2].verdict == "not reproduced"
    one = C.mechanism_rows(_vit(lin_cos=[3 * PARALLEL_MIN]), "s")[2]
    assert one.verdict == "inconclusive" and "one seed" in one.scale


def test_accuracy_margin_three_seeds():
    d = ACC_MARGIN_PP / 100
    inside = C.accuracy_row(_vit(acc_lin=(0.5,) * 3, acc_orth=(0.5 + 1.1 * d,) * 3), "s")
    outside = C.accuracy_row(_vit(acc_lin=(0.5,) * 3, acc_orth=(0.5 + 0.9 * d,) * 3), "s")
    assert inside.verdict == "reproduced" and "3 seeds" in inside.scale and "n=3" in inside.evidence
    assert outside.verdict == "not reproduced"
    assert C.accuracy_row(_vit(acc_lin=(0.6,) * 3, acc_orth=(0.5,) * 3), "s").verdict == "not reproduced"


def test_accuracy_one_seed_is_inconclusive():
    d = ACC_MARGIN_PP / 100
    row = C.accuracy_row(_vit(acc_lin=(0.5,), acc_orth=(0.5 + 3 * d,)), "s")
    assert row.verdict == "inconclusive" and "one seed" in row.scale and "n=1" in row.evidence


def test_accuracy_spread_straddles_margin():
    g = ACC_MARGIN_PP / 100
    # per-seed gains 0.2, 0.8, 1.4 x margin: mean 0.8 margin, std 0.6 margin: mean ± std straddles the margin
    row = C.accuracy_row(_vit(acc_lin=(0.5,) * 3, acc_orth=(0.5 + 0.2 * g, 0.5 + 0.8 * g, 0.5 + 1.4 * g)), "s")
    assert row.verdict == "inconclusive" and "straddles" in row.evidence
    # the mean past the margin but one seed short of it: partly
    row = C.accuracy_row(_vit(acc_lin=(0.5,) * 3, acc_orth=(0.5 + 0.9 * g, 0.5 + 1.5 * g, 0.5 + 1.6 * g)), "s")
    assert row.verdict == "partly reproduced"


def _lm(gaps):
    return {"linear": [{"val_loss": 2.0 + g} for g in gaps], "feature": [{"val_loss": 2.0} for _ in gaps]}


def test_loss_margin():
    assert C.lm_row(_lm([1.1 * LOSS_MARGIN] * 3), "s").verdict == "reproduced"
    assert C.lm_row(_lm([0.9 * LOSS_MARGIN] * 3), "s").verdict == "not reproduced"
    assert C.lm_row(_lm([2 * LOSS_MARGIN]), "s").verdict == "inconclusive"
    straddle = C.lm_row(_lm([0.0, LOSS_MARGIN, 1.5 * LOSS_MARGIN]), "s")
    assert straddle.verdict == "inconclusive" and "straddles" in straddle.evidence
    # the orthogonal model worse: a negative gap never counts
    assert C.lm_row(_lm([-2 * LOSS_MARGIN] * 3), "s").verdict == "not reproduced"


# ---------------------------------------------------------------------------------- GPU rows (recorded JSON)
STAGES = ("training", "step_time_eager", "bf16_coef_training", "step_time_compiled")


def _gpu(**results):
    """A recorded payload in the stage-runner layout; a result given as None leaves its stage failed."""
    payload = {"device": "H200", "date": "d", "profile": {"batch": 32, "seq_len": 512},
               "runs": [{"stages": list(STAGES), "seconds": 1.0, "ended": "2026-12-02 05:27 UTC"}],
               "training": {m: {"seconds": 50, "val_loss": v, "steps": 10} for m, v in (("linear", 1.5), ("feature", 1.4))},
               "step_time_eager": {"linear": 100.0, "feature": 130.0, "overhead_pct": 30.0},
               "step_time_compiled": {"linear": 80.0, "feature": 60.0, "overhead_pct": -25.0},
               "bf16_coef_training": _study([0.0] * 3), **results}
    payload["stages"] = {s: {"state": "done"} if payload[s] is not None else {"state": "failed", "error": "RuntimeError: boom"}
                         for s in STAGES}
    return {k: v for k, v in payload.items() if v is not None}


def _study(gaps, stream="bfloat16"):
    arm = lambda v, s: {"seed": s, "steps": 120, "val_loss": v, "spikes": 0, "cos_perp_max": 1e-3}  # noqa: E731
    return {"stream_dtype": stream, "seeds": list(range(len(gaps))), "seconds_each": 20,
            "runs": {"float32": [arm(2.0, s) for s in range(len(gaps))], "input": [arm(2.0 + g, s) for s, g in enumerate(gaps)]}}


def _timing(ratio):
    return {"linear": 100.0, "feature": 100.0 * ratio, "overhead_pct": 100 * (ratio - 1)}


def test_gpu_training_row_one_seed_is_inconclusive():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    row = C.gpu_rows(_gpu())[0]
    assert row.verdict == "inconclusive" and "one seed" in row.scale and "H200" in row.scale and "+0.100" in row.measured


def test_overhead_max():
    rows = C.gpu_rows(_gpu())
    assert "+30.0%" in rows[1].measured and "torch.compile: 80.0 → 60.0 ms (-25.0%)" in rows[1].measured
    assert "n=2" in rows[1].evidence
    both = lambda r: _gpu(step_time_eager=_timing(r), step_time_compiled=_timing(r))  # noqa: E731
    assert C.gpu_rows(both(0.99 * OVERHEAD_MAX))[1].verdict == "reproduced"
    assert C.gpu_rows(both(1.01 * OVERHEAD_MAX))[1].verdict == "not reproduced"


def test_unfinished_stages_are_never_judged():
    """A stage that failed (or was never run) leaves its row not run, naming the stage and the recorded error;
    with one of the two step-time stages the timing row is inconclusive, never reproduced."""
    one = C.gpu_rows(_gpu(step_time_eager=_timing(0.5 * OVERHEAD_MAX), step_time_compiled=None))[1]
    assert one.verdict == "inconclusive" and "stage step_time_compiled (failed: RuntimeError: boom)" in one.measured
    assert "eager: 100.0 → 55.0 ms" in one.measured
    rows = C.gpu_rows(_gpu(training=None, step_time_eager=None, step_time_compiled=None, bf16_coef_training=None))
    assert [r.verdict for r in rows] == ["not run here"] * 3
    assert "training (failed: RuntimeError: boom)" in rows[0].evidence and "step_time_eager (failed" in rows[1].measured
    partial = _gpu()
    del partial["bf16_coef_training"], partial["stages"]["bf16_coef_training"]  # a --stages call that did not run it
    assert "bf16_coef_training (not recorded)" in C.gpu_rows(partial)[2].evidence


def test_bf16_study_rows():
    ok = C.gpu_rows(_gpu(bf16_coef_training=_study([0.9 * LOSS_MARGIN] * 3)))[-1]
    assert ok.verdict == "reproduced" and "3 seeds" in ok.scale and "bf16 residual stream" in ok.measured
    assert C.gpu_rows(_gpu(bf16_coef_training=_study([1.1 * LOSS_MARGIN] * 3)))[-1].verdict == "not reproduced"
    assert C.gpu_rows(_gpu(bf16_coef_training=_study([0.0])))[-1].verdict == "inconclusive"
    straddle = C.gpu_rows(_gpu(bf16_coef_training=_study([0.0, 1.4 * LOSS_MARGIN, 1.8 * LOSS_MARGIN])))[-1]
    assert straddle.verdict == "inconclusive" and "straddles" in straddle.evidence


def test_bf16_study_on_an_fp32_stream_is_inconclusive():
    """With an fp32 residual stream both arms compute an fp32 coefficient: never judged as a comparison."""
    row = C.gpu_rows(_gpu(bf16_coef_training=_study([0.0] * 3, stream="float32")))[-1]
    assert row.verdict == "inconclusive" and "fp32 residual stream" in row.measured and "fp32 coefficient" in row.evidence


def test_rows_date_the_stage_by_its_last_call():
    gpu = _gpu()
    gpu["runs"].append({"stages": ["bf16_coef_training"], "seconds": 1.0, "ended": "2026-12-04 04:39 UTC"})
    rows = C.gpu_rows(gpu)
    assert "2026-12-02 05:27 UTC" in rows[0].scale and "2026-12-04 04:39 UTC" in rows[-1].scale


def test_recorded_json_rows():
    """The committed JSON: every row judged by the rule, or not run naming its unfinished stage."""
    from companion.core.stages import stage_states
    from companion.ortho_residual.scale import STAGES, recorded

    gpu = recorded()
    if gpu is None:
        pytest.skip("no recorded GPU results")
    rows = C.gpu_rows(gpu)
    assert all(r.verdict in VERDICTS and r.evidence for r in rows)
    states = stage_states(gpu)
    assert set(states) == {s.name for s in STAGES} and all(states[s.name] != "done" or s.name in gpu for s in STAGES)
    if states["bf16_coef_training"] == "done":  # a real comparison: the two arms' losses differ
        study = gpu["bf16_coef_training"]
        assert study["stream_dtype"] == "bfloat16" and "bf16 residual stream" in rows[-1].measured
        assert any(a["curve_loss"] != b["curve_loss"] for a, b in zip(study["runs"]["float32"], study["runs"]["input"]))


def test_all_rows():
    rows = claim_rows(vit=_vit(), lm=_lm([0.0]), vit_scale="v", lm_scale="l", gpu=_gpu())
    assert len(rows) == 8 and all(r.verdict in VERDICTS and r.evidence for r in rows)


@pytest.mark.parametrize("steps", [10, 11])
def test_rows_follow_real_small_runs(steps):
    """The smallest allowed notebook sizes give rows (the exact mechanism rows reproduced)."""
    from companion.ortho_residual.experiments import digits_data, train_vit

    data = digits_data(0)
    vit = {m: [train_vit(m, data, steps=steps, batch=8, seed=0, snapshots=1, depth=1)] for m in ("linear", "feature", "global")}
    rows = C.mechanism_rows(vit, "tiny")
    assert rows[0].verdict == "reproduced" and rows[1].verdict == "reproduced"
    assert rows[2].verdict == "inconclusive"  # one seed
