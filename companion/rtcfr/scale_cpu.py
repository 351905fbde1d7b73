"""The CPU study of paper 18 (RTCFR+): iterations per second against OpenSpiel's C++ CFR+ in the same run, and the
reader of its committed results. No plotly import.

Stage by stage (bodies in :mod:`companion.rtcfr.study`): ``games`` times, on Leduc and Liar's Dice(5), OpenSpiel's
``pyspiel.CFRPlusSolver`` first (C++, alternating updates, linear averaging), then our numpy CFR+ (its linear
average accumulated, as OpenSpiel does) and RTCFR+ (last iterate; no average needed): ms per iteration as the
median over blocks of iterations, wall and process CPU time (the latter steadier on a shared machine), and NashConv
after the same number of iterations, so speed is not bought with accuracy; ``target`` evaluates the project's
target: ours ≥ 20x OpenSpiel's iterations per second on Leduc. Needs open_spiel; about a minute on two
cores. Run it with ``python -m companion.bench rtcfr_cpu`` (``--smoke``: a few iterations). On a GPU,
:mod:`companion.rtcfr.scale`.
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.rtcfr import study as E

__all__ = ["DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "recorded", "run_scale_up"]

RESULTS_NAME = "rtcfr_cpu"
DEADLINE_S = 120

GPU_PROFILE = {  # the full CPU run (the name every study module shares): OpenSpiel's iterations, timing blocks
    "games": {"leduc_poker": {"iterations": 200, "blocks": 5}, "liars_dice_5": {"iterations": 60, "blocks": 5}},
    "seed": 0,  # the solvers are deterministic
}
SMOKE_PROFILE = {**GPU_PROFILE,
                 "games": {"leduc_poker": {"iterations": 10, "blocks": 2}, "liars_dice_5": {"iterations": 4, "blocks": 2}}}
STAGES = (
    Stage("games", E.openspiel_stage, needs_s=60),
    Stage("target", E.target_stage, needs_s=0),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
