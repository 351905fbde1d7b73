"""companion.lorasuite.claims: every verdict threshold just inside and just outside, under the one rule
(companion.core.judge): effects need three seeds, exact recoveries and timings one run."""

import copy

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
    assert C.no_lft_row(result(transferred=[3.2] * 3)).verdict == "reproduced"  # worse than the base: no help at all
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


def gpu_json(lft=(2.64, 2.66), scratch=(2.61, 2.65), base=2.6721, transferred=2.6721, full=2.5477, steps=112,
             planned=150, seconds=12.0, lft_seconds=8.9, seeds=(0,), states=None):
    """A constructed GPU JSON in the stage runner's layout: LFT / LoRA(n) at n 100, lr 1e-3 and 3e-4 (one entry
    per seed); ``states`` overrides stage states (a stage not done has no result)."""
    entries = lambda vals, sec: [{"n_samples": 100, "lr": lr, "val": v + 0.001 * s, "seconds": sec, "peak_gb": 7.0,  # noqa: E731
                                  **({"seed": s} if len(seeds) > 1 else {})}
                                 for s in seeds for lr, v in zip((1e-3, 3e-4), vals)]
    stages = {k: {"state": "done"} for k in ("vocab", "pretrain", "task", "svd")} | (states or {})
    out = {"device": "NVIDIA H200", "date": "2026-12-02 00:00 UTC", "stages": stages,
           "profile": {"lora_steps": planned, "lora_rank": 32, "epochs": 3, "stage_limits": {"lora": 12}},
           "pretrain": {"parameters": {"old": 97e6, "new": 205e6}},
           "task": {"new_base": base, "transferred": transferred, "transfer": {"seconds": 7.0},
                    "lft": entries(lft, lft_seconds), "scratch": entries(scratch, 2.0),
                    "full_lora": {"val": full, "seconds": seconds, "peak_gb": 8.1, "steps": steps}},
           "svd": [{"d": 2048, "full_ms": 100.0, "randomized_ms": 5.0, "rel_err": 1e-3},
                   {"d": 4096, "full_ms": 600.0, "randomized_ms": 6.0, "rel_err": 1e-3}]}
    return {k: v for k, v in out.items() if stages.get(k, {"state": "done"})["state"] == "done"}


def test_gpu_rows_recorded_json_one_seed():
    assert [r.verdict for r in C.gpu_rows(None)] == ["not run here"]
    rows = C.gpu_rows(gpu_json())
    assert len(rows) == 5 and all("H200" in r.scale for r in rows[:4])
    scratch, full, alone, time, svd = rows
    # one seed: every effect is inconclusive, with its numbers
    assert [r.verdict for r in (scratch, full, alone)] == ["inconclusive"] * 3
    assert "one seed" in scratch.scale and "n=1: -0.0300" in scratch.evidence
    # the review's item 11: LoRA(n) ended lower in every setting, the adapter alone changed nothing, the cap is said
    assert "lower than LoRASuite + LFT in 2 of 2 settings" in scratch.measured
    assert "exactly the new model's" in alone.measured and "2.6721 vs new model alone 2.6721" in alone.measured
    assert "stopped by its time cap at 112 of 150 steps" in full.measured and "112 of 150" in scratch.scale
    # the time saving: judged against the full 150 steps at the cut run's step time, the cut run's saving shown too
    assert "16.1 s for all 150 steps" in time.measured and "12.0 s" in time.measured and "26% saved" in time.measured
    assert time.verdict == "not reproduced" and "n=1: 45%" in time.evidence
    assert svd.verdict == "not run here" and "× 6.0 for d × 2" in svd.measured


def test_gpu_rows_follow_the_rule_with_three_seeds():
    good = gpu_json(lft=(2.55, 2.60), scratch=(2.60, 2.62), full=2.56, seeds=(0, 1, 2), transferred=2.67,
                    steps=150, lft_seconds=3.0)
    scratch, full, alone, time, _ = C.gpu_rows(good)
    assert "3 seeds" in scratch.scale and "stopped" not in scratch.scale
    assert scratch.verdict == "reproduced" and "n=3" in scratch.evidence
    assert full.verdict == "reproduced" and time.verdict == "reproduced"
    assert alone.verdict == "inconclusive" and "one transfer" in alone.scale  # the JSON holds one transfer
    bad = copy.deepcopy(good)
    for e in bad["task"]["scratch"]:
        e["val"] -= 0.1  # LoRA(n) from scratch ends lower in every seed
    assert C.gpu_rows(bad)[0].verdict == "not reproduced"


def test_gpu_rows_of_stages_that_did_not_finish_say_so():
    rows = C.gpu_rows(gpu_json(states={"task": {"state": "unfinished", "started": "2026-12-02 09:00 UTC"},
                                       "svd": {"state": "skipped", "reason": "deadline: 4 s left, needs 15 s"}}))
    assert [r.verdict for r in rows] == ["not run here"] * 2
    assert "the recorded run's stage task (unfinished)" in rows[0].evidence
    assert "stage svd (skipped: deadline: 4 s left, needs 15 s)" in rows[1].evidence
    failed = C.gpu_rows(gpu_json(states={"svd": {"state": "failed", "error": "RuntimeError: x"}}))
    assert len(failed) == 5 and "svd (failed: RuntimeError: x)" in failed[-1].evidence
    assert "python -m companion.bench lorasuite" in C.gpu_rows(None)[0].evidence
    assert "task (unfinished)" in C.recorded_summary(gpu_json(states={"task": {"state": "unfinished"}}))


def test_the_migrated_record_reads_as_every_stage_done():
    from companion.lorasuite.scale import STAGES, missing, recorded

    gpu = recorded()
    assert gpu["complete"] and all(missing(gpu, s.name) is None for s in STAGES)
    rows = C.gpu_rows(gpu)
    assert len(rows) == 5 and "stopped by its time cap at 112 of 150 steps" in rows[1].measured
    assert "LoRA(full) was stopped by its 12 s time cap" in C.recorded_summary(gpu)


def test_recorded_summary_says_what_the_run_showed():
    text = C.recorded_summary(gpu_json())
    assert "in 2 of 2 settings" in text and "(exactly the same)" in text
    assert "stopped by its 12 s time cap after 112 of 150 steps" in text and "one seed" in text
    text = C.recorded_summary(gpu_json(scratch=(2.7, 2.7), transferred=2.60, steps=150))
    assert "in 0 of 2 settings" in text and "(-0.0721)" in text and "ran all 150 steps" in text


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_rows_follow_the_run(n_seeds):
    rows = C.claim_rows(result(lft=(2.0,) * n_seeds, scratch=(2.5,) * n_seeds), checks())
    assert all(r.verdict in VERDICTS for r in rows) and len(rows) == 8 and all(r.evidence for r in rows)
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
