"""Paper 06's claim builders: every verdict threshold of companion/sudoku_dfs/claims.py just inside and
just outside, with constructed results; the rows say what was measured, at the smallest sizes too."""

from __future__ import annotations

import pytest

from companion.core import VERDICTS, Claim
from companion.sudoku_dfs import claims as c
from companion.sudoku_dfs.claims import (
    E1_GREEDY_TOLERANCE,
    E1_MIN_MARGINAL_TRIALS,
    L1_MEDIAN_MARGIN,
    MAX_LABEL_PROBLEMS,
    MIN_BOARD_ACCURACY_4X4,
    MIN_BOARD_ACCURACY_9X9,
    MIN_ONE_GUESS_SHARE,
    MIN_OPEN_ACCURACY_4X4,
    FourByFour,
    Guessing,
)

EPS = 1e-6


def test_transcripts_row():
    assert c.transcripts_row(200, MAX_LABEL_PROBLEMS).verdict == "reproduced"
    row = c.transcripts_row(40, MAX_LABEL_PROBLEMS + 1)
    assert row.verdict == "not reproduced" and "40 transcripts" in row.measured and "1 label problems" in row.measured


def _four(acc, in_classes=300, n=300, classes=36):
    return FourByFour(n=n, plain=acc - 0.1, protocol=acc, in_training_classes=in_classes, classes=classes)


def test_learning_row_threshold_and_symmetry_coverage():
    kw = dict(parameters=400_000, steps=900, seconds=12.0, n_train=2000)
    inside = c.learning_row(_four(MIN_BOARD_ACCURACY_4X4), **kw)
    outside = c.learning_row(_four(MIN_BOARD_ACCURACY_4X4 - EPS), **kw)
    assert inside.verdict == "partly reproduced" and outside.verdict == "not reproduced"
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
    assert trained.verdict == loaded.verdict == "partly reproduced"


def test_generalisation_row_threshold():
    inside = c.generalisation_row(_four(MIN_OPEN_ACCURACY_4X4, in_classes=0, n=10, classes=7))
    outside = c.generalisation_row(_four(MIN_OPEN_ACCURACY_4X4 - EPS, in_classes=0, n=10, classes=7))
    assert inside.verdict == "partly reproduced" and outside.verdict == "not reproduced"
    # a set that overlaps the training classes is no test of generalisation
    assert c.generalisation_row(_four(1.0, in_classes=1, n=10)).verdict == "not reproduced"
    assert "of 10 under-determined puzzles" in inside.measured and "0 of them in a training class" in inside.measured


RECORDED = {
    "device": "NVIDIA H200", "date": "2026-11-30 07:39 UTC",
    "model": {"config": {"n_layer": 8, "n_head": 8, "n_embd": 256}, "parameters": 6_962_176},
    "training": {"batch_size": 128, "lr": 0.001, "steps": 4460, "seconds": 115.0},
    "evaluation": {"board_accuracy": 0.0, "held_out_puzzles": 300, "teacher_forced_accuracy": {"move": 0.17}},
}


def test_nine_by_nine_row_shows_the_configuration_that_ran():
    row = c.nine_by_nine_row(recorded=RECORDED)
    assert row.verdict == "not reproduced"
    # what ran (8 heads, batch 128, lr 0.001), not the script's current defaults (16 heads, batch 64)
    assert "8 layers, 8 heads, d = 256" in row.scale and "batch 128" in row.scale and "lr 0.001" in row.scale
    assert "4460 steps" in row.scale and "7.0M parameters" in row.scale
    good = {**RECORDED, "evaluation": {**RECORDED["evaluation"], "board_accuracy": MIN_BOARD_ACCURACY_9X9}}
    assert c.nine_by_nine_row(recorded=good).verdict == "recorded on GPU"
    bad = {**RECORDED, "evaluation": {**RECORDED["evaluation"], "board_accuracy": MIN_BOARD_ACCURACY_9X9 - EPS}}
    assert c.nine_by_nine_row(recorded=bad).verdict == "not reproduced"
    ck = {"accuracy": MIN_BOARD_ACCURACY_9X9, "puzzles": 1, "parameters": 7e6, "steps": 10, "device": "cpu"}
    assert c.nine_by_nine_row(checkpoint=ck).verdict == "reproduced"
    assert c.nine_by_nine_row(checkpoint={**ck, "accuracy": MIN_BOARD_ACCURACY_9X9 - EPS}).verdict == "not reproduced"
    assert c.nine_by_nine_row().verdict == "not run here"


def test_one_guess_row_threshold():
    n = 1_000_000
    assert c.one_guess_row(n, 10, round(MIN_ONE_GUESS_SHARE * n)).verdict == "reproduced"
    assert c.one_guess_row(n, 10, round(MIN_ONE_GUESS_SHARE * n) - 1).verdict == "partly reproduced"
    assert "(3 of 40 by the rules alone)" in c.one_guess_row(40, 3, 39).measured


def _guessing(gap, l1_mean=(10.0,), l2_mean=(9.0,), splits=3):
    l1 = [2.0 + 0.1 * k for k in range(splits)]
    return Guessing(l1_median=l1, l2_median=[x + gap for x in l1], l1_mean=list(l1_mean), l2_mean=list(l2_mean),
                    oracle_median=[2.3] * splits, n_train=20, n_test=21)


def test_guessing_row_margin_and_mean_beside_median():
    inside = c.guessing_row(_guessing(L1_MEDIAN_MARGIN + EPS))
    outside = c.guessing_row(_guessing(L1_MEDIAN_MARGIN - EPS))
    assert inside.verdict == "partly reproduced" and outside.verdict == "not reproduced"
    assert "mean" in inside.measured and "the mean favours L2" in inside.measured  # 10 > 9: the mean reverses
    assert "favours" not in c.guessing_row(_guessing(1.0, l1_mean=(8.0,), l2_mean=(9.0,))).measured
    assert "3 random splits" in inside.scale and "20 / 21 stuck puzzles" in inside.scale
    # L1 must win on every split, not only on average
    g = _guessing(1.0)
    g.l2_median[0] = g.l1_median[0] - 0.01
    assert c.guessing_row(g).verdict == "not reproduced"
    # one split: no range, the row still reads
    assert "range" not in c.guessing_row(_guessing(1.0, splits=1)).measured


def test_theory_row_thresholds():
    e1 = {"greedy": 4 / 3, "marginal": E1_MIN_MARGINAL_TRIALS, "log": 2.9}
    assert c.theory_row(e1, 30, 30).verdict == "reproduced"
    assert c.theory_row({**e1, "marginal": E1_MIN_MARGINAL_TRIALS - EPS}, 30, 30).verdict == "not reproduced"
    assert c.theory_row({**e1, "greedy": 4 / 3 + E1_GREEDY_TOLERANCE / 2}, 30, 30).verdict == "reproduced"
    assert c.theory_row({**e1, "greedy": 4 / 3 + 2 * E1_GREEDY_TOLERANCE}, 30, 30).verdict == "not reproduced"
    assert c.theory_row(e1, 29, 30).verdict == "not reproduced"


@pytest.mark.parametrize("rec", [None, RECORDED])
def test_claim_rows_assemble_valid_claims(rec):
    rows = c.claim_rows(
        transcripts=(40, 0), held_out=_four(0.99, n=20, in_classes=20), open_set=_four(0.9, n=10, in_classes=0),
        training={"parameters": 1, "steps": 10, "seconds": 1.0, "n_train": 100}, nine={"recorded": rec, "checkpoint": None},
        one_guess=(40, 5, 39), guessing=_guessing(0.5), theory=({"greedy": 4 / 3, "marginal": 50.0, "log": 3.0}, 30, 30),
    )
    assert len(rows) == 7 and all(isinstance(r, Claim) and r.verdict in VERDICTS for r in rows)
