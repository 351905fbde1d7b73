"""The Scale-up section of paper 18 (RTCFR+): what the GPU profile runs and the committed results.

``benchmarks/rtcfr_gpu.py`` runs :func:`~companion.rtcfr.study.grid_study` (RTCFR+ over a whole
(μ, T_u) grid in one batched solver, beside the baselines) and the throughput study on one GPU;
``benchmarks/rtcfr_cpu.py`` times our numpy CFR+/RTCFR+ against OpenSpiel's C++ CFR+. No plotly here.
"""

from __future__ import annotations

from companion.core import recorded_results

__all__ = ["CPU_RESULTS_NAME", "GPU_PROFILE", "RESULTS_NAME", "recorded", "recorded_cpu"]

#: What the GPU profile runs: the notebook's GPU profile computes these grids with ``ITERATIONS``
#: iterations; ``benchmarks/rtcfr_gpu.py`` records them (2000 iterations) on more games.
GPU_PROFILE = {
    "script": "benchmarks/rtcfr_gpu.py",
    "notebook_games": ("liars_dice_5", "goofspiel_5"),
    "mus": (1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 1e-1),
    "T_us": (10, 50, 100, 500),
    "eval_every": 100,
    "benchmark_iterations": 2000,
}
RESULTS_NAME = "rtcfr_gpu"
CPU_RESULTS_NAME = "rtcfr_cpu"


def recorded() -> dict | None:
    """The committed GPU results (``benchmarks/results/rtcfr_gpu.json``), or None."""
    return recorded_results(RESULTS_NAME)


def recorded_cpu() -> dict | None:
    """The committed CPU benchmark against OpenSpiel's C++ CFR+ (``benchmarks/results/rtcfr_cpu.json``), or None."""
    return recorded_results(CPU_RESULTS_NAME)
