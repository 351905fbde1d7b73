"""The Scale-up section of paper 16 (unified Shapley estimators): what the GPU profile runs, and
the committed GPU results.

At d = 784 and 3072 enumeration and TreeExplainer are out of reach, so the scale study uses the
sparse cubic :class:`~companion.kernelshap.polynomial.PolynomialGame` (closed-form Shapley values);
``benchmarks/kernelshap_gpu.py`` runs :func:`~companion.kernelshap.experiment.scale_study` on the
plan below and writes ``benchmarks/results/kernelshap_gpu.json``. No plotly here.
"""

from __future__ import annotations

from companion.core import recorded_results

__all__ = ["GPU_PROFILE", "RESULTS_NAME", "recorded"]

#: What the GPU profile runs (``benchmarks/kernelshap_gpu.py`` with its defaults; the notebook's GPU
#: profile runs the same study with its ``SCALE_*`` parameters).
GPU_PROFILE = {
    "script": "benchmarks/kernelshap_gpu.py",
    "game": "PolynomialGame(order=3, terms_per_feature=2, seed=0)",
    "plan": ((784, 10), (3072, 5)),  # (d, seeds)
    "budgets": (500, 5000, 50_000, 100_000),
    "sampling": "paired, with replacement",
    "cpu_peer": (784, 50_000),
    "error_seeds_cpu_vs_gpu_notebook": (10, 30),  # SEEDS on the CPU profile, at least 30 on the GPU profile
}
RESULTS_NAME = "kernelshap_gpu"


def recorded() -> dict | None:
    """The committed GPU results (``benchmarks/results/kernelshap_gpu.json``), or None."""
    return recorded_results(RESULTS_NAME)
