"""The one-GPU (H200) study of paper 18 (RTCFR+) and the reader of its committed results. No plotly import.

The games are loaded from ``data/rtcfr/*.npz`` (written by ``data/rtcfr/make_games.py``), so the GPU machine needs
no OpenSpiel. Stage by stage (bodies in :mod:`companion.rtcfr.study`): ``correctness`` (the batched torch solver,
eager and replayed from a CUDA graph, against the numpy solver on Leduc: NashConv after 60 iterations; a graph
that fails or disagrees leaves the later stages eager), ``throughput`` (ms per batched iteration for B = 1, 16,
128 hyperparameter points, eager and CUDA graph, beside the peer measured first: the single-configuration numpy
solver on the machine's CPU, itself ≥ 20x OpenSpiel's C++ CFR+, see :mod:`companion.rtcfr.scale_cpu`) and
``grids`` (RTCFR+ over the 7 x 4 (μ, T_u) grid in one batch, beside CFR+/PCFR+/DCFR last and average iterate,
NashConv every 100 of 2000 iterations, on Liar's Dice(5/6), Goofspiel(5/6) and Battleship(3), the paper's larger
games). Run it with ``python -m companion.bench rtcfr`` (``--smoke``: a tiny CPU run on Leduc).
"""

from __future__ import annotations

from companion.core.stages import Stage, study_functions
from companion.rtcfr import study as E

__all__ = ["DEADLINE_S", "GPU_PROFILE", "RESULTS_NAME", "SMOKE_PROFILE", "STAGES", "recorded", "run_scale_up"]

RESULTS_NAME = "rtcfr_gpu"
DEADLINE_S = 150

MUS = [1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 1e-1]
T_US = [10, 50, 100, 500]
GPU_PROFILE = {
    "graph_steps": 10,  # iterations per CUDA-graph replay (0: eager only)
    "correctness": {"game": "leduc_poker", "iterations": 60},
    "throughput": {"games": ["leduc_poker", "liars_dice_6", "goofspiel_6", "battleship_3"], "batches": [1, 16, 128],
                   "peer_iterations": 50},
    "grids": {"games": ["liars_dice_5", "goofspiel_5", "liars_dice_6", "goofspiel_6", "battleship_3"], "mus": MUS,
              "T_us": T_US, "iterations": 2000, "eval_every": 100},
    "seed": 0,  # the solvers are deterministic
}
SMOKE_PROFILE = {**GPU_PROFILE,
                 "throughput": {"games": ["leduc_poker"], "batches": [1, 4], "peer_iterations": 20},
                 "grids": {"games": ["leduc_poker"], "mus": MUS[2:5], "T_us": T_US[:2], "iterations": 60, "eval_every": 20}}
STAGES = (
    Stage("correctness", E.correctness_stage, needs_s=5),
    Stage("throughput", E.throughput_stage, needs_s=30),
    Stage("grids", E.grids_stage, needs_s=60),
)


run_scale_up, recorded = study_functions(STAGES, RESULTS_NAME)
