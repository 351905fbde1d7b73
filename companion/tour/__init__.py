"""The tour (notebook 00): Monte Carlo estimation of pi and its 1/sqrt(n) error law.

Not a paper: a known truth small enough to show every part of a companion notebook (parameters,
validation, a library function, an explorer, a claims table, a GPU path, checks), laid out in the same
role files as every paper package: :mod:`~companion.tour.montecarlo` (the method),
:mod:`~companion.tour.explorer`, :mod:`~companion.tour.claims` and :mod:`~companion.tour.scale`.
"""

from companion.core import Paper
from companion.tour.montecarlo import estimate_pi, fit_slope, rms_error_curve, sample_points, standard_error

PAPER = Paper(number="00", slug="tour", title="The tour: Monte Carlo pi", arxiv=None, code=None, venue="—")

__all__ = ["PAPER", "estimate_pi", "fit_slope", "rms_error_curve", "sample_points", "standard_error"]
