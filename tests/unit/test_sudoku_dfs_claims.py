"""Paper 06's claim builders: every verdict threshold of companion/sudoku_dfs/claims.py just inside and
just outside, with constructed results, judged by the one rule (one seed gives inconclusive, a straddling
spread gives inconclusive); the rows say what was measured, at the smallest sizes too."""

from __future__ import annotations

import math

import pytest

from companion.core import VERDICTS, Claim
from companion.sudoku_dfs import claims as c
from companion.sudoku_dfs import mssc
from companion.sudoku_dfs.claims import (
    E1_TOLERANCE,
    E2_TOLERANCE,
    L1_MEDIAN_MARGIN,
    MAX_LABEL_PROBLEMS,
    MIN_BOARD_ACCURACY_4X4,
    MIN_BOARD_ACCURACY_9X9,
    MIN_MOVE_ACCURACY_9X9,
    MIN_ONE_GUESS_SHARE,
    MIN_OPEN_ACCURACY_4X4,
    ONE_GUESS_CHUNKS,
    FourByFour,
    Guessing,
)

EPS = 1e-6


def test_transcripts_row_is_exact():
    row = c.transcripts_row(200, MAX_LABEL_PROBLEMS)
    assert row.verdict == "reproduced" and row.evidence == "error 0 problems vs ≤ 0 problems"
    row = c.transcripts_row(40, MAX_LABEL_PROBLEMS + 1)
    assert row.verdict == "not reproduced" and "40 transcripts" in row.measured and "1 label problems" in row.measured


def _four(acc, in_classes=300, n=300, classes=36):
    return FourByFour(n=n, plain=acc - 0.1, protocol=acc, in_training_classes=in_classes, classes=classes)


def test_learning_row_is_one_seed_and_shows_its_number():
    """One trained model is one seed: inconclusive on either side of the threshold, the number in the evidence."""
    kw = dict(parameters=400_000, steps=900, seconds=12.0, n_train=2000)
    inside = c.learning_row(_four(MIN_BOARD_ACCURACY_4X4), **kw)
    outside = c.learning_row(_four(MIN_BOARD_ACCURACY_4X4 - 0.1), **kw)
    assert inside.verdict == outside.verdict == "inconclusive"
    assert inside.evidence == f"n=1: 95.0% vs ≥ {MIN_BOARD_ACCURACY_4X4:.1%}; fewer than 3 seeds"
    assert outside.evidence.startswith("n=1: 85.0%")
    # the row says the held-out puzzles lie in training classes, and at what scale it ran
    assert "300 of them (in 36 symmetry classes) lie in a class the training augmentation covers" in inside.measured
    assert "900 steps" in inside.scale and "2000 training puzzles" in inside.scale and "one seed" in inside.scale
    assert "trained in this run in 12 s CPU" in inside.scale


def test_learning_row_says_where_the_model_came_from():
    kw = dict(parameters=400_000, steps=900, seconds=26.7, n_train=2000)
    trained = c.learning_row(_four(0.99), **kw, source={"kind": "trained", "path": None, "command": None})
    loaded = c.learning_row(_four(0.99), **kw, source={"kind": "checkpoint", "path": "data/sudoku/m.safetensors",
                                                       "command": "python -m companion.sudoku_dfs.four_by_four --seed 0"})
    assert "trained in this run" in trained.scale and "checkpoint" not in trained.scale
    assert "loaded from the checkpoint data/sudoku/m.safetensors" in loaded.scale
    assert "`python -m companion.sudoku_dfs.four_by_four --seed 0`" in loaded.scale and "not trained in this run" in loaded.scale
    assert trained.verdict == loaded.verdict == "inconclusive"


def test_generalisation_row_threshold_and_overlap():
    inside = c.generalisation_row(_four(MIN_OPEN_ACCURACY_4X4, in_classes=0, n=10, classes=7))
    assert inside.verdict == "inconclusive" and f"vs ≥ {MIN_OPEN_ACCURACY_4X4:.1%}" in inside.evidence
    assert "of 10 under-determined puzzles" in inside.measured and "0 of them in a training class" in inside.measured
    # a set that overlaps the training classes is no test of generalisation, however accurate
    overlap = c.generalisation_row(_four(1.0, in_classes=1, n=10))
    assert overlap.verdict == "not run here" and "1 of the 10 puzzles lie in a training class" in overlap.evidence


RECORDED = {
    "device": "NVIDIA H200", "date": "2026-11-30 07:39 UTC",
    "stages": {"training": {"state": "done"}, "evaluation": {"state": "done"}},
    "training": {"model": {"config": {"n_layer": 8, "n_head": 8, "n_embd": 256}, "parameters": 6_962_176},
                 "batch_size": 128, "lr": 0.001, "steps": 4460, "seconds": 115.0},
    "evaluation": {"board_accuracy": 0.0, "held_out_puzzles": 300, "teacher_forced_accuracy": {"move": 0.17}},
}


def test_nine_by_nine_row_from_a_constructed_gpu_json():
    """The GPU JSON holds one trained model: the row says inconclusive (one seed) and shows its number, and
    the scale column says where and what ran (8 heads, batch 128, lr 0.001; not the script's defaults)."""
    row = c.nine_by_nine_row(recorded=RECORDED)
    assert row.verdict == "inconclusive" and row.evidence == "n=1: 0.0% vs ≥ 95.0%; fewer than 3 seeds"
    assert row.scale.startswith("NVIDIA H200, one seed")
    assert "8 layers, 8 heads, d = 256" in row.scale and "batch 128" in row.scale and "lr 0.001" in row.scale
    assert "4460 steps" in row.scale and "7.0M parameters" in row.scale
    good = {**RECORDED, "evaluation": {**RECORDED["evaluation"], "board_accuracy": MIN_BOARD_ACCURACY_9X9}}
    assert c.nine_by_nine_row(recorded=good).verdict == "inconclusive"
    ck = {"accuracy": MIN_BOARD_ACCURACY_9X9 - EPS, "puzzles": 1, "parameters": 7e6, "steps": 10, "device": "cpu"}
    row = c.nine_by_nine_row(checkpoint=ck)
    assert row.verdict == "inconclusive" and "one seed (one checkpoint)" in row.scale
    assert c.nine_by_nine_row().verdict == "not run here"


def test_nine_by_nine_row_when_a_recorded_stage_did_not_finish():
    """The row reads the NINE_STAGES of the recorded run: one that did not end done makes it not run, saying why."""
    assert c.NINE_STAGES == ("training", "evaluation")
    killed = {**RECORDED, "stages": {"training": {"state": "done"}, "evaluation": {"state": "unfinished", "started": "now"}}}
    killed.pop("evaluation")
    row = c.nine_by_nine_row(recorded=killed)
    assert row.verdict == "not run here" and "in the recorded GPU run: evaluation (unfinished)" in row.measured
    failed = {**RECORDED, "stages": {"training": {"state": "failed", "error": "OutOfMemoryError: CUDA"}}}
    row = c.nine_by_nine_row(recorded=failed)
    assert row.verdict == "not run here"
    assert "training (failed: OutOfMemoryError: CUDA); evaluation (not run)" in row.measured


def _curve(moves, seconds_per_step=0.04):
    """A training curve (``rule_accuracy_curve``) with these move accuracies, one point per 500 steps."""
    return [{"step": 500 * k, "seconds": round(500 * k * seconds_per_step, 1), "loss": 6.0 - k, "all": m - 0.01,
             "move": m, "101": 0.5, "102": 0.25, "0": 1.0, "level": 1.0} for k, m in enumerate(moves)]


SKIPPED = {**RECORDED,
           "stages": {"training": {"state": "done"}, "evaluation": {"state": "skipped", "reason": "deadline: 23 s left"}},
           "training": {**RECORDED["training"], "rule_accuracy_curve": _curve([0.01, 0.3, 0.74])}}
SKIPPED.pop("evaluation")


def test_nine_by_nine_row_says_what_a_run_without_evaluation_reached():
    """Evaluation skipped: no board accuracy (not run), but the headline gives the training's last teacher-forced
    move accuracy, steps and seconds, the details why there is no board accuracy."""
    row = c.nine_by_nine_row(recorded=SKIPPED)
    assert row.verdict == "not run here"
    assert row.measured == ("no board accuracy (evaluation did not finish); the recorded run's training reached "
                            "teacher-forced move accuracy 0.74 in 4460 steps (115 s)")
    assert row.details == "no checkpoint given; in the recorded GPU run: evaluation (skipped: deadline: 23 s left)"
    assert row.scale.startswith("NVIDIA H200, one seed")
    # a layout without the curve: the row names the stage and nothing more
    old = {**SKIPPED, "training": RECORDED["training"]}
    row = c.nine_by_nine_row(recorded=old)
    assert row.verdict == "not run here" and row.details == "" and "move accuracy" not in row.measured


def test_move_accuracy_row_threshold_and_one_seed():
    """The last curve point's move accuracy against MIN_MOVE_ACCURACY_9X9: one training run is one seed, so
    inconclusive on both sides; the evidence carries the number and the target."""
    inside = c.move_accuracy_row({**SKIPPED, "training": {**SKIPPED["training"],
                                                          "rule_accuracy_curve": _curve([0.1, MIN_MOVE_ACCURACY_9X9])}})
    outside = c.move_accuracy_row({**SKIPPED, "training": {**SKIPPED["training"], "rule_accuracy_curve": _curve(
        [0.1, MIN_MOVE_ACCURACY_9X9 - 0.01])}})
    assert inside.verdict == outside.verdict == "inconclusive"
    assert inside.evidence == f"n=1: 0.90 vs ≥ {MIN_MOVE_ACCURACY_9X9:.2f}; fewer than 3 seeds"
    assert outside.evidence.startswith("n=1: 0.89 vs")
    row = c.move_accuracy_row(SKIPPED)
    assert row.measured == "move accuracy 0.74 at step 1000 of 4460"
    assert row.details.startswith("40 s into the training stage; all token types at that step: moves 0.74")
    assert "moves 0.74, all tokens 0.73, 101 (no rule applies) 0.50" in row.details and "the first at move accuracy 0.01" in row.details
    assert row.scale.startswith("NVIDIA H200, one seed, recorded run: 8 layers") and "98.9%" in row.paper


def test_move_accuracy_row_without_a_curve_is_not_run_and_older_curves_read():
    assert c.move_accuracy_row(None).verdict == "not run here"
    steps_only = [{k: v for k, v in p.items() if k != "seconds"} for p in _curve([0.2, 0.5])]  # an older curve
    row = c.move_accuracy_row({**SKIPPED, "training": {**SKIPPED["training"], "rule_accuracy_curve": steps_only}})
    assert row.verdict == "inconclusive" and row.details.startswith("all token types at that step: moves 0.50")
    old = c.move_accuracy_row({**SKIPPED, "training": RECORDED["training"]})  # a layout older than the curve
    assert old.verdict == "not run here" and "not recorded in its layout" in old.measured
    failed = {**SKIPPED, "stages": {"training": {"state": "failed", "error": "OutOfMemoryError: CUDA"}}}
    failed.pop("training")
    row = c.move_accuracy_row(failed)
    assert row.verdict == "not run here" and "training (failed: OutOfMemoryError: CUDA)" in row.measured
    # a curve without move accuracies (the monitor had no transcripts) is no measurement either
    empty = {**SKIPPED, "training": {**SKIPPED["training"], "rule_accuracy_curve": [{"step": 0, "seconds": 1.0, "loss": 7.0}]}}
    assert c.move_accuracy_row(empty).verdict == "not run here"


def test_nine_by_nine_rows_from_the_recorded_json():
    from companion.sudoku_dfs.scale import recorded

    rec = recorded()
    row = c.nine_by_nine_row(recorded=rec)
    end = rec["training"]["rule_accuracy_curve"][-1]
    if rec["stages"]["evaluation"]["state"] == "done":
        assert row.verdict == "inconclusive"  # one training run
        assert f"{rec['evaluation']['board_accuracy']:.1%}" in row.evidence
    else:
        assert row.verdict == "not run here" and f"move accuracy {end['move']:.2f}" in row.measured
    move = c.move_accuracy_row(rec)
    assert move.verdict == "inconclusive" and move.evidence.startswith(f"n=1: {end['move']:.2f}")


def _flags(per_chunk, size=200):
    """Chunks of ``size`` puzzles, the first ``per_chunk[i]`` of chunk i solved."""
    return [j < k for k in per_chunk for j in range(size)]


def test_one_guess_row_threshold_over_chunks():
    size = 200
    k_in, k_out = math.ceil(MIN_ONE_GUESS_SHARE * size), math.ceil(MIN_ONE_GUESS_SHARE * size) - 1
    inside = c.one_guess_row(_flags([k_in] * ONE_GUESS_CHUNKS, size), 10)
    outside = c.one_guess_row(_flags([k_out] * ONE_GUESS_CHUNKS, size), 10)
    assert inside.verdict == "reproduced" and outside.verdict == "not reproduced"
    assert f"{ONE_GUESS_CHUNKS * size} committed 9x9 puzzles in {ONE_GUESS_CHUNKS} disjoint chunks" in inside.scale
    assert inside.evidence.startswith(f"n={ONE_GUESS_CHUNKS}:")
    assert "97.5% of 40 (3 by the rules alone); per chunk of 8:" in c.one_guess_row([True] * 39 + [False], 3).measured


def test_one_guess_row_spread_that_straddles_the_target():
    # chunks of 40: one misses the bar badly, the others are close above and below it
    chunks = [0.975, 0.95, 0.925, 0.975, 0.8]
    flags = [j < round(s * 40) for s in chunks for j in range(40)]
    row = c.one_guess_row(flags, 0)
    assert row.verdict == "inconclusive" and "straddles" in row.evidence
    chunks = [1.0, 1.0, 1.0, 1.0, 0.9]  # the mean past the bar, not every chunk
    row = c.one_guess_row([j < round(s * 40) for s in chunks for j in range(40)], 0)
    assert row.verdict == "partly reproduced"


def _guessing(gaps, l1_mean=(10.0,), l2_mean=(9.0,)):
    l1 = [2.0 + 0.1 * k for k in range(len(gaps))]
    return Guessing(l1_median=l1, l2_median=[x + g for x, g in zip(l1, gaps)], l1_mean=list(l1_mean),
                    l2_mean=list(l2_mean), oracle_median=[2.3] * len(gaps), n_train=20, n_test=21)


def test_guessing_row_margin_per_split():
    assert c.guessing_row(_guessing([L1_MEDIAN_MARGIN + EPS] * 3)).verdict == "reproduced"
    assert c.guessing_row(_guessing([L1_MEDIAN_MARGIN - EPS] * 3)).verdict == "not reproduced"
    inside = c.guessing_row(_guessing([L1_MEDIAN_MARGIN + EPS] * 3))
    assert "mean" in inside.measured and "the mean favours L2" in inside.measured  # 10 > 9: the mean reverses
    assert "favours" not in c.guessing_row(_guessing([1.0] * 3, l1_mean=(8.0,), l2_mean=(9.0,))).measured
    assert "3 random splits" in inside.scale and "20 / 21 stuck puzzles" in inside.scale
    # L1 loses on one split: the mean gap is past the margin but not every split -> partly, not reproduced
    assert c.guessing_row(_guessing([0.3, 0.3, -0.1])).verdict == "partly reproduced"  # 0.17 ± 0.23
    # a spread that straddles the margin
    row = c.guessing_row(_guessing([-0.5, 0.0, 0.5]))
    assert row.verdict == "inconclusive" and "straddles" in row.evidence
    # one split: inconclusive, no range, the row still reads
    one = c.guessing_row(_guessing([1.0]))
    assert one.verdict == "inconclusive" and "range" not in one.measured and "1 random split" in one.scale


def test_theory_e1_against_closed_forms():
    ns = [3, 5, 10, 100]
    rows = mssc.example_e1_table(ns)
    row = c.theory_e1_row(rows)
    assert row.verdict == "reproduced" and "L2 67.0" in row.measured
    # the closed form grows like n: 2n/3 for large n
    assert c.e1_closed_forms(1000)["L2 / marginal policy (trials)"] == pytest.approx(2 * 1000 / 3, rel=1e-3)
    # just inside / just outside the tolerance on one policy
    v = rows[-1]["L2 / marginal policy (trials)"]
    inside = [dict(r) for r in rows]
    inside[-1]["L2 / marginal policy (trials)"] = v * (1 + 0.5 * E1_TOLERANCE)
    outside = [dict(r) for r in rows]
    outside[-1]["L2 / marginal policy (trials)"] = v * (1 + 2 * E1_TOLERANCE)
    assert c.theory_e1_row(inside).verdict == "reproduced"
    assert c.theory_e1_row(outside).verdict == "not reproduced"
    greedy = [dict(r) for r in rows]
    greedy[0]["greedy order (cover time)"] = 4 / 3 * (1 + 2 * E1_TOLERANCE)
    assert c.theory_e1_row(greedy).verdict == "not reproduced"


def _e2(optimum=1.0, sqrt_policy=2.0, cs=3.0, bound=10.0):
    return {"optimum": optimum, "sqrt_policy": sqrt_policy, "cauchy_schwarz": cs, "bound": bound}


def test_theory_e2_violation_threshold():
    assert c.theory_e2_row([_e2()] * 30).verdict == "reproduced"
    bound = 10.0
    inside = c.theory_e2_row([_e2()] * 29 + [_e2(cs=bound * (1 + 0.5 * E2_TOLERANCE), bound=bound)])
    outside = c.theory_e2_row([_e2()] * 29 + [_e2(cs=bound * (1 + 2 * E2_TOLERANCE), bound=bound)])
    assert inside.verdict == "reproduced" and outside.verdict == "not reproduced"
    assert "29/30" in outside.measured
    assert c.theory_e2_row([_e2(optimum=2.5)]).verdict == "not reproduced"  # optimum above the √q policy
    rng = __import__("numpy").random.default_rng(0)
    real = [mssc.theorem_e2_check(*mssc.random_instance(8, 5, rng)) for _ in range(5)]
    assert c.theory_e2_row(real).verdict == "reproduced"


@pytest.mark.parametrize("rec", [None, RECORDED])
def test_claim_rows_assemble_valid_claims(rec):
    rows = c.claim_rows(
        transcripts=(40, 0), held_out=_four(0.99, n=20, in_classes=20), open_set=_four(0.9, n=10, in_classes=0),
        training={"parameters": 1, "steps": 10, "seconds": 1.0, "n_train": 100}, nine={"recorded": rec, "checkpoint": None},
        one_guess=([True] * 39 + [False], 5), guessing=_guessing([0.5] * 5),
        theory=(mssc.example_e1_table([3, 100]), [_e2()] * 30),
    )
    assert len(rows) == 9 and all(isinstance(r, Claim) and r.verdict in VERDICTS and r.evidence for r in rows)
