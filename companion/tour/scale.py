"""What the tour's GPU profile runs, and the reader of its recorded GPU results (none are needed)."""

from __future__ import annotations

from companion.core import recorded_results

__all__ = ["GPU_PROFILE", "recorded"]

#: the GPU profile: the error curve up to ten million samples per estimate.
GPU_PROFILE = {"n_max": 10_000_000}


def recorded() -> dict | None:
    """``benchmarks/results/tour_gpu.json`` if committed, else None."""
    return recorded_results("tour_gpu")
