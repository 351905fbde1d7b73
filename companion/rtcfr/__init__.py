"""Paper 18, RTCFR+: last-iterate convergence of CFR+ on perturbed regularised games.

Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games* (NeurIPS 2025).

* :mod:`companion.rtcfr.games`: compile an OpenSpiel game into sequence-form arrays (npz round trip).
* :mod:`companion.rtcfr.seqform`: vectorised treeplex passes, best responses, NashConv.
* :mod:`companion.rtcfr.solvers`: CFR, CFR+, PCFR+, DCFR and RTCFR+ (Eq. 3, Alg. 1) on numpy.
* :mod:`companion.rtcfr.batched`: the same algorithms batched over hyperparameters in torch (GPU).
* :mod:`companion.rtcfr.policy`: conversion to and from OpenSpiel ``TabularPolicy``.
* :mod:`companion.rtcfr.figures`: plotly figures and the explorer's update function (needs plotly).

Nothing here imports plotly at package import, so the GPU benchmark can use it.
"""

from companion.rtcfr.games import GAMES, PAPER_NAMES, CompiledGame, Treeplex, compile_game, get_game, load_openspiel_game
from companion.rtcfr.seqform import (
    behavioural,
    best_response,
    best_response_value,
    exploitability,
    expected_value,
    nash_conv,
    nash_conv_behavioural,
    sequence_form,
)
from companion.rtcfr.solvers import ALGORITHMS, DEFAULTS, LABELS, TUNED, Solver, Trajectory, check_hyper, solve

__all__ = [
    "ALGORITHMS",
    "DEFAULTS",
    "GAMES",
    "PAPER_NAMES",
    "LABELS",
    "TUNED",
    "CompiledGame",
    "Solver",
    "Trajectory",
    "Treeplex",
    "behavioural",
    "best_response",
    "best_response_value",
    "check_hyper",
    "compile_game",
    "get_game",
    "exploitability",
    "expected_value",
    "load_openspiel_game",
    "nash_conv",
    "nash_conv_behavioural",
    "sequence_form",
    "solve",
]
