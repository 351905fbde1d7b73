"""Bjøntegaard deltas between two rate–distortion curves (VCEG-M33; piecewise-cubic variant).

Rates are taken in log10; each curve is interpolated with a monotone piecewise cubic Hermite
interpolant (PCHIP, the variant the JVET CTC sheets use) and the two are integrated over the
overlapping interval:

* BD-PSNR = (1/(b − a)) ∫_a^b [PSNR₂(r) − PSNR₁(r)] dr over log-rates r ∈ [a, b] (dB; > 0: curve 2 is better);
* BD-rate = 10^((1/(d − c)) ∫_c^d [r₂(p) − r₁(p)] dp) − 1 over PSNR p ∈ [c, d] (as a percentage;
  < 0: curve 2 needs fewer bytes).
"""

from __future__ import annotations

import numpy as np
from scipy.interpolate import PchipInterpolator

from companion.core import ParameterError


def _curve(name, rate, psnr):
    r, p = np.asarray(rate, dtype=float), np.asarray(psnr, dtype=float)
    if r.ndim != 1 or r.shape != p.shape or len(r) < 2 or not np.all(r > 0) or not np.all(np.isfinite(p)):
        raise ParameterError(name, list(zip(r.tolist(), p.tolist())),
                             "at least two (rate > 0, finite PSNR) points")
    o = np.argsort(r)
    return np.log10(r[o]), p[o]


def _mean_gap(x1, y1, x2, y2):
    lo, hi = max(x1.min(), x2.min()), min(x1.max(), x2.max())
    if not hi > lo:
        return float("nan")
    f1, f2 = PchipInterpolator(x1, y1), PchipInterpolator(x2, y2)
    return float((f2.integrate(lo, hi) - f1.integrate(lo, hi)) / (hi - lo))


def _dedupe(x, y):
    """Strictly increasing x (PCHIP needs it): equal x values are merged (mean y)."""
    ux = np.unique(x)
    return ux, np.array([y[x == u].mean() for u in ux])


def bd_psnr(rate1, psnr1, rate2, psnr2) -> float:
    """Mean PSNR gain (dB) of curve 2 over curve 1 over their common log-rate range (NaN if none)."""
    x1, y1 = _dedupe(*_curve("curve 1", rate1, psnr1))
    x2, y2 = _dedupe(*_curve("curve 2", rate2, psnr2))
    if len(x1) < 2 or len(x2) < 2:
        return float("nan")
    return _mean_gap(x1, y1, x2, y2)


def bd_rate(rate1, psnr1, rate2, psnr2) -> float:
    """Mean rate change (%) of curve 2 against curve 1 over their common PSNR range (NaN if none)."""
    r1, p1 = _curve("curve 1", rate1, psnr1)
    r2, p2 = _curve("curve 2", rate2, psnr2)
    p1s, r1s = _dedupe(p1, r1)
    p2s, r2s = _dedupe(p2, r2)
    if len(p1s) < 2 or len(p2s) < 2:
        return float("nan")
    return 100.0 * (10 ** _mean_gap(p1s, r1s, p2s, r2s) - 1)
