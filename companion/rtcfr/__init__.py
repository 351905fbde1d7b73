"""Paper 18, RTCFR+: last-iterate convergence of CFR+ on perturbed regularised games.

Meng et al., *Efficient Last-Iterate Convergence in Solving Extensive-Form Games* (NeurIPS 2025),
arXiv 2308.11256; official code https://github.com/menglinjian/NeurIPS-2025-RTCFR.

* :mod:`companion.rtcfr.games`: compile an OpenSpiel game into sequence-form arrays (npz round trip).
* :mod:`companion.rtcfr.seqform`: vectorised treeplex passes, best responses, NashConv.
* :mod:`companion.rtcfr.solvers`: CFR, CFR+, PCFR+, DCFR and RTCFR+ (Eq. 3, Alg. 1) on numpy.
* :mod:`companion.rtcfr.batched`: the same algorithms batched over hyperparameters in torch (GPU).
* :mod:`companion.rtcfr.policy`: conversion to and from OpenSpiel ``TabularPolicy``.
* :mod:`companion.rtcfr.study`: batched (μ, T_u) grid studies and throughput, and the stage bodies of the studies.
* role files: :mod:`~companion.rtcfr.explorer` (the convergence explorer), :mod:`~companion.rtcfr.figures`
  (plotly figures), :mod:`~companion.rtcfr.claims` (the claims table), :mod:`~companion.rtcfr.scale`
  (the GPU study and its recorded results) and :mod:`~companion.rtcfr.scale_cpu` (the CPU study against
  OpenSpiel's C++ CFR+). Only ``explorer`` and ``figures`` need plotly.

Nothing here imports plotly at package import, so the GPU study can use it.
"""

from companion.core import Paper
from companion.rtcfr.games import GAMES, PAPER_NAMES, CompiledGame, Treeplex, compile_game, load_openspiel_game
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

PAPER = Paper(
    number="18",
    slug="rtcfr",
    title="Efficient Last-Iterate Convergence in Solving Extensive-Form Games",
    arxiv="2308.11256",
    code="https://github.com/menglinjian/NeurIPS-2025-RTCFR",
)

__all__ = [
    "ALGORITHMS",
    "DEFAULTS",
    "GAMES",
    "PAPER",
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
    "exploitability",
    "expected_value",
    "load_openspiel_game",
    "nash_conv",
    "nash_conv_behavioural",
    "sequence_form",
    "solve",
]
