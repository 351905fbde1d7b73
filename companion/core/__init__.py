"""What every notebook needs: profiles, seeding, validation, timing, claims and recorded results.

Nothing here imports plotly or ipywidgets, so benchmark scripts can use it on a bare GPU machine.
"""

from companion.core.claims import VERDICTS, Claims
from companion.core.paths import repo_path
from companion.core.profiles import PROFILES, check_common, device_for, resolve_profile, seed_everything
from companion.core.results import recorded_results, save_results
from companion.core.timing import Timer
from companion.core.validation import (
    ParameterError,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_str,
)

__all__ = [
    "VERDICTS",
    "Claims",
    "PROFILES",
    "ParameterError",
    "Timer",
    "check_bool",
    "check_choice",
    "check_common",
    "check_float",
    "check_int",
    "check_str",
    "device_for",
    "recorded_results",
    "repo_path",
    "resolve_profile",
    "save_results",
    "seed_everything",
]
