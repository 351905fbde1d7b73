"""Parameter validation for notebooks and library entry points.

Every check returns the (normalised) value or raises :class:`ParameterError`, whose message names
the parameter, the value it got and what is allowed, so a wrong value injected by papermill fails in
the validation cell with a message a user can act on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


class ParameterError(ValueError):
    """A parameter has a value outside what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str):
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"parameter {name}={value!r} is not allowed: expected {allowed}")


def _bounds_text(lo, hi, lo_open: bool, hi_open: bool) -> str:
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi}")
    return " and ".join(parts)


def _check_bounds(name, value, lo, hi, lo_open, hi_open, kind):
    too_low = lo is not None and (value <= lo if lo_open else value < lo)
    too_high = hi is not None and (value >= hi if hi_open else value > hi)
    if too_low or too_high:
        raise ParameterError(name, value, f"{kind} {_bounds_text(lo, hi, lo_open, hi_open)}")
    return value


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> int:
    """An integer (not a bool, not a float) within ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(name, value, f"an integer{' ' + _bounds_text(lo, hi, False, False) if lo is not None or hi is not None else ''}")
    return _check_bounds(name, value, lo, hi, False, False, "an integer")


def check_float(
    name: str,
    value: Any,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """A finite real number (ints accepted) within the given bounds; returns a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ParameterError(name, value, f"a finite number {_bounds_text(lo, hi, lo_open, hi_open)}".rstrip())
    return float(_check_bounds(name, value, lo, hi, lo_open, hi_open, "a number"))


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> Any:
    """One of ``allowed``."""
    allowed = list(allowed)
    if value not in allowed:
        raise ParameterError(name, value, "one of " + ", ".join(repr(a) for a in allowed))
    return value


def check_bool(name: str, value: Any) -> bool:
    """True or False (not 0/1, not a string)."""
    if not isinstance(value, bool):
        raise ParameterError(name, value, "True or False")
    return value


def check_str(name: str, value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value:
        raise ParameterError(name, value, "a non-empty string")
    return value
