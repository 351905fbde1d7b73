"""Bjøntegaard deltas between two rate–distortion curves (VCEG-M33; piecewise-cubic variant).

Rates are taken in log10; each curve is interpolated with a monotone piecewise cubic Hermite
interpolant (PCHIP, the variant the JVET CTC sheets use) and the two are integrated over the
overlapping interval:

* BD-PSNR = (1/(b − a)) ∫_a^b [PSNR₂(r) − PSNR₁(r)] dr over log-rates r ∈ [a, b] (dB; > 0: curve 2 is better);
* BD-rate = 10^((1/(d − c)) ∫_c^d [r₂(p) − r₁(p)] dp) − 1 over PSNR p ∈ [c, d] (as a percentage;
  < 0: curve 2 needs fewer bytes).

**Non-monotone curves.** BD-rate reads a curve as rate as a function of PSNR, which needs PSNR to rise
with the rate. A progressive model's curve need not: a top layer can add bytes and lower PSNR. Sorting such
points by PSNR and fitting a zig-zag gives a meaningless number (it once turned a 0.5 % byte difference into
"+49.75 %"). So both metrics work on the **monotone envelope** (:func:`rd_envelope`) by default: the points
in order of rate, keeping only those with a higher PSNR than every point of lower rate (a dominated point,
more bytes for no more PSNR, is one no client would pick). ``non_monotone="raise"`` refuses such a curve
instead; :func:`rd_envelope` says which points were dropped, so that a caller can flag them.
"""

from __future__ import annotations

import numpy as np
from scipy.interpolate import PchipInterpolator

from companion.core import ParameterError, check_choice

NON_MONOTONE = ("envelope", "raise")


def _curve(name, rate, psnr):
    r, p = np.asarray(rate, dtype=float), np.asarray(psnr, dtype=float)
    if r.ndim != 1 or r.shape != p.shape or len(r) < 2 or not np.all(r > 0) or not np.all(np.isfinite(p)):
        raise ParameterError(name, list(zip(r.tolist(), p.tolist())),
                             "at least two (rate > 0, finite PSNR) points")
    return r, p


def rd_envelope(rate, psnr, name: str = "curve") -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(rates, PSNRs, dropped): the monotone envelope of an RD curve, both coordinates strictly increasing.

    The points are taken in order of rate (at equal rates the higher PSNR first) and a point is kept iff
    its PSNR is above every kept point's; ``dropped`` lists the indices (into the input) of the others."""
    r, p = _curve(name, rate, psnr)
    order = np.lexsort((-p, r))  # by rate, then by PSNR descending
    keep, best = [], -np.inf
    for i in order:
        if p[i] > best:
            keep.append(int(i))
            best = p[i]
    dropped = sorted(set(range(len(r))) - set(keep))
    return r[keep], p[keep], dropped


def _prepared(name, rate, psnr, non_monotone):
    check_choice("non_monotone", non_monotone, NON_MONOTONE)
    r, p, dropped = rd_envelope(rate, psnr, name)
    if dropped and non_monotone == "raise":
        pts = list(zip(np.asarray(rate, dtype=float).tolist(), np.asarray(psnr, dtype=float).tolist()))
        raise ParameterError(name, pts, f"PSNR rising with the rate (points {dropped} have more bytes and no more "
                             f"PSNR than a point before them; non_monotone='envelope' drops them)")
    return np.log10(r), p


def _mean_gap(x1, y1, x2, y2):
    lo, hi = max(x1.min(), x2.min()), min(x1.max(), x2.max())
    if not hi > lo:
        return float("nan")
    f1, f2 = PchipInterpolator(x1, y1), PchipInterpolator(x2, y2)
    return float((f2.integrate(lo, hi) - f1.integrate(lo, hi)) / (hi - lo))


def bd_psnr(rate1, psnr1, rate2, psnr2, *, non_monotone: str = "envelope") -> float:
    """Mean PSNR gain (dB) of curve 2 over curve 1 over their common log-rate range (NaN if none), on
    the monotone envelopes (see the module docstring; ``non_monotone="raise"`` refuses a non-monotone curve)."""
    x1, y1 = _prepared("curve 1", rate1, psnr1, non_monotone)
    x2, y2 = _prepared("curve 2", rate2, psnr2, non_monotone)
    if len(x1) < 2 or len(x2) < 2:
        return float("nan")
    return _mean_gap(x1, y1, x2, y2)


def bd_rate(rate1, psnr1, rate2, psnr2, *, non_monotone: str = "envelope") -> float:
    """Mean rate change (%) of curve 2 against curve 1 over their common PSNR range (NaN if none), on the
    monotone envelopes (see the module docstring; ``non_monotone="raise"`` refuses a non-monotone curve)."""
    r1, p1 = _prepared("curve 1", rate1, psnr1, non_monotone)
    r2, p2 = _prepared("curve 2", rate2, psnr2, non_monotone)
    if len(p1) < 2 or len(p2) < 2:
        return float("nan")
    return 100.0 * (10 ** _mean_gap(p1, r1, p2, r2) - 1)
