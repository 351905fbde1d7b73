"""The Scale-up section of the Δ Attention notebook (paper 09): what the GPU profile runs, and the
recorded GPU ladder (``benchmarks/delta_attention_ladder.py`` → ``benchmarks/results/delta_attention_ladder.json``).

The kernels themselves are in ``companion.delta_attention.gpu`` (block-sparse sink + window pass and the
fused Δ kernel of ``companion_kernels.query_sparse``).
"""

from __future__ import annotations

from companion.core import recorded_results

#: What the notebook's GPU profile times (one attention layer in Llama-3.1-8B's geometry) and what the
#: benchmark script sweeps.
GPU_PROFILE = {
    "notebook_sizes": (32768, 131072),
    "geometry": {"q_heads": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16"},
    "sparse": {"sink": 1024, "window": 2048, "block_size": 128},
    "gamma": 64,
    "script": "benchmarks/delta_attention_ladder.py",
}
RESULTS_NAME = "delta_attention_ladder"


def recorded() -> dict | None:
    """The committed GPU ladder, or None when none is recorded."""
    return recorded_results(RESULTS_NAME)
