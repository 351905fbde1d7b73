"""The tour's claim row and explorer: the slope tolerance just inside and just outside, on the one rule."""

import plotly.graph_objects as go

from companion.core import VERDICTS
from companion.tour import PAPER
from companion.tour.claims import SLOPE_TOL, claim_rows
from companion.tour.explorer import explorer_controls, explorer_view


def test_slope_tol():
    assert claim_rows(-0.5 + SLOPE_TOL * 0.99, [100, 1000], 10, "cpu")[0].verdict == "reproduced"
    assert claim_rows(-0.5 - SLOPE_TOL * 0.99, [100, 1000], 10, "cpu")[0].verdict == "reproduced"
    row = claim_rows(-0.5 + SLOPE_TOL * 1.01, [100, 1000], 10, "cpu")[0]
    assert row.verdict == "not reproduced" and "n = 100…1000, 10 repeats, CPU" == row.scale
    assert claim_rows(-0.5 - SLOPE_TOL * 1.01, [100, 1000], 10, "cpu")[0].verdict == "not reproduced"


def test_exact_claim_needs_one_run_and_shows_its_evidence():
    # agreement with a closed form is an exact claim: one run decides, no seeds needed
    (row,) = claim_rows(-0.497, [100, 100000], 200, "cpu")
    assert row.verdict in VERDICTS and row.verdict == "reproduced"
    assert row.evidence == f"error 0.003 vs ≤ {SLOPE_TOL:.3f}" and "-0.497" in row.measured
    # a slope of the wrong sign is as far off as its distance says (a magnitude, never a signed value)
    assert claim_rows(0.5, [100, 1000], 10, "cpu")[0].verdict == "not reproduced"


def test_explorer_view_and_controls():
    fig, text = explorer_view(200, 3)
    assert isinstance(fig, go.Figure) and sum(len(t.x) for t in fig.data) == 200 and "π̂" in text
    assert set(explorer_controls(3)) == {"n", "seed"} and explorer_controls(3)["seed"].value == 3
    assert PAPER.notebook == "00_tour"
