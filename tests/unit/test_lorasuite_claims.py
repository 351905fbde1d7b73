"""companion.lorasuite.claims: every verdict threshold just inside and just outside, under the one rule
(companion.core.judge): effects need three seeds, exact recoveries and timings one run."""


import pytest

from companion.core import MIN_SEEDS, VERDICTS
from companion.lorasuite import claims as C


def hist(final):
    return {"steps": [0, 3, 6], "val": [3.0, 2.9, final], "train": []}


def result(lft=(2.0,), scratch=(2.5,), lft_low=None, base=3.0, full=2.0, transferred=3.0, t_transfer=1.0, t_lft=2.0,
           t_scratch=2.0, steps=21, full_steps=250):
    """A constructed experiment result, one entry per seed: LFT finals at the highest lr (``lft``), at the lowest
    (``lft_low``), LoRA(n) finals at its best lr (``scratch``)."""
    n = len(lft)
    low = lft_low if lft_low is not None else tuple(x + 1.0 for x in lft)
    t_lft = t_lft if isinstance(t_lft, (list, tuple)) else [t_lft] * n
    return {"lft": {1e-4: [hist(x) for x in low], 1e-3: [hist(x) for x in lft]},
            "scratch": {1e-4: [hist(x + 0.5) for x in scratch], 1e-3: [hist(x) for x in scratch]},
            "val": {"new_base": base, "full_lora": full, "transferred": transferred, "old_base": 3.1, "old_lora": 2.0},
            # recorded seed by seed: LFT at each of the two lrs, LoRA(n) at its one lr
            "seconds": {"transfer": t_transfer, "lft": [t for t in t_lft for _ in range(2)], "scratch": [t_scratch] * n},
            "sizes": {"n_samples": 100, "epochs": 3, "batch": 16, "steps": steps, "seeds": list(range(n)),
                      "lrs": [1e-4, 1e-3], "scratch_lrs": [1e-3], "full_steps": full_steps, "full_batch": 16,
                      "scratch_warmup": 0}}


def checks(pairs=((0, 0), (1, 2), (2, 3), (3, 5)), heads=1.0):
    return {"layer_pairs": list(pairs), "true_layer_pairs": [(0, 0), (1, 2), (2, 3), (3, 5)], "head_recovery": heads,
            "cka_minibatches": 8, "cka_tokens": 128}


SEEDS3 = (2.0, 2.0, 2.0)


def test_loss_margin_three_seeds():
    m = C.LOSS_MARGIN
    assert MIN_SEEDS == 3
    assert C.lft_vs_scratch_row(result(lft=SEEDS3, scratch=(2.0 + 1.01 * m,) * 3)).verdict == "reproduced"
    assert C.lft_vs_scratch_row(result(lft=SEEDS3, scratch=(2.0 + 0.99 * m,) * 3)).verdict == "not reproduced"
    # mean past the margin but one seed short of it: partly
    row = C.lft_vs_scratch_row(result(lft=SEEDS3, scratch=(2.0 + 0.9 * m, 2.0 + 1.5 * m, 2.0 + 1.5 * m)))
    assert row.verdict == "partly reproduced" and "n=3" in row.evidence
    assert "3 seeds" in row.scale


def test_one_seed_is_inconclusive():
    """One seed is not enough for an effect, however wide the gap; its numbers are still shown."""
    res = result(lft=(2.0,), scratch=(2.5,), transferred=3.0)
    for row in (C.lft_vs_scratch_row(res), C.full_row(res), C.no_lft_row(res), C.lr_row(res)):
        assert row.verdict == "inconclusive" and "n=1" in row.evidence, row
    assert "one seed" in C.lft_vs_scratch_row(res).scale


def test_spread_straddling_the_margin_is_inconclusive():
    m = C.LOSS_MARGIN
    # per-seed gaps 0.5m, 0.5m, 1.5m... mean 0.83m: not past the margin, but mean + std reaches it
    row = C.lft_vs_scratch_row(result(lft=SEEDS3, scratch=(2.0 + 0.2 * m, 2.0 + 0.6 * m, 2.0 + 1.6 * m)))
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_lft_worse_than_scratch_is_not_reproduced():
    # the GPU's outcome on the CPU rule: LoRA(n) ends lower in every seed
    assert C.lft_vs_scratch_row(result(lft=(2.1, 2.1, 2.1), scratch=SEEDS3)).verdict == "not reproduced"


def test_recovery_full_and_partly():
    f, p = C.RECOVERY_FULL, C.RECOVERY_PARTLY  # base 3, full 2: LFT at 3 − fraction
    assert C.full_row(result(lft=(3.0 - f,) * 3)).verdict == "reproduced"
    assert C.full_row(result(lft=(1.9,) * 3)).verdict == "reproduced"  # beyond LoRA(full)
    assert C.full_row(result(lft=(3.0 - 0.99 * f,) * 3)).verdict == "partly reproduced"
    assert C.full_row(result(lft=(3.0 - 1.01 * p,) * 3)).verdict == "partly reproduced"
    assert C.full_row(result(lft=(3.0 - 0.99 * p,) * 3)).verdict == "not reproduced"
    assert C.full_row(result(lft=(2.0,) * 3, full=3.5)).verdict == "inconclusive"  # LoRA(full) gained nothing


def test_no_lft_fraction():
    f = C.NO_LFT_FRACTION  # base 3, full 2: the transferred adapter at 3 − fraction
    assert C.no_lft_row(result(transferred=[3.0 - 0.99 * f] * 3)).verdict == "reproduced"
    assert C.no_lft_row(result(transferred=[3.0 - 1.01 * f] * 3)).verdict == "not reproduced"
    assert C.no_lft_row(result(transferred=[3.0 + 0.99 * f] * 3)).verdict == "reproduced"  # slightly worse: still "about"
    assert C.no_lft_row(result(transferred=[3.0 + 1.01 * f] * 3)).verdict == "not reproduced"  # a sign flip: the size counts
    one = C.no_lft_row(result(transferred=3.0 - 0.5 * f))  # the notebook's one transfer: a single value
    assert one.verdict == "inconclusive" and "one transfer" in one.scale and "n=1: 12%" in one.evidence


def test_lr_row_margin_and_partly():
    m = C.LOSS_MARGIN  # the loss at the lowest lr minus the loss at the highest, per seed
    assert C.lr_row(result(lft=SEEDS3, lft_low=(2.0 + 1.01 * m,) * 3)).verdict == "reproduced"
    assert C.lr_row(result(lft=SEEDS3, lft_low=(2.0 + 0.99 * m,) * 3)).verdict == "partly reproduced"
    assert C.LR_PARTLY == 0.0
    assert C.lr_row(result(lft=SEEDS3, lft_low=(2.0 + 0.01 * m,) * 3)).verdict == "partly reproduced"
    assert C.lr_row(result(lft=SEEDS3, lft_low=(2.0 - 0.01 * m,) * 3)).verdict == "not reproduced"


def test_layer_and_head_rows_are_exact():
    assert C.LAYER_MISS_MAX == 0.0
    assert C.layer_row(checks()).verdict == "reproduced"
    assert C.layer_row(checks(pairs=((0, 0), (1, 2), (2, 4), (3, 5)))).verdict == "not reproduced"  # one pair missed
    h = C.HEAD_MISS_MAX
    assert C.head_row(checks(heads=1 - 0.99 * h)).verdict == "reproduced"
    assert C.head_row(checks(heads=1 - 1.01 * h)).verdict == "not reproduced"
    assert C.head_row(checks(heads=1 - h)).verdict == "reproduced"  # the bar itself counts


def test_time_saving_min():
    # LoRA(full) ≈ 2 s / 21 steps · 250 steps ≈ 23.8 s; ours = transfer + LFT (one timing ratio is enough)
    full = 2.0 / 21 * 250
    edge = (1 - C.TIME_SAVING_MIN) * full
    assert C.time_row(result(t_transfer=0.99 * edge - 2.0)).verdict == "reproduced"
    assert C.time_row(result(t_transfer=1.01 * edge - 2.0)).verdict == "not reproduced"
    # per-seed times show the spread: one seed above the bar, two below, the mean past it -> partly
    row = C.time_row(result(lft=SEEDS3, scratch=SEEDS3, t_transfer=0.0, t_lft=[0.3 * full, 0.35 * full, 0.6 * full]))
    assert row.verdict == "partly reproduced" and "n=3" in row.evidence


def gpu_json(lft=(2.50, 2.50, 2.50), scratch=(2.55, 2.55, 2.55), base=2.70, transferred=2.69, full=2.45, stop="patience",
             full_seconds=20.0, lft_seconds=9.0, states=None):
    """A constructed record of the grown-upgrade study, one seed stage per entry of ``lft``: the best LFT and LoRA(n)
    losses per seed (the other lr 0.05 worse), the transferred adapter's loss (a number or one per seed), LoRA(full)
    (None: not run); ``states`` overrides stage states (a stage not done has no result)."""
    seeds = range(len(lft))
    transferred = transferred if isinstance(transferred, (list, tuple)) else [transferred] * len(lft)
    arms = lambda v, sec: [{"lr": 1e-3, "val": v, "seconds": sec, "peak_gb": 6.0, "steps": 21},  # noqa: E731
                           {"lr": 3e-4, "val": v + 0.05, "seconds": sec, "peak_gb": 6.0, "steps": 21}]
    stages = {k: {"state": "done"} for k in ("vocab", "pretrain_old", "grow", *(f"seed{s}" for s in seeds), "svd")}
    stages |= states or {}
    out = {"device": "NVIDIA H200", "date": "2026-12-05 00:00 UTC", "stages": stages,
           "profile": {"lora_rank": 32, "epochs": 3, "lft_samples": 100, "full_max_steps": 450},
           "pretrain_old": {"parameters": 97e6},
           "grow": {"parameters": 231e6, "function_gap": 2e-4, "train": {"steps": 200}},
           "svd": [{"d": 2048, "full_ms": 100.0, "randomized_ms": 5.0, "rel_err": 1e-3}]}
    for s in seeds:
        out[f"seed{s}"] = {"seed": s, "n_samples": 100, "old_base": 2.60, "old_lora": {"val": 2.30}, "new_base": base,
                           "transferred": transferred[s], "transfer": {"seconds": 7.0},
                           "lft": arms(lft[s], lft_seconds), "scratch": arms(scratch[s], 2.0)}
        if full is not None:
            out[f"seed{s}"]["full"] = {"val": full, "seconds": full_seconds, "peak_gb": 8.0, "steps": 200, "stop": stop}
    return {k: v for k, v in out.items() if stages.get(k, {"state": "done"})["state"] == "done"}


def test_gpu_rows_without_a_record_of_the_grown_upgrade_are_not_run():
    from companion.lorasuite.scale import recorded

    svd = recorded()["svd"]  # the SVD stage's layout is the same in both studies
    earlier = {"date": "2026-12-02", "svd": svd,
               "stages": {s: {"state": "done"} for s in ("vocab", "pretrain", "task", "svd")}}
    for gpu, why in ((None, "no GPU run recorded yet"), (earlier, "earlier study of two separately trained models")):
        rows = C.gpu_rows(gpu)
        assert [r.verdict for r in rows[:4]] == ["not run here"] * 4 and len(rows) == 5
        assert all(why in r.evidence and "python -m companion.bench lorasuite" in r.evidence for r in rows[:4])
        assert why in C.recorded_summary(gpu)
    assert "d 2048: full SVD" in C.gpu_rows(earlier)[-1].measured
    none_done = gpu_json(states={f"seed{s}": {"state": "skipped", "reason": "deadline"} for s in range(3)})
    assert all("seed0 (skipped: deadline)" in r.evidence for r in C.gpu_rows(none_done)[:4])


def test_gpu_rows_one_seed_is_inconclusive():
    one = gpu_json(states={"seed1": {"state": "failed", "error": "RuntimeError: x"}, "seed2": {"state": "skipped"}})
    scratch, full, alone, time, _ = C.gpu_rows(one)
    assert [r.verdict for r in (scratch, full, alone)] == ["inconclusive"] * 3
    assert "one seed" in scratch.scale and "n=1: +0.0500" in scratch.evidence and "≈97M → ≈231M" in scratch.scale
    assert time.verdict == "reproduced" and "n=1" in time.evidence  # a timing: one run is judged
    assert "one seed" in C.recorded_summary(one)


def test_gpu_rows_three_seeds_follow_the_rule_and_show_every_seed():
    m = C.LOSS_MARGIN
    scratch, full, alone, time, _ = C.gpu_rows(gpu_json(scratch=(2.50 + 1.01 * m,) * 3))
    assert scratch.verdict == "reproduced" and "3 seeds" in scratch.scale and "n=3" in scratch.evidence
    assert "new model alone 2.7000" in scratch.measured and "new model alone 2.7000, 2.7000, 2.7000" in scratch.details
    assert C.gpu_rows(gpu_json(scratch=(2.50 + 0.99 * m,) * 3))[0].verdict == "not reproduced"
    # LFT 2.50, full 2.45, base 2.70: 80% of LoRA(full)'s gain, past RECOVERY_PARTLY, short of RECOVERY_FULL
    assert full.verdict == "partly reproduced" and "80%, 80%, 80%" in full.details
    assert C.gpu_rows(gpu_json(lft=(2.44,) * 3))[1].verdict == "reproduced"
    assert "(converged)" in full.measured and "after 200, 200, 200 steps" in full.details
    # the time saving: 1 - 9 / 20 = 55% per seed; memory shown beside it
    assert time.verdict == "reproduced" and "55%, 55%, 55% saved" in time.details and "8.00 GB" in time.measured
    edge = 20.0 * (1 - C.TIME_SAVING_MIN)
    assert C.gpu_rows(gpu_json(lft_seconds=1.01 * edge))[3].verdict == "not reproduced"
    assert C.gpu_rows(gpu_json(lft_seconds=0.99 * edge))[3].verdict == "reproduced"
    # LoRA(n) from scratch ending lower in every seed (the earlier record's outcome) is not reproduced
    assert C.gpu_rows(gpu_json(scratch=(2.40,) * 3))[0].verdict == "not reproduced"


def test_gpu_rows_spread_straddling_the_margin_is_inconclusive():
    m = C.LOSS_MARGIN  # per-seed gaps m + 0.03, m - 0.04, m - 0.01: mean below m, mean + std above it
    row = C.gpu_rows(gpu_json(scratch=(2.50 + m + 0.03, 2.50 + m - 0.04, 2.50 + m - 0.01)))[0]
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_gpu_no_lft_row_is_a_magnitude_a_sign_flip_does_not_pass():
    f, gain = C.NO_LFT_FRACTION, 2.70 - 2.45
    row = lambda t: C.gpu_rows(gpu_json(transferred=t))[2]  # noqa: E731
    assert row(2.70 - 0.99 * f * gain).verdict == "reproduced"
    assert row(2.70 - 1.01 * f * gain).verdict == "not reproduced"
    assert row(2.70 + 0.99 * f * gain).verdict == "reproduced"  # slightly worse than the new model: still "about"
    flipped = row(2.70 + 1.01 * f * gain)  # much worse: a signed reading (≤ 25% of the gain) would pass it
    assert flipped.verdict == "not reproduced" and "-25%" in flipped.details
    noop = row(2.70)  # the earlier record's outcome: exactly the new model's loss in every seed
    assert noop.verdict == "inconclusive" and "no effect" in noop.evidence
    assert "transferred − new model alone: +0.0000, +0.0000, +0.0000" in noop.details


def test_gpu_rows_when_lora_full_did_not_run_or_converge():
    _, full, alone, time, _ = C.gpu_rows(gpu_json(full=None))
    assert [r.verdict for r in (full, alone, time)] == ["not run here"] * 3 and "time budget" in full.evidence
    _, full, _, time, _ = C.gpu_rows(gpu_json(stop="time"))
    assert "time cap" in full.measured and "lower bound" in time.details
    assert C.gpu_rows(gpu_json(full=2.75))[1].verdict == "inconclusive"  # LoRA(full) above the new model: no gain


def test_recorded_summary_says_what_the_run_showed():
    text = C.recorded_summary(gpu_json(transferred=(2.68, 2.69, 2.70)))
    assert "means over 3 seeds" in text and "relative logit gap of 2.0e-04 before 200 further steps" in text
    assert "from 2.6000 to 2.3000" in text and "(alone 2.7000)" in text and "2.6900 without LFT and 2.5000 with it" in text
    assert "LoRA(100) from scratch 2.5500" in text and "LoRA(full) 2.4500 after 200 steps (converged; 20.0 s, 8.00 GB)" in text
    assert "LoRA(full) did not run" in C.recorded_summary(gpu_json(full=None))


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_rows_follow_the_run(n_seeds):
    rows = C.claim_rows(result(lft=(2.0,) * n_seeds, scratch=(2.5,) * n_seeds), checks())
    assert all(r.verdict in VERDICTS for r in rows) and len(rows) == 7 + 5 and all(r.evidence for r in rows)
    assert "100 windows" in rows[0].scale and "21 steps" in rows[0].scale
    assert (rows[0].verdict == "reproduced") == (n_seeds == 3)


def test_run_summary_follows_the_rows():
    res = result(lft=(2.0,), scratch=(2.5,), transferred=2.9)
    rows = C.claim_rows(res, checks(pairs=((0, 0), (1, 1), (2, 3), (3, 5))))[:7]
    text = C.run_summary(res, checks(pairs=((0, 0), (1, 1), (2, 3), (3, 5))), rows)
    assert "recovers 3 of the upgrade's 4 layer pairs" in text and "one layer away" in text
    assert "recovers 10% of LoRA(full)'s gain" in text and "2.000 (lr 0.001)" in text and "2.500" in text
    assert ", lower;" in text and all(f"{r.claim}: {r.verdict}" in text for r in rows)
    assert "fewer than 3 seeds" in text
    # LFT not lower, a miss far from the true partner, three seeds: the text says so and drops the seed note
    res3 = result(lft=(2.6,) * 3, scratch=(2.5,) * 3)
    ck = checks(pairs=((0, 0), (1, 2), (2, 3), (3, 0)))
    text = C.run_summary(res3, ck, C.claim_rows(res3, ck)[:7])
    assert "not lower" in text and "one layer away" not in text and "fewer than" not in text and "3 seeds" in text


def test_gpu_figure_draws_every_seed_and_says_when_nothing_is_recorded():
    from companion.lorasuite.figures import gpu_figure

    earlier = {"stages": {s: {"state": "done"} for s in ("vocab", "pretrain", "task", "svd")}}
    for gpu in (None, earlier):
        fig = gpu_figure(gpu)
        assert not fig.data and "not recorded" in fig.layout.annotations[0].text
    fig = gpu_figure(gpu_json(lft=(2.5, 2.4), full=None))
    assert len(fig.data) == 2 * 3 and "2 seed(s)" in fig.layout.title.text
    assert list(fig.data[0].y) == [2.60, 2.30, 2.70, 2.69, 2.5, 2.55, None]  # old alone, + LoRA, new alone, ...
