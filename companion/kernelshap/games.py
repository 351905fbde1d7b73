"""Cooperative games over features and their exact Shapley values.

The interventional game of a model f, a query row q and a baseline row b (paper, Sec. 2):
``v(S) = f(x_S)`` with ``x_S[j] = q[j]`` for ``j in S`` and ``b[j]`` otherwise. A whole sample of
coalitions is evaluated in one ``predict`` call, so the estimator's own overhead stays small.

Ground truth: enumeration of all 2^d coalitions (d <= 20), and for tree models shap's
``TreeExplainer`` with ``feature_perturbation="interventional"`` and the single baseline row as
background, which computes the same game exactly (``tree_path_dependent`` would compute another).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import gammaln


class InterventionalGame:
    """``v(masks)`` for boolean masks ``[n, d]`` (True = feature takes the query's value)."""

    def __init__(self, predict: Callable[[np.ndarray], np.ndarray], query, baseline):
        self.query = np.asarray(query, dtype=float)
        self.baseline = np.asarray(baseline, dtype=float)
        if self.query.ndim != 1:
            raise ValueError(f"query must be one row of shape [d], got shape {self.query.shape}")
        if self.baseline.shape != self.query.shape:
            raise ValueError(f"baseline has shape {self.baseline.shape}; it must match the query's {self.query.shape}")
        if self.d < 2:
            raise ValueError(f"Shapley estimation needs d >= 2 features, got d = {self.d}")
        self.predict = predict
        self.evaluations = 0
        self.empty, self.full = self(np.zeros((1, self.d), bool))[0], self(np.ones((1, self.d), bool))[0]

    @property
    def d(self) -> int:
        return self.query.shape[0]

    def rows(self, masks: np.ndarray) -> np.ndarray:
        return np.where(masks, self.query, self.baseline)

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        masks = np.asarray(masks, dtype=bool)
        if masks.ndim != 2 or masks.shape[1] != self.d:
            raise ValueError(f"masks must have shape [n, {self.d}], got {masks.shape}")
        try:
            values = np.asarray(self.predict(self.rows(masks)), dtype=float).reshape(-1)
        except Exception as exc:
            raise RuntimeError(f"the model's predict failed on a batch of {len(masks)} coalitions: {exc}") from exc
        if values.shape[0] != masks.shape[0]:
            raise RuntimeError(f"predict returned {values.shape[0]} values for {masks.shape[0]} rows; it must return one per row")
        self.evaluations += len(masks)
        return values


def all_masks(d: int) -> np.ndarray:
    """All 2^d coalitions as boolean masks, row i = binary digits of i."""
    return ((np.arange(2**d)[:, None] >> np.arange(d)) & 1).astype(bool)


def exact_shapley(game: InterventionalGame, max_d: int = 20) -> np.ndarray:
    """Shapley values by enumeration: phi_j = sum_S |S|!(d-|S|-1)!/d! (v(S+j) - v(S))."""
    d = game.d
    if d > max_d:
        raise ValueError(f"enumeration needs 2^d evaluations; d = {d} exceeds max_d = {max_d}")
    masks = all_masks(d)
    values = game(masks)
    sizes = masks.sum(1)
    phi = np.zeros(d)
    for j in range(d):
        without = ~masks[:, j]
        s = sizes[without]
        weight = np.exp(gammaln(s + 1) + gammaln(d - s) - gammaln(d + 1))
        phi[j] = np.sum(weight * (values[np.flatnonzero(without) + (1 << j)] - values[without]))
    return phi


def tree_shapley(model, query, baseline) -> np.ndarray:
    """Exact interventional Shapley values of a tree model (shap's TreeExplainer, one baseline row)."""
    import shap

    explainer = shap.TreeExplainer(model, data=np.asarray(baseline, float)[None], feature_perturbation="interventional")
    return np.asarray(explainer.shap_values(np.asarray(query, float)[None]), dtype=float).reshape(-1)
