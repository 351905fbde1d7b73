"""Paper 18's claim rows: every threshold of claims.py just inside and just outside, on constructed runs."""

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
    recorded_rows,
)
from companion.rtcfr.solvers import Trajectory

EPS = 1e-9


def _tr(alg, final, iterations=200, every=5, average=None, early=1.0, **params):
    its = np.unique(np.concatenate([[1], np.arange(every, iterations + 1, every)]))
    last = np.full(len(its), early)
    last[-1] = final
    avg = np.full(len(its), np.nan if average is None else early)
    if average is not None:
        avg[-1] = average
    return Trajectory(alg, "g", its, last, avg, 0.1, params)


def _results(rt=1e-8, untuned=1e-6, base_last=1e-3, base_avg=1e-4, iterations=200, games=("kuhn_poker", "leduc_poker")):
    out = {}
    for g in games:
        out[g] = [_tr("rtcfr+", rt, iterations, mu=0.1, T_u=10), _tr("rtcfr+", untuned, iterations)]
        out[g] += [_tr(a, base_last, iterations, average=base_avg) for a in ("cfr+", "pcfr+", "dcfr")]
    return out


def _rows(results=None, keep_end=1e-3, reset_late=0.1, iterations=200, grid=None, recorded=None):
    results = results or _results(iterations=iterations)
    keep = _tr("rtcfr+", keep_end, iterations, mu=1e-3, T_u=100)
    reset = _tr("rtcfr+", reset_late, iterations, early=reset_late, mu=1e-3, T_u=100)
    grid = np.array([[1e-2, 1e-2], [1e-6, 1e-6]]) if grid is None else grid  # rows μ, columns T_u
    rows = claim_rows(results, keep, reset, iterations=iterations, heatmap_grid=grid, heatmap_mus=[1e-3, 1e-1],
                      heatmap_T_us=[10, 100], heatmap_game="leduc_poker", heatmap_iterations=100, recorded=recorded)
    assert all(r.verdict in VERDICTS for r in rows)
    return rows


def _row(rows, word):
    (row,) = [r for r in rows if word in r.claim]
    return row


def test_beats_margin_and_machine_tie():
    assert beats(WIN_FACTOR * 1e-3 - EPS * 1e-3, 1e-3) and not beats(WIN_FACTOR * 1e-3 + EPS * 1e-3, 1e-3)
    assert beats(MACHINE * (1 - EPS), MACHINE * (1 - EPS) / 2)  # both at machine precision: a tie counts
    assert not beats(MACHINE * (1 + EPS), MACHINE * (1 + EPS) / 2)


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
    assert "one run" in _row(rows, "average iterate of CFR+").scale


def test_kuhn_threshold():
    inside = _results(rt=KUHN_NASHCONV * (1 - EPS))
    outside = _results(rt=KUHN_NASHCONV * (1 + EPS))
    assert _row(_rows(inside), "converges to a Nash").verdict == "reproduced"
    assert _row(_rows(outside), "converges to a Nash").verdict == "not reproduced"


def test_wins_need_the_margin():
    avg = 1e-4
    assert _row(_rows(_results(rt=WIN_FACTOR * avg * (1 - EPS), base_avg=avg)), "average iterate of CFR+").verdict == "reproduced"
    assert _row(_rows(_results(rt=WIN_FACTOR * avg * (1 + EPS), base_avg=avg)), "average iterate of CFR+").verdict == "not reproduced"
    assert _row(_rows(_results(rt=1e-3, base_last=1e-3)), "last iterates").verdict == "not reproduced"
    assert _row(_rows(_results(untuned=1e-6)), "Untuned").verdict == "reproduced"
    assert _row(_rows(_results(untuned=1e-4)), "Untuned").verdict == "not reproduced"


@pytest.mark.parametrize("reset_late, keep_end, verdict", [
    (RESET_FLOOR * (1 + EPS), KEEP_CEILING * (1 - EPS), "reproduced"),
    (RESET_FLOOR * (1 - EPS), KEEP_CEILING * (1 - EPS), "not reproduced"),
    (RESET_FLOOR * (1 + EPS), KEEP_CEILING * (1 + EPS), "not reproduced"),
])
def test_reset_theta_thresholds(reset_late, keep_end, verdict):
    assert _row(_rows(reset_late=reset_late, keep_end=keep_end), "Resetting").verdict == verdict


def test_spread_margin():
    # along μ (axis 0): 10**a decades per column; along T_u: 0 → spread_mu = a, spread_tu = 0
    def grid(a):
        return np.array([[1.0, 1.0], [10.0 ** -a, 10.0 ** -a]])

    assert _row(_rows(grid=grid(SPREAD_MARGIN + 1e-6)), "μ matters").verdict == "reproduced"
    assert _row(_rows(grid=grid(SPREAD_MARGIN - 1e-6)), "μ matters").verdict == "not reproduced"


def test_recorded_rows():
    assert [r.verdict for r in recorded_rows(None)] == ["not run here"]
    rec = {"device": "H200", "date": "today", "grid": {"iterations": 2000, "mus": [1, 2], "T_us": [1]},
           "grids": {"goofspiel_5": {"best": {"final_last": WIN_FACTOR * 1e-3 * (1 - EPS)}, "baselines": {"cfr+": {"average": [1e-3]}}},
                     "liars_dice_6": {"best": {"final_last": 1e-3}, "baselines": {"cfr+": {"average": [1e-3]}}}}}
    (row,) = recorded_rows(rec)
    assert row.verdict == "recorded on GPU" and "1 of 2: goofspiel_5" in row.measured
