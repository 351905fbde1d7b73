"""companion.dartquant.claims: every verdict threshold, just inside and just outside, on the one rule."""

import json

import pytest

from companion.core import VERDICTS
from companion.dartquant import claims as C

SCALE = "constructed"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    from companion.core import limit_threads

    with limit_threads(1):
        yield


def _m(identity=0.06, hadamard=0.0073, whip=0.007, layer=False):
    def row(q):
        r = {"quant_mse": q, "kurtosis": 3.0, "max_abs": 4.0, "outlier_frac": 0.0, "orth_err": 1e-7}
        if layer:
            r["layer_err"] = 0.1
        return r
    return {"identity": row(identity), "hadamard": row(hadamard), "qr_orth/whip": row(whip)}


def _seeds(*ratios, identity=0.06, hadamard=0.01, drop=0.05):
    """Seed rows with the given Whip/Hadamard ratios (and identity/Hadamard = identity/hadamard, Whip drop)."""
    return [{"seed": i, "identity": identity, "hadamard": hadamard, "whip": hadamard * r,
             "whip_start": 100.0, "whip_end": 100.0 * (1 - drop)} for i, r in enumerate(ratios)]


def test_orth_tol():
    assert C.orthogonality_row({"a": C.ORTH_TOL * 0.99}).verdict == "reproduced"
    row = C.orthogonality_row({"a": 1e-7, "b": C.ORTH_TOL * 1.01})
    assert row.verdict == "not reproduced" and "max error" in row.evidence


def _drops(*drops):
    return [{"whip_start": 100.0, "whip_end": 100.0 * (1 - d)} for d in drops]


def test_whip_drop_min():
    inside, outside = C.WHIP_DROP_MIN * 1.01, C.WHIP_DROP_MIN * 0.99
    assert C.whip_decrease_row({"a": _drops(inside, inside, inside)}, SCALE).verdict == "reproduced"
    assert C.whip_decrease_row({"a": _drops(outside, outside, outside)}, SCALE).verdict == "not reproduced"
    # the claim must hold on every layer: a seed counts with its smallest drop over the sources
    two = {"a": _drops(0.05, 0.05, 0.05), "b": _drops(0.0015, outside, 0.0012)}
    assert C.whip_drops(two)[1] == pytest.approx(outside)
    assert C.whip_decrease_row(two, SCALE).verdict == "partly reproduced"  # mean past by less than the spread, one seed not
    assert C.whip_decrease_row({"a": _drops(-0.01, -0.01, -0.01)}, SCALE).verdict == "not reproduced"  # Whip rose
    with pytest.raises(ValueError):
        C.whip_drops({"a": _drops(0.1), "b": _drops(0.1, 0.1)})


def test_whip_drop_one_seed_is_inconclusive():
    row = C.whip_decrease_row({"a": _drops(0.5), "b": _drops(0.5)}, SCALE)
    assert row.verdict == "inconclusive" and row.evidence.startswith("n=1") and "one seed" in row.scale


def test_identity_factor():
    h = 0.01
    inside, outside = C.IDENTITY_FACTOR * h * 1.01, C.IDENTITY_FACTOR * h * 0.99
    assert C.outlier_row(_m(), _seeds(1, 1, 1, identity=inside, hadamard=h), SCALE).verdict == "reproduced"
    assert C.outlier_row(_m(), _seeds(1, 1, 1, identity=outside, hadamard=h), SCALE).verdict == "not reproduced"
    one = C.outlier_row(_m(), _seeds(1, identity=10 * h, hadamard=h), SCALE)
    assert one.verdict == "inconclusive" and "one seed" in one.scale


def test_better_margin_and_noninferior():
    inside, outside = (1 - C.BETTER_MARGIN) * 0.999, (1 - C.BETTER_MARGIN) * 1.001
    assert C.synthetic_gain_row(_seeds(inside, inside, inside), SCALE).verdict == "reproduced"
    assert C.synthetic_gain_row(_seeds(outside, outside, outside), SCALE).verdict == "partly reproduced"  # no worse
    assert C.synthetic_gain_row(_seeds(C.NONINFERIOR * 0.999, C.NONINFERIOR * 0.999, C.NONINFERIOR * 0.999),
                                SCALE).verdict == "partly reproduced"
    assert C.synthetic_gain_row(_seeds(C.NONINFERIOR * 1.001, C.NONINFERIOR * 1.001, C.NONINFERIOR * 1.001),
                                SCALE).verdict == "not reproduced"
    # the mean past the target by less than the spread, one seed not past it: partly
    assert C.synthetic_gain_row(_seeds(0.97, 0.97, 0.99), SCALE).verdict == "partly reproduced"
    assert "3 seeds" in C.synthetic_gain_row(_seeds(0.9, 0.9, 0.9), SCALE).scale
    real = C.real_gain_row(_m(layer=True), _seeds(inside, inside, inside), 2, SCALE)
    assert real.verdict == "reproduced" and "layer 2" in real.measured and "3 seeds" in real.scale
    assert C.real_gain_row(_m(), _seeds(*[C.NONINFERIOR * 1.001] * 3), 2, SCALE).verdict == "not reproduced"


def test_gain_one_seed_is_inconclusive():
    for row in (C.synthetic_gain_row(_seeds(0.5), SCALE), C.real_gain_row(_m(), _seeds(0.5), 2, SCALE)):
        assert row.verdict == "inconclusive" and "one seed" in row.scale and "fewer than 3 seeds" in row.evidence


def test_gain_spread_straddling_the_target_is_inconclusive():
    # the mean misses both bars, but by less than the spread: inconclusive
    row = C.synthetic_gain_row(_seeds(0.68, 1.23, 1.23), SCALE)
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def _ablation(moved, flat):
    return {"moved": moved, "flat": flat, "whip_range": 0.6, "mse": {"hadamard": 0.007, "qr_orth/whip": 0.0068}, "steps": 10}


def test_var_move_tol_and_flat_tol():
    assert C.variance_signal_row(_ablation(C.VAR_MOVE_TOL * 0.99, 1.0), SCALE).verdict == "reproduced"
    assert C.variance_signal_row(_ablation(C.VAR_MOVE_TOL * 1.01, 0.0), SCALE).verdict == "not reproduced"
    assert C.variance_flat_row(_ablation(1.0, C.FLAT_TOL * 0.99), SCALE).verdict == "reproduced"
    assert C.variance_flat_row(_ablation(0.0, C.FLAT_TOL * 1.01), SCALE).verdict == "not reproduced"


def test_invariance_tol():
    inv = {"max_abs_logit": 1.0, "model": "m"}
    assert C.invariance_row({**inv, "max_abs_diff": C.INVARIANCE_TOL * 0.99}).verdict == "reproduced"
    assert C.invariance_row({**inv, "max_abs_diff": C.INVARIANCE_TOL * 1.01}).verdict == "not reproduced"


def test_qr_speedup_min_and_step_reps():
    assert C.step_cost_row(10.0, 10.0 * C.QR_SPEEDUP_MIN * 1.01, 256, SCALE).verdict == "reproduced"
    assert C.step_cost_row(10.0, 10.0 * C.QR_SPEEDUP_MIN * 0.99, 256, SCALE).verdict == "not reproduced"
    assert C.step_cost_row(10.0, 14.0, 256, SCALE).evidence == f"n=1: 1.40× vs ≥ {C.QR_SPEEDUP_MIN:.2f}×"
    assert C.STEP_REPS >= 3


def _run(seed, *, fp=5.0, none=(5.1, 9.0), fused=5.2, stream=9.5, quarot=5.3, dartquant=5.2, e2e=5.25, drop=0.05,
         cost=(2.0, 100.0, 40.0, 900.0)):
    """One recorded outlier seed: average PPLs (the same on both eval sets; ``none`` at the norm-gain scales 1 and
    50, ``stream`` and the rotations on the residual-stream model) and the calibration costs."""
    two = lambda v: {"source": v, "docs": v}  # noqa: E731
    return {"name": "d512-L8", "seed": seed, "train_seconds": 12.0, "channels": [1, 2, 3, 4],
            "injected": {s: {"logit_diff": 1e-6, "peak_ratio": 9.0, "fused_weight_diff": 1e-7} for s in ("1", "50")},
            "stream": {"logit_diff": 2e-6, "rms_ratio_fused": 3.0, "rms_ratio": 40.0},
            "ppl": {"fp32": two(fp), "none": {s: two(v) for s, v in zip(("1", "50"), none)}, "fused": two(fused),
                    "stream": {"none": two(stream), "quarot": two(quarot), "dartquant": two(dartquant),
                               "end-to-end": two(e2e)}},
            "cost": {"dartquant_s": cost[0], "dartquant_mib": cost[1], "e2e_s": cost[2], "e2e_mib": cost[3],
                     "e2e_loss": [1.0, 0.9], "e2e_loss_drop": drop}}


def _gpu(runs=None, step=((4096, 10.0, 14.0), (8192, 10.0, 15.0)), cost_models=None, states=None):
    """A recorded payload in the stage runner's layout; ``states`` overrides stage states (a stage not done
    has no result)."""
    runs = [_run(i) for i in range(3)] if runs is None else runs
    stages = {"step_cost": {"state": "done"}, "cost": {"state": "done"},
              **{f"outliers_seed{i}": {"state": "done"} for i in range(len(runs))}, **(states or {})}
    payload = {"device": "NVIDIA H200", "date": "2026-12-05", "stages": stages, "profile": {"e2e_steps": 100},
               "step_cost": {"rows": [{"n": n, "tokens": 2048, "qr_ms": q, "cayley_ms": c} for n, q, c in step],
                             "tokens": 2048},
               "cost": cost_models if cost_models is not None else
               [{"name": "d1024-L12", "cost": {"dartquant_s": 5.0, "dartquant_mib": 300.0, "e2e_s": 60.0,
                                               "e2e_mib": 3000.0, "e2e_loss": [1.0, 0.9], "e2e_loss_drop": 0.1}}],
               **{f"outliers_seed{i}": r for i, r in enumerate(runs)}}
    for name, s in stages.items():
        if s["state"] != "done":
            payload.pop(name, None)
    return json.loads(json.dumps(payload))  # as scale.recorded() reads it back


def _row(rows, start):
    (row,) = [r for r in rows if r.claim.startswith(start)]
    return row


N_GPU_ROWS = 8  # step cost, 2 norm-gain breaks, the stream break, 3 comparisons, the cost placeholder


def test_gpu_rows_without_a_run():
    rows = C.gpu_rows(None)
    assert [r.verdict for r in rows] == ["not run here"] * N_GPU_ROWS and all(r.evidence for r in rows)
    assert all("python -m companion.bench dartquant" in r.evidence for r in rows)
    assert [r.claim for r in rows if "break" in r.claim] == [
        "Massive channels in the norm gains break W4A4KV4 without a rotation (s = 10)",
        "Massive channels in the norm gains break W4A4KV4 without a rotation (s = 50)", C.STREAM_BREAK]
    assert [r.claim for r in rows if r.claim.startswith("DartQuant beats")] == [
        f"DartQuant beats {C.PEER_NAME[p]} in W4A4KV4 perplexity (massive residual-stream channels)" for p in C.PEERS]


def test_gpu_rows_of_the_older_layout_are_not_run_and_do_not_crash():
    old = {"device": "NVIDIA H200", "date": "2026-12-02", "stages": {"step_cost": {"state": "done"}, "models": {"state": "done"}},
           "step_cost": {"rows": [{"n": 4096, "qr_ms": 40.012, "cayley_ms": 35.4}], "tokens": 2048}, "models": [{"name": "x"}]}
    rows = C.gpu_rows(old)
    assert rows[0].verdict == "not reproduced"  # the recorded step times are still judged
    assert all(r.verdict == "not run here" and "stage outliers_seed0 (not run)" in r.evidence for r in rows[1:])


def test_gpu_rows_of_outlier_stages_without_the_stream_injection_are_not_run():
    runs = [_run(i) for i in range(3)]
    for r in runs:
        del r["ppl"]["stream"], r["stream"]
    rows = C.gpu_rows(_gpu(runs))
    effects = [r for r in rows if "break" in r.claim or r.claim.startswith("DartQuant beats")]
    assert len(effects) == 6 and all(r.verdict == "not run here" and "predate the residual-stream" in r.evidence
                                     for r in effects)


def test_gpu_rows_of_stages_that_did_not_finish_say_so():
    cut = {"state": "unfinished", "started": "2026-12-05 09:00 UTC"}
    rows = C.gpu_rows(_gpu(runs=[], states={"outliers_seed0": cut, "step_cost": {"state": "skipped", "reason": "deadline"},
                                            "cost": {"state": "failed", "error": "OutOfMemoryError: CUDA"}}))
    assert [r.verdict for r in rows] == ["not run here"] * N_GPU_ROWS
    assert "stage step_cost (skipped: deadline)" in rows[0].evidence
    assert all("stage outliers_seed0 (unfinished)" in r.evidence for r in rows[1:])


def test_gpu_rows_one_seed_is_inconclusive_and_later_seeds_cut_say_nothing_false():
    rows = C.gpu_rows(_gpu(runs=[_run(0)], states={"outliers_seed1": {"state": "skipped", "reason": "deadline"}}))
    effects = [r for r in rows if "massive" in r.claim.lower()]
    assert len(effects) == 5 and all(r.verdict == "inconclusive" and "one seed" in r.scale for r in effects)
    assert "fewer than 3 seeds" in effects[0].evidence and "H200" in effects[0].scale


def test_break_factor_norm_gains():
    f = C.BREAK_FACTOR
    inside = [_run(i, fp=4.0, none=(4.1, 4.0 * f * 1.01)) for i in range(3)]
    outside = [_run(i, fp=4.0, none=(4.1, 4.0 * f * 0.99)) for i in range(3)]
    assert _row(C.gpu_rows(_gpu(inside)), "Massive channels in the norm gains").verdict == "reproduced"
    assert _row(C.gpu_rows(_gpu(outside)), "Massive channels in the norm gains").verdict == "not reproduced"
    # the claim is a size (none's excess over FP): quantization "improving" on FP is a sign flip, not a break
    flipped = [_run(i, fp=4.0, none=(4.1, 4.0 / f)) for i in range(3)]
    row = _row(C.gpu_rows(_gpu(flipped)), "Massive channels in the norm gains")
    assert row.verdict == "not reproduced" and "s = 50" in row.claim and "3 seeds" in row.scale
    assert "4.000 → 2.667" in row.measured and "max |Δ logit| 1.0e-06" in row.measured
    assert "fusing the norms cancels it" in row.measured


def test_break_factor_residual_stream():
    f = C.BREAK_FACTOR
    inside = [_run(i, fp=4.0, stream=4.0 * f * 1.01) for i in range(3)]
    outside = [_run(i, fp=4.0, stream=4.0 * f * 0.99) for i in range(3)]
    row = _row(C.gpu_rows(_gpu(inside)), C.STREAM_BREAK)
    assert row.verdict == "reproduced" and "3.0 → 40.0" in row.measured and "max |Δ logit| 2.0e-06" in row.measured
    assert _row(C.gpu_rows(_gpu(outside)), C.STREAM_BREAK).verdict == "not reproduced"
    flipped = [_run(i, fp=4.0, stream=4.0 / f) for i in range(3)]  # a sign flip of the excess is no break
    assert _row(C.gpu_rows(_gpu(flipped)), C.STREAM_BREAK).verdict == "not reproduced"
    one = _row(C.gpu_rows(_gpu([_run(0, fp=4.0, stream=40.0)])), C.STREAM_BREAK)
    assert one.verdict == "inconclusive" and "one seed" in one.scale
    straddle = [_run(i, fp=4.0, stream=4.0 * v) for i, v in enumerate((1.0, 2.0, 1.45))]
    row = _row(C.gpu_rows(_gpu(straddle)), C.STREAM_BREAK)
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_ppl_ratio_max_against_each_peer_on_the_residual_stream_model():
    t = C.PPL_RATIO_MAX
    for peer, key in (("quarot", "quarot"), ("end-to-end", "e2e"), ("none", "stream")):
        inside = [_run(i, **{key: 5.0, "dartquant": 5.0 * t * 0.999}) for i in range(3)]
        outside = [_run(i, **{key: 5.0, "dartquant": 5.0 * t * 1.001}) for i in range(3)]
        start = f"DartQuant beats {C.PEER_NAME[peer]} "
        assert _row(C.gpu_rows(_gpu(inside)), start).verdict == "reproduced", peer
        assert _row(C.gpu_rows(_gpu(outside)), start).verdict == "not reproduced", peer
        one = _row(C.gpu_rows(_gpu([_run(0, **{key: 5.0, "dartquant": 4.0})])), start)
        assert one.verdict == "inconclusive" and "one seed" in one.scale, peer
    # the rows read the residual-stream arms, not the norm-gain ones: a fused model far worse changes nothing
    assert _row(C.gpu_rows(_gpu([_run(i, fused=50.0) for i in range(3)])), "DartQuant beats no rotation").verdict == "reproduced"


def test_ppl_spread_straddling_the_target_is_inconclusive():
    runs = [_run(i, quarot=5.0, dartquant=5.0 * r) for i, r in enumerate((0.96, 1.03, 1.02))]
    row = _row(C.gpu_rows(_gpu(runs)), "DartQuant beats QuaRot")
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_e2e_loss_drop_min():
    m = C.E2E_LOSS_DROP_MIN
    trained = [_run(i, e2e=6.0, drop=m + 1e-3) for i in range(3)]
    assert _row(C.gpu_rows(_gpu(trained)), "DartQuant beats end-to-end").verdict == "reproduced"
    flat = [_run(0, e2e=6.0, drop=m + 1e-3), _run(1, e2e=6.0, drop=m), _run(2, e2e=6.0, drop=m - 0.02)]
    row = _row(C.gpu_rows(_gpu(flat)), "DartQuant beats end-to-end")
    assert row.verdict == "inconclusive" and "did not go down on seed(s) [1, 2]" in row.evidence
    assert "-2.0 %" in row.measured


def test_gpu_step_cost_row_judged_on_the_recorded_ratios():
    row = C.gpu_step_cost_row(_gpu())
    assert row.verdict == "reproduced" and "n=4096" in row.measured and "n=2: 1.45×" in row.evidence
    assert "one run" in row.scale and "H200" in row.scale
    t = C.QR_SPEEDUP_MIN
    assert C.gpu_step_cost_row(_gpu(step=((4096, 10.0, 10 * t * 1.01),))).verdict == "reproduced"
    below = C.gpu_step_cost_row(_gpu(step=((4096, 10.0, 10 * t * 0.99),)))
    assert below.verdict == "not reproduced" and "not met" in below.measured
    # the first recorded H200 run: Cayley 35.4 vs QR-Orth 40.0 ms at n=4096, 173.4 vs 164.3 at 8192
    first = C.gpu_step_cost_row(_gpu(step=((4096, 40.012, 35.4), (8192, 164.284, 173.388))))
    assert first.verdict == "not reproduced" and first.measured.count("not met") == 2


def test_gpu_cost_rows_cost_time_paper_memory_paper_and_cheaper():
    time_row, mem_row = [r for r in C.gpu_rows(_gpu()) if r.claim.startswith("Calibration")]
    assert "n=4:" in time_row.evidence and "d1024-L12" in time_row.scale and "d512-L8 seed 2" in time_row.scale
    assert time_row.verdict == "partly reproduced" and mem_row.verdict == "partly reproduced"  # cheaper, not 47× / 10×

    def at(t, m):
        run = _run(0, cost=(1.0, 1.0, t, m))
        return [r.verdict for r in C.gpu_rows(_gpu([run], cost_models=[])) if r.claim.startswith("Calibration")]

    assert at(C.COST_TIME_PAPER * 1.01, C.COST_MEMORY_PAPER * 1.01) == ["reproduced", "reproduced"]
    assert at(C.COST_TIME_PAPER * 0.99, C.COST_MEMORY_PAPER * 0.99) == ["partly reproduced", "partly reproduced"]
    assert at(C.CHEAPER * 0.9, C.CHEAPER * 0.9) == ["not reproduced", "not reproduced"]


def test_gpu_rows_from_the_recorded_json():
    from companion.dartquant.scale import recorded

    gpu = recorded()
    if gpu is None:
        pytest.skip("no recorded GPU run")
    rows = C.gpu_rows(gpu)
    assert len(rows) >= N_GPU_ROWS - 1 and all(r.verdict in VERDICTS and r.evidence for r in rows)


def test_claim_rows_from_a_tiny_real_run():
    import torch

    from companion.dartquant import experiment as DE
    from companion.dartquant.activations import synthetic_activations

    x = synthetic_activations(256, 16, massive=1, seed=0)
    syn = DE.layer_study(x, torch.randn(32, 16), steps=10, lr=0.02, batch=32, n_snapshots=2)
    real = DE.layer_study(x, None, steps=10, lr=0.02, batch=32, learned=[("qr_orth", "whip")], n_snapshots=2)
    seeds = [DE.study_seed_row(syn, 0)] + DE.seed_comparison(lambda s: synthetic_activations(256, 16, massive=1, seed=s),
                                                             [1, 2], steps=10, lr=0.02, batch=32)
    real_seeds = [DE.study_seed_row(real, 0)] + DE.seed_comparison(lambda s: x, [1, 2], steps=10, lr=0.02, batch=32)
    assert seeds[0]["hadamard"] == syn["metrics"]["hadamard"]["quant_mse"] and seeds[0]["whip_start"] > 0
    kw = dict(synthetic=syn, real=real, real_layer=0, seeds=seeds, real_seeds=real_seeds,
              invariance={"max_abs_diff": 1e-7, "max_abs_logit": 1.0, "model": "m"},
              angle=DE.angle_study(DE.laplace_cloud(200), angles=[0, 45, 90]))
    rows = C.claim_rows(**kw)
    assert len(rows) == 9 + len(C.gpu_rows(None)) and all(r.verdict in VERDICTS and r.evidence for r in rows)
    assert "mean step of the calibration runs" in rows[8].scale and "3 seeds" in rows[3].scale
    for factor, verdict in ((1.01, "reproduced"), (0.99, "not reproduced")):
        timed = C.claim_rows(**kw, step_cost={"n": 16, "tokens": 32, "qr_ms": 1.0, "cayley_ms": C.QR_SPEEDUP_MIN * factor})
        assert timed[8].verdict == verdict and f"median of {C.STEP_REPS} timed steps of 32 tokens" in timed[8].scale
    assert "256 tokens × d=16, 10 steps of 32 tokens" in rows[2].scale
    assert rows[0].verdict == "reproduced" and rows[7].verdict == "reproduced"
    one = C.claim_rows(**{**kw, "seeds": seeds[:1], "real_seeds": real_seeds[:1]})
    assert all(one[i].verdict == "inconclusive" for i in (1, 2, 3, 4))  # the effect rows with one seed
    # the real layer with the same tokens on every seed gives one count; a fresh draw per seed gives each seed's
    assert ": 256 tokens × d=16" in rows[4].scale
    assert "3 seeds (docstrings, random-Hadamard start and batches)" in rows[4].scale
    drawn = [DE.study_seed_row(real, 0)] + DE.seed_comparison(lambda s: synthetic_activations(250 + s, 16, massive=1, seed=s),
                                                              [1, 2], steps=10, lr=0.02, batch=32)
    assert [r["tokens"] for r in drawn] == [256, 251, 252] and [r["tokens"] for r in seeds] == [256, 256, 256]
    varied = C.claim_rows(**{**kw, "real_seeds": drawn})
    assert ": 256, 251, 252 tokens × d=16" in varied[4].scale and ": 256, 251, 252 tokens × d=16" in varied[1].scale
    assert "256 tokens × d=16" in varied[3].scale  # the synthetic rows keep their one count


@pytest.mark.parametrize("name", ["ORTH_TOL", "WHIP_DROP_MIN", "IDENTITY_FACTOR", "BETTER_MARGIN", "NONINFERIOR",
                                  "VAR_MOVE_TOL", "FLAT_TOL", "INVARIANCE_TOL", "QR_SPEEDUP_MIN", "STEP_REPS",
                                  "PPL_RATIO_MAX", "COST_TIME_PAPER", "COST_MEMORY_PAPER", "CHEAPER", "BREAK_FACTOR"])
def test_constants_are_positive_numbers(name):
    assert getattr(C, name) > 0
    assert C.E2E_LOSS_DROP_MIN >= 0  # a loss that rose never counts as trained


def test_gpu_figure_per_seed_and_without_a_record():
    from companion.dartquant.figures import gpu_figure

    assert "not recorded: no GPU run recorded" in gpu_figure(None).layout.annotations[0].text
    old = {"device": "NVIDIA H200", "stages": {"models": {"state": "done"}}, "models": []}
    assert "stage outliers_seed0 (not run)" in gpu_figure(old).layout.annotations[0].text
    fig = gpu_figure(_gpu())
    per_seed = [t for t in fig.data if t.type == "scatter" and t.mode == "markers+lines"]
    assert [t.name for t in per_seed] == [f"seed {i} (stream channel RMS ratio 40.0)" for i in range(3)]
    assert list(per_seed[0].x) == ["FP32", "gains ×1: none", "gains ×50: none", "fused, no rotation", "stream: none",
                                   "stream: QuaRot", "stream: DartQuant", "stream: end-to-end"]
    assert list(per_seed[0].y) == pytest.approx([5.0, 5.1, 9.0, 5.2, 9.5, 5.3, 5.2, 5.25])
    bars = [t for t in fig.data if t.type == "bar"]
    assert [t.name for t in bars] == ["DartQuant", "end-to-end"] and list(bars[1].y) == [40.0, 40.0, 40.0, 60.0]
