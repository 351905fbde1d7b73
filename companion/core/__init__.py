"""What every notebook needs: profiles, seeding, validation, timing, claims, recorded results and
``record`` (a named number a sweep plots).

Nothing here imports plotly or ipywidgets, so benchmark scripts can use it on a bare GPU machine.
"""

from companion.core.claims import Claim, Claims
from companion.core.paper import Paper
from companion.core.paths import repo_path
from companion.core.profiles import (PROFILES, check_common, device_for, gpu_hidden_from_children, resolve_profile,
                                     seed_everything)
from companion.core.records import record
from companion.core.results import recorded_results, save_results
from companion.core.timing import Timer, cuda_graph, limit_threads, time_ms
from companion.core.verdicts import (MIN_SEEDS, VERDICTS, Judgement, inconclusive, judge, mean_std, not_run,
                                     per_seed, seeds_text)
from companion.core.validation import (
    ParameterError,
    check_bool,
    check_choice,
    check_float,
    check_injected,
    check_int,
    check_str,
)

__all__ = [
    "VERDICTS",
    "Claim",
    "Claims",
    "Judgement",
    "MIN_SEEDS",
    "Paper",
    "PROFILES",
    "ParameterError",
    "Timer",
    "check_bool",
    "check_choice",
    "check_common",
    "check_float",
    "check_injected",
    "check_int",
    "check_str",
    "cuda_graph",
    "device_for",
    "gpu_hidden_from_children",
    "inconclusive",
    "judge",
    "mean_std",
    "limit_threads",
    "not_run",
    "per_seed",
    "record",
    "recorded_results",
    "repo_path",
    "resolve_profile",
    "save_results",
    "seed_everything",
    "seeds_text",
    "time_ms",
]
