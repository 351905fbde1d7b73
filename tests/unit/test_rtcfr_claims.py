"""Paper 18's claim rows on the one rule: every threshold of claims.py just inside and just outside, one game
(inconclusive), a straddling spread across games, and the GPU rows from a constructed JSON."""

import math

import numpy as np
import pytest

from companion.core import VERDICTS
from companion.rtcfr.claims import (
    KEEP_CEILING,
    KUHN_NASHCONV,
    LATE_FRACTION,
    MACHINE,
    RESET_FLOOR,
    SPREAD_MARGIN,
    WIN_FACTOR,
    beats,
    claim_rows,
    late_window,
    mu_tu_spread,
    recorded_rows,
    win_log_ratio,
)
from companion.rtcfr.solvers import Trajectory

EPS = 1e-9
GAMES = ("kuhn_poker", "leduc_poker", "liars_dice_4")


def _tr(alg, final, iterations=200, every=5, average=None, early=1.0, **params):
    its = np.unique(np.concatenate([[1], np.arange(every, iterations + 1, every)]))
    last = np.full(len(its), early)
    last[-1] = final
    avg = np.full(len(its), np.nan if average is None else early)
    if average is not None:
        avg[-1] = average
    return Trajectory(alg, "g", its, last, avg, 0.1, params)


def _game(rt=1e-8, untuned=1e-6, base_last=1e-3, base_avg=1e-4, iterations=200):
    return ([_tr("rtcfr+", rt, iterations, mu=0.1, T_u=10), _tr("rtcfr+", untuned, iterations)]
            + [_tr(a, base_last, iterations, average=base_avg) for a in ("cfr+", "pcfr+", "dcfr")])


def _results(games=GAMES, iterations=200, **kw):
    """Every game alike, or ``kw`` values given per game as lists."""
    out = {}
    for i, g in enumerate(games):
        out[g] = _game(iterations=iterations, **{k: (v[i] if isinstance(v, list) else v) for k, v in kw.items()})
    return out


def _rows(results=None, keep_end=1e-3, reset_late=0.1, iterations=200, grid=None, recorded=None):
    results = results or _results(iterations=iterations)
    keep = _tr("rtcfr+", keep_end, iterations, mu=1e-3, T_u=100)
    reset = _tr("rtcfr+", reset_late, iterations, early=reset_late, mu=1e-3, T_u=100)
    grid = np.array([[1e-2, 1e-2], [1e-6, 1e-6]]) if grid is None else grid  # rows μ, columns T_u
    rows = claim_rows(results, keep, reset, iterations=iterations, heatmap_grid=grid, heatmap_mus=[1e-3, 1e-1],
                      heatmap_T_us=[10, 100], heatmap_game="leduc_poker", heatmap_iterations=100, recorded=recorded)
    assert all(r.verdict in VERDICTS and r.evidence for r in rows)
    return rows


def _row(rows, word):
    (row,) = [r for r in rows if word in r.claim]
    return row


def test_beats_margin_and_machine_tie():
    assert beats(WIN_FACTOR * 1e-3 * (1 - EPS), 1e-3) and not beats(WIN_FACTOR * 1e-3 * (1 + EPS), 1e-3)
    # both at machine precision: a tie, not a win
    assert win_log_ratio(MACHINE * 1e-3, MACHINE * 1e-5) == 0.0 and not beats(MACHINE * 1e-3, MACHINE * 1e-5)
    assert beats(MACHINE * 1e-3, 2 * MACHINE * (1 + EPS) / WIN_FACTOR)  # machine precision against a larger value
    assert win_log_ratio(1e-4, 1e-2) == pytest.approx(-2.0)


def test_late_window_follows_iterations():
    assert late_window(2000, 100) == (int(2000 * (1 - LATE_FRACTION)), 2000)
    assert late_window(200, 100) == (100, 200)  # at least one T_u cycle
    assert late_window(200, 10) == (180, 200)
    assert late_window(100, 500) == (1, 100)


@pytest.mark.parametrize("iterations", [100, 200, 2000])
def test_rows_follow_iterations_and_have_no_nan(iterations):
    rows = _rows(iterations=iterations)
    lo, hi = late_window(iterations, 100)
    reset_row = _row(rows, "Resetting")
    assert f"iterations {lo}-{hi}" in reset_row.measured and "nan" not in " ".join(r.measured for r in rows)
    assert f"at {iterations} iterations" in _row(rows, "converges to a Nash").measured
    assert "one run per game" in _row(rows, "average iterate of CFR+").scale


def test_kuhn_row_names_the_iteration_its_early_value_was_evaluated_at():
    """With EVAL_EVERY = 30 the last evaluation at or before 100 is iteration 90: the row says 90, not 100."""
    results = _results()
    results["kuhn_poker"][0] = _tr("rtcfr+", 1e-9, 200, every=30, early=3e-2, mu=0.1, T_u=10)
    measured = _row(_rows(results), "converges to a Nash").measured
    assert "3.0e-02 at 90," in measured and "at 100," not in measured


def test_kuhn_threshold_exact():
    inside = _results(rt=KUHN_NASHCONV * (1 - EPS))
    outside = _results(rt=KUHN_NASHCONV * (1 + EPS))
    assert _row(_rows(inside), "converges to a Nash").verdict == "reproduced"
    row = _row(_rows(outside), "converges to a Nash")
    assert row.verdict == "not reproduced" and "vs ≤ 1.0e-06" in row.evidence


def test_wins_are_judged_per_game_against_the_margin():
    avg = 1e-4
    row = _row(_rows(_results(rt=WIN_FACTOR * avg * (1 - EPS), base_avg=avg)), "average iterate of CFR+")
    assert row.verdict == "reproduced" and "n=3" in row.evidence and "3 of 3" in row.measured
    row = _row(_rows(_results(rt=WIN_FACTOR * avg * (1 + EPS), base_avg=avg)), "average iterate of CFR+")
    assert row.verdict == "not reproduced"  # every game just outside the margin, no spread
    assert _row(_rows(_results(rt=avg, base_avg=avg)), "average iterate of CFR+").verdict == "not reproduced"
    assert _row(_rows(_results(rt=1e-3, base_last=1e-3)), "last iterates").verdict == "not reproduced"
    assert _row(_rows(_results(untuned=1e-6)), "Untuned").verdict == "reproduced"
    assert _row(_rows(_results(untuned=1e-4)), "Untuned").verdict == "not reproduced"


def test_a_machine_precision_tie_is_not_a_win():
    # RTCFR+ and PCFR+ both converge to 1e-17 on every game: no game is won
    res = _results(rt=1e-17, base_last=[1e-3] * 3)
    for trs in res.values():
        trs[3] = _tr("pcfr+", 1e-17, 200, average=1e-4)
    row = _row(_rows(res), "last iterates")
    assert row.verdict == "not reproduced" and "0 of 3" in row.measured


def test_one_game_is_inconclusive():
    row = _row(_rows(_results(games=("kuhn_poker",), rt=1e-10)), "average iterate of CFR+")
    assert row.verdict == "inconclusive" and "n=1" in row.evidence and "fewer than 3" in row.evidence


def test_straddling_spread_across_games():
    # log ratios -3, +1, +1: mean -0.33 is past the target -0.30 but not on every game -> partly;
    # -2.5, +1, +1: mean -0.17 misses it, mean - std passes it -> inconclusive
    base = 1e-4
    row = _row(_rows(_results(rt=[base * 1e-3, base * 10, base * 10], base_avg=base)), "average iterate of CFR+")
    assert row.verdict == "partly reproduced"
    row = _row(_rows(_results(rt=[base * 10 ** -2.5, base * 10, base * 10], base_avg=base)), "average iterate of CFR+")
    assert row.verdict == "inconclusive" and "straddles" in row.evidence


def test_keep_theta_threshold_exact():
    assert _row(_rows(keep_end=KEEP_CEILING * (1 - EPS)), "Keeping θ").verdict == "reproduced"
    assert _row(_rows(keep_end=KEEP_CEILING * (1 + EPS)), "Keeping θ").verdict == "not reproduced"


def test_reset_theta_one_game_is_inconclusive_either_side_of_the_floor():
    for late in (RESET_FLOOR * (1 + EPS), RESET_FLOOR * (1 - EPS), 1.0):
        row = _row(_rows(reset_late=late), "Resetting")
        assert row.verdict == "inconclusive" and "n=1" in row.evidence and "one game" in row.scale
    assert "vs ≥ 0.03" in _row(_rows(reset_late=0.1), "Resetting").evidence


def test_spread_margin():
    # along μ (axis 0): a decades per column; along T_u: 0 -> spread_mu = a, spread_tu = 0
    def grid(a):
        return np.array([[1.0, 1.0], [10.0 ** -a, 10.0 ** -a]])

    assert mu_tu_spread(grid(2.0)) == pytest.approx((2.0, 0.0))
    for a in (SPREAD_MARGIN + 1e-6, SPREAD_MARGIN - 1e-6):  # one game's grid: one value
        row = _row(_rows(grid=grid(a)), "μ matters")
        assert row.verdict == "inconclusive" and f"n=1: {a:.2f}" in row.evidence


def _grid_payload(games):
    """A constructed GPU JSON: per game (best final, best baseline average, spread-along-μ decades)."""
    grids = {}
    mus, T_us = [1e-3, 1e-2, 1e-1], [10, 100]
    for g, (best, average, decades) in games.items():
        final = [10.0 ** (-decades * i / 2) for i in range(len(mus)) for _ in T_us]  # μ rows, constant along T_u
        grids[g] = {"best": {"final_last": best}, "baselines": {"cfr+": {"average": [1.0, average]}},
                    "rtcfr": {"mus": mus, "T_us": T_us, "last": [[1.0] * 6, final]}}
    return {"device": "H200", "date": "today", "profile": {"grids": {"iterations": 2000, "mus": mus, "T_us": T_us}},
            "stages": {"grids": {"state": "done"}}, "grids": grids}


def test_recorded_rows_judged_by_the_rule():
    assert [r.verdict for r in recorded_rows(None)] == ["not run here"]
    win, lose = WIN_FACTOR * 1e-3 * (1 - EPS), 1e-3
    rec = _grid_payload({"a": (win, 1e-3, 2.0), "b": (win, 1e-3, 2.0), "c": (win, 1e-3, 2.0)})
    beat, spread = recorded_rows(rec)
    assert beat.verdict == "reproduced" and "3 of 3" in beat.measured and "H200" in beat.scale
    assert "best of the 6 grid points" in beat.measured
    assert spread.verdict == "reproduced" and "a 2.0 − 0.0" in spread.details
    # the recorded GPU case: wins on 2 of 5, the mean at the target with a wide spread
    rec = _grid_payload({"ld5": (1e-3 * 10 ** -1.69, 1e-3, 1.0), "g5": (1e-3 * 10 ** -0.71, 1e-3, 1.0),
                         "ld6": (1e-3 * 10 ** 0.14, 1e-3, 1.0), "g6": (1e-3 * 10 ** 0.19, 1e-3, 1.0),
                         "b3": (1e-3 * 10 ** 0.63, 1e-3, 1.0)})
    beat, spread = recorded_rows(rec)
    assert beat.verdict == "inconclusive" and "2 of 5" in beat.measured and "n=5" in beat.evidence
    assert spread.verdict == "reproduced"  # 1 decade along μ against 0 along T_u, every game
    rec = _grid_payload({"a": (lose, 1e-3, SPREAD_MARGIN * 0.5), "b": (lose, 1e-3, SPREAD_MARGIN * 0.5),
                         "c": (lose, 1e-3, SPREAD_MARGIN * 0.5)})
    beat, spread = recorded_rows(rec)
    assert beat.verdict == "not reproduced" and spread.verdict == "not reproduced"
    two = _grid_payload({"a": (win, 1e-3, 2.0), "b": (win, 1e-3, 2.0)})
    assert [r.verdict for r in recorded_rows(two)] == ["inconclusive", "inconclusive"]  # two games


def test_recorded_grids_stage_that_did_not_finish_is_not_run():
    rec = _grid_payload({"a": (1e-6, 1e-3, 2.0), "b": (1e-6, 1e-3, 2.0), "c": (1e-6, 1e-3, 2.0)})
    rec["stages"]["grids"] = {"state": "skipped", "reason": "deadline: 20 s left, needs 60 s"}
    (row,) = recorded_rows(rec)
    assert row.verdict == "not run here" and "grids (skipped: deadline: 20 s left, needs 60 s)" in row.measured


def test_grids_of_a_batched_solver_that_disagreed_with_numpy_are_not_evidence():
    """The correctness stage compares the batched solver (which runs the grids) with the numpy solver; where it
    disagreed, the grids' rows are not run here, with the two NashConvs, however well they read."""
    rec = _grid_payload({"a": (1e-6, 1e-3, 2.0), "b": (1e-6, 1e-3, 2.0), "c": (1e-6, 1e-3, 2.0)})
    rec["correctness"] = {"game": "leduc_poker", "iterations": 60, "numpy": 0.5, "eager": 0.7, "eager_ok": False}
    (row,) = recorded_rows(rec)
    assert row.verdict == "not run here" and "NashConv 0.7 vs 0.5" in row.measured
    rec["correctness"].update(eager=0.5, eager_ok=True)
    assert [r.verdict for r in recorded_rows(rec)] == ["reproduced", "reproduced"]


def test_committed_results_are_read_in_the_stage_layout():
    from companion.rtcfr.scale import GPU_PROFILE, recorded

    rec = recorded()
    if rec is None:
        pytest.skip("no recorded GPU run")
    assert rec["profile"] == GPU_PROFILE and rec["complete"]
    assert all(r.verdict != "not run here" for r in recorded_rows(rec))


def test_win_target_is_log_win_factor():
    assert _row(_rows(), "average iterate of CFR+").evidence.endswith(f"vs ≤ {math.log10(WIN_FACTOR):.2f}")
