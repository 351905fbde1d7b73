"""Scale-aware KV budgets: ScaleKV's drafter/refiner allocation and the baselines' tables (paper 03, Eq. 3).

Paper: ScaleKV (arXiv 2505.19602), Sec. 3.3, with the same total memory as a uniform budget:

    sum_k ( N_d^k * B_d(k) + N_r^k * B_r(k) ) = B_uniform * L * K,      B_r(k) = B_r(0) - delta * k

Refiners get a budget that decays with the scale index; drafters share the rest. The official
budgets (``budgets/2b_10%_budget.json``) satisfy the equality *per scale* (2B, scale 9:
2 * 920 + 30 * 632 = 32 * 650), so we allocate per scale, which implies the total.

Conventions (from the official ``scale_kv.py`` / ``infer_*.py``; the calibration code is not released):

* ``B_uniform`` for a memory fraction ``f`` is ``round(f * N_{K-2})``: on Infinity's 1024^2 schedule,
  whose cache before the last scale holds N_{K-2} = 6,425 tokens, 10 % gives 642 tokens; the paper's
  10 % budget is 650 (its rounding is not stated; 650 / 6,425 = 10.1 %).
* Compression starts at the first scale whose full cache exceeds ``B_uniform`` (``base_capacity``)
  and the last scale reuses the previous scale's budgets.
* ``delta`` and ``B_r(0)`` are given as fractions of ``B_uniform`` (the paper's ablation: B = 650,
  B_r(0) = 600, delta = 70 tokens, i.e. 0.923 and 0.108); ``k`` counts compressed scales from 0.
* Budgets are integers whose per-scale sum is exactly ``L * B_uniform``. A drafter never gets more
  than the keys it can hold (its cache length at that step); what it cannot use goes to the
  refiners. A budget is never below the observation window (the code keeps the window anyway);
  the difference is taken from the drafters. Both are our explicit versions of what the official
  JSONs do implicitly ("Max" <= "Limit").

Baselines at the same per-scale total: ``uniform`` (SnapKV-style selection), ``pyramid``
(PyramidKV's arithmetic decrease with depth, ``B_min = B / beta``, ``B_max = 2B - B_min``, beta = 20),
``streaming`` (StreamingLLM: 4 sink tokens + the most recent) and ``window`` (most recent only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from companion.core import ParameterError, check_float, check_int
from companion.scalekv.schedule import check_schedule, cumulative_tokens, map_sizes

__all__ = [
    "Budgets",
    "METHODS",
    "check_fraction",
    "uniform_budget",
    "compressed_scales",
    "fit_integer_budgets",
    "scalekv_budgets",
    "uniform_budgets",
    "pyramid_budgets",
    "method_budgets",
    "expected_retained",
    "retained_lengths",
]

METHODS = ("scalekv", "uniform", "pyramid", "streaming", "window")
SELECTORS = {"scalekv": "snapkv", "uniform": "snapkv", "pyramid": "snapkv", "streaming": "streaming", "window": "recent"}
# Display names used in tables and figures.
LABELS = {
    "full": "full cache",
    "scalekv": "ScaleKV",
    "uniform": "uniform + SnapKV",
    "pyramid": "PyramidKV",
    "streaming": "StreamingLLM",
    "window": "sliding window",
}


@dataclass
class Budgets:
    """Per-(layer, scale) capacities of one method at one memory fraction.

    ``table [L, K]`` is the capacity applied after step ``k`` (0 where no compression happens);
    ``base`` is ``B_uniform`` (also the ``base_capacity`` that triggers compression); ``drafters``
    ``[L, K]`` marks ScaleKV's drafters (all False for baselines); ``selector`` is how a layer picks
    the kept keys: ``snapkv`` (window scores, max-pool, top-k), ``streaming`` or ``recent``.
    """

    method: str
    fraction: float
    sides: tuple[int, ...]
    base: int
    table: torch.Tensor
    drafters: torch.Tensor
    selector: str
    first: int  # first compressed scale

    @property
    def layers(self) -> int:
        return self.table.shape[0]


def check_fraction(fraction) -> float:
    """A KV budget given as a fraction of the full cache: a number in ``(0, 1]``."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:  # NaN fails too
        raise ParameterError("fraction", fraction, "a KV budget as a fraction of the full cache, a number in (0, 1] "
                             "(e.g. 0.1 for the paper's 10 %)")
    return float(fraction)


def uniform_budget(fraction: float, sides) -> int:
    """``B_uniform = round(f * N_{K-2})`` tokens per layer (at least 1)."""
    fraction = check_fraction(fraction)
    cum = cumulative_tokens(sides)
    return max(1, int(round(fraction * cum[-2])))


def compressed_scales(base: int, sides) -> list[int]:
    """Scales after which the cache is compressed: from the first with ``N_k > base`` to the last."""
    cum = cumulative_tokens(sides)
    return [k for k, n in enumerate(cum) if n > base]


def fit_integer_budgets(desired, total: int, lo, hi) -> np.ndarray:
    """Integers ``x`` with ``sum x = total`` and ``lo <= x <= hi``, nearest to ``desired + c`` (one shift ``c``).

    Water filling: bisection on the shift ``c`` of ``clip(desired + c, lo, hi)``, then largest
    remainders. Used to honour caps (a cache cannot keep more than it holds) and floors (the window)
    while keeping the per-scale total exact. Raises if ``sum lo > total``; returns ``hi`` if
    ``sum hi < total`` (everything fits uncompressed).
    """
    d = np.asarray(desired, dtype=np.float64)
    lo = np.broadcast_to(np.asarray(lo, dtype=np.int64), d.shape).copy()
    hi = np.maximum(np.broadcast_to(np.asarray(hi, dtype=np.int64), d.shape), lo)
    if lo.sum() > total:
        raise ParameterError("budget", total, f"a per-scale total of at least {int(lo.sum())} tokens (every layer keeps its observation window)")
    if hi.sum() <= total:
        return hi.copy()
    a, b = -d.max() - hi.max() - 1.0, hi.max() - d.min() + 1.0
    for _ in range(200):
        c = 0.5 * (a + b)
        if np.clip(d + c, lo, hi).sum() > total:
            b = c
        else:
            a = c
    x = np.clip(d + a, lo, hi)
    base = np.floor(x).astype(np.int64)
    rest = int(total - base.sum())
    order = np.argsort(-(x - base), kind="stable")
    for i in order:
        if rest <= 0:
            break
        if base[i] < hi[i]:
            base[i] += 1
            rest -= 1
    return base


def _allocate(desired_per_scale, fraction, sides, method, selector, window_size, drafters=None) -> Budgets:
    sides = check_schedule(sides)
    base = uniform_budget(fraction, sides)
    sizes, cum = map_sizes(sides), cumulative_tokens(sides)
    nk = len(sides)
    comp = compressed_scales(base, sides)
    nl = len(desired_per_scale(comp[0] if comp else nk - 1, 0))
    table = torch.zeros(nl, nk, dtype=torch.long)
    floor = min(window_size, base)
    if base < window_size and selector == "snapkv":
        raise ParameterError("fraction", fraction, f"a budget of at least {window_size} tokens per layer (the observation window); "
                             f"{fraction} of {cum[-2]} tokens is {base}. Raise the budget or use a smaller window")
    first = comp[0] if comp else nk - 1
    steps = [k for k in comp if k < nk - 1]
    if not steps:  # only the last scale exceeds the budget: it reuses a uniform budget
        table[:, nk - 2 :] = base
        mask = torch.zeros(nl, nk, dtype=torch.bool)
        return Budgets(method, float(fraction), sides, base, table, mask, selector, nk - 1)
    retained = np.full(nl, cum[first - 1] if first > 0 else 0, dtype=np.int64)
    for j, k in enumerate(steps):
        key_len = retained + sizes[k]
        desired = np.asarray(desired_per_scale(k, j), dtype=np.float64)
        fit = fit_integer_budgets(desired, nl * base, np.minimum(floor, key_len), key_len)
        table[:, k] = torch.from_numpy(fit)
        retained = np.minimum(fit, key_len)
    table[:, nk - 1] = table[:, steps[-1]]
    mask = torch.zeros(nl, nk, dtype=torch.bool) if drafters is None else drafters.clone()
    return Budgets(method, float(fraction), sides, base, table, mask, selector, first)


def uniform_budgets(layers: int, fraction: float, sides, *, method: str = "uniform", window_size: int = 16) -> Budgets:
    """Every layer keeps ``B_uniform`` at every compressed scale."""
    check_int("layers", layers, lo=1)
    base = uniform_budget(fraction, sides)
    selector = SELECTORS.get(method, "snapkv")
    return _allocate(lambda k, j: [base] * layers, fraction, sides, method, selector, window_size if selector == "snapkv" else 1)


def pyramid_budgets(layers: int, fraction: float, sides, *, beta: float = 20.0, window_size: int = 16) -> Budgets:
    """PyramidKV: budgets decreasing linearly with depth, mean ``B_uniform`` (``B_min = B / beta``)."""
    check_int("layers", layers, lo=1)
    check_float("beta", beta, lo=1.0)
    base = uniform_budget(fraction, sides)
    b_min = base / beta
    b_max = 2 * base - b_min
    if layers == 1:
        desired = [float(base)]
    else:
        desired = [b_max - i * (b_max - b_min) / (layers - 1) for i in range(layers)]
    return _allocate(lambda k, j: desired, fraction, sides, "pyramid", "snapkv", window_size)


def scalekv_budgets(
    drafters: torch.Tensor,
    fraction: float,
    sides,
    *,
    refiner_start: float = 600 / 650,
    delta: float = 70 / 650,
    window_size: int = 16,
) -> Budgets:
    """ScaleKV: refiners ``B_r(j) = (refiner_start - delta * j) * B``, drafters share the rest.

    ``drafters [L, K]`` bool (from :func:`companion.scalekv.asi.select_drafters`); ``j`` counts the
    compressed scales before the last (which reuses the previous budgets). A scale without drafters
    is uniform. Raises :class:`ParameterError` if ``delta`` would make a refiner budget negative.
    """
    sides = check_schedule(sides)
    if not isinstance(drafters, torch.Tensor) or drafters.dim() != 2 or drafters.shape[1] != len(sides):
        raise ParameterError("drafters", getattr(drafters, "shape", drafters), f"a bool tensor [layers, {len(sides)} scales]")
    refiner_start = check_float("refiner_start", refiner_start, lo=0.0, hi=1.0)
    delta = check_float("delta", delta, lo=0.0)
    base = uniform_budget(fraction, sides)
    comp = compressed_scales(base, sides)
    steps = [k for k in comp if k < len(sides) - 1] or [len(sides) - 2]
    last_j = len(steps) - 1
    if refiner_start - delta * last_j < 0:
        top = refiner_start / last_j if last_j else float("inf")
        raise ParameterError("delta", delta, f"delta <= {top:.4g} so that the refiner budget stays >= 0 over {last_j + 1} compressed scales "
                             f"(B_r(j) = ({refiner_start:.3g} - delta * j) * B)")
    d = drafters.bool()
    nl = d.shape[0]
    draft = d.clone()

    def desired(k, j):
        is_d = d[:, k].numpy()
        n_d = int(is_d.sum())
        if n_d == 0:
            return [float(base)] * nl
        b_r = (refiner_start - delta * j) * base
        b_d = (nl * base - (nl - n_d) * b_r) / n_d
        return [b_d if x else b_r for x in is_d]

    out = _allocate(desired, fraction, sides, "scalekv", "snapkv", window_size, drafters=draft)
    if out.first >= len(sides) - 1:
        out.drafters[:] = False
        return out
    out.drafters[:, len(sides) - 1] = d[:, len(sides) - 2]
    out.drafters[:, : out.first] = False
    return out


def method_budgets(method: str, layers: int, fraction: float, sides, *, drafters=None, delta: float = 70 / 650,
                   refiner_start: float = 600 / 650, window_size: int = 16) -> Budgets:
    """Budgets of any method in :data:`METHODS` at the same per-scale total."""
    if method not in METHODS:
        raise ParameterError("method", method, "one of " + ", ".join(METHODS))
    if method == "scalekv":
        if drafters is None:
            raise ParameterError("drafters", None, "a drafter mask [layers, scales] for ScaleKV (see asi.select_drafters)")
        return scalekv_budgets(drafters, fraction, sides, refiner_start=refiner_start, delta=delta, window_size=window_size)
    if method == "pyramid":
        return pyramid_budgets(layers, fraction, sides, window_size=window_size)
    return uniform_budgets(layers, fraction, sides, method=method, window_size=window_size)


def retained_lengths(sides, base: int, capacities) -> list[int]:
    """One layer's cache length after each step under the official rule: the cache is kept whole while
    it fits ``base``; from the first step where it does not, it is cut to ``capacities[k]`` at every step."""
    held, reached, out = 0, False, []
    for k, n in enumerate(map_sizes(sides)):
        key_len = held + n
        reached = reached or key_len > base
        held = min(key_len, int(capacities[k])) if reached else key_len
        out.append(held)
    return out


def expected_retained(budgets: Budgets) -> torch.Tensor:
    """Analytic cache length ``[L, K]`` after each step under the official rule (compare with a run);
    the last scale reuses the previous scale's budget."""
    nk = budgets.table.shape[1]
    caps = torch.cat([budgets.table[:, : nk - 1], budgets.table[:, nk - 2: nk - 1]], dim=1)
    return torch.tensor([retained_lengths(budgets.sides, budgets.base, row.tolist()) for row in caps], dtype=torch.long)
