"""One rule for every verdict: the only place a claims table's verdict is decided.

Every row of every paper's Reproduce table is judged here, on the CPU and on the GPU alike, from the
measurements the run made. :func:`judge` returns a :class:`Judgement`, the verdict with an evidence
string that shows what it rests on, e.g. ``n=3: 0.67 ± 0.06 (0.61–0.72) vs ≤ 0.5``.

Three kinds of claim:

* ``kind="exact"``: agreement with a reference or a closed form within a tolerance, a bit-exact round
  trip. The values are errors (absolute differences, distances: never negative). One run is enough:
  *reproduced* iff every measured error is within the tolerance, otherwise *not reproduced*.
* ``kind="effect"``: A beats B, a gain, a gap, a correlation. The values are one per seed (or per
  independent repeat). With fewer than ``MIN_SEEDS`` values the row is *inconclusive* (it still shows
  its numbers). Otherwise, with m the mean and s the sample standard deviation:

  - *reproduced*: every value is past the target, or m is past it by more than s;
  - *partly reproduced*: m is past the target (but not every value), or m is past the weaker bar;
  - *inconclusive*: m misses both, but m ± s straddles the target;
  - *not reproduced*: m misses both, and the target by more than s (a miss of the weaker bar alone,
    however small, does not make a row inconclusive: only the target's spread does).
* ``kind="timing"``: speed ratios measured side by side in one run (peers first). The values are the
  ratios of that run (per size, or per repeat); one is enough, and the same rule as for effects
  decides.

"Past" includes equality (a target reads "≥ 2.5", "≤ 0.5"). Two verdicts rest on no judged measurement,
and their evidence says why: :func:`not_run` (the claim was not run here) and :func:`inconclusive` (it was
run, but what it measured cannot be judged: a stale record, every seed below a validity floor, a baseline that
never moved).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from companion.core.validation import ParameterError, check_choice, check_str

VERDICTS = ("reproduced", "partly reproduced", "not reproduced", "inconclusive", "not run here")
KINDS = ("exact", "effect", "timing")
DIRECTIONS = ("higher", "lower")
MIN_SEEDS = 3  # an effect claim needs at least this many seeds before it can be judged
NOT_AVAILABLE = "n/a"  # how a rendered value writes a number that is not one (NaN, ``f"{nan:+.2f}"`` = "+nan")
_NAN = re.compile(r"(?<![\w.])[+-]?nan(?![\w])", re.IGNORECASE)


def readable(text: str) -> str:
    """``text`` as a claims table shows it: every NaN a format wrote ("nan", "+nan", "NaN") becomes "n/a".

    The one place this happens: :class:`Judgement` and :class:`companion.core.Claim` pass every text field
    through it, so no paper has to guard each number it formats.
    """
    return _NAN.sub(NOT_AVAILABLE, text)


@dataclass(frozen=True)
class Judgement:
    """A verdict from :func:`judge` or :func:`not_run`, with the evidence string it rests on."""

    verdict: str
    evidence: str

    def __post_init__(self):
        check_choice("verdict", self.verdict, VERDICTS)
        object.__setattr__(self, "evidence", readable(check_str("evidence", self.evidence)))


def _number(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.3g}"


def _values(values) -> np.ndarray:
    try:
        v = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise ParameterError("values", values, "numbers, one per seed or run") from exc
    if v.size == 0:
        raise ParameterError("values", values, "at least one measurement")
    if np.isnan(v).any():
        raise ParameterError("values", v.tolist(), "no NaN (say what a failed seed means, e.g. +inf for a "
                             "diverged loss)")
    return v


def _bar(name: str, x) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)) or not math.isfinite(x):
        raise ParameterError(name, x, "a finite number")
    return float(x)


def judge(values, target: float, *, kind: str = "effect", direction: str | None = None,
          weaker: float | None = None, fmt=_number) -> Judgement:
    """Judge a claim from its measurements: the one rule behind every verdict (see the module docstring).

    ``values``: the measurements, one per seed/run (a number or a sequence; ±inf is allowed and shown,
    NaN is refused). ``target``: the paper's bar, past which a value supports the claim.
    ``direction``: ``"higher"`` (values ≥ target support it) or ``"lower"`` (values ≤ target do); required
    for effects and timings, while an ``"exact"`` claim is always ``"lower"`` (errors within a tolerance). ``weaker``: an optional bar for
    *partly reproduced*, on the easy side of the target. ``fmt``: how numbers are written in the evidence.
    """
    check_choice("kind", kind, KINDS)
    if direction is None and kind == "exact":
        direction = "lower"
    check_choice("direction", direction, DIRECTIONS)
    v = _values(values)
    target = _bar("target", target)
    if kind == "exact":
        if direction != "lower":
            raise ParameterError("direction", direction, "'lower' for an exact claim (errors within a tolerance)")
        if weaker is not None:
            raise ParameterError("weaker", weaker, "None for an exact claim (within the tolerance or not)")
        if target < 0:
            raise ParameterError("target", target, "a tolerance >= 0 for an exact claim")
        if (v < 0).any():
            raise ParameterError("values", v.tolist(), "errors >= 0 for an exact claim (pass an absolute difference "
                                 "or a distance; a signed one would pass every negative error)")
    sign = 1.0 if direction == "higher" else -1.0
    if weaker is not None:
        weaker = _bar("weaker", weaker)
        if sign * (weaker - target) > 0:
            raise ParameterError("weaker", weaker, f"a bar on the easy side of target = {target!r} "
                                 f"({'<=' if sign > 0 else '>='} it for direction {direction!r})")

    relation = "≥" if sign > 0 else "≤"
    bars = f"{relation} {fmt(target)}" + (f" (partly {relation} {fmt(weaker)})" if weaker is not None else "")
    past = sign * (v - target) >= 0
    if kind == "exact":
        worst = float(v.max())
        evidence = f"{'max ' if v.size > 1 else ''}error {fmt(worst)} vs {bars}"
        return Judgement("reproduced" if past.all() else "not reproduced", evidence)

    with np.errstate(invalid="ignore"):  # ±inf values give an infinite (or undefined) spread
        mean = float(v.mean())
        spread = float(v.std(ddof=1)) if v.size > 1 else 0.0
    spread = math.inf if math.isnan(spread) else spread
    if v.size == 1:
        evidence = f"n=1: {fmt(mean)} vs {bars}"
    else:
        std = fmt(spread) if math.isfinite(spread) else "inf"
        evidence = f"n={v.size}: {fmt(mean)} ± {std} ({fmt(float(v.min()))}–{fmt(float(v.max()))}) vs {bars}"
    if kind == "effect" and v.size < MIN_SEEDS:
        return Judgement("inconclusive", f"{evidence}; fewer than {MIN_SEEDS} seeds")
    if math.isnan(mean):
        return Judgement("inconclusive", f"{evidence}; values diverge to both +inf and -inf")
    margin = sign * (mean - target)  # ±inf when some value is infinite
    if past.all() or margin > spread:
        return Judgement("reproduced", evidence)
    if margin >= 0 or (weaker is not None and sign * (mean - weaker) >= 0):
        return Judgement("partly reproduced", evidence)
    straddles = -margin <= spread if math.isfinite(margin) else bool(past.any())  # an infinite miss: any seed past?
    if straddles:
        return Judgement("inconclusive", f"{evidence}; the spread straddles the target")
    return Judgement("not reproduced", evidence)


def per_seed(runs) -> list:
    """The runs of a claim as a list, one per seed: a list or tuple as given, a single run as a list of one."""
    return list(runs) if isinstance(runs, (list, tuple)) else [runs]


def mean_std(values, fmt=lambda x: f"{x:.3f}") -> str:
    """Values over seeds as text: ``"m ± s"`` (sample std), or ``"m"`` for one value."""
    v = np.asarray(list(values), dtype=float)
    return fmt(float(v.mean())) + (f" ± {fmt(float(v.std(ddof=1)))}" if v.size > 1 else "")


def seeds_text(n: int) -> str:
    """How a scale column says the number of seeds: ``"one seed"``, ``"3 seeds"``."""
    return "one seed" if n == 1 else f"{n} seeds"


def not_run(why: str) -> Judgement:
    """The verdict of a claim this run did not test; ``why`` says what it would need."""
    return Judgement("not run here", check_str("why", why))


def inconclusive(why: str) -> Judgement:
    """The verdict of a claim this run tested without a measurement the rule can judge; ``why`` says what is missing."""
    return Judgement("inconclusive", check_str("why", why))
