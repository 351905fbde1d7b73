"""The tour's claims table, built from the run's error curve and judged by the one rule
(:func:`companion.core.judge`); the tolerance is a named constant tested in ``tests/unit/test_tour_claims.py``.

The claim is agreement with a closed form, the exponent −1/2 of the error law, within a tolerance: an exact
claim (``kind="exact"``), judged on one run's fitted slope. A paper's effect claims (A beats B) instead pass one
value per seed and need three seeds before they can count.
"""

from __future__ import annotations

from companion.core import Claim, judge

__all__ = ["SLOPE_TOL", "claim_rows"]

#: the fitted log-log slope must lie within this distance of -1/2.
SLOPE_TOL = 0.08
# the cell of notebooks/00_tour.ipynb (nbformat id) that measures the row: the error curve of the Reproduce section
CURVE_CELL = "0eb43b83"


def claim_rows(slope: float, sizes: list[int], repeats: int, profile: str) -> list[Claim]:
    """One row: the fitted slope of RMS error against n over ``sizes`` with ``repeats`` estimates each."""
    return [Claim(
        claim="RMS error of the Monte Carlo π estimate falls as n^-1/2",
        paper="slope −0.5 on log–log axes",
        measured=f"fitted slope {slope:.3f}; judged on its distance from −0.5",
        scale=f"n = {sizes[0]}…{sizes[-1]}, {repeats} repeats, {profile.upper()}",
        judgement=judge([abs(slope + 0.5)], SLOPE_TOL, kind="exact", fmt=lambda x: f"{x:.3f}"),
        cell=CURVE_CELL,
    )]
