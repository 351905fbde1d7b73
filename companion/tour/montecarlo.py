"""The tour notebook's toy science: Monte Carlo estimation of pi and its 1/sqrt(n) error law.

Not a paper: a known truth small enough to show every part of a companion notebook (parameters,
validation, a library function, an explorer, a claims table, a GPU path, checks). The estimator is
``pi_hat = 4 * mean(x^2 + y^2 <= 1)`` for ``(x, y)`` uniform on the unit square; its standard error
is ``4 * sqrt(p (1 - p) / n)`` with ``p = pi / 4``, so the root-mean-square error falls as ``n^-1/2``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from companion.core.validation import check_int


def sample_points(n: int, seed: int) -> np.ndarray:
    """``n`` points uniform on the unit square, ``[n, 2]``, from NumPy's PCG64 stream (stable across machines)."""
    check_int("n", n, lo=1)
    return np.random.default_rng(seed).random((n, 2))


def estimate_pi(points: np.ndarray) -> float:
    """``4 * (share of points inside the quarter circle)``."""
    inside = (points**2).sum(axis=1) <= 1.0
    return 4.0 * float(inside.mean())


def standard_error(n: int) -> float:
    """The estimator's exact standard deviation at ``n`` samples."""
    p = math.pi / 4
    return 4.0 * math.sqrt(p * (1 - p) / n)


def rms_error_curve(sizes: list[int], repeats: int, seed: int, device: str = "cpu") -> np.ndarray:
    """Root-mean-square error of the estimate at each sample size, over ``repeats`` independent runs.

    Runs in torch so the same code fills a GPU on the GPU profile (large sizes, many repeats).
    """
    check_int("repeats", repeats, lo=2)
    gen = torch.Generator(device=device).manual_seed(seed)
    errors = []
    for n in sizes:
        check_int("n", n, lo=1)
        xy = torch.rand((repeats, n, 2), generator=gen, device=device)
        estimates = 4.0 * ((xy**2).sum(-1) <= 1.0).float().mean(-1)
        errors.append(float(((estimates - math.pi) ** 2).mean().sqrt()))
    return np.asarray(errors)


def fit_slope(sizes, errors) -> float:
    """Least-squares slope of log(error) against log(n): -1/2 for a Monte Carlo mean."""
    return float(np.polyfit(np.log(sizes), np.log(errors), 1)[0])
