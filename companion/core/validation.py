"""Parameter validation for notebooks and library entry points.

Every check returns the (normalised) value or raises :class:`ParameterError`, whose message names
the parameter, the value it got and what is allowed, so a wrong value injected by papermill fails in
the validation cell with a message a user can act on.
"""

from __future__ import annotations

import ast
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


def parameter_defaults(source: str) -> dict[str, Any]:
    """``{name: default}`` of a parameters cell's source, in order: its assignments of literals to names
    (a value that is not a literal maps to None)."""
    defaults: dict[str, Any] = {}
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                defaults[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except ValueError:
                defaults[stmt.targets[0].id] = None
    return defaults


class UnknownParameterError(ParameterError):
    """Values given for names that are not parameters of the notebook."""

    def __init__(self, unknown: list[str], known: list[str], notebook: str):
        self.unknown, self.known = unknown, known
        ValueError.__init__(self, f"{notebook} has no parameter(s) {', '.join(unknown)}; its parameters cell has: "
                                  f"{', '.join(known)}")
        self.name, self.value, self.allowed = ", ".join(unknown), None, "one of " + ", ".join(known)


def fits_type(value: Any, default: Any) -> bool:
    """Whether ``value`` may replace ``default`` (a notebook parameter's or a study profile's): the same type, an
    int where a float was, a list where a tuple was (and the reverse), anything where the default is None; never a
    bool for a number."""
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def check_known(names: Iterable[str], known: Iterable[str], notebook: str) -> None:
    """Every one of ``names`` is one of ``known`` (a notebook's parameters), else
    :class:`UnknownParameterError` naming the unknown ones and all the valid ones."""
    known = list(known)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UnknownParameterError(unknown, known, notebook)


INJECTED_HEADER = "# Parameters\n"  # the first line of the cell papermill adds (tagged injected-parameters)


def check_injected(namespace: dict) -> None:
    """Refuse a value papermill injected under a name the notebook's parameters cell does not define.

    papermill (``-p NAME VALUE``, ``companion.runner``, ``companion.sweep``) runs the cell tagged
    ``parameters``, then a cell it adds, which starts with ``# Parameters`` and assigns the given values.
    IPython keeps the source of every cell it ran in ``In``: the last such cell is checked against the cell
    run just before it (papermill's own ``PAPERMILL_INPUT_PATH`` and ``PAPERMILL_OUTPUT_PATH``, from
    ``--inject-paths``, are allowed). Without IPython's history, or with nothing injected, there is nothing
    to check.
    A validation cell calls ``check_injected(globals())`` first, so a misspelt name stops the run instead of
    leaving the default in place.
    """
    history = list(namespace.get("In") or ())
    for i in range(len(history) - 1, 0, -1):
        if history[i].startswith(INJECTED_HEADER):
            injected = [name for name in parameter_defaults(history[i]) if not name.startswith("PAPERMILL_")]
            check_known(injected, parameter_defaults(history[i - 1]), "this notebook")
            return
