"""The tour's claims table, built from the run's error curve; the threshold is a named constant tested in
``tests/unit/test_tour_claims.py``."""

from __future__ import annotations

from companion.core import Claim

__all__ = ["SLOPE_TOL", "claim_rows"]

#: the fitted log-log slope must lie within this distance of -1/2.
SLOPE_TOL = 0.08


def claim_rows(slope: float, sizes: list[int], repeats: int, profile: str) -> list[Claim]:
    """One row: the fitted slope of RMS error against n over ``sizes`` with ``repeats`` estimates each."""
    return [Claim(
        claim="RMS error of the Monte Carlo π estimate falls as n^-1/2",
        paper="slope −0.5 on log–log axes",
        measured=f"slope {slope:.3f} (required: within {SLOPE_TOL} of −0.5)",
        scale=f"n = {sizes[0]}…{sizes[-1]}, {repeats} repeats, {profile.upper()}",
        verdict="reproduced" if abs(slope + 0.5) < SLOPE_TOL else "not reproduced",
    )]
