"""Named numbers a notebook publishes for a sweep to plot: ``record("slope", slope)``.

Under the batch runner (``make run`` / ``make sweep``) ``COMPANION_CLAIMS_DIR`` is set and every call
rewrites ``<dir>/records.json`` atomically (one folder per executed notebook), so the sweep report can
plot a recorded value against the grid. Interactively nothing is written; the value is returned.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from companion.core.atomic import write_json_atomic
from companion.core.claims import CLAIMS_DIR_ENV
from companion.core.validation import ParameterError

RECORDS_FILE = "records.json"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_RECORDED: dict[str, float] = {}


def record(name: str, value) -> float:
    """Publish ``value`` (a finite real number) under ``name``; returns it as a float."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ParameterError("name", name, "a name of letters, digits, '_', '.' or '-' (starting with a letter or '_')")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(name, value, "a real number") from None
    if isinstance(value, (str, bytes)) or not math.isfinite(number):
        raise ParameterError(name, value, "a finite real number")
    _RECORDED[name] = number
    folder = os.environ.get(CLAIMS_DIR_ENV)
    if folder:
        write_json_atomic(Path(folder) / RECORDS_FILE, dict(_RECORDED))
    return number
